//! The sink: the target of every workload. An HTTP/1.1 server on loopback
//! serving `GET /bytes/<n>` (n deterministic pseudo-random bytes, their
//! SHA-256 in the `X-Onionmix-Sha256` header), a TCP and UDP echo port, and a small
//! DNS responder that answers A queries for names under
//! [`TEST_DOMAIN`] so exits can resolve the sink by name. With
//! [`start_https`] it also serves the same HTTP over TLS 1.3, with a
//! certificate for [`SINK_HOSTNAME`] issued by a private CA made at start
//! (its PEM is written where the caller says, for clients to trust).
//!
//! The byte stream for `/bytes/<n>` is the ChaCha8 keystream of
//! `rand_chacha::ChaCha8Rng::seed_from_u64(n)`, so any client can recompute
//! it; the digest header makes recomputation unnecessary.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use onionmix_http::io::read_request_head;
use onionmix_http::{BodyFraming, HttpError, Limits, ReadError};
use onionmix_tunnel::dns::wire::{self, Rcode};
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tracing::debug;

/// Largest body `/bytes/<n>` serves.
pub const MAX_BYTES: u64 = 1 << 30;
/// Names under this domain resolve to the sink's address.
pub const TEST_DOMAIN: &str = "onionmix.test";
/// The sink's hostname.
pub const SINK_HOSTNAME: &str = "sink.onionmix.test";
/// Largest request head accepted (8 KiB, 64 headers).
pub const HEAD_LIMITS: Limits = Limits::new(8 * 1024, 64);
/// Idle time before a keep-alive connection is closed.
const IDLE: Duration = Duration::from_secs(120);

/// Fill `out` with bytes `[offset, offset+len)` of the stream for `n`
/// (offset must be a multiple of 64 for the fast path; we only stream
/// sequentially, so one generator per response is enough).
pub fn generator(n: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(n)
}

/// The whole body for `n` (tests and small sizes).
pub fn body(n: u64) -> Vec<u8> {
    let mut v = vec![0u8; n as usize];
    generator(n).fill_bytes(&mut v);
    v
}

/// SHA-256 of the body for `n`.
pub fn digest(n: u64) -> [u8; 32] {
    let mut g = generator(n);
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut left = n;
    while left > 0 {
        let k = left.min(buf.len() as u64) as usize;
        g.fill_bytes(&mut buf[..k]);
        h.update(&buf[..k]);
        left -= k as u64;
    }
    h.finalize().into()
}

/// Addresses the sink listens on.
#[derive(Debug, Clone, Copy)]
pub struct SinkAddrs {
    /// HTTP.
    pub http: SocketAddr,
    /// TCP echo, and UDP echo on the same port.
    pub echo: SocketAddr,
    /// DNS (UDP).
    pub dns: SocketAddr,
}

/// Start the sink's three listeners on the given addresses (port 0 picks
/// one) and return the bound addresses.
pub async fn start(
    http: SocketAddr,
    echo: SocketAddr,
    dns: SocketAddr,
) -> std::io::Result<SinkAddrs> {
    let hl = TcpListener::bind(http).await?;
    let el = TcpListener::bind(echo).await?;
    // UDP echo on the TCP echo's port (for UDP carried through the
    // network: the tunnel's UDP flows, docs/udp-over-tor.md).
    let eu = UdpSocket::bind(el.local_addr()?).await?;
    let du = UdpSocket::bind(dns).await?;
    let addrs = SinkAddrs {
        http: hl.local_addr()?,
        echo: el.local_addr()?,
        dns: du.local_addr()?,
    };
    let cache: Arc<Mutex<HashMap<u64, [u8; 32]>>> = Arc::new(Mutex::new(HashMap::new()));
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = hl.accept().await else {
                continue;
            };
            let cache = cache.clone();
            let _ = s.set_nodelay(true);
            tokio::spawn(async move {
                if let Err(e) = serve_http(s, cache).await {
                    debug!("sink http: {e}");
                }
            });
        }
    });
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = el.accept().await else {
                continue;
            };
            tokio::spawn(serve_echo(s));
        }
    });
    tokio::spawn(serve_udp_echo(eu));
    let answer_ip = match addrs.http.ip() {
        IpAddr::V4(a) if !a.is_unspecified() => a,
        _ => Ipv4Addr::LOCALHOST,
    };
    tokio::spawn(serve_dns(du, answer_ip));
    Ok(addrs)
}

