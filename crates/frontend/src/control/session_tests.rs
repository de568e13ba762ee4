//! Session state machine against a mock backend.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;

use rand_core::OsRng;

use super::auth::{self, HashedPassword};
use super::events::EventMask;
use super::framing::Framer;
use super::onion::{AddOnion, AddedOnion};
use super::session::*;

#[derive(Default)]
struct Mock {
    conf: HashMap<String, String>,
    signals: Vec<Signal>,
    events: EventMask,
    owner: bool,
    circuits: Vec<u64>,
    attached: Vec<(String, String)>,
    onions: Vec<String>,
    creds: Vec<super::client_auth::ClientAuthCred>,
    servers: Vec<String>,
    fetches: Vec<super::hsdesc::HsFetch>,
    posts: Vec<super::hsdesc::HsPost>,
}

impl Backend for Mock {
    fn version(&self) -> String {
        "0.4.9.11 (onionmix-test)".into()
    }
    fn getinfo(&mut self, key: &str) -> Info {
        match key {
            "version" => Info::Value(self.version()),
            "circuit-status" => {
                Info::Value("1 BUILT $AA~a PURPOSE=GENERAL\r\n2 LAUNCHED PURPOSE=GENERAL".into())
            }
            "address" => Info::Fail("Address unknown".into()),
            _ => Info::Unknown,
        }
    }
    fn getconf(&mut self, key: &str) -> Option<Vec<(String, Option<String>)>> {
        match key.to_ascii_lowercase().as_str() {
            "socksport" => Some(vec![("SocksPort".into(), Some("127.0.0.1:9050".into()))]),
            "__owningcontrollerprocess" => Some(vec![("__OwningControllerProcess".into(), None)]),
            "disablenetwork" => Some(vec![(
                "DisableNetwork".into(),
                Some(
                    self.conf
                        .get("DisableNetwork")
                        .cloned()
                        .unwrap_or("0".into()),
                ),
            )]),
            _ => None,
        }
    }
    fn setconf(
        &mut self,
        changes: &[(String, Option<String>)],
        _reset: bool,
    ) -> Result<(), ConfError> {
        for (k, v) in changes {
            if !k.eq_ignore_ascii_case("DisableNetwork") {
                return Err(ConfError::Unknown(k.clone()));
            }
            if !matches!(v.as_deref(), Some("0" | "1") | None) {
                return Err(ConfError::Parse("bad".into()));
            }
        }
        for (k, v) in changes {
            let _ = k;
            self.conf
                .insert("DisableNetwork".into(), v.clone().unwrap_or("0".into()));
        }
        Ok(())
    }
    fn signal(&mut self, sig: Signal) {
        self.signals.push(sig);
    }
    fn set_events(&mut self, mask: EventMask) {
        self.events = mask;
    }
    fn extend_circuit(
        &mut self,
        id: &str,
        path: Option<Vec<String>>,
        _p: Option<&str>,
    ) -> Result<u64, CmdError> {
        if id != "0" {
            return Err(CmdError::new(552, format!("Unknown circuit \"{id}\"")));
        }
        if let Some(p) = path
            && p.iter().any(|h| h.len() != 41)
        {
            return Err(CmdError::new(552, format!("No such router \"{}\"", p[0])));
        }
        self.circuits.push(7);
        Ok(7)
    }
    fn circuit_exists(&mut self, id: &str) -> bool {
        id == "7"
    }
    fn set_circuit_purpose(&mut self, id: &str, _p: &str) -> Result<(), CmdError> {
        if id == "7" {
            Ok(())
        } else {
            Err(CmdError::new(552, format!("Unknown circuit \"{id}\"")))
        }
    }
    fn attach_stream(&mut self, s: &str, c: &str, _hop: Option<u32>) -> Result<(), CmdError> {
        if s != "3" {
            return Err(CmdError::new(552, format!("Unknown stream \"{s}\"")));
        }
        self.attached.push((s.into(), c.into()));
        Ok(())
    }
    fn close_stream(&mut self, s: &str, _r: u8) -> Result<(), CmdError> {
        Err(CmdError::new(552, format!("Unknown stream \"{s}\"")))
    }
    fn close_circuit(&mut self, c: &str, _u: bool) -> Result<(), CmdError> {
        if c == "7" {
            Ok(())
        } else {
            Err(CmdError::new(552, format!("Unknown circuit \"{c}\"")))
        }
    }
    fn set_owner(&mut self, o: bool) {
        self.owner = o;
    }
    fn add_onion(&mut self, req: &AddOnion) -> Result<AddedOnion, CmdError> {
        let id = crate::addr::encode_onion_v3(
            &curve25519_dalek::constants::ED25519_BASEPOINT_COMPRESSED.0,
        );
        if self.onions.contains(&id) {
            return Err(CmdError::new(550, "Onion address collision"));
        }
        self.onions.push(id.clone());
        Ok(AddedOnion {
            service_id: id,
            generated: matches!(req.key, super::onion::OnionKey::Generate)
                .then(|| zeroize::Zeroizing::new([1u8; 64])),
        })
    }
    fn client_auth_add(
        &mut self,
        cred: super::client_auth::ClientAuthCred,
    ) -> Result<super::client_auth::AuthAdded, CmdError> {
        if cred.permanent {
            return Err(CmdError::new(
                553,
                format!("Unable to store creds for \"{}\"", cred.address),
            ));
        }
        let n = self.creds.len();
        self.creds.retain(|c| c.address != cred.address);
        let replaced = self.creds.len() != n;
        self.creds.push(cred);
        Ok(if replaced {
            super::client_auth::AuthAdded::Replaced
        } else {
            super::client_auth::AuthAdded::Added
        })
    }
    fn client_auth_remove(&mut self, address: &str) -> Result<bool, CmdError> {
        let n = self.creds.len();
        self.creds.retain(|c| c.address != address);
        Ok(self.creds.len() != n)
    }
    fn client_auth_view(&mut self) -> Vec<super::client_auth::ClientAuthCred> {
        self.creds.clone()
    }
    fn hs_server_known(&mut self, server: &str) -> bool {
        self.servers.iter().any(|s| s == server)
    }
    fn hs_fetch(&mut self, req: &super::hsdesc::HsFetch) -> Result<(), CmdError> {
        self.fetches.push(req.clone());
        Ok(())
    }
    fn hs_post(&mut self, req: super::hsdesc::HsPost) -> Result<(), CmdError> {
        if !req.body.starts_with(b"hs-descriptor 3\n") {
            return Err(CmdError::new(554, "Invalid descriptor"));
        }
        self.posts.push(req);
        Ok(())
    }
    fn del_onion(&mut self, id: &str) -> Result<(), CmdError> {
        let n = self.onions.len();
        self.onions.retain(|o| o != id);
        if self.onions.len() == n {
            return Err(CmdError::new(552, "Unknown Onion Service id"));
        }
        Ok(())
    }
}

