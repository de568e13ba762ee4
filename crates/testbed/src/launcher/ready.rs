//! Readiness checks: the wait loop, consensus counts, stock relays' directory info, echo through SOCKS.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use super::{LaunchError, LaunchOptions, Progress};
use crate::netinfo::{NodeInfo, OnionServiceInfo, SinkInfo};
use crate::proc;
use crate::spec::{Implementation, Role, Spec};

/// Wait until the network is usable: a consensus listing every relay,
/// every stock relay holding it, every client bootstrapped and carrying a
/// round trip to the sink, every client-service pair a round trip; then
/// the sink accepting connections. The onion services (`deferred`, not yet
/// spawned) start once every stock relay holds the full consensus; they
/// join `children` and `started`. Returns the onion services. The caller
/// stops what was started (`started`) when this fails.
#[allow(clippy::too_many_arguments)]
pub(super) fn wait_ready(
    spec: &Spec,
    dir: &Path,
    opts: &LaunchOptions,
    p: &Progress,
    children: &mut Vec<Child>,
    started: &mut Vec<NodeInfo>,
    deferred: Vec<(NodeInfo, Command)>,
    sink_info: &Option<SinkInfo>,
) -> Result<Vec<OnionServiceInfo>, LaunchError> {
    let timeout = opts
        .timeout
        .unwrap_or(Duration::from_secs(spec.bootstrap_timeout_secs));
    let deadline = p.t0 + timeout;
    let n_relays = started
        .iter()
        .filter(|n| n.roles.iter().any(|r| r.is_relay()))
        .count();
    let auth_dir = started
        .iter()
        .find(|n| n.has_role(Role::Authority))
        .and_then(|n| n.dir_addr());
    let mut deferred = Some(deferred);
    let mut onion_services = Vec::new();
    let mut onion_wait: Option<crate::onion::OnionWait> = None;
    let mut last_count = usize::MAX;
    let mut consensus_ok = false;
    let mut clients_done = 0;
    // Stock relays and exits (not authorities) that must hold the full
    // consensus themselves: see `DirWait`.
    let mut dir_wait = DirWait::new(
        started
            .iter()
            .filter(|n| {
                n.implementation == Implementation::Tor
                    && !n.has_role(Role::Authority)
                    && n.roles.iter().any(|r| r.is_relay())
            })
            .cloned()
            .collect(),
    );
    p.step(
        "consensus",
        &format!("waiting for a consensus listing all {n_relays} relays"),
    );
    loop {
        // A node that exited is a failure.
        for (i, c) in children.iter_mut().enumerate() {
            if let Ok(Some(status)) = c.try_wait() {
                let (name, log) = if i == 0 && spec.sink {
                    ("sink".to_string(), dir.join("sink.log"))
                } else {
                    let idx = i - usize::from(spec.sink);
                    started
                        .get(idx)
                        .map(|n| (n.name.clone(), n.log.clone()))
                        .unwrap_or(("?".into(), dir.join("sink.log")))
                };
                let err = LaunchError {
                    msg: format!("node exited during start-up ({status})"),
                    node: Some(name),
                    log_tail: proc::tail(&log, 25),
                };
                return Err(err);
            }
        }
        if !consensus_ok && let Some(a) = auth_dir {
            let n = count_consensus_relays(a);
            if n != last_count {
                if n > 0 {
                    p.step("consensus", &format!("{n}/{n_relays} relays listed"));
                }
                last_count = n;
            }
            if n >= n_relays {
                consensus_ok = true;
                p.step("consensus", "complete");
            }
        }
        if consensus_ok
            && dir_wait.done()
            && let Some(services) = deferred.take()
            && !services.is_empty()
        {
            onion_services = start_services(p, children, started, services)?;
        }
        let clients: Vec<&NodeInfo> = started
            .iter()
            .filter(|n| n.has_role(Role::Client))
            .collect();
        let done = clients
            .iter()
            .filter(|c| {
                std::fs::read_to_string(&c.log).is_ok_and(|l| l.contains("Bootstrapped 100%"))
            })
            .count();
        if done != clients_done {
            clients_done = done;
            p.step(
                "bootstrap",
                &format!("{done}/{} clients at 100%", clients.len()),
            );
        }
        if consensus_ok && !dir_wait.done() {
            let before = dir_wait.ready_count();
            dir_wait.poll(n_relays);
            if dir_wait.ready_count() != before || dir_wait.done() {
                p.step(
                    "dirinfo",
                    &format!(
                        "{}/{} stock relays hold a consensus listing all {n_relays} relays",
                        dir_wait.ready_count(),
                        dir_wait.len()
                    ),
                );
            }
        }
        // `deferred` is None once the onion services were started (the
        // block above, at the next turn after `dir_wait` is done).
        if consensus_ok && dir_wait.done() && deferred.is_none() && done == clients.len() {
            // Bootstrapped is not yet usable (stock tor may still fail its
            // first streams): require an echo round trip through each client.
            let echo = sink_info.as_ref().map(|s| s.echo);
            let usable = match echo {
                Some(echo) => clients
                    .iter()
                    .filter_map(|c| c.socks_addr())
                    .all(|socks| echo_through_socks(socks, echo)),
                None => true,
            };
            if usable && onion_wait.is_none() {
                p.step("traffic", "every client carried a round trip to the sink");
                onion_wait = Some(crate::onion::OnionWait::new(&clients, &onion_services));
            }
        }
        if let Some(w) = onion_wait.as_mut() {
            let before = w.progress().0;
            w.poll();
            let (ok, all) = w.progress();
            if ok != before && all > 0 {
                p.step(
                    "onion",
                    &format!("{ok}/{all} client-service pairs carried a round trip"),
                );
            }
            if w.done() {
                break;
            }
        }
        if Instant::now() > deadline {
            // Blame a client that has not bootstrapped, else a stock relay
            // without the consensus, else the first authority.
            let lagging = dir_wait.first_missing();
            let culprit = if consensus_ok {
                clients
                    .iter()
                    .find(|c| {
                        !std::fs::read_to_string(&c.log)
                            .is_ok_and(|l| l.contains("Bootstrapped 100%"))
                    })
                    .copied()
                    .or(lagging)
            } else {
                started.iter().find(|n| n.has_role(Role::Authority))
            };
            if let Some(pair) = onion_wait.as_ref().and_then(|w| w.first_missing()) {
                let svc = pair.rsplit(" -> ").next().unwrap_or_default().to_string();
                let err = match started.iter().find(|n| n.name == svc) {
                    Some(n) => LaunchError::node(
                        format!("onion service not reachable within {timeout:?} ({pair})"),
                        n,
                    ),
                    None => LaunchError::new(format!("onion service not reachable ({pair})")),
                };
                return Err(err);
            }
            let msg = if consensus_ok && done == clients.len() && lagging.is_some() {
                format!("relay holds no consensus listing all {n_relays} relays within {timeout:?}")
            } else if consensus_ok {
                format!("client did not reach Bootstrapped 100% within {timeout:?}")
            } else {
                format!(
                    "no consensus listing all {n_relays} relays within {timeout:?} (last seen: {})",
                    if last_count == usize::MAX {
                        0
                    } else {
                        last_count
                    }
                )
            };
            let err = match culprit {
                Some(c) => LaunchError::node(msg, c),
                None => LaunchError::new(msg),
            };
            return Err(err);
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    if let Some(s) = sink_info
        && TcpStream::connect_timeout(&s.http, Duration::from_secs(2)).is_err()
    {
        let err = LaunchError {
            msg: "the sink is not accepting connections".into(),
            node: Some("sink".into()),
            log_tail: proc::tail(&s.log, 25),
        };
        return Err(err);
    }
    Ok(onion_services)
}

/// Spawn the onion services and read their addresses (both
/// implementations write the hostname file at start); reachability from
/// every client is checked once the clients work.
fn start_services(
    p: &Progress,
    children: &mut Vec<Child>,
    started: &mut Vec<NodeInfo>,
    services: Vec<(NodeInfo, Command)>,
) -> Result<Vec<OnionServiceInfo>, LaunchError> {
    p.step(
        "services",
        &format!("starting {} onion services", services.len()),
    );
    let first = started.len();
    for (mut info, cmd) in services {
        let child = proc::spawn(cmd, &info.log)
            .map_err(|e| LaunchError::node(format!("cannot start: {e}"), &info))?;
        info.pid = child.id();
        info.start_time = proc::start_time(info.pid).unwrap_or(0);
        children.push(child);
        started.push(info);
    }
    started[first..]
        .iter()
        .map(|n| {
            crate::onion::info(n, Duration::from_secs(30)).map_err(|e| LaunchError::node(e, n))
        })
        .collect()
}

/// Waits until every stock (tor) relay and exit holds a microdesc
/// consensus listing every relay.
///
/// A stock exit refuses a BEGIN whose previous hop it does not know as a
/// relay (neither in its consensus nor among its descriptors): it logs
/// "Attempt by ... to open a stream from unknown relay. Closing." and
/// answers END reason MISC (`RefuseUnknownExits`, on by default). Relays
/// fetch the consensus on an exponential back-off that grows while the
/// authorities answer 404 (before the first consensus exists), so an exit
/// can get its first consensus 30 s or more after the client has
/// bootstrapped; meanwhile every stream through it fails, and after three
/// such ENDs the client gives up with SOCKS "general failure".
///
/// A relay's `cached-microdesc-consensus` is read (or, failing that, its
/// DirPort asked for the consensus); a relay that does not
/// have it yet gets SIGHUP, which makes tor reset its download back-off and
/// fetch at once (sent only after its log shows "Bootstrapped 0%", i.e.
/// once tor's signal handlers are installed, and at most every 10 s).
struct DirWait {
    nodes: Vec<NodeInfo>,
    ready: Vec<bool>,
    last_poll: Option<Instant>,
    last_nudge: Vec<Option<Instant>>,
}

impl DirWait {
    const POLL: Duration = Duration::from_secs(1);
    const NUDGE: Duration = Duration::from_secs(10);

    fn new(nodes: Vec<NodeInfo>) -> Self {
        let n = nodes.len();
        DirWait {
            nodes,
            ready: vec![false; n],
            last_poll: None,
            last_nudge: vec![None; n],
        }
    }
    fn len(&self) -> usize {
        self.nodes.len()
    }
    fn ready_count(&self) -> usize {
        self.ready.iter().filter(|r| **r).count()
    }
    fn done(&self) -> bool {
        self.ready.iter().all(|r| *r)
    }
    fn first_missing(&self) -> Option<&NodeInfo> {
        self.nodes
            .iter()
            .zip(&self.ready)
            .find(|(_, r)| !**r)
            .map(|(n, _)| n)
    }
    /// Check the relays not yet ready (at most once a second) and nudge
    /// the ones still without the full consensus.
    fn poll(&mut self, n_relays: usize) {
        if self.last_poll.is_some_and(|t| t.elapsed() < Self::POLL) {
            return;
        }
        self.last_poll = Some(Instant::now());
        for (i, n) in self.nodes.iter().enumerate() {
            if self.ready[i] {
                continue;
            }
            // Its data directory holds the consensus tor uses; else ask its
            // DirPort (the same document, as a directory cache serves it).
            let cached = std::fs::read_to_string(n.data_dir.join("cached-microdesc-consensus"))
                .is_ok_and(|c| c.lines().filter(|l| l.starts_with("r ")).count() >= n_relays);
            let ready = cached
                || n.dir_addr()
                    .is_some_and(|a| count_consensus_relays(a) >= n_relays);
            if ready {
                self.ready[i] = true;
                continue;
            }
            let due = self.last_nudge[i].is_none_or(|t| t.elapsed() >= Self::NUDGE);
            let started =
                std::fs::read_to_string(&n.log).is_ok_and(|l| l.contains("Bootstrapped 0%"));
            if due && started && proc::reload(n.pid, n.start_time) {
                self.last_nudge[i] = Some(Instant::now());
            }
        }
    }
}

/// Count `r ` lines in the current microdesc consensus a directory (an
/// authority, or a stock relay's DirPort) serves.
pub fn count_consensus_relays(dir_addr: SocketAddr) -> usize {
    match http_get_plain(dir_addr, "/tor/status-vote/current/consensus-microdesc") {
        Some(body) => body.lines().filter(|l| l.starts_with("r ")).count(),
        None => 0,
    }
}

/// A minimal blocking HTTP/1.0 GET (identity encoding) for readiness checks.
pub fn http_get_plain(addr: SocketAddr, path: &str) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: {addr}\r\nAccept-Encoding: identity\r\n\r\n"
    )
    .ok()?;
    const MAX: usize = 16 * 1024 * 1024;
    let mut buf = Vec::new();
    s.take(MAX as u64).read_to_end(&mut buf).ok()?;
    let resp =
        onionmix_http::parse_response(&buf, &onionmix_http::Limits::DEFAULT, MAX, false).ok()?;
    (resp.head.status == 200).then(|| String::from_utf8_lossy(&resp.body).into_owned())
}

