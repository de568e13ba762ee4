//! The client side of the control commands: GETINFO keys, the options
//! GETCONF/SETCONF know, signals, and circuit and stream commands.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use base64::Engine;
use tracing::{info, warn};

use onionmix_frontend::control::events::{EventMask, long_name};
use onionmix_frontend::control::syntax::quote;
use onionmix_frontend::control::{
    AddOnion, AddedOnion, AuthAdded, Backend, ClientAuthCred, CmdError, ConfError, Info, Signal,
};
use onionmix_netdoc::{NetDir, RelayId};

use super::ControlContext;
use crate::client::circmgr::Purpose;
use crate::client::circuit::{self, HopTarget};
use crate::client::config::ClientConfig;
use crate::client::dir::DirMgr;

/// The version string: the tor control-protocol level we follow, then
/// ours (stem parses it as a tor version and gates features on it).
pub fn version() -> String {
    format!("0.4.9.11 (onionmix-{})", env!("CARGO_PKG_VERSION"))
}

/// One control connection's view of the client.
pub struct ClientBackend {
    /// Shared client state.
    pub ctx: Arc<ControlContext>,
    /// This connection's event subscription.
    pub sub_id: u64,
    /// Whether this connection sent TAKEOWNERSHIP.
    pub owning: Arc<AtomicBool>,
}

/// Options GETCONF/SETCONF know: (canonical name, type for config/names).
const OPTIONS: &[(&str, &str)] = &[
    ("SocksPort", "LineList"),
    ("ControlPort", "LineList"),
    ("ControlSocket", "LineList"),
    ("MetricsPort", "LineList"),
    ("DataDirectory", "Filename"),
    ("DisableNetwork", "Boolean"),
    ("__LeaveStreamsUnattached", "Boolean"),
    ("__OwningControllerProcess", "String"),
    ("CookieAuthentication", "Boolean"),
    ("CookieAuthFile", "Filename"),
    ("HashedControlPassword", "LineList"),
    ("MaxCircuitDirtiness", "TimeInterval"),
    ("CircuitBuildTimeout", "TimeInterval"),
    ("EntryNodes", "RouterList"),
    ("MiddleNodes", "RouterList"),
    ("ExitNodes", "RouterList"),
    ("StrictNodes", "Boolean"),
    ("TestingTorNetwork", "Boolean"),
    ("PathsNeededToBuildCircuits", "Float"),
    ("UseMicrodescriptors", "Boolean"),
    ("ClientOnly", "Boolean"),
    ("ORPort", "LineList"),
    ("SafeSocks", "Boolean"),
];

/// GETINFO keys we answer (for `info/names`).
const INFO_NAMES: &[(&str, &str)] = &[
    ("version", "The current version of Tor."),
    ("config-file", "Current location of the \"torrc\" file."),
    (
        "config/names",
        "List of configuration options, types, and documentation.",
    ),
    (
        "info/names",
        "List of GETINFO options, types, and documentation.",
    ),
    (
        "events/names",
        "Events that the controller can ask for with SETEVENTS.",
    ),
    (
        "signal/names",
        "Signal names recognized by the SIGNAL command",
    ),
    ("features/names", "What arguments can USEFEATURE take?"),
    (
        "process/pid",
        "Process id belonging to the main tor process.",
    ),
    ("uptime", "Uptime of the Tor daemon in seconds."),
    (
        "status/bootstrap-phase",
        "The last bootstrap phase status event that Tor sent.",
    ),
    (
        "status/circuit-established",
        "Whether we think client functionality is working.",
    ),
    (
        "status/enough-dir-info",
        "Whether we have enough up-to-date directory information to build circuits.",
    ),
    (
        "circuit-status",
        "List of current circuits originating here.",
    ),
    ("stream-status", "List of current streams."),
    ("orconn-status", "A list of current OR connections."),
    ("entry-guards", "Which nodes are we using as entry guards?"),
    ("net/listeners/socks", "Bound addresses by type"),
    ("net/listeners/control", "Bound addresses by type"),
    (
        "ns/id/*",
        "Brief summary of router status by ID (v3 directory format).",
    ),
    (
        "ns/name/*",
        "Brief summary of router status by nickname (v3 directory format).",
    ),
    (
        "ns/all",
        "Brief summary of router status (v3 directory format)",
    ),
    ("md/id/*", "Microdescriptors by ID"),
    ("md/name/*", "Microdescriptors by name"),
    (
        "dormant",
        "Is Tor dormant (not building circuits because it's idle)?",
    ),
    ("traffic/read", "Bytes read since the process was started."),
    (
        "traffic/written",
        "Bytes written since the process was started.",
    ),
    (
        "address",
        "IP address of this Tor host, if we can guess it.",
    ),
    ("fingerprint", "Get hash of router's identity key."),
    ("accounting/enabled", "Is accounting currently enabled?"),
    (
        "onions/current",
        "Onion services owned by the current control connection.",
    ),
    (
        "onions/detached",
        "Onion services detached from the control connection.",
    ),
];

