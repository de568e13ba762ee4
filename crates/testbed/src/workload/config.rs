//! Workload parameters: the `WorkloadConfig` TOML, its defaults and checks, and the `session` script.

use serde::{Deserialize, Serialize};

/// One message of a `session` script.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Name (table label).
    pub name: String,
    /// Request size in bytes (padded with a header).
    pub request_bytes: usize,
    /// Response body size in bytes.
    pub response_bytes: u64,
    /// Pause before the message, ms.
    #[serde(default)]
    pub think_ms: u64,
}

/// The built-in session script: seed 000's message pattern (new session,
/// get commitments, get proof, respond permission). The seed timed the
/// messages but did not publish their sizes; these are estimates of the
/// JSON bodies' order of magnitude.
pub fn seed000_script() -> Vec<Message> {
    let m = |name: &str, request_bytes, response_bytes, think_ms| Message {
        name: name.into(),
        request_bytes,
        response_bytes,
        think_ms,
    };
    vec![
        m("new-session", 400, 1500, 0),
        m("get-commitments", 300, 800, 200),
        m("get-proof", 500, 1200, 0),
        m("respond-permission", 2500, 300, 500),
    ]
}

/// Workload parameters (a TOML file may set any of them; the name alone
/// gives the defaults).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadConfig {
    /// `bulk`, `voip`, `session`, `goodput`, `reliability` or `access`.
    pub workload: String,
    /// Repetitions (transfers per size, streams, sessions, fetches).
    #[serde(default = "d_runs")]
    pub runs: u32,
    /// Timeout of one event, seconds.
    #[serde(default = "d_timeout")]
    pub timeout_secs: f64,
    /// `bulk` sizes in bytes.
    #[serde(default = "d_sizes")]
    pub sizes: Vec<u64>,
    /// `bulk`: a fresh circuit per transfer (OnionPerf does this).
    #[serde(default = "d_true")]
    pub fresh_circuit: bool,
    /// `voip`: packet size in bytes (>= 16).
    #[serde(default = "d_packet")]
    pub packet_bytes: usize,
    /// `voip`: packets per second.
    #[serde(default = "d_pps")]
    pub packets_per_sec: f64,
    /// `voip`/`goodput`: measured seconds per run.
    #[serde(default = "d_duration")]
    pub duration_secs: f64,
    /// `goodput`: parallel streams; a number or a list (each count is
    /// measured in every run; seed 002 used 1 and 3).
    #[serde(default = "d_streams", deserialize_with = "one_or_many")]
    pub streams: Vec<usize>,
    /// `goodput` and `session`: also measure the same download or
    /// session straight to the sink (series `none/direct`), the reference
    /// seed 002's percentages and seed 000's Tor deltas use. On an
    /// emulated network it leaves from the measured client's namespace,
    /// over the same links.
    #[serde(default = "d_true")]
    pub baseline: bool,
    /// `goodput`: seconds before measuring.
    #[serde(default = "d_warmup")]
    pub warmup_secs: f64,
    /// `session`: the messages.
    #[serde(default = "seed000_script")]
    pub script: Vec<Message>,
    /// `session`: HTTPS (TLS 1.3 to the sink, which the client verifies
    /// against the sink's CA) instead of plain HTTP.
    #[serde(default)]
    pub https: bool,
    /// `session`: all messages of a session on one connection (HTTP
    /// keep-alive; the first message pays for the stream and the TLS
    /// handshake), or a new connection per message.
    #[serde(default = "d_true")]
    pub keep_alive: bool,
    /// `session`: before every session after the first, send `SIGNAL
    /// NEWNYM` to the client's control port (stock tor and onionmix,
    /// cookie authentication), so the session gets a new circuit, as
    /// seed 000's app renewed its circuit before every session after the
    /// first. Not sent on direct (no-anonymisation) endpoints.
    #[serde(default)]
    pub newnym: bool,
    /// `session`: pause before every session after the first, ms (seed
    /// 000: 13 s). Both clients defer a NEWNYM that comes less than 10 s
    /// after the previous one, so with `newnym` keep it above 10000.
    #[serde(default)]
    pub pause_ms: u64,
    /// `session`: before the timed messages, one untimed small fetch on
    /// the session's circuit (recorded as the session's `warmup_ms`), so
    /// the messages find the circuit built, as seed 000's app had its
    /// check.torproject.org GET before every timed message. Skipped on
    /// direct endpoints.
    #[serde(default)]
    pub warm_circuit: bool,
    /// `reliability`: fetch interval, ms.
    #[serde(default = "d_interval")]
    pub interval_ms: u64,
    /// `reliability`: page size.
    #[serde(default = "d_page")]
    pub page_bytes: u64,
    /// `reliability`: fetchers per client at once, each on its own
    /// circuit (many users behind one client).
    #[serde(default = "d_parallel")]
    pub parallel: usize,
    /// `bulk`, `session`, `reliability`, `access`: send the SOCKS request
    /// and the first application bytes (the HTTP request, the TLS
    /// ClientHello) in one go, without waiting for the SOCKS replies
    /// (optimistic SOCKS, as proposal 181 suggests clients do). The
    /// client's optimistic data then saves a round trip through the
    /// network. `connect_ms` is not recorded then (the stream opens under
    /// the first exchange). Off by default: like most applications, the
    /// measuring client waits for the SOCKS reply.
    #[serde(default)]
    pub optimistic_socks: bool,
    /// Where the traffic goes: `"sink"` (default, the sink's address),
    /// `"onion:<name>"`, the onion service `<name>` of the network (its
    /// virtual ports lead to the sink), or `"onion"`, the network's first
    /// onion service (for `compare` across specs whose services differ in
    /// name).
    #[serde(default)]
    pub target: Option<String>,
    /// Path length: pin every stream of the measured client to one
    /// circuit of this many hops (relays from the network's `relay`
    /// nodes, then one of its exits), built and attached through the
    /// client's control port (EXTENDCIRCUIT, ATTACHSTREAM; stock tor and
    /// onionmix). `None`: the client chooses (three hops). Seed 002
    /// compared 2 and 3 relays. `onionmix measure` only.
    #[serde(default)]
    pub hops: Option<usize>,
    /// With several clients measured (`--client all`): client `i`'s
    /// streams go over a circuit along `circuits[i]`, built before each run
    /// and closed after it (through the client's control port, as for
    /// `hops`). A hop is `relay<N>` or `exit<N>`: the N-th node of that
    /// role in the network's spec order, so one workload names the same
    /// topology on networks of either implementation. Seed 004's scenarios
    /// 2-4 (two clients sharing an exit, a whole path, or one link).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub circuits: Vec<Vec<String>>,
    /// How the workload reaches the client: `"socks"` (its SOCKS port)
    /// and/or `"tunnel"` (an `onionmix tunnel` in front of that SOCKS port:
    /// the workload connects from inside the tunnel's namespace, by the
    /// sink's name through the tunnel's resolver). Each path is its own
    /// series. `onionmix measure` only.
    #[serde(default = "d_paths")]
    pub paths: Vec<String>,
}