#[path = "hsdesc_tests.rs"]
mod hsdesc_tests;

fn auth_cfg() -> AuthConfig {
    AuthConfig {
        cookie: Some([9u8; 32]),
        cookie_path: Some("/tmp/x/control_auth_cookie".into()),
        passwords: vec![HashedPassword::new(b"foo", [1; 8])],
    }
}

/// Run `input` through a fresh session; the replies as text, and whether
/// the connection was closed.
fn run(s: &mut Session, m: &mut Mock, auth: &AuthConfig, input: &str) -> (String, bool) {
    let mut f = Framer::default();
    f.push(input.as_bytes()).unwrap();
    let mut text = String::new();
    while let Some(c) = f.next_command().unwrap() {
        let o = s.handle(&c, auth, m, &mut OsRng);
        text.push_str(&String::from_utf8(o.reply).unwrap());
        if o.close {
            return (text, true);
        }
    }
    (text, false)
}

fn authed() -> (Session, Mock, AuthConfig) {
    let mut s = Session::new();
    let mut m = Mock::default();
    let a = auth_cfg();
    let (r, _) = run(&mut s, &mut m, &a, "AUTHENTICATE \"foo\"\r\n");
    assert_eq!(r, "250 OK\r\n");
    (s, m, a)
}

#[test]
fn protocolinfo_byte_exact() {
    let (mut s, mut m, a) = (Session::new(), Mock::default(), auth_cfg());
    let (r, closed) = run(&mut s, &mut m, &a, "PROTOCOLINFO 1\r\n");
    assert_eq!(
        r,
        "250-PROTOCOLINFO 1\r\n250-AUTH METHODS=COOKIE,SAFECOOKIE,HASHEDPASSWORD COOKIEFILE=\"/tmp/x/control_auth_cookie\"\r\n250-VERSION Tor=\"0.4.9.11 (onionmix-test)\"\r\n250 OK\r\n"
    );
    assert!(!closed);
    // Only once before authentication.
    let (r, closed) = run(&mut s, &mut m, &a, "PROTOCOLINFO\r\n");
    assert_eq!(r, "514 Authentication required.\r\n");
    assert!(closed);
}

