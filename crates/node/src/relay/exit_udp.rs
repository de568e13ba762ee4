//! UDP exit streams (proposal 339 as docs/udp-over-tor.md describes): a
//! CONNECT_UDP gets a UDP socket connected to its target, after the same
//! checks as BEGIN (the exit policy, private addresses, hostnames resolved
//! here), and CONNECTED_UDP with the socket's address and the target's;
//! then each DATAGRAM is one datagram each way. Only exits configured with
//! `exit_udp` (which advertise `Datagram=1`) accept them.
//!
//! Datagrams towards the client count in the circuit's window like DATA;
//! one that finds the window closed is dropped (counted), not queued.
//! The stream ends (END) after [`UDP_IDLE`] without a datagram either way,
//! when the target answers with ICMP port unreachable (CONNECTREFUSED), or
//! when the client ends it.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::net::UdpSocket;
use tracing::debug;

use onionmix_cell::relay::udp::MAX_DATAGRAM;
use onionmix_cell::relay::{ConnectUdp, ConnectedUdp, RelayCmd, end_reason};

use super::exit::{ExitStream, pick_target};
use super::reactor::DataSend;

/// A UDP stream with no datagram either way for this long is ended.
pub const UDP_IDLE: Duration = Duration::from_secs(120);
/// Largest datagram read from a target (larger than one message carries:
/// such datagrams are dropped).
const MAX_READ: usize = 64 * 1024;

/// Run one UDP exit stream to completion.
pub async fn connect_udp(mut s: ExitStream, c: ConnectUdp) {
    if !s.ctx.cfg.exit || !s.ctx.cfg.exit_udp {
        s.end(end_reason::EXITPOLICY);
        return;
    }
    let Some(addr) = pick_target(&s, &c.host, c.port, c.flags).await else {
        return;
    };
    let target = SocketAddr::new(addr, c.port);
    let bind: SocketAddr = if addr.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let sock = match UdpSocket::bind(bind).await {
        Ok(x) => x,
        Err(e) => {
            debug!("UDP exit: bind failed: {e}");
            s.end(end_reason::RESOURCELIMIT);
            return;
        }
    };
    if let Err(e) = sock.connect(target).await {
        debug!("UDP exit: connect failed: {e}");
        s.end(end_reason::NOROUTE);
        return;
    }
    let ours = match sock.local_addr() {
        Ok(a) => a,
        Err(_) => {
            s.end(end_reason::INTERNAL);
            return;
        }
    };
    let connected = ConnectedUdp {
        ours,
        theirs: target,
    };
    if !s.send(RelayCmd::CONNECTED_UDP, &connected.encode()) {
        return;
    }
    s.ctx.stats.udp_streams.fetch_add(1, Ordering::Relaxed);
    let stats = &s.ctx.stats;
    let mut buf = vec![0u8; MAX_READ];
    let reason = loop {
        tokio::select! {
            // Datagrams that came before CONNECTED_UDP waited here too.
            d = s.data.recv() => {
                let Some(d) = d else { return };
                match sock.send(&d).await {
                    Ok(_) => {
                        stats.datagrams_up.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                        break end_reason::CONNECTREFUSED;
                    }
                    Err(_) => {
                        stats.datagrams_dropped.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            r = sock.recv(&mut buf) => match r {
                Ok(n) => {
                    let Some(d) = buf.get(..n).filter(|d| d.len() <= MAX_DATAGRAM) else {
                        stats.datagrams_dropped.fetch_add(1, Ordering::Relaxed);
                        continue;
                    };
                    match s.path.try_send_datagram(s.stream, d) {
                        DataSend::Sent => {
                            stats.datagrams_down.fetch_add(1, Ordering::Relaxed);
                        }
                        DataSend::WindowClosed | DataSend::ChanFull(_) => {
                            stats.datagrams_dropped.fetch_add(1, Ordering::Relaxed);
                        }
                        DataSend::Closed => return,
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                    break end_reason::CONNECTREFUSED;
                }
                Err(_) => break end_reason::MISC,
            },
            () = tokio::time::sleep(UDP_IDLE) => break end_reason::TIMEOUT,
        }
    };
    s.end(reason);
}