/// A private CA and a certificate for [`SINK_HOSTNAME`] (and
/// `localhost`) signed by it: (CA certificate PEM, TLS 1.3 server config).
pub fn make_tls() -> Result<(String, rustls::ServerConfig), String> {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
    let e = |e: rcgen::Error| format!("sink certificate: {e}");
    let ca_key = KeyPair::generate().map_err(e)?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(e)?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "onionmix sink test CA");
    let ca = CertifiedIssuer::self_signed(ca_params, ca_key).map_err(e)?;
    let key = KeyPair::generate().map_err(e)?;
    let mut params =
        CertificateParams::new(vec![SINK_HOSTNAME.to_string(), "localhost".to_string()])
            .map_err(e)?;
    params
        .distinguished_name
        .push(DnType::CommonName, SINK_HOSTNAME);
    let cert = params.signed_by(&key, &ca).map_err(e)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| format!("sink TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone(), ca.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .map_err(|e| format!("sink TLS: {e}"))?;
    Ok((ca.pem(), config))
}

/// A TLS 1.3 client config that trusts only the CA in `ca_pem` (the
/// sink's), for connections to [`SINK_HOSTNAME`].
pub fn client_tls(ca_pem: &[u8]) -> Result<rustls::ClientConfig, String> {
    use rustls::pki_types::{CertificateDer, pem::PemObject};
    let mut roots = rustls::RootCertStore::empty();
    let mut n = 0;
    for c in CertificateDer::pem_slice_iter(ca_pem) {
        let c = c.map_err(|e| format!("sink CA: {e}"))?;
        roots.add(c).map_err(|e| format!("sink CA: {e}"))?;
        n += 1;
    }
    if n == 0 {
        return Err("sink CA: no certificate in the PEM".into());
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// Serve the sink's HTTP over TLS 1.3 on `addr`; writes the CA
/// certificate (PEM) to `ca_out` before listening. Returns the bound
/// address.
pub async fn start_https(
    addr: SocketAddr,
    ca_out: &std::path::Path,
) -> std::io::Result<SocketAddr> {
    let (ca_pem, config) = make_tls().map_err(std::io::Error::other)?;
    std::fs::write(ca_out, ca_pem)?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let l = TcpListener::bind(addr).await?;
    let bound = l.local_addr()?;
    let cache: Arc<Mutex<HashMap<u64, [u8; 32]>>> = Arc::new(Mutex::new(HashMap::new()));
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = l.accept().await else {
                continue;
            };
            let _ = s.set_nodelay(true);
            let (acceptor, cache) = (acceptor.clone(), cache.clone());
            tokio::spawn(async move {
                match tokio::time::timeout(Duration::from_secs(30), acceptor.accept(s)).await {
                    Ok(Ok(tls)) => {
                        if let Err(e) = serve_http(tls, cache).await {
                            debug!("sink https: {e}");
                        }
                    }
                    Ok(Err(e)) => debug!("sink TLS handshake: {e}"),
                    Err(_) => debug!("sink TLS handshake timed out"),
                }
            });
        }
    });
    Ok(bound)
}

async fn serve_echo(mut s: TcpStream) {
    let _ = s.set_nodelay(true);
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match tokio::time::timeout(IDLE, s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return,
            Ok(Ok(n)) => {
                if s.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        }
    }
}

fn cached_digest(cache: &Mutex<HashMap<u64, [u8; 32]>>, n: u64) -> [u8; 32] {
    if let Some(d) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&n) {
        return *d;
    }
    let d = digest(n);
    let mut c = cache.lock().unwrap_or_else(|e| e.into_inner());
    if c.len() > 256 {
        c.clear();
    }
    c.insert(n, d);
    d
}