#[test]
fn unauthenticated_commands_close() {
    let (mut s, mut m, a) = (Session::new(), Mock::default(), auth_cfg());
    let (r, closed) = run(&mut s, &mut m, &a, "GETINFO version\r\n");
    assert_eq!(r, "514 Authentication required.\r\n");
    assert!(closed);
    let (mut s, mut m) = (Session::new(), Mock::default());
    let (r, closed) = run(&mut s, &mut m, &a, "quit\r\n");
    assert_eq!(r, "250 closing connection\r\n");
    assert!(closed);
}

#[test]
fn authentication_methods() {
    let a = auth_cfg();
    // Cookie, hex.
    let mut s = Session::new();
    let (r, _) = run(
        &mut s,
        &mut Mock::default(),
        &a,
        &format!("AUTHENTICATE {}\r\n", "09".repeat(32)),
    );
    assert_eq!(r, "250 OK\r\n");
    // Password as hex of "foo".
    let mut s = Session::new();
    let (r, _) = run(&mut s, &mut Mock::default(), &a, "AUTHENTICATE 666f6f\r\n");
    assert_eq!(r, "250 OK\r\n");
    // Bad.
    let mut s = Session::new();
    let (r, closed) = run(&mut s, &mut Mock::default(), &a, "AUTHENTICATE \"bar\"\r\n");
    assert_eq!(
        r,
        "515 Authentication failed: Password did not match HashedControlPassword *or* authentication cookie.\r\n"
    );
    assert!(closed && !s.is_authenticated());
    let mut s = Session::new();
    let (r, closed) = run(&mut s, &mut Mock::default(), &a, "AUTHENTICATE bar\r\n");
    assert!(r.starts_with("551 Invalid hexadecimal encoding."), "{r}");
    assert!(closed);
    let mut s = Session::new();
    let (r, closed) = run(
        &mut s,
        &mut Mock::default(),
        &a,
        "AUTHENTICATE \"unterminated\r\n",
    );
    assert!(r.starts_with("512 "), "{r}");
    assert!(closed);
    // No methods configured: anything goes, but AUTHENTICATE is required.
    let none = AuthConfig::default();
    let mut s = Session::new();
    let (r, _) = run(
        &mut s,
        &mut Mock::default(),
        &none,
        "PROTOCOLINFO\r\nAUTHENTICATE\r\n",
    );
    assert!(r.contains("250-AUTH METHODS=NULL\r\n"));
    assert!(r.ends_with("250 OK\r\n250 OK\r\n"));
}

