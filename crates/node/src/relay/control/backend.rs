//! The relay's side of the control commands: GETINFO keys a relay
//! answers, the options GETCONF/SETCONF know, signals. Commands about
//! circuits, streams and onion services a relay does not originate are
//! answered as tor answers unknown ids, or 551.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tracing::{debug, info};

use onionmix_frontend::control::events::EventMask;
use onionmix_frontend::control::reply;
use onionmix_frontend::control::syntax::quote;
use onionmix_frontend::control::{
    AddOnion, AddedOnion, AuthAdded, Backend, ClientAuthCred, CmdError, ConfError, HsFetch, HsPost,
    Info, Signal,
};

use super::{RelayControlNode, bootstrap_phase};
use crate::control::{
    bool01, common_info, conf_lines, find_relay, line_list, ns_value, option_name, version,
};
use crate::relay::config::RelayConfig;

/// GETINFO keys a relay answers (for `info/names`).
const INFO_KEYS: &[&str] = &[
    "version",
    "config-file",
    "config/names",
    "info/names",
    "events/names",
    "signal/names",
    "features/names",
    "process/pid",
    "process/uid",
    "process/user",
    "process/descriptor-limit",
    "ip-to-country/*",
    "status/version/current",
    "uptime",
    "fingerprint",
    "address",
    "address/v4",
    "net/listeners/or",
    "net/listeners/dir",
    "net/listeners/socks",
    "net/listeners/control",
    "status/bootstrap-phase",
    "status/circuit-established",
    "status/enough-dir-info",
    "status/good-server-descriptor",
    "status/accepted-server-descriptor",
    "status/reachability-succeeded/or",
    "status/reachability-succeeded/dir",
    "status/reachability-succeeded",
    "circuit-status",
    "stream-status",
    "orconn-status",
    "traffic/read",
    "traffic/written",
    "ns/id/*",
    "ns/name/*",
    "ns/all",
    "dormant",
    "accounting/enabled",
];

/// Options GETCONF/SETCONF know on a relay: (canonical name, type).
const OPTIONS: &[(&str, &str)] = &[
    ("Nickname", "String"),
    ("ORPort", "LineList"),
    ("Address", "LineList"),
    ("DataDirectory", "Filename"),
    ("ContactInfo", "String"),
    ("ExitRelay", "Autobool"),
    ("ExitPolicy", "LineList"),
    ("MyFamily", "LineList"),
    ("SocksPort", "LineList"),
    ("DirPort", "LineList"),
    ("ControlPort", "LineList"),
    ("ControlSocket", "LineList"),
    ("MetricsPort", "LineList"),
    ("CookieAuthentication", "Boolean"),
    ("CookieAuthFile", "Filename"),
    ("HashedControlPassword", "LineList"),
    ("__OwningControllerProcess", "String"),
    ("DisableNetwork", "Boolean"),
    ("ClientOnly", "Boolean"),
    ("PublishServerDescriptor", "CommaList"),
    ("ShutdownWaitLength", "TimeInterval"),
    ("TestingTorNetwork", "Boolean"),
];

/// One control connection's view of a relay.
pub struct RelayBackend {
    node: Arc<RelayControlNode>,
    sub_id: u64,
    owning: AtomicBool,
}

fn not_here(what: &str) -> CmdError {
    CmdError::new(551, format!("{what} is not available on an onionmix relay"))
}

impl RelayBackend {
    pub(super) fn new(node: Arc<RelayControlNode>, sub_id: u64) -> Self {
        RelayBackend {
            node,
            sub_id,
            owning: AtomicBool::new(false),
        }
    }

    /// Whether this connection sent TAKEOWNERSHIP.
    pub fn is_owner(&self) -> bool {
        self.owning.load(Ordering::Relaxed)
    }

    fn cfg(&self) -> &RelayConfig {
        &self.node.ctx.cfg
    }

    /// Listed as Running in the consensus we have: the authorities reached
    /// our ORPort (we run no self-test of our own).
    fn listed_running(&self) -> bool {
        self.node.ctx.control.netdir().is_some_and(|nd| {
            nd.listed_by_rsa_id(&self.node.ctx.rsa_id)
                .is_some_and(|r| r.flags.names().any(|f| f == "Running"))
        })
    }