/// What the sink answers to a request head (the decision `serve_http`
/// carries out; sans-IO so it can be tested and fuzzed alone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SinkAnswer {
    /// The request has a body (or a chunked one): 400 and close, so the
    /// connection cannot desynchronise.
    BodyRefused,
    /// Not GET or HEAD: 405.
    MethodNotAllowed,
    /// `/bytes/<n>` or `/stream/<n>` with `n` not an integer up to
    /// [`MAX_BYTES`]: 400.
    BadCount,
    /// `n` deterministic bytes; `digest`: with the `X-Onionmix-Sha256`
    /// header (`/bytes/`), without it (`/stream/`).
    Bytes {
        /// Body length.
        n: u64,
        /// Whether the digest header is sent.
        digest: bool,
    },
    /// `/`: a line of help.
    Index,
    /// Anything else: 404.
    NotFound,
}

/// Decide the answer to one request head.
pub fn answer_for(head: &onionmix_http::RequestHead) -> SinkAnswer {
    // GET and HEAD carry no body; one with a body (or a chunked one)
    // is refused and the connection closed, so it cannot desync.
    if !matches!(head.body_framing(0), Ok(BodyFraming::Length(0))) {
        return SinkAnswer::BodyRefused;
    }
    let (method, path) = (head.method.as_str(), head.path.as_str());
    if method != "GET" && method != "HEAD" {
        return SinkAnswer::MethodNotAllowed;
    }
    let (nstr, digest) = match (path.strip_prefix("/bytes/"), path.strip_prefix("/stream/")) {
        (Some(n), _) => (Some(n), true),
        // `/stream/<n>`: the same bytes without the digest header, so
        // the first byte does not wait for hashing n bytes (goodput).
        (None, Some(n)) => (Some(n), false),
        _ => (None, false),
    };
    match nstr {
        Some(nstr) => match nstr.parse::<u64>() {
            Ok(n) if n <= MAX_BYTES => SinkAnswer::Bytes { n, digest },
            _ => SinkAnswer::BadCount,
        },
        None if path == "/" => SinkAnswer::Index,
        None => SinkAnswer::NotFound,
    }
}

async fn serve_http<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    cache: Arc<Mutex<HashMap<u64, [u8; 32]>>>,
) -> std::io::Result<()> {
    let mut buf: Vec<u8> = Vec::with_capacity(1024);
    loop {
        // Read one request head.
        let head = match read_request_head(&mut s, &mut buf, &HEAD_LIMITS, IDLE).await {
            Ok(h) => h,
            // Idle, or closed between requests.
            Err(ReadError::TimedOut | ReadError::Closed(_)) => return Ok(()),
            Err(ReadError::Io(e)) => return Err(e),
            Err(ReadError::Http(
                e @ (HttpError::HeadTooLarge { .. } | HttpError::TooManyHeaders { .. }),
            )) => {
                debug!("sink http: {e}");
                respond_close(&mut s, 431, "Request Header Fields Too Large", "").await?;
                return Ok(());
            }
            Err(ReadError::Http(e)) => {
                debug!("sink http: {e}");
                respond_close(&mut s, 400, "Bad Request", "malformed request\n").await?;
                return Ok(());
            }
        };
        let close = head.wants_close();
        let method = head.method.as_str();
        match answer_for(&head) {
            SinkAnswer::BodyRefused => {
                respond_close(&mut s, 400, "Bad Request", "no request bodies\n").await?;
                return Ok(());
            }
            SinkAnswer::MethodNotAllowed => {
                respond_simple(&mut s, 405, "Method Not Allowed", "only GET\n").await?;
            }
            SinkAnswer::BadCount => {
                respond_simple(
                    &mut s,
                    400,
                    "Bad Request",
                    "n must be an integer <= 1 GiB\n",
                )
                .await?;
            }
            SinkAnswer::Bytes { n, digest } => {
                let d = if !digest {
                    [0u8; 32]
                } else if n <= 4 * 1024 * 1024 {
                    cached_digest(&cache, n)
                } else {
                    let c = cache.clone();
                    tokio::task::spawn_blocking(move || cached_digest(&c, n))
                        .await
                        .unwrap_or([0u8; 32])
                };
                let digest_line = if digest {
                    format!("X-Onionmix-Sha256: {}\r\n", hex::encode(d))
                } else {
                    String::new()
                };
                let hdr = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {n}\r\n{digest_line}{}\r\n",
                    if close { "Connection: close\r\n" } else { "" }
                );
                s.write_all(hdr.as_bytes()).await?;
                if method == "GET" {
                    let mut g = generator(n);
                    let mut chunk = vec![0u8; 64 * 1024];
                    let mut left = n;
                    while left > 0 {
                        let k = left.min(chunk.len() as u64) as usize;
                        g.fill_bytes(&mut chunk[..k]);
                        s.write_all(&chunk[..k]).await?;
                        left -= k as u64;
                    }
                }
            }
            SinkAnswer::Index => {
                respond_simple(
                    &mut s,
                    200,
                    "OK",
                    "onionmix sink: GET /bytes/<n> returns n deterministic bytes (SHA-256 in X-Onionmix-Sha256)\n",
                )
                .await?;
            }
            SinkAnswer::NotFound => {
                respond_simple(&mut s, 404, "Not Found", "try /bytes/<n>\n").await?;
            }
        }
        if close {
            break;
        }
        s.flush().await?;
    }
    s.flush().await?;
    let _ = s.shutdown().await;
    Ok(())
}

