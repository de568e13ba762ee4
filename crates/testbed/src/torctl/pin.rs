//! Streams pinned to one circuit through a control port: build the
//! circuit with `EXTENDCIRCUIT`, then attach each new stream to it with
//! `ATTACHSTREAM` (stock tor's control port and onionmix's alike).

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::{read_line, subscribe};

/// Streams pinned to one circuit ([`pin_streams`]); [`Pinned::finish`]
/// gives control back to the client.
pub struct Pinned {
    /// The circuit's id on the control port.
    pub circ: String,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<u64, String>>,
}

impl Pinned {
    /// Stop attaching (`__LeaveStreamsUnattached` back to 0, the circuit
    /// closed); how many streams were attached, or why pinning broke (the
    /// circuit closed under the streams, the control connection failed).
    pub async fn finish(mut self) -> Result<u64, String> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        self.task
            .await
            .unwrap_or_else(|e| Err(format!("pinning task failed: {e}")))
    }
}

/// Builds of a pinned circuit [`pin_streams`] tries before it gives up.
pub const PIN_BUILD_ATTEMPTS: usize = 5;

/// Build a circuit along `path` (fingerprints, first hop first: the path
/// length is the caller's) with `EXTENDCIRCUIT` (a failed build is tried
/// again, up to [`PIN_BUILD_ATTEMPTS`] builds), wait until it is built,
/// then have the client leave new streams unattached
/// (`__LeaveStreamsUnattached`) and attach each to that circuit
/// (`ATTACHSTREAM`) until [`Pinned::finish`]. Works with stock tor's
/// control port and onionmix's (cookie authentication).
pub async fn pin_streams(
    addr: SocketAddr,
    cookie_file: &Path,
    path: &[String],
    timeout: Duration,
) -> Result<Pinned, String> {
    if path.is_empty()
        || path
            .iter()
            .any(|f| f.is_empty() || !f.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'$'))
    {
        return Err(format!("bad path {path:?}"));
    }
    let (mut rd, mut wr) = subscribe(addr, cookie_file, "STREAM CIRC", timeout).await?;
    let mut line = String::new();
    let setup = async {
        // A build that fails (stock tor gives up on a build that passes
        // its learned circuit build timeout, as one with a lost cell on a
        // lossy link can) is tried again, as tor would for its own
        // circuits, up to PIN_BUILD_ATTEMPTS times within `timeout`.
        let mut failures = Vec::new();
        let circ = 'attempt: loop {
            // A client that bootstrapped from an earlier consensus may not
            // know every relay yet (552 No such router): ask again until its
            // next consensus arrives, within `timeout`.
            let circ = 'extend: loop {
                wr.write_all(format!("EXTENDCIRCUIT 0 {}\r\n", path.join(",")).as_bytes())
                    .await
                    .map_err(|e| e.to_string())?;
                loop {
                    read_line(&mut rd, &mut line).await?;
                    if line.starts_with("650") {
                        continue;
                    }
                    let reply = line.trim_end();
                    if let Some(id) = reply.strip_prefix("250 EXTENDED ") {
                        break 'extend id.to_string();
                    }
                    if reply.starts_with("552 No such router") {
                        break;
                    }
                    return Err(format!("EXTENDCIRCUIT: {reply}"));
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            };
            loop {
                read_line(&mut rd, &mut line).await?;
                let w: Vec<&str> = line.split_whitespace().collect();
                if w.get(1) == Some(&"CIRC") && w.get(2) == Some(&circ.as_str()) {
                    match w.get(3) {
                        Some(&"BUILT") => break 'attempt circ,
                        Some(&"FAILED" | &"CLOSED") => {
                            failures.push(format!("circuit {circ}: {}", line.trim_end()));
                            if failures.len() >= PIN_BUILD_ATTEMPTS {
                                return Err(failures.join("; "));
                            }
                            continue 'attempt;
                        }
                        _ => {}
                    }
                }
            }
        };
        wr.write_all(b"SETCONF __LeaveStreamsUnattached=1\r\n")
            .await
            .map_err(|e| e.to_string())?;
        Ok::<String, String>(circ)
    };
    let circ = tokio::time::timeout(timeout, setup)
        .await
        .map_err(|_| format!("control port {addr}: no built circuit within {timeout:?}"))??;
    let (stop_tx, mut stop_rx) = oneshot::channel();
    let c = circ.clone();
    let task = tokio::spawn(async move {
        let mut attached: std::collections::HashSet<String> = std::collections::HashSet::new();
        // Commands whose reply is still to come, oldest first: the
        // SETCONF above (`None`), then ATTACHSTREAMs (their stream).
        let mut pending: std::collections::VecDeque<Option<String>> = [None].into();
        // Streams that announced CONTROLLER_WAIT while their attach was
        // pending: attached again if that attach is refused.
        let mut waiting: std::collections::HashSet<String> = std::collections::HashSet::new();
        let mut broken = None;
        loop {
            tokio::select! {
                biased;
                r = read_line(&mut rd, &mut line) => {
                    if let Err(e) = r {
                        broken = Some(e);
                        break;
                    }
                    let w: Vec<&str> = line.split_whitespace().collect();
                    let mut attach = None;
                    if !line.starts_with("650") {
                        // The reply to the oldest command.
                        if let Some(Some(sid)) = pending.pop_front() {
                            let again = waiting.remove(&sid);
                            if line.starts_with("250") {
                                if attached.len() < 1_000_000 {
                                    attached.insert(sid);
                                }
                            } else if again {
                                attach = Some(sid);
                            }
                        }
                    } else {
                        match (w.get(1), w.get(3)) {
                            // A stream waits for us: stock tor announces NEW
                            // then CONTROLLER_WAIT, onionmix may refuse an
                            // attach before CONTROLLER_WAIT. Each stream is
                            // attached once: a second ATTACHSTREAM on an
                            // attached stream would detach it (stock tor
                            // ends it at the exit and begins it again).
                            (Some(&"STREAM"), Some(&ev @ ("NEW" | "CONTROLLER_WAIT"))) => {
                                let Some(sid) = w.get(2).map(|s| s.to_string()) else { continue };
                                if attached.contains(&sid) {
                                } else if pending.iter().any(|p| p.as_deref() == Some(sid.as_str())) {
                                    if ev == "CONTROLLER_WAIT" && waiting.len() < 10_000 {
                                        waiting.insert(sid);
                                    }
                                } else {
                                    attach = Some(sid);
                                }
                            }
                            (Some(&"CIRC"), Some(&("FAILED" | "CLOSED"))) if w.get(2) == Some(&c.as_str()) => {
                                broken = Some(format!("the pinned circuit closed: {}", line.trim_end()));
                            }
                            _ => {}
                        }
                    }
                    if let Some(sid) = attach {
                        if pending.len() >= 10_000 {
                            broken = Some("too many streams waiting to be attached".into());
                            break;
                        }
                        let cmd = format!("ATTACHSTREAM {sid} {c}\r\n");
                        if wr.write_all(cmd.as_bytes()).await.is_err() {
                            broken = Some("control connection closed".into());
                            break;
                        }
                        pending.push_back(Some(sid));
                    }
                }
                _ = &mut stop_rx => break,
            }
        }
        let _ = wr
            .write_all(
                format!("SETCONF __LeaveStreamsUnattached=0\r\nCLOSECIRCUIT {c}\r\nQUIT\r\n")
                    .as_bytes(),
            )
            .await;
        match broken {
            Some(e) => Err(e),
            None => Ok(attached.len() as u64),
        }
    });
    Ok(Pinned {
        circ,
        stop: Some(stop_tx),
        task,
    })
}