/// `streams = 3` or `streams = [1, 3]`.
fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<usize>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(usize),
        Many(Vec<usize>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(n) => vec![n],
        OneOrMany::Many(v) => v,
    })
}

fn d_paths() -> Vec<String> {
    vec!["socks".into()]
}
fn d_runs() -> u32 {
    10
}
fn d_timeout() -> f64 {
    60.0
}
fn d_sizes() -> Vec<u64> {
    vec![50 * 1024, 1 << 20, 5 << 20]
}
fn d_true() -> bool {
    true
}
fn d_packet() -> usize {
    300
}
fn d_pps() -> f64 {
    10.0
}
fn d_duration() -> f64 {
    10.0
}
fn d_streams() -> Vec<usize> {
    vec![1, 3]
}
fn d_parallel() -> usize {
    1
}
fn d_warmup() -> f64 {
    2.0
}
fn d_interval() -> u64 {
    500
}
fn d_page() -> u64 {
    10 * 1024
}

/// A hop of `circuits`: (`"relay"` or `"exit"`, index).
pub fn parse_hop(h: &str) -> Option<(&'static str, usize)> {
    let (role, n) = if let Some(n) = h.strip_prefix("relay") {
        ("relay", n)
    } else {
        ("exit", h.strip_prefix("exit")?)
    };
    if n.is_empty() || n.len() > 3 || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((role, n.parse().ok()?))
}

/// The workloads there are.
pub const WORKLOADS: &[&str] = &[
    "bulk",
    "voip",
    "session",
    "goodput",
    "reliability",
    "access",
];

impl WorkloadConfig {
    /// Defaults for a built-in workload name.
    pub fn named(name: &str) -> Result<Self, String> {
        Self::parse(&format!("workload = {name:?}\n"))
    }

