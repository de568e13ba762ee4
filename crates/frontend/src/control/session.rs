//! One control connection's state machine: authentication (PROTOCOLINFO,
//! AUTHCHALLENGE, AUTHENTICATE), then commands, with the replies and error
//! codes stock tor 0.4.9 gives. What the commands act on is behind
//! [`Backend`], so this file holds no client state and is tested with a
//! mock.

use rand_core::RngCore;

use super::auth::{self, COOKIE_LEN, HashedPassword, SERVER_NONCE_LEN};
use super::client_auth::{self, AuthAdded, ClientAuthCred};
use super::commands;
use super::events::EventMask;
use super::framing::RawCommand;
use super::hsdesc::{self, HsFetch, HsPost};
use super::onion::{self, AddOnion, AddedOnion};
use super::reply::Reply;
use super::syntax::{self, KvFlags, SyntaxError, decode_hex, positional, quote};

/// Signals SIGNAL accepts, in tor's order (`GETINFO signal/names`).
pub const SIGNAL_NAMES: &[&str] = &[
    "RELOAD",
    "HUP",
    "SHUTDOWN",
    "DUMP",
    "USR1",
    "DEBUG",
    "USR2",
    "HALT",
    "TERM",
    "INT",
    "NEWNYM",
    "CLEARDNSCACHE",
    "HEARTBEAT",
    "ACTIVE",
    "DORMANT",
];

/// What SIGNAL asks for (POSIX aliases folded in).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// RELOAD / HUP.
    Reload,
    /// SHUTDOWN / INT.
    Shutdown,
    /// HALT / TERM.
    Halt,
    /// DUMP / USR1.
    Dump,
    /// DEBUG / USR2.
    Debug,
    /// NEWNYM.
    Newnym,
    /// CLEARDNSCACHE.
    ClearDnsCache,
    /// HEARTBEAT.
    Heartbeat,
    /// ACTIVE.
    Active,
    /// DORMANT.
    Dormant,
}

impl Signal {
    /// Parse a signal name (case-insensitive).
    pub fn parse(s: &str) -> Option<Signal> {
        Some(match s.to_ascii_uppercase().as_str() {
            "RELOAD" | "HUP" => Signal::Reload,
            "SHUTDOWN" | "INT" => Signal::Shutdown,
            "HALT" | "TERM" => Signal::Halt,
            "DUMP" | "USR1" => Signal::Dump,
            "DEBUG" | "USR2" => Signal::Debug,
            "NEWNYM" => Signal::Newnym,
            "CLEARDNSCACHE" => Signal::ClearDnsCache,
            "HEARTBEAT" => Signal::Heartbeat,
            "ACTIVE" => Signal::Active,
            "DORMANT" => Signal::Dormant,
            _ => return None,
        })
    }
}

/// An error reply from a backend command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmdError {
    /// Reply code (551, 552, 553, 555...).
    pub code: u16,
    /// Reply text.
    pub msg: String,
}

impl CmdError {
    /// An error with `code` and `msg`.
    pub fn new(code: u16, msg: impl Into<String>) -> Self {
        CmdError {
            code,
            msg: msg.into(),
        }
    }
}

/// Why SETCONF failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfError {
    /// An option we do not have (552).
    Unknown(String),
    /// A value that does not parse (513).
    Parse(String),
    /// A value that parses but cannot be applied (553).
    Setting(String),
}

/// A GETINFO answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Info {
    /// The value.
    Value(String),
    /// Not a key we know (552 `Unrecognized key`).
    Unknown,
    /// Known, but no answer (tor's 551, e.g. `Address unknown`).
    Fail(String),
}

