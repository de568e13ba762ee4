//! A directory cache for relays: answers `BEGIN_DIR` requests for
//! directory documents (`GET /tor/...`) by fetching them from the
//! configured authorities' DirPorts and keeping successful answers for a
//! short time.
//!
//! Serving `BEGIN_DIR` is what earns a relay the `V2Dir` flag, and tor
//! clients only take relays with `V2Dir` as guards (guard-spec: guards are
//! directory caches). The cache forwards the request path and the
//! client's `Accept-Encoding` only (no consensus diffs: a full document
//! is always a valid answer), bounds every request, response, entry count
//! and wait, and never forwards anything but `GET /tor/...`.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tracing::debug;

use super::exit::DirServer;

/// Largest upstream answer kept or relayed.
pub const MAX_RESPONSE: usize = 16 << 20;
/// Most cached answers.
pub const MAX_ENTRIES: usize = 256;
/// How long a cached answer is served.
pub const TTL: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const FETCH_TIMEOUT: Duration = Duration::from_secs(30);

/// Cached answers by request key: when stored, and the raw response.
type Entries = HashMap<String, (Instant, std::sync::Arc<Vec<u8>>)>;

/// The cache.
pub struct DirCache {
    upstreams: Vec<SocketAddr>,
    next: AtomicUsize,
    entries: Mutex<Entries>,
}

/// What a request asked for.
#[derive(Debug, PartialEq, Eq)]
pub struct DirGet {
    /// The path (`/tor/...`).
    pub path: String,
    /// The `Accept-Encoding` value, if any.
    pub accept_encoding: Option<String>,
}

/// Parse a raw HTTP request: only `GET /tor/...` is accepted.
pub fn parse_request(req: &[u8]) -> Result<DirGet, &'static str> {
    let end = req
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("incomplete request")?;
    let head = std::str::from_utf8(&req[..end]).map_err(|_| "request is not UTF-8")?;
    let mut lines = head.split("\r\n");
    let first = lines.next().ok_or("empty request")?;
    let mut parts = first.split(' ');
    let (Some(method), Some(path), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("malformed request line");
    };
    if method != "GET" {
        return Err("only GET is served");
    }
    if !version.starts_with("HTTP/1.") {
        return Err("not HTTP/1.x");
    }
    if !path.starts_with("/tor/")
        || path.len() > 8192
        || !path
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b'\\' && b != b'"')
    {
        return Err("not a directory path");
    }
    let mut accept_encoding = None;
    for l in lines {
        if let Some((k, v)) = l.split_once(':')
            && k.trim().eq_ignore_ascii_case("accept-encoding")
        {
            let v = v.trim();
            if v.len() <= 200 && v.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
                accept_encoding = Some(v.to_string());
            }
        }
    }
    Ok(DirGet {
        path: path.to_string(),
        accept_encoding,
    })
}

fn error_response(code: u16, reason: &str) -> Vec<u8> {
    format!("HTTP/1.0 {code} {reason}\r\nContent-Length: 0\r\n\r\n").into_bytes()
}

impl DirCache {
    /// A cache fetching from these DirPorts (tried in rotation).
    pub fn new(upstreams: Vec<SocketAddr>) -> Self {
        DirCache {
            upstreams,
            next: AtomicUsize::new(0),
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn lookup(&self, key: &str) -> Option<std::sync::Arc<Vec<u8>>> {
        let map = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        map.get(key)
            .filter(|(t, _)| t.elapsed() < TTL)
            .map(|(_, v)| v.clone())
    }

    fn store(&self, key: String, v: std::sync::Arc<Vec<u8>>) {
        let mut map = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        map.retain(|_, (t, _)| t.elapsed() < TTL);
        if map.len() >= MAX_ENTRIES
            && let Some(oldest) = map
                .iter()
                .min_by_key(|(_, (t, _))| *t)
                .map(|(k, _)| k.clone())
        {
            map.remove(&oldest);
        }
        map.insert(key, (Instant::now(), v));
    }

    async fn fetch(&self, up: SocketAddr, get: &DirGet) -> Result<Vec<u8>, String> {
        let mut s = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(up))
            .await
            .map_err(|_| "connect timed out".to_string())?
            .map_err(|e| e.to_string())?;
        let mut req = format!("GET {} HTTP/1.0\r\nHost: {up}\r\n", get.path);
        if let Some(ae) = &get.accept_encoding {
            req.push_str(&format!("Accept-Encoding: {ae}\r\n"));
        }
        req.push_str("\r\n");
        let read = async {
            s.write_all(req.as_bytes()).await?;
            let mut out = Vec::new();
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = s.read(&mut buf).await?;
                if n == 0 {
                    return Ok::<_, std::io::Error>(out);
                }
                if out.len() + n > MAX_RESPONSE {
                    return Err(std::io::Error::other("response too large"));
                }
                out.extend_from_slice(&buf[..n]);
            }
        };
        let out = tokio::time::timeout(FETCH_TIMEOUT, read)
            .await
            .map_err(|_| "fetch timed out".to_string())?
            .map_err(|e| e.to_string())?;
        if !out.starts_with(b"HTTP/1.") {
            return Err("upstream answer is not HTTP".into());
        }
        Ok(out)
    }