/// Answer with `Connection: close`, then close without losing the answer:
/// the write side is shut and unread request bytes are drained for a
/// moment (closing with unread bytes makes the kernel send a reset, which
/// can destroy the answer before the client reads it).
async fn respond_close<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    code: u16,
    reason: &str,
    body: &str,
) -> std::io::Result<()> {
    let r = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(r.as_bytes()).await?;
    s.flush().await?;
    let _ = s.shutdown().await;
    let drain = async {
        let mut tmp = [0u8; 4096];
        let mut left: usize = 256 * 1024;
        while left > 0 {
            match s.read(&mut tmp).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(2), drain).await;
    Ok(())
}

async fn respond_simple<S: AsyncWrite + Unpin>(
    s: &mut S,
    code: u16,
    reason: &str,
    body: &str,
) -> std::io::Result<()> {
    let r = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(r.as_bytes()).await
}

/// Send every datagram back to where it came from.
async fn serve_udp_echo(sock: UdpSocket) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let Ok((n, peer)) = sock.recv_from(&mut buf).await else {
            continue;
        };
        let Some(d) = buf.get(..n) else { continue };
        let _ = sock.send_to(d, peer).await;
    }
}

/// Answer DNS A queries under [`TEST_DOMAIN`] with `ip`; everything else
/// gets NXDOMAIN (AAAA under the domain: an empty answer).
async fn serve_dns(sock: UdpSocket, ip: Ipv4Addr) {
    let mut buf = [0u8; 512];
    loop {
        let Ok((n, peer)) = sock.recv_from(&mut buf).await else {
            continue;
        };
        // Every name asked is logged: tests read the log to prove that a
        // name (a `.onion` one, say) never reached an exit's resolver.
        if let Some((name, qtype, _)) = dns_question(&buf[..n]) {
            tracing::info!(%name, qtype, "dns query");
        }
        if let Some(resp) = dns_answer(&buf[..n], ip) {
            let _ = sock.send_to(&resp, peer).await;
        }
    }
}

/// The question of a DNS query: (lower-cased name, qtype, end of the
/// question section). None for anything that is not a one-question query.
/// Read with the project's DNS codec (onionmix-tunnel's `dns::wire`).
pub fn dns_question(q: &[u8]) -> Option<(String, u16, usize)> {
    let query = wire::parse_query(q).ok()?;
    let end = query.question_end();
    Some((query.name, query.qtype, end))
}