#[test]
fn safecookie_exchange() {
    let a = auth_cfg();
    let mut s = Session::new();
    let mut m = Mock::default();
    let (r, _) = run(&mut s, &mut m, &a, "AUTHCHALLENGE SAFECOOKIE 0a0b\r\n");
    let r = r
        .trim_end()
        .strip_prefix("250 AUTHCHALLENGE SERVERHASH=")
        .unwrap();
    let (sh, sn) = r.split_once(" SERVERNONCE=").unwrap();
    let sn: [u8; 32] = super::syntax::decode_hex(sn).unwrap().try_into().unwrap();
    let (server, client) = auth::safecookie_hashes(&[9u8; 32], &[0x0a, 0x0b], &sn);
    assert_eq!(super::syntax::decode_hex(sh).unwrap(), server);
    // Only AUTHENTICATE may follow, and only the client hash works.
    let hex: String = client.iter().map(|b| format!("{b:02x}")).collect();
    let (r, _) = run(&mut s, &mut m, &a, &format!("AUTHENTICATE {hex}\r\n"));
    assert_eq!(r, "250 OK\r\n");
    // The cookie itself is refused after a challenge.
    let mut s = Session::new();
    run(&mut s, &mut m, &a, "AUTHCHALLENGE SAFECOOKIE \"ab\"\r\n");
    let (r, closed) = run(
        &mut s,
        &mut m,
        &a,
        &format!("AUTHENTICATE {}\r\n", "09".repeat(32)),
    );
    assert_eq!(
        r,
        "515 Authentication failed: Safe cookie response did not match expected value.\r\n"
    );
    assert!(closed);
    let mut s = Session::new();
    let (r, closed) = run(&mut s, &mut m, &a, "AUTHCHALLENGE SAFECOOKIE zz\r\n");
    assert_eq!(r, "513 Invalid base16 client nonce\r\n");
    assert!(closed);
    let mut s = Session::new();
    let (r, _) = run(&mut s, &mut m, &a, "AUTHCHALLENGE FOO 00\r\n");
    assert_eq!(
        r,
        "513 AUTHCHALLENGE only supports SAFECOOKIE authentication\r\n"
    );
}

#[test]
fn getinfo_and_getconf_like_tor() {
    let (mut s, mut m, a) = authed();
    let (r, _) = run(&mut s, &mut m, &a, "GETINFO version circuit-status\r\n");
    assert_eq!(
        r,
        "250-version=0.4.9.11 (onionmix-test)\r\n250+circuit-status=\r\n1 BUILT $AA~a PURPOSE=GENERAL\r\n2 LAUNCHED PURPOSE=GENERAL\r\n.\r\n250 OK\r\n"
    );
    let (r, _) = run(&mut s, &mut m, &a, "GETINFO version nosuch\r\n");
    assert_eq!(r, "552 Unrecognized key \"nosuch\"\r\n");
    let (r, _) = run(&mut s, &mut m, &a, "GETINFO address\r\n");
    assert_eq!(r, "551 Address unknown\r\n");
    let (r, _) = run(&mut s, &mut m, &a, "GETINFO\r\n");
    assert_eq!(r, "250 OK\r\n");
    let (r, _) = run(
        &mut s,
        &mut m,
        &a,
        "GETCONF SocksPort __OwningControllerProcess\r\n",
    );
    assert_eq!(
        r,
        "250-SocksPort=127.0.0.1:9050\r\n250 __OwningControllerProcess\r\n"
    );
    let (r, _) = run(&mut s, &mut m, &a, "GETCONF nosuch\r\n");
    assert_eq!(r, "552 Unrecognized configuration key \"nosuch\"\r\n");
}