fn bool01(b: bool) -> String {
    if b { "1".into() } else { "0".into() }
}

/// A SocksPort value: `PORT` (on 127.0.0.1) or `ADDRESS:PORT`; no flags.
fn parse_socks_port(v: &str) -> Result<std::net::SocketAddr, ConfError> {
    if let Ok(p) = v.parse::<u16>() {
        return Ok(std::net::SocketAddr::from(([127, 0, 0, 1], p)));
    }
    v.parse()
        .map_err(|_| ConfError::Parse("Invalid SocksPort configuration".into()))
}

fn parse_bool(key: &str, v: Option<&str>) -> Result<bool, ConfError> {
    match v {
        None | Some("0") => Ok(false),
        Some("1") => Ok(true),
        Some(x) => Err(ConfError::Parse(format!(
            "Could not parse {key}: Unrecognized value {x}. Allowed values are 0 and 1."
        ))),
    }
}

/// Find a relay by ServerSpec (`$FP`, `$FP~nick`, `$FP=nick`, `FP`, or a
/// nickname); (RSA id, whether a microdescriptor is known).
fn find_relay(nd: &NetDir, spec: &str) -> Option<([u8; 20], bool)> {
    let fp = spec.trim_start_matches('$');
    let (fp, nick) = match fp.split_once(['~', '=']) {
        Some((f, n)) => (f, Some(n)),
        None => (fp, None),
    };
    if let Some(id) = crate::client::config::parse_fingerprint(fp) {
        let listed = nd.listed_by_rsa_id(&id)?;
        if nick.is_some_and(|n| !n.eq_ignore_ascii_case(&listed.nickname)) {
            return None;
        }
        return Some((id, nd.relay_by_rsa_id(&id).is_some()));
    }
    if spec.starts_with('$') {
        return None;
    }
    nd.listed()
        .iter()
        .find(|r| r.nickname.eq_ignore_ascii_case(spec))
        .map(|r| (r.rsa_id, nd.relay_by_rsa_id(&r.rsa_id).is_some()))
}

fn ns_entry(nd: &NetDir, r: &onionmix_netdoc::ConsensusRelay) -> String {
    let b64 = base64::engine::general_purpose::STANDARD_NO_PAD;
    let published = onionmix_crypto::timefmt::format_utc(
        nd.lifetime()
            .valid_after
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
    );
    let mut flags: Vec<&str> = r.flags.names().collect();
    flags.sort_unstable();
    let mut s = format!(
        "r {} {} {} {} {} {} {}\n",
        r.nickname,
        b64.encode(r.rsa_id),
        b64.encode([0u8; 20]),
        published,
        r.ipv4.ip(),
        r.ipv4.port(),
        r.dir_port
    );
    if let Some(a) = r.ipv6 {
        s.push_str(&format!("a {a}\n"));
    }
    s.push_str(&format!("s {}\n", flags.join(" ")));
    if let Some(v) = &r.version {
        s.push_str(&format!("v {v}\n"));
    }
    s.push_str(&format!("w Bandwidth={}", r.bandwidth));
    if !r.measured {
        s.push_str(" Unmeasured=1");
    }
    s.push('\n');
    s
}