    fn info_value(&self, key: &str) -> Info {
        let ctx = &self.node.ctx;
        let c = &ctx.control;
        if let Some(i) = common_info(key, self.cfg().config_path.as_deref(), OPTIONS, INFO_KEYS) {
            return i;
        }
        let v = match key {
            "uptime" => ctx.started.elapsed().as_secs().to_string(),
            "fingerprint" => hex::encode_upper(ctx.rsa_id),
            "address" | "address/v4" => ctx.cfg.advertised_ip().to_string(),
            "net/listeners/or" => {
                let a = std::net::SocketAddr::new(ctx.cfg.or_listen.ip(), ctx.or_port());
                quote(a.to_string().as_bytes())
            }
            "net/listeners/dir" | "net/listeners/socks" => String::new(),
            "net/listeners/control" => self
                .node
                .listeners
                .iter()
                .map(|l| quote(l.as_bytes()))
                .collect::<Vec<_>>()
                .join(" "),
            "status/bootstrap-phase" => bootstrap_phase(c.netdir().is_some()),
            "status/circuit-established" => "0".into(),
            "status/enough-dir-info" => bool01(c.netdir().is_some()),
            "status/good-server-descriptor" | "status/accepted-server-descriptor" => {
                bool01(c.descriptor_accepted.load(Ordering::Relaxed))
            }
            "status/reachability-succeeded/or" => bool01(self.listed_running()),
            // No DirPort: nothing to test, as tor answers then.
            "status/reachability-succeeded/dir" => "1".into(),
            "status/reachability-succeeded" => {
                format!("OR={} DIR=1", bool01(self.listed_running()))
            }
            "circuit-status" | "stream-status" => String::new(),
            "orconn-status" => c.orconns.status().0,
            "traffic/read" => c.traffic.read.load(Ordering::Relaxed).to_string(),
            "traffic/written" => c.traffic.written.load(Ordering::Relaxed).to_string(),
            "dormant" => "0".into(),
            "status/version/current" => "unknown".into(),
            "accounting/enabled" => "0".into(),
            k if k == "ns/all" || k.starts_with("ns/id/") || k.starts_with("ns/name/") => {
                return ns_value(c.netdir().as_deref(), k);
            }
            _ => return Info::Unknown,
        };
        Info::Value(v)
    }

    fn conf_value(&self, name: &str) -> Vec<Option<String>> {
        let c = self.cfg();
        let auth = &self.node.auth;
        match name {
            "Nickname" => vec![Some(c.nickname.clone())],
            "ORPort" => vec![Some(format!(
                "{}:{}",
                c.or_listen.ip(),
                self.node.ctx.or_port()
            ))],
            "Address" => vec![c.address.map(|a| a.to_string())],
            "DataDirectory" => vec![Some(c.data_dir.display().to_string())],
            "ContactInfo" => vec![c.contact.clone()],
            "ExitRelay" => vec![Some(bool01(c.exit))],
            "ExitPolicy" => line_list(&c.exit_policy),
            "MyFamily" => {
                if c.family.is_empty() {
                    vec![None]
                } else {
                    vec![Some(c.family.join(","))]
                }
            }
            "SocksPort" | "DirPort" | "DisableNetwork" | "ClientOnly" => vec![Some("0".into())],
            "ControlPort" => vec![c.control_port.map(|a| a.to_string())],
            "ControlSocket" => vec![c.control_socket.as_ref().map(|p| p.display().to_string())],
            "MetricsPort" => vec![c.metrics_port.map(|a| a.to_string())],
            "CookieAuthentication" => vec![Some(bool01(auth.cookie.is_some()))],
            "CookieAuthFile" => vec![auth.cookie_path.clone()],
            "HashedControlPassword" => line_list(&c.hashed_control_password),
            "__OwningControllerProcess" => {
                vec![self.node.owner.owning_pid().map(|p| p.to_string())]
            }
            "PublishServerDescriptor" => vec![Some("1".into())],
            "ShutdownWaitLength" => vec![Some(c.shutdown_wait_secs.to_string())],
            "TestingTorNetwork" => vec![Some(bool01(c.testing_network))],
            _ => vec![None],
        }
    }

    fn reload(&self) {
        // Tor's notice, word for word (controllers watch for it).
        info!("Received reload signal (hup). Reloading config and resetting internal state.");
        let Some(p) = &self.cfg().config_path else {
            debug!("RELOAD: no configuration file");
            return;
        };
        // An authority's file has the authority's schema.
        let checked = if self.cfg().config_is_authority {
            crate::authority::AuthorityConfig::load(p).map(|_| ())
        } else {
            RelayConfig::load(p).map(|_| ())
        };
        match checked {
            Ok(()) => debug!("configuration checked; options that need a restart are kept"),
            Err(e) => {
                self.node
                    .ctx
                    .control
                    .bus
                    .log("WARN", &format!("Reloading config failed: {e}"));
            }
        }
    }
}

impl Backend for RelayBackend {
    fn version(&self) -> String {
        version()
    }

    fn getinfo(&mut self, key: &str) -> Info {
        self.info_value(key)
    }

    fn getconf(&mut self, key: &str) -> Option<Vec<(String, Option<String>)>> {
        let name = option_name(OPTIONS, key)?;
        Some(conf_lines(name, self.conf_value(name)))
    }