#[test]
fn setconf_errors_like_tor() {
    let (mut s, mut m, a) = authed();
    let (r, _) = run(&mut s, &mut m, &a, "SETCONF nosuch=1\r\n");
    assert_eq!(
        r,
        "552 Unrecognized option: Unknown option 'nosuch'.  Failing.\r\n"
    );
    let (r, _) = run(&mut s, &mut m, &a, "SETCONF DisableNetwork=\"1\r\n");
    assert_eq!(
        r,
        "512 Bad arguments to SETCONF: Cannot parse keyword argument(s)\r\n"
    );
    let (r, _) = run(&mut s, &mut m, &a, "SETCONF DisableNetwork=2\r\n");
    assert!(r.starts_with("513 Unacceptable option value"));
    let (r, _) = run(
        &mut s,
        &mut m,
        &a,
        "SETCONF DisableNetwork=1\r\nGETCONF DisableNetwork\r\n",
    );
    assert_eq!(r, "250 OK\r\n250 DisableNetwork=1\r\n");
}

#[test]
fn saveconf_succeeds_with_nothing_to_write() {
    let (mut s, mut m, a) = authed();
    let (r, closed) = run(
        &mut s,
        &mut m,
        &a,
        "SETCONF DisableNetwork=0\r\nSAVECONF\r\nsaveconf force\r\nSAVECONF now\r\n",
    );
    assert!(!closed);
    assert_eq!(
        r,
        "250 OK\r\n250 OK\r\n250 OK\r\n512 Unexpected argument \"now\"\r\n"
    );
}

#[test]
fn signals_events_and_circuits() {
    let (mut s, mut m, a) = authed();
    let (r, _) = run(
        &mut s,
        &mut m,
        &a,
        "SIGNAL NEWNYM\r\nSIGNAL hup\r\nSIGNAL FOO\r\nSIGNAL\r\n",
    );
    assert_eq!(
        r,
        "250 OK\r\n250 OK\r\n552 Unrecognized signal code \"FOO\"\r\n512 Bad arguments to SIGNAL: Need at least 1 argument(s)\r\n"
    );
    assert_eq!(m.signals, vec![Signal::Newnym, Signal::Reload]);
    let (r, _) = run(
        &mut s,
        &mut m,
        &a,
        "SETEVENTS EXTENDED circ STREAM\r\nSETEVENTS CIRC FOO\r\n",
    );
    assert_eq!(r, "250 OK\r\n552 Unrecognized event \"FOO\"\r\n");
    assert!(m.events.has("CIRC") && m.events.has("STREAM"));
    // The obsolete AUTHDIR_NEWDESCS is taken and ignored, as by tor.
    let (r, _) = run(&mut s, &mut m, &a, "SETEVENTS CIRC AUTHDIR_NEWDESCS\r\n");
    assert_eq!(r, "250 OK\r\n");
    assert!(m.events.has("CIRC"));
    let fp = format!("${}", "A".repeat(40));
    let (r, _) = run(
        &mut s,
        &mut m,
        &a,
        &format!("EXTENDCIRCUIT 0 {fp},{fp} purpose=general\r\n"),
    );
    assert_eq!(r, "250 EXTENDED 7\r\n");
    let (r, _) = run(
        &mut s,
        &mut m,
        &a,
        "EXTENDCIRCUIT 0 $AAAA\r\nEXTENDCIRCUIT 99\r\nEXTENDCIRCUIT 7\r\nEXTENDCIRCUIT\r\n",
    );
    assert_eq!(
        r,
        "552 No such router \"$AAAA\"\r\n552 Unknown circuit \"99\"\r\n512 syntax error: path required.\r\n512 Bad arguments to EXTENDCIRCUIT: Need at least 1 argument(s)\r\n"
    );
    let (r, _) = run(
        &mut s,
        &mut m,
        &a,
        "ATTACHSTREAM 3 7\r\nATTACHSTREAM 1 7\r\nATTACHSTREAM 3 7 FOO=1\r\nATTACHSTREAM 3\r\n",
    );
    assert_eq!(
        r,
        "250 OK\r\n552 Unknown stream \"1\"\r\n512 Bad arguments to ATTACHSTREAM: Unrecognized keyword argument \"FOO\"\r\n512 Bad arguments to ATTACHSTREAM: Need at least 2 argument(s)\r\n"
    );
    let (r, _) = run(
        &mut s,
        &mut m,
        &a,
        "CLOSECIRCUIT 7 IfUnused\r\nCLOSECIRCUIT 5\r\nCLOSESTREAM 5 1\r\nCLOSESTREAM 5\r\n",
    );
    assert_eq!(
        r,
        "250 OK\r\n552 Unknown circuit \"5\"\r\n552 Unknown stream \"5\"\r\n512 Bad arguments to CLOSESTREAM: Need at least 2 argument(s)\r\n"
    );
    let (r, _) = run(
        &mut s,
        &mut m,
        &a,
        "TAKEOWNERSHIP\r\nUSEFEATURE VERBOSE_NAMES\r\nUSEFEATURE XX\r\nFOO bar\r\n+FOO\r\nx\r\n.\r\nMAPADDRESS a=b\r\n",
    );
    assert_eq!(
        r,
        "250 OK\r\n250 OK\r\n552 Unrecognized feature \"XX\"\r\n510 Unrecognized command \"FOO\"\r\n510 Unrecognized command \"+FOO\"\r\n511 Unimplemented command \"MAPADDRESS\"\r\n"
    );
    assert!(m.owner);
}