/// What the control port acts on. All calls are synchronous: long work
/// (building a circuit) is started and reported through events, as tor
/// does.
pub trait Backend {
    /// `GETINFO version` (also PROTOCOLINFO's VERSION line).
    fn version(&self) -> String;
    /// One GETINFO key.
    fn getinfo(&mut self, key: &str) -> Info;
    /// One GETCONF key: the canonical name and its values (None: unset),
    /// or None for an unknown option.
    fn getconf(&mut self, key: &str) -> Option<Vec<(String, Option<String>)>>;
    /// SETCONF (`reset` false) / RESETCONF (`reset` true), all or nothing.
    fn setconf(
        &mut self,
        changes: &[(String, Option<String>)],
        reset: bool,
    ) -> Result<(), ConfError>;
    /// A SIGNAL (after `250 OK` was queued).
    fn signal(&mut self, sig: Signal);
    /// The events this connection wants changed.
    fn set_events(&mut self, mask: EventMask);
    /// EXTENDCIRCUIT: the circuit id, or an error.
    fn extend_circuit(
        &mut self,
        id: &str,
        path: Option<Vec<String>>,
        purpose: Option<&str>,
    ) -> Result<u64, CmdError>;
    /// Whether a circuit with this controller id exists.
    fn circuit_exists(&mut self, id: &str) -> bool;
    /// SETCIRCUITPURPOSE.
    fn set_circuit_purpose(&mut self, id: &str, purpose: &str) -> Result<(), CmdError>;
    /// ATTACHSTREAM.
    fn attach_stream(&mut self, stream: &str, circ: &str, hop: Option<u32>)
    -> Result<(), CmdError>;
    /// CLOSESTREAM.
    fn close_stream(&mut self, stream: &str, reason: u8) -> Result<(), CmdError>;
    /// CLOSECIRCUIT.
    fn close_circuit(&mut self, circ: &str, if_unused: bool) -> Result<(), CmdError>;
    /// TAKEOWNERSHIP (true) / DROPOWNERSHIP (false) on this connection.
    fn set_owner(&mut self, owning: bool);
    /// ADD_ONION (arguments checked): start the service, owned by this
    /// connection unless `req.detach`. Errors as tor: 550 `Onion address
    /// collision`, 551 `Failed to generate onion address` (unusable key),
    /// 551 `Failed to add Onion Service`.
    fn add_onion(&mut self, req: &AddOnion) -> Result<AddedOnion, CmdError>;
    /// DEL_ONION of a well-formed id: stop a service this connection owns
    /// or a detached one; else 552 `Unknown Onion Service id`.
    fn del_onion(&mut self, service_id: &str) -> Result<(), CmdError>;
    /// ONION_CLIENT_AUTH_ADD (arguments checked): use `cred` for its
    /// service from now on (553 `Unable to store creds for "<addr>"` when
    /// a permanent one cannot be stored).
    fn client_auth_add(&mut self, cred: ClientAuthCred) -> Result<AuthAdded, CmdError>;
    /// ONION_CLIENT_AUTH_REMOVE of a well-formed address: whether there
    /// were credentials.
    fn client_auth_remove(&mut self, address: &str) -> Result<bool, CmdError>;
    /// ONION_CLIENT_AUTH_VIEW: every credential the client holds.
    fn client_auth_view(&mut self) -> Vec<ClientAuthCred>;
    /// Whether an HSFETCH / HSPOST `SERVER=` names a relay of the
    /// consensus (tor's `node_get_by_hex_id`: `$FP`, `FP`, `$FP~nick`).
    fn hs_server_known(&mut self, server: &str) -> bool;
    /// HSFETCH (arguments checked): start the fetch(es) and return at
    /// once (`250 OK` is sent before any of the `HS_DESC` /
    /// `HS_DESC_CONTENT` events that report them).
    fn hs_fetch(&mut self, req: &HsFetch) -> Result<(), CmdError>;
    /// HSPOST (arguments checked): check the descriptor (tor's 554
    /// `Invalid descriptor`), start the uploads and return at once; the
    /// `HS_DESC UPLOADED` / `FAILED` events report them.
    fn hs_post(&mut self, req: HsPost) -> Result<(), CmdError>;
}

/// Authentication settings.
#[derive(Clone, Default)]
pub struct AuthConfig {
    /// The cookie, when cookie authentication is on.
    pub cookie: Option<[u8; COOKIE_LEN]>,
    /// Where the cookie file is (PROTOCOLINFO's COOKIEFILE).
    pub cookie_path: Option<String>,
    /// Accepted hashed passwords.
    pub passwords: Vec<HashedPassword>,
}

impl std::fmt::Debug for AuthConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthConfig")
            .field("cookie", &self.cookie.is_some())
            .field("passwords", &self.passwords.len())
            .finish()
    }
}

/// What the driver must do after a command.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Outcome {
    /// Bytes to send.
    pub reply: Vec<u8>,
    /// Close the connection after sending them.
    pub close: bool,
}