    /// Answer one raw request.
    pub async fn answer(&self, req: &[u8]) -> Vec<u8> {
        let get = match parse_request(req) {
            Ok(g) => g,
            Err(why) => {
                debug!("directory request refused: {why}");
                return error_response(400, why);
            }
        };
        let key = format!(
            "{}\n{}",
            get.path,
            get.accept_encoding.as_deref().unwrap_or("")
        );
        if let Some(v) = self.lookup(&key) {
            return v.as_ref().clone();
        }
        let n = self.upstreams.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let mut last = String::from("no directory authority configured");
        for i in 0..n {
            let up = self.upstreams[(start + i) % n];
            match self.fetch(up, &get).await {
                Ok(resp) => {
                    let ok = resp.starts_with(b"HTTP/1.0 200") || resp.starts_with(b"HTTP/1.1 200");
                    if ok {
                        self.store(key, std::sync::Arc::new(resp.clone()));
                        return resp;
                    }
                    // 404 and the like are answers too; try another
                    // authority first in case this one lags.
                    last = String::from_utf8_lossy(&resp[..resp.len().min(40)]).into_owned();
                    if i + 1 == n {
                        return resp;
                    }
                }
                Err(e) => last = e,
            }
        }
        debug!("directory request failed upstream: {last}");
        error_response(503, "Directory unavailable")
    }
}

impl DirServer for DirCache {
    fn handle_request<'a>(
        &'a self,
        req: &'a [u8],
    ) -> Pin<Box<dyn Future<Output = Vec<u8>> + Send + 'a>> {
        Box::pin(self.answer(req))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_only_directory_gets() {
        let g = parse_request(
            b"GET /tor/status-vote/current/consensus-microdesc.z HTTP/1.0\r\nAccept-Encoding: deflate, zstd\r\n\r\n",
        )
        .unwrap();
        assert_eq!(g.path, "/tor/status-vote/current/consensus-microdesc.z");
        assert_eq!(g.accept_encoding.as_deref(), Some("deflate, zstd"));
        for bad in [
            &b"POST /tor/ HTTP/1.0\r\n\r\n"[..],
            b"GET /etc/passwd HTTP/1.0\r\n\r\n",
            b"GET /tor/x HTTP/1.0\r\n",
            b"GET /tor/x\r\n\r\n",
            b"GET /tor/x y HTTP/1.0\r\n\r\n",
            b"GET /tor/\xff HTTP/1.0\r\n\r\n",
            b"",
        ] {
            assert!(parse_request(bad).is_err(), "{bad:?}");
        }
    }

    #[tokio::test]
    async fn caches_and_bounds() {
        // A fake authority counting requests.
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let hits = std::sync::Arc::new(AtomicUsize::new(0));
        let h = hits.clone();
        tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = l.accept().await else {
                    return;
                };
                h.fetch_add(1, Ordering::Relaxed);
                let mut buf = vec![0u8; 4096];
                let _ = s.read(&mut buf).await;
                let _ = s
                    .write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhello")
                    .await;
            }
        });
        let c = DirCache::new(vec![addr]);
        let req = b"GET /tor/keys/all HTTP/1.0\r\n\r\n";
        let a = c.answer(req).await;
        assert!(a.ends_with(b"hello"));
        let b = c.answer(req).await;
        assert_eq!(a, b);
        assert_eq!(hits.load(Ordering::Relaxed), 1, "second answer from cache");
        let bad = c.answer(b"GET / HTTP/1.0\r\n\r\n").await;
        assert!(bad.starts_with(b"HTTP/1.0 400"));
        // No upstream reachable: 503, not a hang.
        let dead = DirCache::new(vec!["127.0.0.1:1".parse().unwrap()]);
        assert!(dead.answer(req).await.starts_with(b"HTTP/1.0 503"));
    }
}