proptest::proptest! {
    /// No input panics the session, before or after authentication.
    #[test]
    fn session_never_panics(lines in proptest::collection::vec("[A-Za-z+ \"\\\\=$0-9,/.-]{0,40}", 0..12), pre in proptest::bool::ANY) {
        let a = auth_cfg();
        let mut s = Session::new();
        let mut m = Mock::default();
        if pre {
            run(&mut s, &mut m, &a, "AUTHENTICATE \"foo\"\r\n");
        }
        let mut f = Framer::default();
        for l in &lines {
            let _ = f.push(format!("{l}\r\n").as_bytes());
            while let Ok(Some(c)) = f.next_command() {
                let o = s.handle(&c, &a, &mut m, &mut OsRng);
                proptest::prop_assert!(o.reply.ends_with(b"\r\n"));
            }
        }
    }
}

#[test]
fn add_and_del_onion() {
    let (mut s, mut m, a) = authed();
    let id =
        crate::addr::encode_onion_v3(&curve25519_dalek::constants::ED25519_BASEPOINT_COMPRESSED.0);
    let (r, close) = run(&mut s, &mut m, &a, "ADD_ONION NEW:BEST Port=80\r\n");
    assert!(!close);
    assert_eq!(
        r,
        format!(
            "250-ServiceID={id}\r\n250-PrivateKey=ED25519-V3:{}\r\n250 OK\r\n",
            "AQEB".repeat(21) + "AQ=="
        )
    );
    let (r, _) = run(&mut s, &mut m, &a, "ADD_ONION NEW:BEST Port=80\r\n");
    assert_eq!(r, "550 Onion address collision\r\n");
    let (r, _) = run(&mut s, &mut m, &a, "ADD_ONION NEW:BEST\r\n");
    assert_eq!(r, "512 Missing 'Port' argument\r\n");
    let (r, _) = run(&mut s, &mut m, &a, &format!("DEL_ONION {id}\r\n"));
    assert_eq!(r, "250 OK\r\n");
    let (r, _) = run(&mut s, &mut m, &a, &format!("DEL_ONION {id}\r\n"));
    assert_eq!(r, "552 Unknown Onion Service id\r\n");
    let (r, _) = run(&mut s, &mut m, &a, "DEL_ONION abc\r\n");
    assert_eq!(r, "512 Malformed Onion Service id\r\n");
    let (r, _) = run(&mut s, &mut m, &a, "DEL_ONION\r\n");
    assert_eq!(
        r,
        "512 Bad arguments to DEL_ONION: Need at least 1 argument(s)\r\n"
    );
    let (r, _) = run(&mut s, &mut m, &a, &format!("DEL_ONION {id} x\r\n"));
    assert_eq!(
        r,
        "512 Bad arguments to DEL_ONION: Cannot accept more than 1 argument(s)\r\n"
    );
}

