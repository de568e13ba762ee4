//! Packet capture for leak tests (no tcpdump needed): one `AF_PACKET`
//! socket sees every packet on every interface of one network namespace
//! (the host's, or a named one entered by the capture's own thread), in
//! both directions. Only the first [`SNAPLEN`] bytes of each packet's
//! network layer are kept, enough for the IP and transport headers; the
//! kernel's count of packets it had to drop (buffer full) is reported, so
//! a test can tell "nothing seen" from "not looked at".

use crate::sys;
use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Bytes kept of each packet (IPv6 header 40 + TCP header with options 60).
pub const SNAPLEN: u32 = 128;
/// The socket's receive buffer.
const RCVBUF: usize = 64 << 20;
/// Most packets kept; later ones are counted in `overflow`.
pub const MAX_PACKETS: usize = 2_000_000;

/// One captured packet.
#[derive(Debug, Clone)]
pub struct Captured {
    /// When it was read (from the capture's start).
    pub at: Duration,
    /// Interface name (in the captured namespace).
    pub interface: String,
    /// Sent by this namespace (else received).
    pub outgoing: bool,
    /// Link-layer protocol (0x0800 IPv4, 0x86dd IPv6, ...).
    pub protocol: u16,
    /// The first [`SNAPLEN`] bytes of the network layer.
    pub head: Vec<u8>,
}

/// What a capture saw.
#[derive(Debug, Default)]
pub struct CaptureResult {
    /// The packets, in order.
    pub packets: Vec<Captured>,
    /// Packets the kernel dropped before we read them.
    pub dropped: u64,
    /// Packets read past [`MAX_PACKETS`] (not kept).
    pub overflow: u64,
}

/// A running capture; [`Capture::stop`] ends it.
pub struct Capture {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<io::Result<CaptureResult>>>,
}