/// Build the DNS response for one query (None: not a query we answer).
pub fn dns_answer(q: &[u8], ip: Ipv4Addr) -> Option<Vec<u8>> {
    let query = wire::parse_query(q).ok()?;
    let name = &query.name;
    let ours = name == TEST_DOMAIN || name.ends_with(&format!(".{TEST_DOMAIN}"));
    let rcode = if ours {
        Rcode::NoError
    } else {
        Rcode::NxDomain
    };
    let addrs = if ours && query.qtype == wire::TYPE_A {
        vec![IpAddr::V4(ip)]
    } else {
        Vec::new()
    };
    Some(wire::build_answer(&query, rcode, &addrs, 60))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_bytes_and_digest() {
        assert_eq!(body(1000), body(1000));
        assert_ne!(body(1000)[..100], body(1001)[..100]);
        let b = body(300_000);
        assert_eq!(<[u8; 32]>::from(Sha256::digest(&b)), digest(300_000));
    }

    #[test]
    fn answers_by_head() {
        let ans = |req: &str| {
            let h = onionmix_http::parse_request_head(req.as_bytes(), &HEAD_LIMITS)
                .unwrap()
                .unwrap();
            answer_for(&h)
        };
        assert_eq!(
            ans("GET /bytes/10 HTTP/1.1\r\n\r\n"),
            SinkAnswer::Bytes {
                n: 10,
                digest: true
            }
        );
        assert_eq!(
            ans("HEAD /stream/0 HTTP/1.0\r\n\r\n"),
            SinkAnswer::Bytes {
                n: 0,
                digest: false
            }
        );
        assert_eq!(
            ans("GET /bytes/1073741825 HTTP/1.1\r\n\r\n"),
            SinkAnswer::BadCount
        );
        assert_eq!(ans("GET /bytes/-1 HTTP/1.1\r\n\r\n"), SinkAnswer::BadCount);
        assert_eq!(ans("GET / HTTP/1.1\r\n\r\n"), SinkAnswer::Index);
        assert_eq!(ans("GET /x HTTP/1.1\r\n\r\n"), SinkAnswer::NotFound);
        assert_eq!(ans("PUT / HTTP/1.1\r\n\r\n"), SinkAnswer::MethodNotAllowed);
        assert_eq!(
            ans("GET / HTTP/1.1\r\nContent-Length: 1\r\n\r\n"),
            SinkAnswer::BodyRefused
        );
        assert_eq!(
            ans("GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"),
            SinkAnswer::BodyRefused
        );
    }

    #[test]
    fn dns_answers_test_domain_only() {
        // Query for sink.onionmix.test A.
        let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        for l in ["sink", "onionmix", "test"] {
            q.push(l.len() as u8);
            q.extend_from_slice(l.as_bytes());
        }
        q.extend_from_slice(&[0, 0, 1, 0, 1]);
        let r = dns_answer(&q, Ipv4Addr::new(127, 0, 0, 1)).unwrap();
        assert_eq!(&r[..2], &[0x12, 0x34]);
        assert_eq!(r[3] & 0x0f, 0);
        assert_eq!(&r[r.len() - 4..], &[127, 0, 0, 1]);
        let mut other = q.clone();
        other[13] = b'x';
        other[27] = b'x'; // "test" -> "tesx"
        let r = dns_answer(&other, Ipv4Addr::LOCALHOST).unwrap();
        assert_eq!(r[3] & 0x0f, 3);
        assert!(dns_answer(&q[..10], Ipv4Addr::LOCALHOST).is_none());
    }

    #[tokio::test]
    async fn http_and_echo() {
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let a = start(any, any, any).await.unwrap();
        let mut s = TcpStream::connect(a.http).await.unwrap();
        let r = crate::http::get(&mut s, "sink", "/bytes/100000", std::time::Instant::now())
            .await
            .unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.body.len(), 100_000);
        assert!(r.sha256_ok());
        // Keep-alive: a second request on the same connection.
        let r = crate::http::get(&mut s, "sink", "/bytes/7", std::time::Instant::now())
            .await
            .unwrap();
        assert_eq!(r.body, body(7));
        let r = crate::http::get(
            &mut s,
            "sink",
            "/bytes/notanumber",
            std::time::Instant::now(),
        )
        .await
        .unwrap();
        assert_eq!(r.status, 400);
        let mut e = TcpStream::connect(a.echo).await.unwrap();
        e.write_all(b"ping").await.unwrap();
        let mut b = [0u8; 4];
        e.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"ping");
        // UDP echo on the same port.
        let u = UdpSocket::bind(any).await.unwrap();
        u.connect(a.echo).await.unwrap();
        u.send(b"datagram").await.unwrap();
        let mut d = [0u8; 64];
        let n = tokio::time::timeout(std::time::Duration::from_secs(10), u.recv(&mut d))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&d[..n], b"datagram");
    }

    /// Send raw request bytes, read the answer until the sink closes.
    async fn raw_exchange(addr: SocketAddr, req: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(req).await.unwrap();
        let mut out = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
            .await
            .expect("the sink closes")
            .unwrap();
        String::from_utf8_lossy(&out).into_owned()
    }

    #[tokio::test]
    async fn bad_requests_are_refused_and_closed() {
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let a = start(any, any, any).await.unwrap();
        let r = raw_exchange(a.http, b"GET /bytes/5 HTTP/1.1\r\nBad Name: x\r\n\r\n").await;
        assert!(r.starts_with("HTTP/1.1 400 "), "{r}");
        // A body on a GET, or a chunked one, would desync keep-alive.
        let r = raw_exchange(
            a.http,
            b"GET /bytes/5 HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc",
        )
        .await;
        assert!(r.starts_with("HTTP/1.1 400 "), "{r}");
        let r = raw_exchange(
            a.http,
            b"GET /bytes/5 HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        )
        .await;
        assert!(r.starts_with("HTTP/1.1 400 "), "{r}");
        let mut big = b"GET /bytes/5 HTTP/1.1\r\nX: ".to_vec();
        big.resize(9000, b'x');
        let r = raw_exchange(a.http, &big).await;
        assert!(r.starts_with("HTTP/1.1 431 "), "{r}");
        // HTTP/1.0 closes after the answer; a pipelined HTTP/1.1 pair is
        // answered in order.
        let r = raw_exchange(a.http, b"GET /bytes/3 HTTP/1.0\r\n\r\n").await;
        assert!(r.starts_with("HTTP/1.1 200 ") && r.contains("Content-Length: 3\r\n"));
        let r = raw_exchange(
            a.http,
            b"GET /bytes/1 HTTP/1.1\r\n\r\nGET /nothing HTTP/1.1\r\nConnection: close\r\n\r\n",
        )
        .await;
        assert!(r.starts_with("HTTP/1.1 200 "), "{r}");
        assert!(r.contains("HTTP/1.1 404 "), "{r}");
    }

    #[tokio::test]
    async fn https_with_the_sink_ca() {
        let tmp = tempfile::tempdir().unwrap();
        let ca = tmp.path().join("ca.pem");
        let a = start_https("127.0.0.1:0".parse().unwrap(), &ca)
            .await
            .unwrap();
        let pem = std::fs::read(&ca).unwrap();
        let cfg = client_tls(&pem).unwrap();
        let conn = tokio_rustls::TlsConnector::from(std::sync::Arc::new(cfg));
        let name = rustls::pki_types::ServerName::try_from(SINK_HOSTNAME).unwrap();
        let tcp = TcpStream::connect(a).await.unwrap();
        let mut tls = conn.connect(name, tcp).await.unwrap();
        assert_eq!(
            tls.get_ref().1.protocol_version(),
            Some(rustls::ProtocolVersion::TLSv1_3)
        );
        let r = crate::http::get(&mut tls, "sink", "/bytes/70000", std::time::Instant::now())
            .await
            .unwrap();
        assert_eq!(r.status, 200);
        assert!(r.sha256_ok());
        let r = crate::http::get(&mut tls, "sink", "/bytes/5", std::time::Instant::now())
            .await
            .unwrap();
        assert_eq!(r.body, body(5));
        // Another CA is not trusted: the handshake fails.
        let (other, _) = make_tls().unwrap();
        let conn = tokio_rustls::TlsConnector::from(std::sync::Arc::new(
            client_tls(other.as_bytes()).unwrap(),
        ));
        let tcp = TcpStream::connect(a).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from(SINK_HOSTNAME).unwrap();
        assert!(conn.connect(name, tcp).await.is_err());
        assert!(client_tls(b"not a pem").is_err());
    }
}