/// A connection's protocol state.
#[derive(Debug)]
pub struct Session {
    authenticated: bool,
    sent_protocolinfo: bool,
    safecookie_expected: Option<[u8; 32]>,
    events: EventMask,
}

impl Default for Session {
    fn default() -> Self {
        Self::new()
    }
}

pub(crate) fn out(r: Reply, close: bool) -> Outcome {
    Outcome {
        reply: r.encode(),
        close,
    }
}

pub(crate) fn bad_args(cmd: &str, e: &SyntaxError) -> Outcome {
    out(
        Reply::single(512, &format!("Bad arguments to {cmd}: {e}")),
        false,
    )
}

const AUTH_FLAGS: KvFlags = KvFlags {
    omit_keys: true,
    omit_vals: false,
    qstring: true,
    cstring: false,
};
pub(crate) const CONF_FLAGS: KvFlags = KvFlags {
    omit_keys: false,
    omit_vals: true,
    qstring: false,
    cstring: true,
};
pub(crate) const FLAG_FLAGS: KvFlags = KvFlags {
    omit_keys: false,
    omit_vals: true,
    qstring: false,
    cstring: false,
};

/// Commands tor has that we recognise but do not implement (511).
const UNIMPLEMENTED: &[&str] = &[
    "MAPADDRESS",
    "REDIRECTSTREAM",
    "RESOLVE",
    "DROPGUARDS",
    "DROPTIMEOUTS",
    "+LOADCONF",
    "+POSTDESCRIPTOR",
];

impl Session {
    /// A new, unauthenticated connection.
    pub fn new() -> Self {
        Session {
            authenticated: false,
            sent_protocolinfo: false,
            safecookie_expected: None,
            events: EventMask::default(),
        }
    }

    /// Whether AUTHENTICATE succeeded.
    pub fn is_authenticated(&self) -> bool {
        self.authenticated
    }

    /// The events this connection asked for.
    pub fn events(&self) -> EventMask {
        self.events
    }

    fn allowed_before_auth(&self, kw: &str) -> bool {
        match kw {
            "PROTOCOLINFO" => !self.sent_protocolinfo && self.safecookie_expected.is_none(),
            "AUTHCHALLENGE" => self.safecookie_expected.is_none(),
            "AUTHENTICATE" | "QUIT" => true,
            _ => false,
        }
    }

    /// Handle one command.
    pub fn handle(
        &mut self,
        cmd: &RawCommand,
        auth: &AuthConfig,
        backend: &mut dyn Backend,
        rng: &mut dyn RngCore,
    ) -> Outcome {
        let kw = cmd.keyword.to_ascii_uppercase();
        if kw == "QUIT" {
            return out(Reply::single(250, "closing connection"), true);
        }
        if !self.authenticated {
            if !self.allowed_before_auth(&kw) {
                return out(Reply::single(514, "Authentication required."), true);
            }
            // Before authentication every error closes the connection.
            let mut o = self.dispatch(&kw, cmd, auth, backend, rng);
            if !o.reply.starts_with(b"250") {
                o.close = true;
            }
            return o;
        }
        self.dispatch(&kw, cmd, auth, backend, rng)
    }