fn md_text(nd: &NetDir, id: &[u8; 20]) -> Option<String> {
    let b64 = base64::engine::general_purpose::STANDARD_NO_PAD;
    let r = nd.relay_by_rsa_id(id)?;
    let mut s = format!(
        "onion-key\nntor-onion-key {}\n",
        b64.encode(r.ntor_onion_key)
    );
    if let Some(ed) = r.ed_id {
        s.push_str(&format!("id ed25519 {}\n", b64.encode(ed)));
    }
    Some(s)
}

impl ClientBackend {
    fn cfg(&self) -> &ClientConfig {
        &self.ctx.cfg
    }
    fn dir(&self) -> &DirMgr {
        &self.ctx.dir
    }

    fn conf_value(&self, name: &str) -> Vec<Option<String>> {
        let c = self.cfg();
        let hub = &self.ctx.hub;
        let join = |l: &[String]| (!l.is_empty()).then(|| l.join(","));
        match name {
            "SocksPort" => vec![Some(
                self.ctx
                    .socks
                    .addr()
                    .map(|a| a.to_string())
                    .unwrap_or_else(|| "0".into()),
            )],
            "ControlPort" => vec![c.control_port.map(|a| a.to_string())],
            "ControlSocket" => vec![c.control_socket.as_ref().map(|p| p.display().to_string())],
            "MetricsPort" => vec![c.metrics_port.map(|a| a.to_string())],
            "DataDirectory" => vec![Some(c.data_dir.display().to_string())],
            "DisableNetwork" => vec![Some(bool01(hub.disable_network.load(Ordering::Relaxed)))],
            "__LeaveStreamsUnattached" => {
                vec![Some(bool01(hub.leave_unattached.load(Ordering::Relaxed)))]
            }
            "__OwningControllerProcess" => vec![self.ctx.owning_pid().map(|p| p.to_string())],
            "CookieAuthentication" => vec![Some(bool01(self.ctx.auth.cookie.is_some()))],
            "CookieAuthFile" => vec![self.ctx.auth.cookie_path.clone()],
            "HashedControlPassword" => {
                if c.hashed_control_password.is_empty() {
                    vec![None]
                } else {
                    c.hashed_control_password
                        .iter()
                        .cloned()
                        .map(Some)
                        .collect()
                }
            }
            "MaxCircuitDirtiness" => vec![Some(c.max_circuit_dirtiness_secs.to_string())],
            "CircuitBuildTimeout" => vec![Some(c.circuit_build_timeout_secs.to_string())],
            "EntryNodes" => vec![join(&c.entry_nodes)],
            "MiddleNodes" => vec![join(&c.middle_nodes)],
            "ExitNodes" => vec![join(&c.exit_nodes)],
            "StrictNodes" => vec![Some("1".into())],
            "TestingTorNetwork" => vec![Some(bool01(c.testing_network))],
            "PathsNeededToBuildCircuits" => {
                vec![Some(c.paths_needed_to_build_circuits.to_string())]
            }
            "UseMicrodescriptors" | "ClientOnly" => vec![Some("1".into())],
            "SafeSocks" => vec![Some("0".into())],
            _ => vec![None],
        }
    }

    fn netdir(&self) -> Result<Arc<NetDir>, Info> {
        self.dir()
            .netdir()
            .ok_or(Info::Fail("Not enough directory information".into()))
    }

    fn newnym(&self) {
        let hub = self.ctx.hub.clone();
        let cm = self.ctx.circmgr.clone();
        match hub.newnym_due() {
            Some(d) if d.is_zero() => {
                hub.newnym_apply();
                cm.clear();
            }
            Some(d) => {
                let secs = d.as_secs_f64().ceil() as u64;
                info!("Rate limiting NEWNYM request: delaying by {secs} second(s)");
                hub.log(
                    "NOTICE",
                    &format!("Rate limiting NEWNYM request: delaying by {secs} second(s)"),
                );
                tokio::spawn(async move {
                    tokio::time::sleep(d).await;
                    hub.newnym_apply();
                    cm.clear();
                });
            }
            None => {}
        }
    }

