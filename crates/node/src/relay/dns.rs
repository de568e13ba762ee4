//! A minimal DNS client (A and AAAA over UDP) for exits configured with a
//! specific nameserver. The codec's tests live with it in onionmix-tunnel.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::net::UdpSocket;

// The wire codec is the project's one DNS codec, in onionmix-tunnel
// (shared with the tunnel's resolver).
pub use onionmix_tunnel::dns::wire::{build_query as query, parse_answer as parse};

/// Resolve `name` (A, then AAAA) at `server`.
pub async fn resolve(server: SocketAddr, name: &str) -> std::io::Result<Vec<IpAddr>> {
    let bind: SocketAddr = if server.is_ipv4() {
        "0.0.0.0:0".parse().map_err(std::io::Error::other)?
    } else {
        "[::]:0".parse().map_err(std::io::Error::other)?
    };
    let sock = UdpSocket::bind(bind).await?;
    sock.connect(server).await?;
    let mut out = Vec::new();
    for qtype in [1u16, 28] {
        let id: u16 = rand::random();
        let Some(q) = query(id, name, qtype) else {
            return Ok(Vec::new());
        };
        for _attempt in 0..2 {
            sock.send(&q).await?;
            let mut buf = [0u8; 1500];
            match tokio::time::timeout(Duration::from_secs(2), sock.recv(&mut buf)).await {
                Ok(Ok(n)) => {
                    if let Some(v) = parse(&buf[..n], id) {
                        out.extend(v);
                        break;
                    }
                }
                Ok(Err(e)) => return Err(e),
                Err(_) => continue,
            }
        }
    }
    Ok(out)
}
