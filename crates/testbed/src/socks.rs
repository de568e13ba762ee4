//! A small SOCKS5 client (RFC 1928, RFC 1929, and Tor's RESOLVE and
//! RESOLVE_PTR extensions).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// SOCKS errors.
#[derive(Debug, thiserror::Error)]
pub enum SocksError {
    /// I/O failed.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The proxy refused with this reply code.
    #[error("SOCKS reply {code}: {}", reply_name(*code))]
    Reply {
        /// The reply code.
        code: u8,
    },
    /// The proxy spoke something else.
    #[error("protocol error: {0}")]
    Protocol(&'static str),
    /// Timed out.
    #[error("timed out")]
    Timeout,
}

/// Name of a SOCKS5 reply code.
pub fn reply_name(c: u8) -> &'static str {
    match c {
        0 => "succeeded",
        1 => "general failure",
        2 => "not allowed by ruleset",
        3 => "network unreachable",
        4 => "host unreachable",
        5 => "connection refused",
        6 => "TTL expired",
        7 => "command not supported",
        8 => "address type not supported",
        _ => "unknown",
    }
}

/// Where to connect.
#[derive(Debug, Clone)]
pub enum Target {
    /// A hostname (resolved by the exit).
    Host(String, u16),
    /// An address.
    Addr(SocketAddr),
}

/// Username/password for isolation.
pub type Auth<'a> = Option<(&'a str, &'a str)>;

async fn negotiate(proxy: SocketAddr, auth: Auth<'_>) -> Result<TcpStream, SocksError> {
    let mut s = TcpStream::connect(proxy).await?;
    s.set_nodelay(true)?;
    let methods: &[u8] = if auth.is_some() {
        &[5, 1, 2]
    } else {
        &[5, 1, 0]
    };
    s.write_all(methods).await?;
    let mut r = [0u8; 2];
    s.read_exact(&mut r).await?;
    if r[0] != 5 {
        return Err(SocksError::Protocol("not a SOCKS5 proxy"));
    }
    match (r[1], auth) {
        (0, _) => {}
        (2, Some((u, p))) => {
            let mut m = vec![1, u.len() as u8];
            m.extend_from_slice(u.as_bytes());
            m.push(p.len() as u8);
            m.extend_from_slice(p.as_bytes());
            s.write_all(&m).await?;
            s.read_exact(&mut r).await?;
            if r[1] != 0 {
                return Err(SocksError::Protocol("authentication refused"));
            }
        }
        _ => return Err(SocksError::Protocol("no acceptable method")),
    }
    Ok(s)
}

async fn request(
    s: &mut TcpStream,
    cmd: u8,
    target: &Target,
) -> Result<(u8, Option<IpAddr>, Option<String>), SocksError> {
    let mut m = vec![5, cmd, 0];
    match target {
        Target::Host(h, p) => {
            if h.len() > 255 {
                return Err(SocksError::Protocol("hostname too long"));
            }
            m.push(3);
            m.push(h.len() as u8);
            m.extend_from_slice(h.as_bytes());
            m.extend_from_slice(&p.to_be_bytes());
        }
        Target::Addr(SocketAddr::V4(a)) => {
            m.push(1);
            m.extend_from_slice(&a.ip().octets());
            m.extend_from_slice(&a.port().to_be_bytes());
        }
        Target::Addr(SocketAddr::V6(a)) => {
            m.push(4);
            m.extend_from_slice(&a.ip().octets());
            m.extend_from_slice(&a.port().to_be_bytes());
        }
    }
    s.write_all(&m).await?;
    let mut h = [0u8; 4];
    s.read_exact(&mut h).await?;
    if h[0] != 5 {
        return Err(SocksError::Protocol("bad reply version"));
    }
    let (ip, name) = match h[3] {
        1 => {
            let mut a = [0u8; 6];
            s.read_exact(&mut a).await?;
            (Some(IpAddr::from([a[0], a[1], a[2], a[3]])), None)
        }
        4 => {
            let mut a = [0u8; 18];
            s.read_exact(&mut a).await?;
            let mut o = [0u8; 16];
            o.copy_from_slice(&a[..16]);
            (Some(IpAddr::from(o)), None)
        }
        3 => {
            let mut l = [0u8; 1];
            s.read_exact(&mut l).await?;
            let mut n = vec![0u8; l[0] as usize + 2];
            s.read_exact(&mut n).await?;
            n.truncate(l[0] as usize);
            (None, Some(String::from_utf8_lossy(&n).to_string()))
        }
        _ => return Err(SocksError::Protocol("bad address type in reply")),
    };
    Ok((h[1], ip, name))
}

/// CONNECT through the proxy; returns the stream ready for data.
pub async fn connect(
    proxy: SocketAddr,
    target: &Target,
    auth: Auth<'_>,
    timeout: Duration,
) -> Result<TcpStream, SocksError> {
    let fut = async {
        let mut s = negotiate(proxy, auth).await?;
        let (code, _, _) = request(&mut s, 1, target).await?;
        if code != 0 {
            return Err(SocksError::Reply { code });
        }
        Ok(s)
    };
    tokio::time::timeout(timeout, fut)
        .await
        .map_err(|_| SocksError::Timeout)?
}

/// Tor's RESOLVE (0xF0): the address for a hostname.
pub async fn resolve(
    proxy: SocketAddr,
    host: &str,
    auth: Auth<'_>,
    timeout: Duration,
) -> Result<IpAddr, SocksError> {
    let fut = async {
        let mut s = negotiate(proxy, auth).await?;
        let (code, ip, _) = request(&mut s, 0xF0, &Target::Host(host.into(), 0)).await?;
        if code != 0 {
            return Err(SocksError::Reply { code });
        }
        ip.ok_or(SocksError::Protocol("no address in RESOLVE reply"))
    };
    tokio::time::timeout(timeout, fut)
        .await
        .map_err(|_| SocksError::Timeout)?
}

/// Tor's RESOLVE_PTR (0xF1): the hostname for an address.
pub async fn resolve_ptr(
    proxy: SocketAddr,
    ip: IpAddr,
    auth: Auth<'_>,
    timeout: Duration,
) -> Result<String, SocksError> {
    let fut = async {
        let mut s = negotiate(proxy, auth).await?;
        let (code, _, name) = request(&mut s, 0xF1, &Target::Addr(SocketAddr::new(ip, 0))).await?;
        if code != 0 {
            return Err(SocksError::Reply { code });
        }
        name.ok_or(SocksError::Protocol("no name in RESOLVE_PTR reply"))
    };
    tokio::time::timeout(timeout, fut)
        .await
        .map_err(|_| SocksError::Timeout)?
}