    /// A built-in name or a TOML file.
    pub fn load(name_or_path: &str) -> Result<Self, String> {
        if WORKLOADS.contains(&name_or_path) {
            return Self::named(name_or_path);
        }
        let text = std::fs::read_to_string(name_or_path).map_err(|e| {
            format!(
                "{name_or_path:?} is neither a workload ({}) nor a readable file: {e}",
                WORKLOADS.join(", ")
            )
        })?;
        Self::parse(&text).map_err(|e| format!("{name_or_path}: {e}"))
    }

    /// Parse and validate TOML.
    pub fn parse(text: &str) -> Result<Self, String> {
        let c: WorkloadConfig = toml::from_str(text).map_err(|e| e.to_string())?;
        if !WORKLOADS.contains(&c.workload.as_str()) {
            return Err(format!(
                "unknown workload {:?} (one of {})",
                c.workload,
                WORKLOADS.join(", ")
            ));
        }
        let bad = |w: &str| Err(format!("invalid {w}"));
        if c.runs == 0 || c.runs > 100_000 {
            return bad("runs (1-100000)");
        }
        if !(c.timeout_secs > 0.0 && c.timeout_secs <= 3600.0) {
            return bad("timeout_secs (0-3600]");
        }
        if c.sizes.is_empty()
            || c.sizes
                .iter()
                .any(|s| *s == 0 || *s > crate::sink::MAX_BYTES)
        {
            return bad("sizes (1 byte to 1 GiB each)");
        }
        if !(16..=65536).contains(&c.packet_bytes) {
            return bad("packet_bytes (16-65536)");
        }
        if !(c.packets_per_sec > 0.0 && c.packets_per_sec <= 1000.0) {
            return bad("packets_per_sec (0-1000]");
        }
        if !(c.duration_secs > 0.0 && c.duration_secs <= 86400.0) {
            return bad("duration_secs (0-86400]");
        }
        if c.streams.is_empty()
            || c.streams.len() > 8
            || c.streams.iter().any(|n| !(1..=64).contains(n))
        {
            return bad("streams (1-64, or a list of up to 8 such counts)");
        }
        if !(1..=256).contains(&c.parallel) {
            return bad("parallel (1-256)");
        }
        if !(c.warmup_secs >= 0.0 && c.warmup_secs <= 3600.0) {
            return bad("warmup_secs [0-3600]");
        }
        if c.script.is_empty()
            || c.script
                .iter()
                .any(|m| m.request_bytes > 6000 || m.response_bytes > crate::sink::MAX_BYTES)
        {
            return bad("script (1+ messages, request_bytes <= 6000)");
        }
        if c.pause_ms > 3_600_000 {
            return bad("pause_ms (at most an hour)");
        }
        if c.interval_ms == 0 || c.page_bytes == 0 {
            return bad("interval_ms / page_bytes");
        }
        if c.hops.is_some_and(|h| !(2..=8).contains(&h)) {
            return bad("hops (2-8)");
        }
        if c.circuits.len() > 64
            || c.circuits
                .iter()
                .any(|p| !(1..=8).contains(&p.len()) || p.iter().any(|h| parse_hop(h).is_none()))
        {
            return bad("circuits (up to 64 paths of 1-8 hops, each \"relay<N>\" or \"exit<N>\")");
        }
        if c.hops.is_some() && !c.circuits.is_empty() {
            return bad("circuits with hops (one or the other)");
        }
        if c.paths.is_empty()
            || c.paths.len() > 2
            || c.paths.iter().any(|p| p != "socks" && p != "tunnel")
        {
            return bad("paths (\"socks\" and/or \"tunnel\")");
        }
        match c.onion_target() {
            Ok(Some(_)) if c.https => {
                return bad("target: HTTPS goes to the sink's own address, not an onion service");
            }
            Ok(_) => {}
            Err(e) => return Err(e),
        }
        Ok(c)
    }

    /// The onion service named by `target`, if any (`""`: the first).
    pub fn onion_target(&self) -> Result<Option<&str>, String> {
        match self.target.as_deref() {
            None | Some("sink") => Ok(None),
            Some("onion") => Ok(Some("")),
            Some(t) => match t.strip_prefix("onion:") {
                Some(name) if !name.is_empty() => Ok(Some(name)),
                _ => Err(format!(
                    "invalid target {t:?} (\"sink\", \"onion\" or \"onion:<service name>\")"
                )),
            },
        }
    }

