//! What every node's control port shares (clients, relays, authorities):
//! the sockets and per-connection tasks (`server`), the event fan-out
//! (`bus`), the log as NOTICE/WARN/ERR events (`logs`), controller ownership (TAKEOWNERSHIP, `__OwningControllerProcess`)
//! and the network-status entries `GETINFO ns/*` prints. The protocol is
//! `onionmix_frontend::control`; each node's side of the commands is its
//! own backend (`client::control::backend`, `relay::control`).

pub mod bus;
pub mod counted;
pub mod logs;
pub mod server;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use tokio::sync::Notify;
use tracing::info;

use onionmix_frontend::control::Info;
use onionmix_frontend::control::events::{long_name, orconn_line};
use onionmix_frontend::control::reply;
use onionmix_netdoc::{ConsensusRelay, NetDir};

use bus::EventBus;

/// Most OR connections tracked for `orconn-status`.
pub const MAX_TRACKED_ORCONNS: usize = 8192;

/// The version string: the tor control-protocol level we follow, then
/// ours (stem parses it as a tor version and gates features on it).
pub fn version() -> String {
    format!("0.4.9.11 (onionmix-{})", env!("CARGO_PKG_VERSION"))
}

/// tor's documentation of the GETINFO keys our nodes answer (`info/names`).
pub const INFO_DOCS: &[(&str, &str)] = &[
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
        "md/all",
        "All known microdescriptors for the entire Tor network",
    ),
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
    ("address/v4", "IPv4 address of this Tor host."),
    ("net/listeners/or", "Bound addresses by type"),
    ("net/listeners/dir", "Bound addresses by type"),
    (
        "status/good-server-descriptor",
        "Whether we have a good server descriptor.",
    ),
    (
        "status/accepted-server-descriptor",
        "Whether we have a server descriptor that has been accepted.",
    ),
    (
        "status/reachability-succeeded/or",
        "Whether we've confirmed our ORPort is reachable.",
    ),
    (
        "status/reachability-succeeded/dir",
        "Whether we've confirmed our DirPort is reachable.",
    ),
    (
        "status/reachability-succeeded",
        "A combination of status/reachability-succeeded/*.",
    ),
];

