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
#[derive(Debug, Clone, PartialEq, Eq)]
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
) -> Result<(u8, Option<SocketAddr>, Option<String>), SocksError> {
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
            let ip = IpAddr::from([a[0], a[1], a[2], a[3]]);
            (
                Some(SocketAddr::new(ip, u16::from_be_bytes([a[4], a[5]]))),
                None,
            )
        }
        4 => {
            let mut a = [0u8; 18];
            s.read_exact(&mut a).await?;
            let mut o = [0u8; 16];
            o.copy_from_slice(&a[..16]);
            let port = u16::from_be_bytes([a[16], a[17]]);
            (Some(SocketAddr::new(IpAddr::from(o), port)), None)
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
        ip.map(|a| a.ip())
            .ok_or(SocksError::Protocol("no address in RESOLVE reply"))
    };
    tokio::time::timeout(timeout, fut)
        .await
        .map_err(|_| SocksError::Timeout)?
}

/// A UDP association (RFC 1928 §7): it lives while `control` is open;
/// datagrams with a SOCKS5 UDP header (`onionmix_frontend::socks_udp`) go
/// to and come from `relay`.
#[derive(Debug)]
pub struct UdpAssociation {
    /// The TCP connection that holds the association.
    pub control: TcpStream,
    /// The proxy's relay address.
    pub relay: SocketAddr,
}