    fn set_disable_network(&self, off: bool) {
        let was = self.ctx.hub.disable_network.swap(off, Ordering::Relaxed);
        if off && !was {
            // As tor: no new connections or circuits; what we hold is let
            // go, so streams after re-enabling get fresh circuits.
            self.ctx.hub.epoch.fetch_add(1, Ordering::Relaxed);
            self.ctx.circmgr.clear();
            info!("DisableNetwork is set: not building circuits");
        }
    }

    fn circ_id(&self, id: &str) -> Result<u64, CmdError> {
        id.parse::<u64>()
            .ok()
            .filter(|n| self.ctx.hub.with_circ(*n, |_| ()).is_some())
            .ok_or_else(|| CmdError::new(552, format!("Unknown circuit \"{id}\"")))
    }
}

impl Backend for ClientBackend {
    fn version(&self) -> String {
        version()
    }

    fn getinfo(&mut self, key: &str) -> Info {
        let hub = &self.ctx.hub;
        let v = match key {
            "version" => version(),
            "config-file" => match &self.cfg().config_path {
                Some(p) => p.display().to_string(),
                None => return Info::Unknown,
            },
            "config/names" => OPTIONS
                .iter()
                .map(|(n, t)| format!("{n} {t}"))
                .collect::<Vec<_>>()
                .join("\n"),
            "info/names" => INFO_NAMES
                .iter()
                .map(|(n, d)| format!("{n} -- {d}"))
                .collect::<Vec<_>>()
                .join("\n"),
            "process/pid" => std::process::id().to_string(),
            "uptime" => hub.started.elapsed().as_secs().to_string(),
            "status/bootstrap-phase" => hub.bootstrap_phase(),
            "status/circuit-established" => bool01(hub.circuit_established.load(Ordering::Relaxed)),
            "status/enough-dir-info" => bool01(hub.enough_dir_info.load(Ordering::Relaxed)),
            "circuit-status" => hub.circuit_status(),
            "stream-status" => hub.stream_status_text(),
            "orconn-status" => hub.orconn_status().0,
            "entry-guards" => {
                let nd = self.dir().netdir();
                self.dir()
                    .primary_guards()
                    .iter()
                    .map(|id| {
                        let nick = nd
                            .as_ref()
                            .and_then(|n| n.listed_by_rsa_id(id))
                            .map(|r| r.nickname.clone())
                            .unwrap_or_default();
                        format!("{} up", long_name(id, &nick))
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            }
            "net/listeners/socks" => self
                .ctx
                .socks
                .addr()
                .map(|a| quote(a.to_string().as_bytes()))
                .unwrap_or_default(),
            "net/listeners/control" => self
                .ctx
                .listeners()
                .iter()
                .map(|l| quote(l.as_bytes()))
                .collect::<Vec<_>>()
                .join(" "),
            "ns/all" => match self.netdir() {
                Ok(nd) => nd
                    .listed()
                    .iter()
                    .map(|r| ns_entry(&nd, r))
                    .collect::<String>(),
                Err(e) => return e,
            },
            "dormant" => bool01(hub.dormant.load(Ordering::Relaxed)),
            "onions/current" => self.ctx.onions.list(Some(self.sub_id)),
            "onions/detached" => self.ctx.onions.list(None),
            "traffic/read" => hub.read.load(Ordering::Relaxed).to_string(),
            "traffic/written" => hub.written.load(Ordering::Relaxed).to_string(),
            "address" | "address/v4" | "address/v6" => return Info::Fail("Address unknown".into()),
            "fingerprint" => return Info::Fail("Not running in server mode".into()),
            "accounting/enabled" => "0".into(),
            k if k.starts_with("ns/id/") || k.starts_with("ns/name/") => {
                let nd = match self.netdir() {
                    Ok(n) => n,
                    Err(e) => return e,
                };
                let spec = k
                    .trim_start_matches("ns/id/")
                    .trim_start_matches("ns/name/");
                match find_relay(&nd, spec).and_then(|(id, _)| nd.listed_by_rsa_id(&id)) {
                    Some(r) => ns_entry(&nd, r),
                    None => String::new(),
                }
            }
            k if k.starts_with("md/id/") || k.starts_with("md/name/") => {
                let nd = match self.netdir() {
                    Ok(n) => n,
                    Err(e) => return e,
                };
                let spec = k
                    .trim_start_matches("md/id/")
                    .trim_start_matches("md/name/");
                match find_relay(&nd, spec).and_then(|(id, _)| md_text(&nd, &id)) {
                    Some(t) => t,
                    None => return Info::Unknown,
                }
            }
            _ => return Info::Unknown,
        };
        Info::Value(v)
    }

    fn getconf(&mut self, key: &str) -> Option<Vec<(String, Option<String>)>> {
        let (name, _) = OPTIONS.iter().find(|(n, _)| n.eq_ignore_ascii_case(key))?;
        Some(
            self.conf_value(name)
                .into_iter()
                .map(|v| (name.to_string(), v))
                .collect(),
        )
    }

    fn setconf(
        &mut self,
        changes: &[(String, Option<String>)],
        reset: bool,
    ) -> Result<(), ConfError> {
        // Check everything first: SETCONF is all or nothing.
        let mut plan = Vec::new();
        for (k, v) in changes {
            let Some((name, _)) = OPTIONS.iter().find(|(n, _)| n.eq_ignore_ascii_case(k)) else {
                return Err(ConfError::Unknown(k.clone()));
            };
            let v = if reset {
                v.clone().filter(|s| !s.is_empty())
            } else {
                v.clone()
            };
            match *name {
                "DisableNetwork" | "__LeaveStreamsUnattached" => {
                    let b = match (&v, reset) {
                        (None, true) if *name == "__LeaveStreamsUnattached" => {
                            self.cfg().leave_streams_unattached
                        }
                        _ => parse_bool(name, v.as_deref())?,
                    };
                    plan.push((*name, Some(bool01(b))));
                }
                "SocksPort" => {
                    let addr = match (v.as_deref(), reset) {
                        (None, true) => Some(self.cfg().socks_listen),
                        (None, false) | (Some("0"), _) => None,
                        (Some(x), _) => Some(parse_socks_port(x)?),
                    };
                    if addr != self.ctx.socks.addr() {
                        plan.push((
                            *name,
                            Some(addr.map(|a| a.to_string()).unwrap_or_else(|| "0".into())),
                        ));
                    }
                }
                "__OwningControllerProcess" => {
                    if let Some(p) = &v
                        && p.parse::<u32>().is_err()
                    {
                        return Err(ConfError::Parse(format!(
                            "Could not parse __OwningControllerProcess: {p}"
                        )));
                    }
                    plan.push((*name, v));
                }
                _ => {
                    let current = self.conf_value(name);
                    if current.len() == 1 && current.first().cloned().flatten() == v {
                        continue;
                    }
                    return Err(ConfError::Setting(format!(
                        "{name} cannot be changed on a running onionmix client"
                    )));
                }
            }
        }
        // The one change that can still fail goes first.
        plan.sort_by_key(|(n, _)| *n != "SocksPort");
        for (name, v) in plan {
            match name {
                "DisableNetwork" => self.set_disable_network(v.as_deref() == Some("1")),
                "__LeaveStreamsUnattached" => {
                    self.ctx
                        .hub
                        .leave_unattached
                        .store(v.as_deref() == Some("1"), Ordering::Relaxed);
                }
                "__OwningControllerProcess" => {
                    self.ctx.set_owning_pid(v.and_then(|p| p.parse().ok()))
                }
                "SocksPort" => {
                    let addr = v.and_then(|a| a.parse().ok());
                    if let Err(e) = self.ctx.socks.rebind(addr) {
                        return Err(ConfError::Setting(e));
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn signal(&mut self, sig: Signal) {
        let hub = &self.ctx.hub;
        let name = match sig {
            Signal::Newnym => {
                self.newnym();
                return;
            }
            Signal::Reload => {
                match &self.cfg().config_path {
                    Some(p) => match ClientConfig::load(p) {
                        Ok(_) => {
                            info!("configuration reloaded; options that need a restart are kept")
                        }
                        Err(e) => {
                            warn!("reloading the configuration failed: {e}");
                            hub.log("WARN", &format!("Reloading config failed: {e}"));
                        }
                    },
                    None => info!("RELOAD: no configuration file"),
                }
                "RELOAD"
            }
            Signal::Shutdown | Signal::Halt => {
                info!("shutting down at the controller's request");
                self.ctx.request_shutdown();
                return;
            }
            Signal::Dump => "DUMP",
            Signal::Debug => "DEBUG",
            Signal::Heartbeat => {
                let (built, pending) = hub.circuit_counts();
                info!(
                    "Heartbeat: {built} circuits open, {pending} building, {} streams",
                    hub.open_streams()
                );
                "HEARTBEAT"
            }
            Signal::ClearDnsCache => "CLEARDNSCACHE",
            Signal::Active => {
                hub.dormant.store(false, Ordering::Relaxed);
                return;
            }
            Signal::Dormant => {
                hub.dormant.store(true, Ordering::Relaxed);
                return;
            }
        };
        hub.emit("SIGNAL", || {
            onionmix_frontend::control::reply::event(&format!("SIGNAL {name}"))
        });
    }

    fn set_events(&mut self, mask: EventMask) {
        self.ctx.hub.set_mask(self.sub_id, mask);
    }

    fn extend_circuit(
        &mut self,
        id: &str,
        path: Option<Vec<String>>,
        purpose: Option<&str>,
    ) -> Result<u64, CmdError> {
        if id != "0" {
            self.circ_id(id)?;
            return Err(CmdError::new(
                551,
                "Extending an existing circuit is not supported",
            ));
        }
        let controller = match purpose.map(str::to_ascii_lowercase).as_deref() {
            None | Some("general") => false,
            Some("controller") => true,
            Some(p) => return Err(CmdError::new(552, format!("Unknown purpose \"{p}\""))),
        };
        if self.ctx.hub.disable_network.load(Ordering::Relaxed) {
            return Err(CmdError::new(551, "Couldn't start circuit"));
        }
        let nd = self
            .dir()
            .netdir()
            .ok_or_else(|| CmdError::new(551, "Couldn't start circuit"))?;
        let hops: Vec<HopTarget> = match path {
            Some(names) => {
                let params = Arc::new(onionmix_proto::cc::CcParams::from_consensus(nd.params()));
                let mut hops = Vec::new();
                for n in &names {
                    let (rid, has_md) = find_relay(&nd, n)
                        .ok_or_else(|| CmdError::new(552, format!("No such router \"{n}\"")))?;
                    let r = nd
                        .relay(&RelayId(rid))
                        .filter(|_| has_md)
                        .ok_or_else(|| CmdError::new(552, format!("No descriptor for \"{n}\"")))?;
                    hops.push(DirMgr::hop(r, &params));
                }
                hops
            }
            None => self
                .dir()
                .pick_path(Purpose::Exit(None), &HashSet::new())
                .map_err(|_| CmdError::new(551, "Couldn't start circuit"))?,
        };
        let first = hops
            .first()
            .cloned()
            .ok_or_else(|| CmdError::new(512, "No router names provided"))?;
        let hub = self.ctx.hub.clone();
        let cid = hub.circ_launched(&hops, controller);
        let chanmgr = self.ctx.chanmgr.clone();
        let timeout = self.ctx.build_timeout;
        tokio::spawn(async move {
            let chan = match tokio::time::timeout(timeout, chanmgr.get(&first)).await {
                Ok(Ok(c)) => c,
                _ => {
                    hub.circ_failed(cid, "CONNECTFAILED");
                    return;
                }
            };
            if let Ok(c) = circuit::build_launched(chan, hops, timeout, cid).await {
                hub.circ_handle(&Arc::new(c), true);
            }
        });
        Ok(cid)
    }

    fn circuit_exists(&mut self, id: &str) -> bool {
        self.circ_id(id).is_ok()
    }

    fn set_circuit_purpose(&mut self, id: &str, purpose: &str) -> Result<(), CmdError> {
        let n = self.circ_id(id)?;
        let p = match purpose.to_ascii_lowercase().as_str() {
            "general" => "GENERAL",
            "controller" => "CONTROLLER",
            _ => return Err(CmdError::new(552, format!("Unknown purpose \"{purpose}\""))),
        };
        self.ctx.hub.with_circ(n, |e| e.status.purpose = p);
        Ok(())
    }

    fn attach_stream(
        &mut self,
        stream: &str,
        circ: &str,
        hop: Option<u32>,
    ) -> Result<(), CmdError> {
        let hub = &self.ctx.hub;
        let unknown = || CmdError::new(552, format!("Unknown stream \"{stream}\""));
        let sid = stream.parse::<u64>().map_err(|_| unknown())?;
        hub.with_stream(sid, |_| ()).ok_or_else(unknown)?;
        if circ == "0" {
            return Err(CmdError::new(
                551,
                "Attaching to circuit 0 (giving the stream back) is not supported",
            ));
        }
        let cid = self.circ_id(circ)?;
        let (c, built, len) = hub
            .with_circ(cid, |e| {
                let c = e
                    .strong
                    .clone()
                    .or_else(|| e.weak.as_ref().and_then(|w| w.upgrade()));
                (c, e.status.status == "BUILT", e.relays.len())
            })
            .ok_or_else(|| CmdError::new(552, format!("Unknown circuit \"{circ}\"")))?;
        let Some(c) = c.filter(|_| built) else {
            return Err(CmdError::new(
                551,
                "Can't attach stream to non-open origin circuit",
            ));
        };
        if len < 2 || hop == Some(1) {
            return Err(CmdError::new(
                551,
                "Can't attach stream to this one-hop circuit.",
            ));
        }
        if hop.is_some_and(|h| usize::try_from(h).ok() != Some(len)) {
            return Err(CmdError::new(
                551,
                "Attaching to a hop other than the last is not supported",
            ));
        }
        let tx = hub
            .with_stream(sid, |e| e.attach.take())
            .flatten()
            .ok_or_else(|| CmdError::new(555, "Connection is not managed by controller."))?;
        tx.send(c).map_err(|_| unknown())
    }

    fn close_stream(&mut self, stream: &str, _reason: u8) -> Result<(), CmdError> {
        let unknown = || CmdError::new(552, format!("Unknown stream \"{stream}\""));
        let sid = stream.parse::<u64>().map_err(|_| unknown())?;
        let tx = self
            .ctx
            .hub
            .with_stream(sid, |e| e.close.take())
            .ok_or_else(unknown)?;
        if let Some(tx) = tx {
            let _ = tx.send(_reason);
        }
        Ok(())
    }

    fn close_circuit(&mut self, circ: &str, if_unused: bool) -> Result<(), CmdError> {
        let n = self.circ_id(circ)?;
        let hub = &self.ctx.hub;
        if if_unused && hub.with_circ(n, |e| e.streams > 0).unwrap_or(false) {
            return Ok(());
        }
        if let Some(mut e) = hub.take_circ(n) {
            if let Some((chan, id, credits)) = e.chan.take() {
                credits.close();
                chan.try_send(crate::reactor::ChanCommand::Destroy { circ_id: id });
            }
            e.status.status = "CLOSED";
            e.status.reason = Some("REQUESTED");
            let line = e.status.line();
            hub.emit("CIRC", || {
                onionmix_frontend::control::reply::event(&format!("CIRC {line}"))
            });
        }
        Ok(())
    }

    fn add_onion(&mut self, req: &AddOnion) -> Result<AddedOnion, CmdError> {
        self.add_onion_impl(req)
    }

    fn del_onion(&mut self, service_id: &str) -> Result<(), CmdError> {
        self.del_onion_impl(service_id)
    }

    fn client_auth_add(&mut self, cred: ClientAuthCred) -> Result<AuthAdded, CmdError> {
        self.client_auth_add_impl(cred)
    }

    fn client_auth_remove(&mut self, address: &str) -> Result<bool, CmdError> {
        self.client_auth_remove_impl(address)
    }

    fn client_auth_view(&mut self) -> Vec<ClientAuthCred> {
        self.client_auth_view_impl()
    }

    fn set_owner(&mut self, owning: bool) {
        self.owning.store(owning, Ordering::Relaxed);
    }
}
