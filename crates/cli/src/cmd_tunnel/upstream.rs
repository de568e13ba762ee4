//! The tunnel's upstream over a client's SOCKS5 port (ours or stock tor's):
//! TCP flows as CONNECTs, fallback DNS as tor's RESOLVE (0xF0), UDP flows
//! as UDP ASSOCIATE (an onionmix client carries them over exits that
//! advertise `Datagram=1`; stock tor answers "command not supported", and
//! the tunnel's UDP policy applies). Every request carries the flow's
//! isolation key as the SOCKS5 password.

use bytes::Bytes;
use onionmix_cell::relay::TargetHost;
use onionmix_frontend::socks::reply_code;
use onionmix_frontend::socks_udp;
use onionmix_node::tunnel::driver::{BoxFuture, ConnectError, UDP_QUEUE, UdpChannel, Upstream};
use onionmix_testbed::socks::{self, SocksError};
use onionmix_tunnel::flows::Target;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;

/// How long one SOCKS request may take (circuit build included).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// Largest datagram read from the proxy's relay port.
const MAX_DATAGRAM: usize = 64 * 1024;

/// A client's SOCKS port.
pub struct SocksUpstream {
    proxy: SocketAddr,
    /// Set once the proxy answered UDP ASSOCIATE with "command not
    /// supported": later UDP flows fall back at once.
    no_udp: Arc<AtomicBool>,
}

impl SocksUpstream {
    /// Use the SOCKS port at `proxy`.
    pub fn new(proxy: SocketAddr) -> Self {
        SocksUpstream {
            proxy,
            no_udp: Arc::new(AtomicBool::new(false)),
        }
    }
}

fn socks_target(t: Target) -> socks::Target {
    match t {
        Target::Host(h, p) => socks::Target::Host(h, p),
        Target::Addr(a) => socks::Target::Addr(a),
    }
}

fn map_err(e: SocksError) -> ConnectError {
    match e {
        SocksError::Reply { code } => ConnectError::Reply(code),
        SocksError::Timeout => ConnectError::Timeout,
        e => ConnectError::Other(e.to_string()),
    }
}

impl Upstream for SocksUpstream {
    fn connect(
        &self,
        target: Target,
        isolation: String,
    ) -> BoxFuture<Result<tokio::net::TcpStream, ConnectError>> {
        let proxy = self.proxy;
        Box::pin(async move {
            let auth = Some((onionmix_tunnel::socks::SOCKS_USER, isolation.as_str()));
            socks::connect(proxy, &socks_target(target), auth, REQUEST_TIMEOUT)
                .await
                .map_err(map_err)
        })
    }

    fn resolve(
        &self,
        name: String,
        isolation: String,
    ) -> BoxFuture<Result<Vec<IpAddr>, ConnectError>> {
        let proxy = self.proxy;
        Box::pin(async move {
            let auth = Some((onionmix_tunnel::socks::SOCKS_USER, isolation.as_str()));
            socks::resolve(proxy, &name, auth, REQUEST_TIMEOUT)
                .await
                .map(|a| vec![a])
                .map_err(map_err)
        })
    }

    fn udp(
        &self,
        target: Target,
        isolation: String,
    ) -> BoxFuture<Result<UdpChannel, ConnectError>> {
        let proxy = self.proxy;
        let no_udp = self.no_udp.clone();
        Box::pin(async move {
            if no_udp.load(Ordering::Relaxed) {
                return Err(ConnectError::Reply(reply_code::COMMAND_NOT_SUPPORTED));
            }
            let (host, port) = match &target {
                Target::Host(h, p) => (TargetHost::Hostname(h.clone()), *p),
                Target::Addr(a) => (TargetHost::Ip(a.ip()), a.port()),
            };
            // One header for every datagram of the flow.
            let header = socks_udp::encode(&host, port, &[])
                .ok_or_else(|| ConnectError::Other("hostname too long".into()))?;
            let local = SocketAddr::new(
                if proxy.is_ipv4() {
                    IpAddr::from([127, 0, 0, 1])
                } else {
                    IpAddr::from(std::net::Ipv6Addr::LOCALHOST)
                },
                0,
            );
            let sock = tokio::net::UdpSocket::bind(local)
                .await
                .map_err(|e| ConnectError::Other(e.to_string()))?;
            let from = sock
                .local_addr()
                .map_err(|e| ConnectError::Other(e.to_string()))?;
            let auth = Some((onionmix_tunnel::socks::SOCKS_USER, isolation.as_str()));
            let assoc = match socks::udp_associate(proxy, from, auth, REQUEST_TIMEOUT).await {
                Ok(a) => a,
                Err(SocksError::Reply { code }) if code == reply_code::COMMAND_NOT_SUPPORTED => {
                    no_udp.store(true, Ordering::Relaxed);
                    return Err(ConnectError::Reply(code));
                }
                Err(e) => return Err(map_err(e)),
            };
            sock.connect(assoc.relay)
                .await
                .map_err(|e| ConnectError::Other(e.to_string()))?;
            let (to_exit, mut rx) = mpsc::channel::<Bytes>(UDP_QUEUE);
            let (tx, from_exit) = mpsc::channel::<Bytes>(UDP_QUEUE);
            let mut control = assoc.control;
            tokio::spawn(async move {
                let mut buf = vec![0u8; MAX_DATAGRAM];
                let mut ctl = [0u8; 64];
                loop {
                    tokio::select! {
                        d = rx.recv() => {
                            let Some(d) = d else { return };
                            let mut m = header.clone();
                            m.extend_from_slice(&d);
                            // UDP: a datagram that cannot go is lost.
                            let _ = sock.send(&m).await;
                        }
                        r = sock.recv(&mut buf) => {
                            let Ok(n) = r else { return };
                            let Some(d) = buf.get(..n) else { continue };
                            // Only datagrams from the flow's destination.
                            if let Ok((h, p, payload)) = socks_udp::parse(d)
                                && (h == host || matches!(target, Target::Host(..)))
                                && p == port
                            {
                                let _ = tx.try_send(Bytes::copy_from_slice(payload));
                            }
                        }
                        // The association ends with its TCP connection.
                        r = control.read(&mut ctl) => {
                            if !matches!(r, Ok(n) if n > 0) {
                                return;
                            }
                        }
                    }
                }
            });
            Ok(UdpChannel { to_exit, from_exit })
        })
    }
}