    fn dispatch(
        &mut self,
        kw: &str,
        cmd: &RawCommand,
        auth: &AuthConfig,
        b: &mut dyn Backend,
        rng: &mut dyn RngCore,
    ) -> Outcome {
        let args = cmd.args.as_str();
        match kw {
            "PROTOCOLINFO" => self.protocolinfo(args, auth, b),
            "AUTHCHALLENGE" => self.authchallenge(args, auth, rng),
            "AUTHENTICATE" => self.authenticate(args, auth),
            "GETINFO" => commands::getinfo(args, b),
            "GETCONF" => commands::getconf(args, b),
            "SETCONF" | "RESETCONF" => commands::setconf(kw, args, b),
            "SETEVENTS" => self.setevents(args, b),
            // The options SETCONF changes here live for the process only
            // (the TOML file is the configuration): nothing to write, so
            // SAVECONF succeeds, as controllers such as Tor Browser expect
            // right after their SETCONF.
            "SAVECONF" => match args.trim() {
                "" => out(Reply::ok(), false),
                a if a.eq_ignore_ascii_case("FORCE") => out(Reply::ok(), false),
                a => out(
                    Reply::single(512, &format!("Unexpected argument \"{a}\"")),
                    false,
                ),
            },
            "SIGNAL" => commands::signal(args, b),
            "USEFEATURE" => commands::usefeature(args),
            "TAKEOWNERSHIP" | "DROPOWNERSHIP" => {
                b.set_owner(kw == "TAKEOWNERSHIP");
                out(Reply::ok(), false)
            }
            "EXTENDCIRCUIT" => commands::extendcircuit(args, b),
            "SETCIRCUITPURPOSE" => commands::setcircuitpurpose(args, b),
            "ATTACHSTREAM" => commands::attachstream(args, b),
            "CLOSESTREAM" => commands::closestream(args, b),
            "CLOSECIRCUIT" => commands::closecircuit(args, b),
            "ADD_ONION" => onion::add_onion(args, b),
            "DEL_ONION" => onion::del_onion(args, b),
            "ONION_CLIENT_AUTH_ADD" => client_auth::add(args, b),
            "ONION_CLIENT_AUTH_REMOVE" => client_auth::remove(args, b),
            "ONION_CLIENT_AUTH_VIEW" => client_auth::view(args, b),
            "HSFETCH" => hsdesc::hsfetch(&cmd.keyword, args, b),
            "+HSPOST" => hsdesc::hspost(&cmd.keyword, args, cmd.data.as_deref(), b),
            "SETROUTERPURPOSE" => out(Reply::single(511, "SETROUTERPURPOSE is obsolete."), false),
            _ if UNIMPLEMENTED.contains(&kw) => out(
                Reply::single(511, &format!("Unimplemented command \"{}\"", cmd.keyword)),
                false,
            ),
            _ => out(
                Reply::single(510, &format!("Unrecognized command \"{}\"", cmd.keyword)),
                false,
            ),
        }
    }

    fn protocolinfo(&mut self, args: &str, auth: &AuthConfig, b: &mut dyn Backend) -> Outcome {
        for v in args.split_ascii_whitespace() {
            if !v.bytes().all(|c| c.is_ascii_digit()) {
                return out(
                    Reply::single(513, &format!("No such version {}", quote(v.as_bytes()))),
                    false,
                );
            }
        }
        self.sent_protocolinfo = true;
        let mut methods = Vec::new();
        if auth.cookie.is_some() {
            methods.extend(["COOKIE", "SAFECOOKIE"]);
        }
        if !auth.passwords.is_empty() {
            methods.push("HASHEDPASSWORD");
        }
        if methods.is_empty() {
            methods.push("NULL");
        }
        let mut line = format!("AUTH METHODS={}", methods.join(","));
        if let (Some(_), Some(p)) = (&auth.cookie, &auth.cookie_path) {
            line.push_str(&format!(" COOKIEFILE={}", quote(p.as_bytes())));
        }
        let mut r = Reply::new();
        r.line(250, "PROTOCOLINFO 1")
            .line(250, &line)
            .line(
                250,
                &format!("VERSION Tor={}", quote(b.version().as_bytes())),
            )
            .line(250, "OK");
        out(r, false)
    }

    fn authchallenge(&mut self, args: &str, auth: &AuthConfig, rng: &mut dyn RngCore) -> Outcome {
        let (pos, rest) = match positional(args, 1, 1, true) {
            Ok(x) => x,
            Err(e) => return bad_args("AUTHCHALLENGE", &e),
        };
        if !pos
            .first()
            .is_some_and(|m| m.eq_ignore_ascii_case("SAFECOOKIE"))
        {
            return out(
                Reply::single(513, "AUTHCHALLENGE only supports SAFECOOKIE authentication"),
                true,
            );
        }
        let Some(cookie) = auth.cookie else {
            return out(
                Reply::single(515, "Cookie authentication is disabled"),
                true,
            );
        };
        let entries = match syntax::parse_kvline(rest.unwrap_or(""), AUTH_FLAGS) {
            Ok(e) => e,
            Err(e) => return bad_args("AUTHCHALLENGE", &e),
        };
        let [nonce] = entries.as_slice() else {
            return out(
                Reply::single(512, "Wrong number of arguments for AUTHCHALLENGE"),
                true,
            );
        };
        if !nonce.key.is_empty() {
            return out(
                Reply::single(512, "AUTHCHALLENGE does not accept keyword arguments."),
                true,
            );
        }
        let client_nonce = if nonce.quoted {
            nonce.value.clone()
        } else {
            match decode_hex(&nonce.value_str()) {
                Some(v) => v,
                None => return out(Reply::single(513, "Invalid base16 client nonce"), true),
            }
        };
        let mut server_nonce = [0u8; SERVER_NONCE_LEN];
        rng.fill_bytes(&mut server_nonce);
        let (server_hash, client_hash) =
            auth::safecookie_hashes(&cookie, &client_nonce, &server_nonce);
        self.safecookie_expected = Some(client_hash);
        out(
            Reply::single(
                250,
                &format!(
                    "AUTHCHALLENGE SERVERHASH={} SERVERNONCE={}",
                    commands::upper_hex(&server_hash),
                    commands::upper_hex(&server_nonce)
                ),
            ),
            false,
        )
    }