    fn setconf(
        &mut self,
        changes: &[(String, Option<String>)],
        reset: bool,
    ) -> Result<(), ConfError> {
        // All or nothing: check everything first.
        let mut owner = None;
        for (k, v) in changes {
            let Some(name) = option_name(OPTIONS, k) else {
                return Err(ConfError::Unknown(k.clone()));
            };
            let v = if reset {
                v.clone().filter(|s| !s.is_empty())
            } else {
                v.clone()
            };
            if name == "__OwningControllerProcess" {
                let pid = match &v {
                    None => None,
                    Some(p) => Some(p.parse::<u32>().map_err(|_| {
                        ConfError::Parse(format!("Could not parse __OwningControllerProcess: {p}"))
                    })?),
                };
                owner = Some(pid);
                continue;
            }
            let current = self.conf_value(name);
            if current.len() == 1 && current.first().cloned().flatten() == v {
                continue;
            }
            return Err(ConfError::Setting(format!(
                "{name} cannot be changed on a running onionmix relay"
            )));
        }
        if let Some(pid) = owner {
            self.node.owner.set_owning_pid(pid);
        }
        Ok(())
    }

    fn signal(&mut self, sig: Signal) {
        let ctx = &self.node.ctx;
        let name = match sig {
            Signal::Reload => {
                self.reload();
                "RELOAD"
            }
            Signal::Shutdown => {
                self.node.begin_shutdown();
                return;
            }
            Signal::Halt => {
                info!("Catching signal TERM, exiting cleanly.");
                self.node.owner.request_shutdown();
                return;
            }
            Signal::Dump | Signal::Heartbeat => {
                let s = &ctx.stats;
                info!(
                    "Heartbeat: {} channels, {} circuits, {} exit streams since start; {} bytes read, {} written",
                    s.channels.load(Ordering::Relaxed),
                    s.circuits.load(Ordering::Relaxed),
                    s.streams.load(Ordering::Relaxed),
                    ctx.control.traffic.read.load(Ordering::Relaxed),
                    ctx.control.traffic.written.load(Ordering::Relaxed),
                );
                if sig == Signal::Dump {
                    "DUMP"
                } else {
                    "HEARTBEAT"
                }
            }
            Signal::Debug => "DEBUG",
            // A relay builds no circuits of its own: nothing to renew,
            // no DNS cache, never dormant; the event still says so.
            Signal::Newnym => "NEWNYM",
            Signal::ClearDnsCache => "CLEARDNSCACHE",
            Signal::Active => "ACTIVE",
            Signal::Dormant => "DORMANT",
        };
        ctx.control
            .bus
            .emit("SIGNAL", || reply::event(&format!("SIGNAL {name}")));
    }

    fn set_events(&mut self, mask: EventMask) {
        self.node.ctx.control.bus.set_mask(self.sub_id, mask);
    }

    fn extend_circuit(
        &mut self,
        id: &str,
        _path: Option<Vec<String>>,
        _purpose: Option<&str>,
    ) -> Result<u64, CmdError> {
        if id != "0" {
            return Err(CmdError::new(552, format!("Unknown circuit \"{id}\"")));
        }
        Err(not_here("Building circuits"))
    }

    fn circuit_exists(&mut self, _id: &str) -> bool {
        false
    }

    fn set_circuit_purpose(&mut self, id: &str, _purpose: &str) -> Result<(), CmdError> {
        Err(CmdError::new(552, format!("Unknown circuit \"{id}\"")))
    }

    fn attach_stream(
        &mut self,
        stream: &str,
        _circ: &str,
        _hop: Option<u32>,
    ) -> Result<(), CmdError> {
        Err(CmdError::new(552, format!("Unknown stream \"{stream}\"")))
    }

    fn close_stream(&mut self, stream: &str, _reason: u8) -> Result<(), CmdError> {
        Err(CmdError::new(552, format!("Unknown stream \"{stream}\"")))
    }

    fn close_circuit(&mut self, circ: &str, _if_unused: bool) -> Result<(), CmdError> {
        Err(CmdError::new(552, format!("Unknown circuit \"{circ}\"")))
    }

    fn set_owner(&mut self, owning: bool) {
        self.owning.store(owning, Ordering::Relaxed);
    }

    fn add_onion(&mut self, _req: &AddOnion) -> Result<AddedOnion, CmdError> {
        Err(not_here("Hosting onion services"))
    }

    fn del_onion(&mut self, _service_id: &str) -> Result<(), CmdError> {
        Err(CmdError::new(552, "Unknown Onion Service id"))
    }

    fn client_auth_add(&mut self, _cred: ClientAuthCred) -> Result<AuthAdded, CmdError> {
        Err(not_here("Onion-service client authorization"))
    }

    fn client_auth_remove(&mut self, _address: &str) -> Result<bool, CmdError> {
        Ok(false)
    }

    fn client_auth_view(&mut self) -> Vec<ClientAuthCred> {
        Vec::new()
    }

    fn hs_server_known(&mut self, server: &str) -> bool {
        self.node
            .ctx
            .control
            .netdir()
            .is_some_and(|nd| find_relay(&nd, server).is_some())
    }

    fn hs_fetch(&mut self, _req: &HsFetch) -> Result<(), CmdError> {
        Err(not_here("HSFETCH"))
    }

    fn hs_post(&mut self, _req: HsPost) -> Result<(), CmdError> {
        Err(not_here("HSPOST"))
    }
}