#[test]
fn onion_client_auth_like_tor() {
    let (mut s, mut m, a) = authed();
    let id =
        crate::addr::encode_onion_v3(&curve25519_dalek::constants::ED25519_BASEPOINT_COMPRESSED.0);
    let key = "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=";
    let mut t = |line: String| run(&mut s, &mut m, &a, &format!("{line}\r\n")).0;
    assert_eq!(
        t(format!("ONION_CLIENT_AUTH_ADD {id} x25519:{key}")),
        "250 OK\r\n"
    );
    assert_eq!(
        t(format!(
            "ONION_CLIENT_AUTH_ADD {id} x25519:{} ClientName=alice",
            key.trim_end_matches('=')
        )),
        "251 Client for onion existed and replaced\r\n"
    );
    assert_eq!(
        t(format!("ONION_CLIENT_AUTH_VIEW {id}")),
        format!(
            "250-ONION_CLIENT_AUTH_VIEW {id}\r\n250-CLIENT {id} x25519:{key} ClientName=alice\r\n250 OK\r\n"
        )
    );
    assert_eq!(
        t("ONION_CLIENT_AUTH_VIEW".into()),
        format!(
            "250-ONION_CLIENT_AUTH_VIEW\r\n250-CLIENT {id} x25519:{key} ClientName=alice\r\n250 OK\r\n"
        )
    );
    assert_eq!(
        t(format!(
            "ONION_CLIENT_AUTH_ADD {id} x25519:{key} Flags=Permanent"
        )),
        format!("553 Unable to store creds for \"{id}\"\r\n")
    );
    assert_eq!(
        t(format!("ONION_CLIENT_AUTH_ADD {id}")),
        "512 Incomplete ONION_CLIENT_AUTH_ADD command\r\n"
    );
    assert_eq!(
        t(format!("ONION_CLIENT_AUTH_ADD abc x25519:{key}")),
        "512 Invalid v3 address \"abc\"\r\n"
    );
    assert_eq!(
        t(format!("ONION_CLIENT_AUTH_ADD {id} x448:{key}")),
        "552 Unrecognized key type \"x448\"\r\n"
    );
    assert_eq!(
        t(format!("ONION_CLIENT_AUTH_ADD {id} x25519")),
        "512 Invalid key type/blob\r\n"
    );
    assert_eq!(
        t(format!("ONION_CLIENT_AUTH_ADD {id} x25519:AAAA")),
        "512 Failed to decode x25519 private key\r\n"
    );
    let zero = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
    assert_eq!(
        t(format!("ONION_CLIENT_AUTH_ADD {id} x25519:{zero}")),
        format!("553 Invalid private key \"{zero}\"\r\n")
    );
    assert_eq!(
        t(format!(
            "ONION_CLIENT_AUTH_ADD {id} x25519:{key} Flags=Bogus"
        )),
        "512 Invalid 'Flags' argument: \"Bogus\"\r\n"
    );
    assert_eq!(
        t(format!(
            "ONION_CLIENT_AUTH_ADD {id} x25519:{key} ClientName=abcdefghijklmnopq"
        )),
        "512 ClientName longer than 16 chars\r\n"
    );
    assert_eq!(t(format!("ONION_CLIENT_AUTH_REMOVE {id}")), "250 OK\r\n");
    assert_eq!(
        t(format!("ONION_CLIENT_AUTH_REMOVE {id}")),
        format!("251 No credentials for \"{id}\"\r\n")
    );
    assert_eq!(
        t("ONION_CLIENT_AUTH_REMOVE".into()),
        "512 Incomplete ONION_CLIENT_AUTH_REMOVE command\r\n"
    );
    assert_eq!(
        t("ONION_CLIENT_AUTH_VIEW x".into()),
        "512 Invalid v3 address \"x\"\r\n"
    );
    assert_eq!(
        t("ONION_CLIENT_AUTH_VIEW".into()),
        "250-ONION_CLIENT_AUTH_VIEW\r\n250 OK\r\n"
    );
}