    fn authenticate(&mut self, args: &str, auth: &AuthConfig) -> Outcome {
        let fail = |msg: &str| {
            out(
                Reply::single(515, &format!("Authentication failed: {msg}")),
                true,
            )
        };
        let entries = match syntax::parse_kvline(args, AUTH_FLAGS) {
            Ok(e) => e,
            Err(e) => {
                return out(
                    Reply::single(512, &format!("Bad arguments to AUTHENTICATE: {e}")),
                    true,
                );
            }
        };
        let (secret, quoted) = match entries.as_slice() {
            [] => (Vec::new(), false),
            [e] if !e.key.is_empty() => {
                return out(
                    Reply::single(512, "AUTHENTICATE does not accept keyword arguments."),
                    true,
                );
            }
            [e] if e.quoted => (e.value.clone(), true),
            [e] => match decode_hex(&e.value_str()) {
                Some(v) => (v, false),
                None => {
                    return out(
                        Reply::single(
                            551,
                            "Invalid hexadecimal encoding.  Maybe you tried a plain text password?  If so, the standard requires that you put it in double quotes.",
                        ),
                        true,
                    );
                }
            },
            _ => {
                return out(
                    Reply::single(512, "Too many arguments to AUTHENTICATE."),
                    true,
                );
            }
        };
        if let Some(expected) = self.safecookie_expected.take() {
            if secret.len() != 32 {
                return fail("Wrong length for safe cookie response.");
            }
            if !auth::ct_eq(&secret, &expected) {
                return fail("Safe cookie response did not match expected value.");
            }
            return self.auth_ok();
        }
        if auth.cookie.is_none() && auth.passwords.is_empty() {
            return self.auth_ok();
        }
        if let Some(cookie) = &auth.cookie
            && auth::ct_eq(&secret, cookie)
        {
            return self.auth_ok();
        }
        if auth.passwords.iter().any(|p| p.verify(&secret)) {
            return self.auth_ok();
        }
        match (auth.cookie.is_some(), !auth.passwords.is_empty()) {
            (true, true) => {
                fail("Password did not match HashedControlPassword *or* authentication cookie.")
            }
            (true, false) if secret.len() != COOKIE_LEN => {
                fail("Wrong length on authentication cookie.")
            }
            (true, false) => fail("Authentication cookie did not match expected value."),
            _ if quoted => {
                fail("Password did not match HashedControlPassword value from configuration")
            }
            _ => fail(
                "Password did not match HashedControlPassword value from configuration. Maybe you tried a plain text password? If so, the standard requires that you put it in double quotes.",
            ),
        }
    }

    fn auth_ok(&mut self) -> Outcome {
        self.authenticated = true;
        out(Reply::ok(), false)
    }

    fn setevents(&mut self, args: &str, b: &mut dyn Backend) -> Outcome {
        let mut mask = EventMask::default();
        for name in args.split_ascii_whitespace() {
            // EXTENDED is always on; AUTHDIR_NEWDESCS is obsolete, and
            // tor takes it and ignores it too.
            if name.eq_ignore_ascii_case("EXTENDED")
                || name.eq_ignore_ascii_case("AUTHDIR_NEWDESCS")
            {
                continue;
            }
            if !mask.add(name) {
                return out(
                    Reply::single(552, &format!("Unrecognized event \"{name}\"")),
                    false,
                );
            }
        }
        self.events = mask;
        b.set_events(mask);
        out(Reply::ok(), false)
    }
}