impl Capture {
    /// Start capturing on every interface of network namespace `ns`
    /// (`/run/netns/<ns>`), or of this process's namespace with `None`.
    /// Returns once the socket is open: every packet after that is seen.
    pub fn start(ns: Option<&str>) -> io::Result<Capture> {
        let ns_file = match ns {
            Some(n) => {
                if n.is_empty() || n.contains('/') || n.starts_with('.') {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("bad namespace name `{n}`"),
                    ));
                }
                Some(File::open(Path::new("/run/netns").join(n))?)
            }
            None => None,
        };
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<io::Result<()>>();
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("capture".into())
            .spawn(move || {
                let opened = ns_file
                    .as_ref()
                    .map_or(Ok(()), sys::setns_net)
                    .and_then(|()| sys::packet_socket(SNAPLEN, RCVBUF));
                let sock = match opened {
                    Ok(s) => {
                        let _ = ready_tx.send(Ok(()));
                        s
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(io::Error::new(e.kind(), e.to_string())));
                        return Err(e);
                    }
                };
                read_until(&sock, &flag)
            })?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(Capture {
                stop,
                thread: Some(thread),
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => Err(io::Error::other("capture thread ended before starting")),
        }
    }

    /// Stop and return what was seen (packets already queued in the
    /// socket are read first).
    pub fn stop(mut self) -> io::Result<CaptureResult> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            _ => Err(io::Error::other("capture thread panicked")),
        }
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn read_until(sock: &File, stop: &AtomicBool) -> io::Result<CaptureResult> {
    let t0 = Instant::now();
    let mut out = CaptureResult::default();
    let mut names: BTreeMap<i32, String> = BTreeMap::new();
    let mut buf = vec![0u8; SNAPLEN as usize];
    loop {
        let stopping = stop.load(Ordering::Relaxed);
        // Drain what is queued.
        loop {
            match sys::recv_packet(sock, &mut buf) {
                Ok(m) => {
                    if out.packets.len() >= MAX_PACKETS {
                        out.overflow = out.overflow.saturating_add(1);
                        continue;
                    }
                    let interface = names
                        .entry(m.ifindex)
                        .or_insert_with(|| {
                            sys::if_name(m.ifindex).unwrap_or_else(|| format!("if{}", m.ifindex))
                        })
                        .clone();
                    out.packets.push(Captured {
                        at: t0.elapsed(),
                        interface,
                        outgoing: m.outgoing,
                        protocol: m.protocol,
                        head: buf.get(..m.len).unwrap_or_default().to_vec(),
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        out.dropped = out.dropped.saturating_add(sys::packet_drops(sock)?);
        if stopping {
            return Ok(out);
        }
        let mut fds = [sys::pollfd(sock.as_raw_fd())];
        sys::ppoll(&mut fds, Some(Duration::from_millis(50)))?;
    }
}

/// The headers of a captured IP packet that leak checks look at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Transport protocol (IPv4 protocol, or IPv6 next header after the
    /// fixed header).
    pub proto: u8,
    /// Source and destination ports (TCP and UDP).
    pub ports: Option<(u16, u16)>,
    /// TCP flags.
    pub tcp_flags: Option<u8>,
}

/// Read the headers of a captured packet (truncated captures are fine:
/// fields past the snap length are `None`); `None` for non-IP packets.
pub fn summarize(head: &[u8]) -> Option<Summary> {
    let first = *head.first()?;
    let (src, dst, proto, l4) = match first >> 4 {
        4 => {
            let ihl = usize::from(first & 0x0f) * 4;
            let s: [u8; 4] = head.get(12..16)?.try_into().ok()?;
            let d: [u8; 4] = head.get(16..20)?.try_into().ok()?;
            let frag = u16::from_be_bytes([*head.get(6)?, *head.get(7)?]) & 0x1fff;
            // Only a first fragment has the transport header.
            let l4 = (frag == 0 && ihl >= 20).then_some(ihl);
            (
                IpAddr::V4(Ipv4Addr::from(s)),
                IpAddr::V4(Ipv4Addr::from(d)),
                *head.get(9)?,
                l4,
            )
        }
        6 => {
            let s: [u8; 16] = head.get(8..24)?.try_into().ok()?;
            let d: [u8; 16] = head.get(24..40)?.try_into().ok()?;
            (
                IpAddr::V6(Ipv6Addr::from(s)),
                IpAddr::V6(Ipv6Addr::from(d)),
                *head.get(6)?,
                Some(40),
            )
        }
        _ => return None,
    };
    let transport = matches!(proto, 6 | 17);
    let ports = l4.filter(|_| transport).and_then(|o| {
        let p = head.get(o..o.checked_add(4)?)?;
        Some((
            u16::from_be_bytes([p[0], p[1]]),
            u16::from_be_bytes([p[2], p[3]]),
        ))
    });
    let tcp_flags = l4
        .filter(|_| proto == 6)
        .and_then(|o| head.get(o.checked_add(13)?).copied());
    Some(Summary {
        src,
        dst,
        proto,
        ports,
        tcp_flags,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn summaries_of_truncated_headers() {
        let mut v4 = vec![0u8; 40];
        v4[0] = 0x45;
        v4[9] = 6;
        v4[12..16].copy_from_slice(&[10, 0, 0, 1]);
        v4[16..20].copy_from_slice(&[10, 0, 0, 2]);
        v4[20..22].copy_from_slice(&1234u16.to_be_bytes());
        v4[22..24].copy_from_slice(&80u16.to_be_bytes());
        v4[33] = 0x02;
        let s = summarize(&v4).unwrap();
        assert_eq!(s.ports, Some((1234, 80)));
        assert_eq!(s.tcp_flags, Some(0x02));
        assert_eq!(s.dst, IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)));
        // Cut inside the TCP header: addresses, no ports.
        let s = summarize(&v4[..22]).unwrap();
        assert_eq!((s.ports, s.tcp_flags), (None, None));
        // A later fragment has no transport header.
        let mut frag = v4.clone();
        frag[7] = 1;
        assert_eq!(summarize(&frag).unwrap().ports, None);
        let mut v6 = vec![0u8; 48];
        v6[0] = 0x60;
        v6[6] = 17;
        v6[39] = 1;
        v6[40..44].copy_from_slice(&[0, 53, 0, 54]);
        let s = summarize(&v6).unwrap();
        assert_eq!((s.proto, s.ports, s.tcp_flags), (17, Some((53, 54)), None));
        for n in 0..20 {
            assert!(summarize(&v4[..n]).is_none() || n >= 20);
        }
        assert!(summarize(&[0x10; 40]).is_none());
        assert!(summarize(&[]).is_none());
    }
}