    /// Parameters for the run metadata.
    pub fn params(&self) -> std::collections::BTreeMap<String, String> {
        let v = serde_json::to_value(self).unwrap_or_default();
        v.as_object()
            .map(|o| o.iter().map(|(k, v)| (k.clone(), v.to_string())).collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn configs_parse_and_bad_ones_are_refused() {
        for w in WORKLOADS {
            let c = WorkloadConfig::named(w).unwrap();
            assert_eq!(c.workload, *w);
        }
        assert_eq!(WorkloadConfig::named("bulk").unwrap().sizes, d_sizes());
        let c = WorkloadConfig::parse("workload = \"goodput\"\nstreams = 3\nduration_secs = 5\n")
            .unwrap();
        assert_eq!((c.streams.clone(), c.duration_secs), (vec![3], 5.0));
        let c = WorkloadConfig::parse("workload = \"goodput\"\nstreams = [1, 3]\n").unwrap();
        assert_eq!(c.streams, [1, 3]);
        assert!(c.baseline);
        // A config survives a round trip through TOML (overrides re-check).
        let back = WorkloadConfig::parse(&toml::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);
        let c = WorkloadConfig::parse("workload = \"session\"\nhttps = true\n").unwrap();
        assert!(c.https && c.keep_alive);
        assert!(!c.newnym && !c.warm_circuit && c.pause_ms == 0);
        let c = WorkloadConfig::parse(
            "workload = \"session\"\nnewnym = true\npause_ms = 13000\nwarm_circuit = true\n",
        )
        .unwrap();
        assert!(c.newnym && c.warm_circuit && c.pause_ms == 13000);
        for bad in [
            "workload = \"nope\"",
            "workload = \"bulk\"\nruns = 0",
            "workload = \"bulk\"\nsizes = []",
            "workload = \"voip\"\npacket_bytes = 8",
            "workload = \"goodput\"\nstreams = 0",
            "workload = \"goodput\"\nstreams = []",
            "workload = \"goodput\"\nstreams = [1, 65]",
            "workload = \"goodput\"\nstreams = -1",
            "workload = \"reliability\"\nparallel = 0",
            "workload = \"session\"\nhttps = \"yes\"",
            "workload = \"bulk\"\nunknown = 1",
            "workload = \"session\"\nscript = []",
            "workload = \"session\"\npause_ms = 3600001",
            "workload = \"session\"\nnewnym = 1",
            "workload = \"bulk\"\ntarget = \"onion:\"",
            "workload = \"bulk\"\ntarget = \"elsewhere\"",
            "workload = \"session\"\nhttps = true\ntarget = \"onion:hs0\"",
            "workload = \"goodput\"\nhops = 1",
            "workload = \"goodput\"\nhops = 9",
            "workload = \"goodput\"\npaths = []",
            "workload = \"goodput\"\npaths = [\"vpn\"]",
            "workload = \"bulk\"\ncircuits = [[]]",
            "workload = \"bulk\"\ncircuits = [[\"guard0\"]]",
            "workload = \"bulk\"\ncircuits = [[\"relay\"]]",
            "workload = \"bulk\"\ncircuits = [[\"relay-1\"]]",
            "workload = \"bulk\"\ncircuits = [[\"exit1000\"]]",
            "workload = \"bulk\"\ncircuits = [[\"relay0\"]]\nhops = 2",
        ] {
            assert!(WorkloadConfig::parse(bad).is_err(), "{bad}");
        }
        let c = WorkloadConfig::parse(
            "workload = \"goodput\"\nhops = 2\npaths = [\"socks\", \"tunnel\"]",
        )
        .unwrap();
        assert_eq!((c.hops, c.paths.len()), (Some(2), 2));
        assert_eq!(WorkloadConfig::named("goodput").unwrap().paths, ["socks"]);
        let c = WorkloadConfig::parse(
            "workload = \"bulk\"\ncircuits = [[\"relay0\", \"relay1\", \"exit0\"], [\"relay2\", \"relay12\", \"exit0\"]]",
        )
        .unwrap();
        assert_eq!(c.circuits.len(), 2);
        assert_eq!(parse_hop("relay12"), Some(("relay", 12)));
        assert_eq!(parse_hop("exit0"), Some(("exit", 0)));
        assert_eq!(
            WorkloadConfig::parse(&toml::to_string(&c).unwrap()).unwrap(),
            c
        );
        let c = WorkloadConfig::parse("workload = \"voip\"\ntarget = \"onion:omhs0\"").unwrap();
        assert_eq!(c.onion_target(), Ok(Some("omhs0")));
        let c = WorkloadConfig::parse("workload = \"bulk\"\ntarget = \"sink\"").unwrap();
        assert_eq!(c.onion_target(), Ok(None));
        assert!(WorkloadConfig::load("/nonexistent/w.toml").is_err());
        assert!(
            !WorkloadConfig::named("session")
                .unwrap()
                .params()
                .is_empty()
        );
    }
}