/// UDP ASSOCIATE through the proxy, for datagrams sent from `from` (the
/// client's UDP socket). A proxy without UDP answers "command not
/// supported" (stock tor): [`SocksError::Reply`] with code 7.
pub async fn udp_associate(
    proxy: SocketAddr,
    from: SocketAddr,
    auth: Auth<'_>,
    timeout: Duration,
) -> Result<UdpAssociation, SocksError> {
    let fut = async {
        let mut s = negotiate(proxy, auth).await?;
        let (code, bound, _) = request(&mut s, 3, &Target::Addr(from)).await?;
        if code != 0 {
            return Err(SocksError::Reply { code });
        }
        let mut relay = bound.ok_or(SocksError::Protocol("no relay address in UDP reply"))?;
        if relay.ip().is_unspecified() {
            // "The same address as the proxy's."
            relay.set_ip(proxy.ip());
        }
        Ok(UdpAssociation { control: s, relay })
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

/// The bytes of a SOCKS5 CONNECT sent without waiting for any reply: the
/// greeting offering exactly one method (username/password when `auth`
/// is given, else none), the username/password sub-negotiation, and the
/// request. With one method offered the client knows the server's
/// choice, so all three can go in one write, and the application's first
/// bytes may follow at once (tor's SOCKS parser and onionmix's take them;
/// proposal 181 describes this for optimistic data).
pub fn pipelined_request(target: &Target, auth: Auth<'_>) -> Result<Vec<u8>, SocksError> {
    let mut m = Vec::new();
    match auth {
        Some((u, p)) => {
            if u.len() > 255 || p.len() > 255 {
                return Err(SocksError::Protocol("username or password too long"));
            }
            m.extend_from_slice(&[5, 1, 2, 1, u.len() as u8]);
            m.extend_from_slice(u.as_bytes());
            m.push(p.len() as u8);
            m.extend_from_slice(p.as_bytes());
        }
        None => m.extend_from_slice(&[5, 1, 0]),
    }
    m.extend_from_slice(&[5, 1, 0]);
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
    Ok(m)
}

/// Parse the replies to a [`pipelined_request`]: `Ok(Some(n))` when the
/// first `n` bytes of `buf` hold them all and the request succeeded,
/// `Ok(None)` when more bytes are needed.
///
/// With username/password, stock tor 0.4.9 answers a greeting and a
/// sub-negotiation that arrive together with the sub-negotiation's reply
/// only (its parser keeps one pending reply, and the second overwrites
/// the first), so the method reply `5 2` may be missing before `1 0`.
pub fn parse_pipelined_replies(buf: &[u8], auth: bool) -> Result<Option<usize>, SocksError> {
    let Some(&first) = buf.first() else {
        return Ok(None);
    };
    let mut at = 0;
    if !(auth && first == 1) {
        let Some(head) = buf.get(..2) else {
            return Ok(None);
        };
        if head[0] != 5 {
            return Err(SocksError::Protocol("not a SOCKS5 proxy"));
        }
        if head[1] != if auth { 2 } else { 0 } {
            return Err(SocksError::Protocol("no acceptable method"));
        }
        at = 2;
    }
    if auth {
        let Some(r) = buf.get(at..at + 2) else {
            return Ok(None);
        };
        if r[0] != 1 || r[1] != 0 {
            return Err(SocksError::Protocol("authentication refused"));
        }
        at += 2;
    }
    let Some(h) = buf.get(at..at + 4) else {
        return Ok(None);
    };
    if h[0] != 5 {
        return Err(SocksError::Protocol("bad reply version"));
    }
    if h[1] != 0 {
        return Err(SocksError::Reply { code: h[1] });
    }
    let addr_len = match h[3] {
        1 => 4,
        4 => 16,
        3 => match buf.get(at + 4) {
            Some(l) => 1 + *l as usize,
            None => return Ok(None),
        },
        _ => return Err(SocksError::Protocol("bad address type in reply")),
    };
    let end = at + 4 + addr_len + 2;
    Ok((buf.len() >= end).then_some(end))
}

/// A SOCKS5 CONNECT opened optimistically (see [`connect_pipelined`]):
/// the request waits for the caller's first write and leaves with it, in
/// one write to the proxy (a read or flush sends it alone); the first
/// reads consume and check the proxy's replies (a refusal is an I/O
/// error carrying the [`SocksError`]).
#[derive(Debug)]
pub struct PipelinedStream {
    inner: TcpStream,
    /// The request, and what the caller wrote behind it, not yet sent.
    unsent: Vec<u8>,
    auth: bool,
    /// Reply bytes collected so far (until the replies are complete).
    head: Vec<u8>,
    /// Application bytes read past the replies, not yet returned.
    extra: Vec<u8>,
    done: bool,
}

/// CONNECT through the proxy without waiting for it: the stream is
/// returned once the TCP connection is up, and the caller's first bytes
/// leave together with the SOCKS request (as a proposal 181 client sends
/// them).
pub async fn connect_pipelined(
    proxy: SocketAddr,
    target: &Target,
    auth: Auth<'_>,
    timeout: Duration,
) -> Result<PipelinedStream, SocksError> {
    let msg = pipelined_request(target, auth)?;
    let fut = async {
        let s = TcpStream::connect(proxy).await?;
        s.set_nodelay(true)?;
        Ok::<_, SocksError>(s)
    };
    let inner = tokio::time::timeout(timeout, fut)
        .await
        .map_err(|_| SocksError::Timeout)??;
    Ok(PipelinedStream {
        inner,
        unsent: msg,
        auth: auth.is_some(),
        head: Vec::new(),
        extra: Vec::new(),
        done: false,
    })
}

/// Bytes a [`PipelinedStream`] holds back before it waits for the proxy.
const MAX_UNSENT: usize = 64 * 1024;

impl PipelinedStream {
    /// Write out what is held back.
    fn send_unsent(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        use std::task::Poll;
        while !self.unsent.is_empty() {
            match tokio::io::AsyncWrite::poll_write(
                std::pin::Pin::new(&mut self.inner),
                cx,
                &self.unsent,
            ) {
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
                }
                Poll::Ready(Ok(n)) => {
                    self.unsent.drain(..n);
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl tokio::io::AsyncRead for PipelinedStream {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        out: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        use std::task::Poll;
        let me = self.get_mut();
        match me.send_unsent(cx) {
            Poll::Ready(Ok(())) => {}
            other => return other,
        }
        while !me.done {
            let mut tmp = [0u8; 512];
            let mut rb = tokio::io::ReadBuf::new(&mut tmp);
            match std::pin::Pin::new(&mut me.inner).poll_read(cx, &mut rb) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) => {}
            }
            if rb.filled().is_empty() {
                return Poll::Ready(Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "proxy closed before its SOCKS reply",
                )));
            }
            me.head.extend_from_slice(rb.filled());
            match parse_pipelined_replies(&me.head, me.auth) {
                Ok(Some(n)) => {
                    me.extra = me.head.split_off(n);
                    me.done = true;
                }
                Ok(None) if me.head.len() > 1024 => {
                    return Poll::Ready(Err(std::io::Error::other("SOCKS reply too long")));
                }
                Ok(None) => {}
                Err(e) => return Poll::Ready(Err(std::io::Error::other(e))),
            }
        }
        if !me.extra.is_empty() {
            let n = me.extra.len().min(out.remaining());
            out.put_slice(&me.extra[..n]);
            me.extra.drain(..n);
            return Poll::Ready(Ok(()));
        }
        std::pin::Pin::new(&mut me.inner).poll_read(cx, out)
    }
}

impl tokio::io::AsyncWrite for PipelinedStream {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        use std::task::Poll;
        let me = self.get_mut();
        if !me.unsent.is_empty() && me.unsent.len() < MAX_UNSENT {
            // Behind the request, in the same write.
            let n = buf.len().min(MAX_UNSENT - me.unsent.len());
            me.unsent.extend_from_slice(&buf[..n]);
            return match me.send_unsent(cx) {
                Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                _ => Poll::Ready(Ok(n)),
            };
        }
        match me.send_unsent(cx) {
            Poll::Ready(Ok(())) => {}
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => return Poll::Pending,
        }
        std::pin::Pin::new(&mut me.inner).poll_write(cx, buf)
    }
    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let me = self.get_mut();
        match me.send_unsent(cx) {
            std::task::Poll::Ready(Ok(())) => {}
            other => return other,
        }
        std::pin::Pin::new(&mut me.inner).poll_flush(cx)
    }
    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let me = self.get_mut();
        match me.send_unsent(cx) {
            std::task::Poll::Ready(Ok(())) => {}
            other => return other,
        }
        std::pin::Pin::new(&mut me.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn pipelined_request_bytes() {
        let t = Target::Addr("127.0.0.1:8080".parse().unwrap());
        assert_eq!(
            pipelined_request(&t, None).unwrap(),
            vec![5, 1, 0, 5, 1, 0, 1, 127, 0, 0, 1, 0x1f, 0x90]
        );
        let m = pipelined_request(&Target::Host("a.b".into(), 80), Some(("u", "pw"))).unwrap();
        assert_eq!(
            m,
            vec![
                5, 1, 2, 1, 1, b'u', 2, b'p', b'w', 5, 1, 0, 3, 3, b'a', b'.', b'b', 0, 80
            ]
        );
        let long = "x".repeat(256);
        assert!(pipelined_request(&t, Some((&long, "p"))).is_err());
    }

    #[test]
    fn replies_are_parsed_split_anywhere() {
        let ok = [5, 2, 1, 0, 5, 0, 0, 1, 127, 0, 0, 1, 0, 80];
        for cut in 0..ok.len() {
            assert_eq!(parse_pipelined_replies(&ok[..cut], true).unwrap(), None);
        }
        assert_eq!(parse_pipelined_replies(&ok, true).unwrap(), Some(ok.len()));
        let mut more = ok.to_vec();
        more.extend_from_slice(b"HTTP/1.1 200");
        assert_eq!(
            parse_pipelined_replies(&more, true).unwrap(),
            Some(ok.len())
        );
        let named = [5, 0, 5, 0, 0, 3, 2, b'a', b'b', 0, 1];
        assert_eq!(parse_pipelined_replies(&named, false).unwrap(), Some(11));
        // Stock tor: the method reply overwritten by the auth reply.
        let tor = [1, 0, 5, 0, 0, 1, 0, 0, 0, 0, 0, 0];
        for cut in 0..tor.len() {
            assert_eq!(parse_pipelined_replies(&tor[..cut], true).unwrap(), None);
        }
        assert_eq!(
            parse_pipelined_replies(&tor, true).unwrap(),
            Some(tor.len())
        );
        // Without auth a leading 1 is not SOCKS5.
        assert!(parse_pipelined_replies(&tor, false).is_err());
    }

    #[test]
    fn refusals_are_errors() {
        assert!(matches!(
            parse_pipelined_replies(&[5, 2, 1, 0, 5, 4, 0, 1, 0, 0, 0, 0, 0, 0], true),
            Err(SocksError::Reply { code: 4 })
        ));
        assert!(parse_pipelined_replies(&[5, 0xFF], true).is_err());
        assert!(parse_pipelined_replies(&[5, 2, 1, 1], true).is_err());
        assert!(parse_pipelined_replies(&[4, 0], false).is_err());
        assert!(parse_pipelined_replies(&[5, 0, 5, 0, 0, 9], false).is_err());
    }

    /// The request leaves with the caller's first write, in one write to
    /// the proxy (the proxy's first read sees both), and the replies are
    /// taken off what the caller reads.
    #[tokio::test]
    async fn pipelined_stream_sends_the_request_with_the_first_write() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy = l.local_addr().unwrap();
        let target = Target::Host("x.onion".into(), 80);
        let mut expect = pipelined_request(&target, None).unwrap();
        expect.extend_from_slice(b"GET /");
        let want = expect.clone();
        let server = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 256];
            let mut reads = 0;
            while got.len() < want.len() {
                let n = s.read(&mut buf).await.unwrap();
                assert!(n > 0);
                got.extend_from_slice(&buf[..n]);
                reads += 1;
            }
            assert_eq!(got, want);
            s.write_all(&[5, 0, 5, 0, 0, 1, 0, 0, 0, 0, 0, 0])
                .await
                .unwrap();
            s.write_all(b"200 OK").await.unwrap();
            reads
        });
        let mut c = connect_pipelined(proxy, &target, None, Duration::from_secs(10))
            .await
            .unwrap();
        // Nothing goes out before the first write.
        tokio::time::sleep(Duration::from_millis(50)).await;
        c.write_all(b"GET /").await.unwrap();
        c.flush().await.unwrap();
        let mut got = [0u8; 6];
        c.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"200 OK");
        assert_eq!(server.await.unwrap(), 1, "request and data in one read");
    }
}