/// `GETINFO info/names` for a node that answers `keys`.
pub fn info_names(keys: &[&str]) -> String {
    keys.iter()
        .filter_map(|k| INFO_DOCS.iter().find(|(n, _)| n == k))
        .map(|(n, d)| format!("{n} -- {d}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The canonical name of option `key` in `options` (name, type) (option
/// names are case-insensitive, as in tor).
pub fn option_name(options: &[(&'static str, &str)], key: &str) -> Option<&'static str> {
    options
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(key))
        .map(|(n, _)| *n)
}

/// The GETCONF lines of option `name` with `values`.
pub fn conf_lines(name: &str, values: Vec<Option<String>>) -> Vec<(String, Option<String>)> {
    values.into_iter().map(|v| (name.to_string(), v)).collect()
}

/// The GETINFO keys every node answers alike (`version`, `config-file`,
/// `config/names`, `info/names`, `process/*`, `ip-to-country/*`); None
/// for any other key.
pub fn common_info(
    key: &str,
    config_path: Option<&Path>,
    options: &[(&str, &str)],
    info_keys: &[&str],
) -> Option<Info> {
    let v = match key {
        "version" => version(),
        "config-file" => match config_path {
            Some(p) => p.display().to_string(),
            None => return Some(Info::Unknown),
        },
        "config/names" => options
            .iter()
            .map(|(n, t)| format!("{n} {t}"))
            .collect::<Vec<_>>()
            .join("\n"),
        "info/names" => info_names(info_keys),
        "process/pid" => std::process::id().to_string(),
        "process/uid" => crate::procinfo::uid().to_string(),
        "process/user" => crate::procinfo::user_name(),
        "process/descriptor-limit" => crate::procinfo::descriptor_limit().to_string(),
        // No GeoIP database is loaded (tor's answer without one).
        k if k.starts_with("ip-to-country/") => {
            return Some(Info::Fail("GeoIP data not loaded".into()));
        }
        _ => return None,
    };
    Some(Info::Value(v))
}

/// A LineList option's values for GETCONF (one line per value; unset:
/// the bare name).
pub fn line_list(values: &[String]) -> Vec<Option<String>> {
    if values.is_empty() {
        vec![None]
    } else {
        values.iter().cloned().map(Some).collect()
    }
}

/// `"1"` / `"0"`, as tor prints booleans.
pub fn bool01(b: bool) -> String {
    if b { "1".into() } else { "0".into() }
}

/// Who may stop the node from the control port: the owning controller
/// (TAKEOWNERSHIP: the node exits when that connection closes) and
/// `__OwningControllerProcess` (it exits when that process is gone).
#[derive(Debug)]
pub struct Ownership {
    pid: Mutex<Option<u32>>,
    shutdown: Arc<Notify>,
}

impl Ownership {
    /// Watching `pid` (if any); `shutdown` is notified to stop the node.
    pub fn new(pid: Option<u32>, shutdown: Arc<Notify>) -> Self {
        Ownership {
            pid: Mutex::new(pid),
            shutdown,
        }
    }
    /// `__OwningControllerProcess`.
    pub fn owning_pid(&self) -> Option<u32> {
        *self.pid.lock().unwrap_or_else(|e| e.into_inner())
    }
    /// Set `__OwningControllerProcess`.
    pub fn set_owning_pid(&self, pid: Option<u32>) {
        *self.pid.lock().unwrap_or_else(|e| e.into_inner()) = pid;
    }
    /// Ask the node to exit (after the reply in flight is written).
    pub fn request_shutdown(&self) {
        self.request_shutdown_in(Duration::from_millis(200));
    }
    /// Ask the node to exit after `delay`.
    pub fn request_shutdown_in(&self, delay: Duration) {
        let s = self.shutdown.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            s.notify_one();
        });
    }
    /// Once a second: stop the node when the owning process is gone.
    pub fn check_owner(&self) {
        if let Some(pid) = self.owning_pid()
            && !Path::new(&format!("/proc/{pid}")).exists()
        {
            info!("owning controller process {pid} is gone; shutting down");
            self.set_owning_pid(None);
            self.request_shutdown();
        }
    }
    /// The owning connection closed.
    pub fn owner_connection_closed(&self) {
        info!("the owning controller's connection closed; shutting down");
        self.request_shutdown();
    }
}

/// OR connections (channels to relays) as the control port reports them:
/// ORCONN events with tor's connection ids, and `orconn-status`.
#[derive(Debug)]
pub struct OrConns {
    next: AtomicU64,
    map: Mutex<BTreeMap<[u8; 20], (u64, String)>>,
}

impl Default for OrConns {
    fn default() -> Self {
        OrConns {
            next: AtomicU64::new(1),
            map: Mutex::new(BTreeMap::new()),
        }
    }
}

impl OrConns {
    /// ORCONN LAUNCHED / CONNECTED / FAILED / CLOSED for the channel to
    /// `rsa_id`.
    pub fn event(
        &self,
        bus: &EventBus,
        rsa_id: [u8; 20],
        nickname: &str,
        status: &'static str,
        reason: Option<&str>,
    ) {
        let id = {
            let mut m = self.map.lock().unwrap_or_else(|e| e.into_inner());
            let id = match m.get(&rsa_id) {
                Some((id, _)) if status != "LAUNCHED" => *id,
                _ => self.next.fetch_add(1, Ordering::Relaxed),
            };
            if matches!(status, "FAILED" | "CLOSED") {
                m.remove(&rsa_id);
            } else if m.len() < MAX_TRACKED_ORCONNS || m.contains_key(&rsa_id) {
                m.insert(rsa_id, (id, status.to_string()));
            }
            id
        };
        bus.emit("ORCONN", || {
            reply::event(&orconn_line(
                &long_name(&rsa_id, nickname),
                status,
                reason,
                0,
                id,
            ))
        });
    }

    /// `orconn-status` lines and the peers they name.
    pub fn status(&self) -> (String, Vec<[u8; 20]>) {
        let m = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let text = m
            .iter()
            .map(|(id, (_, st))| format!("{} {st}", long_name(id, "")))
            .collect::<Vec<_>>()
            .join("\r\n");
        (text, m.keys().copied().collect())
    }
}

/// Find a relay by ServerSpec (`$FP`, `$FP~nick`, `$FP=nick`, `FP`, or a
/// nickname); (RSA id, whether a microdescriptor is known).
pub fn find_relay(nd: &NetDir, spec: &str) -> Option<([u8; 20], bool)> {
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

/// One relay's network-status entry as `GETINFO ns/*` prints it (v3
/// directory format). From the microdesc consensus: the descriptor digest
/// is all zeros and the published time is the consensus's valid-after.
pub fn ns_entry(nd: &NetDir, r: &ConsensusRelay) -> String {
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

/// `GETINFO ns/all`, `ns/id/<fingerprint>` or `ns/name/<nickname>` from
/// `nd` (the current directory, if any).
pub fn ns_value(nd: Option<&NetDir>, key: &str) -> Info {
    // As tor (networkstatus.c): without a consensus every `ns/` key is
    // empty; `ns/id/` must be hex ("551 Data not decodeable as hex"); a
    // relay the consensus does not list is an unrecognized key (552).
    let Some(nd) = nd else {
        return Info::Value(String::new());
    };
    if key == "ns/all" {
        return Info::Value(nd.listed().iter().map(|r| ns_entry(nd, r)).collect());
    }
    let relay = if let Some(fp) = key.strip_prefix("ns/id/") {
        match crate::client::config::parse_fingerprint(fp.trim_start_matches('$')) {
            Some(id) => nd.listed_by_rsa_id(&id),
            None => return Info::Fail("Data not decodeable as hex".into()),
        }
    } else if let Some(nick) = key.strip_prefix("ns/name/") {
        find_relay(nd, nick).and_then(|(id, _)| nd.listed_by_rsa_id(&id))
    } else {
        None
    };
    match relay {
        Some(r) => Info::Value(ns_entry(nd, r)),
        None => Info::Unknown,
    }
}

#[cfg(test)]
mod ns_tests {
    use super::*;

    #[test]
    fn ns_keys_answer_as_tor() {
        let nd = crate::client::dir::tests::netdir();
        let value = |k: &str| match ns_value(Some(&nd), k) {
            Info::Value(v) => v,
            other => panic!("{k}: {other:?}"),
        };
        let fp = "6E0C2D928E2C1643BF6AF7EF5A84632202DC4CB5";
        let entry = value(&format!("ns/id/{fp}"));
        assert!(entry.starts_with("r relay3 "), "{entry}");
        assert_eq!(value(&format!("ns/id/${fp}")), entry);
        assert_eq!(value("ns/name/relay3"), entry);
        assert!(value("ns/all").contains(&entry));
        // Not listed: an unrecognized key; not hex: 551.
        let unknown = format!("ns/id/{}", "0".repeat(40));
        assert!(matches!(ns_value(Some(&nd), &unknown), Info::Unknown));
        assert!(matches!(
            ns_value(Some(&nd), "ns/name/nobody"),
            Info::Unknown
        ));
        assert!(matches!(
            ns_value(Some(&nd), "ns/id/xyz"),
            Info::Fail(m) if m == "Data not decodeable as hex"
        ));
        // No directory yet: empty, whatever the key.
        for k in ["ns/all", "ns/id/xyz", "ns/name/relay3"] {
            assert!(matches!(ns_value(None, k), Info::Value(v) if v.is_empty()));
        }
    }
}