/// One SOCKS5 CONNECT to `target` through `socks`, send a probe and expect
/// it echoed back (blocking; short timeouts).
pub fn echo_through_socks(socks: SocketAddr, target: SocketAddr) -> bool {
    let attempt = || -> std::io::Result<bool> {
        let mut s = TcpStream::connect_timeout(&socks, Duration::from_secs(2))?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        s.set_write_timeout(Some(Duration::from_secs(10)))?;
        s.write_all(&[5, 1, 0])?;
        let mut r = [0u8; 2];
        s.read_exact(&mut r)?;
        if r != [5, 0] {
            return Ok(false);
        }
        let mut req = vec![5, 1, 0];
        match target {
            SocketAddr::V4(a) => {
                req.push(1);
                req.extend_from_slice(&a.ip().octets());
            }
            SocketAddr::V6(a) => {
                req.push(4);
                req.extend_from_slice(&a.ip().octets());
            }
        }
        req.extend_from_slice(&target.port().to_be_bytes());
        s.write_all(&req)?;
        let mut head = [0u8; 4];
        s.read_exact(&mut head)?;
        if head[1] != 0 {
            return Ok(false);
        }
        let rest = match head[3] {
            1 => 6,
            4 => 18,
            _ => return Ok(false),
        };
        let mut skip = vec![0u8; rest];
        s.read_exact(&mut skip)?;
        s.write_all(b"onionmix-ready")?;
        let mut back = [0u8; 14];
        s.read_exact(&mut back)?;
        Ok(&back == b"onionmix-ready")
    };
    attempt().unwrap_or(false)
}
