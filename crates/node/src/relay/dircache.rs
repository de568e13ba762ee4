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

use onionmix_http::Limits;
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
    /// Our own descriptor (`/tor/server/authority`), set by publishing.
    own: Mutex<Option<std::sync::Arc<String>>>,
}

/// dir-spec's path for "the server's own descriptor".
pub const OWN_DESCRIPTOR_PATH: &str = "/tor/server/authority";

/// What a request asked for.
#[derive(Debug, PartialEq, Eq)]
pub struct DirGet {
    /// The path (`/tor/...`).
    pub path: String,
    /// The `Accept-Encoding` value, if any.
    pub accept_encoding: Option<String>,
}

/// Why a directory request was refused (answered 400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DirRequestError {
    /// Not an acceptable HTTP request head.
    #[error(transparent)]
    Http(#[from] onionmix_http::HttpError),
    /// The head is not complete.
    #[error("incomplete request")]
    Incomplete,
    /// Another method than GET.
    #[error("only GET is served")]
    NotGet,
    /// Not `/tor/...` in visible ASCII.
    #[error("not a directory path")]
    NotDirectoryPath,
}

/// Parse a raw HTTP request: only `GET /tor/...` is accepted.
pub fn parse_request(req: &[u8]) -> Result<DirGet, DirRequestError> {
    let head = onionmix_http::parse_request_head(req, &Limits::DEFAULT)?
        .ok_or(DirRequestError::Incomplete)?;
    if head.method != "GET" {
        return Err(DirRequestError::NotGet);
    }
    let path = head.path.as_str();
    if !path.starts_with("/tor/")
        || path.len() > 8192
        || !path
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b'\\' && b != b'"')
    {
        return Err(DirRequestError::NotDirectoryPath);
    }
    let accept_encoding = head
        .header("accept-encoding")
        .filter(|v| v.len() <= 200 && v.bytes().all(|b| b.is_ascii_graphic() || b == b' '))
        .map(str::to_string);
    Ok(DirGet {
        path: head.path.clone(),
        accept_encoding,
    })
}

fn error_response(code: u16, reason: &str) -> Vec<u8> {
    let reason = onionmix_http::sanitize(reason, 200);
    format!("HTTP/1.0 {code} {reason}\r\nContent-Length: 0\r\n\r\n").into_bytes()
}

impl DirCache {
    /// A cache fetching from these DirPorts (tried in rotation).
    pub fn new(upstreams: Vec<SocketAddr>) -> Self {
        DirCache {
            upstreams,
            next: AtomicUsize::new(0),
            entries: Mutex::new(HashMap::new()),
            own: Mutex::new(None),
        }
    }

    /// Answer `/tor/server/authority[.z]` from our own descriptor, never
    /// from upstream (an authority would answer with its own).
    fn own_descriptor(&self, get: &DirGet) -> Vec<u8> {
        let own = self.own.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let Some(desc) = own else {
            return error_response(404, "Not found");
        };
        let deflate = get.path.ends_with(".z")
            || get
                .accept_encoding
                .as_deref()
                .is_some_and(|v| v.split(',').any(|e| e.trim() == "deflate"));
        crate::authority::http::response(200, "OK", desc.as_bytes(), deflate)
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

    /// Fetch from one upstream: (status, the raw response).
    async fn fetch(&self, up: SocketAddr, get: &DirGet) -> Result<(u16, Vec<u8>), String> {
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
        // Relay the answer as it came, once it is a whole, well-formed
        // HTTP response (a truncated one is neither cached nor relayed).
        let resp = onionmix_http::parse_response(&out, &Limits::DEFAULT, MAX_RESPONSE, false)
            .map_err(|e| format!("bad upstream answer: {e}"))?;
        Ok((resp.head.status, out))
    }

    /// Answer one raw request.
    pub async fn answer(&self, req: &[u8]) -> Vec<u8> {
        let get = match parse_request(req) {
            Ok(g) => g,
            Err(why) => {
                debug!("directory request refused: {why}");
                return error_response(400, &why.to_string());
            }
        };
        if get.path.strip_suffix(".z").unwrap_or(&get.path) == OWN_DESCRIPTOR_PATH {
            return self.own_descriptor(&get);
        }
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
                Ok((status, resp)) => {
                    if status == 200 {
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
    fn set_own_descriptor(&self, descriptor: &str) {
        *self.own.lock().unwrap_or_else(|e| e.into_inner()) =
            Some(std::sync::Arc::new(descriptor.to_string()));
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

    #[tokio::test]
    async fn truncated_or_malformed_upstream_answers_are_not_relayed() {
        for answer in [
            &b"HTTP/1.0 200 OK\r\nContent-Length: 10\r\n\r\nhello"[..],
            b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello",
            b"HTTP/1.0 200 OK\r\nContent-Len",
            b"<html>not http</html>",
        ] {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = l.local_addr().unwrap();
            tokio::spawn(async move {
                let Ok((mut s, _)) = l.accept().await else {
                    return;
                };
                let mut buf = vec![0u8; 4096];
                let _ = s.read(&mut buf).await;
                let _ = s.write_all(answer).await;
            });
            let c = DirCache::new(vec![addr]);
            let a = c.answer(b"GET /tor/keys/all HTTP/1.0\r\n\r\n").await;
            assert!(
                a.starts_with(b"HTTP/1.0 503"),
                "{:?}",
                String::from_utf8_lossy(&a)
            );
        }
    }

    #[tokio::test]
    async fn serves_its_own_descriptor_not_an_upstream_one() {
        // The upstream would answer anything; it must not be asked.
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let hits = std::sync::Arc::new(AtomicUsize::new(0));
        let h = hits.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                h.fetch_add(1, Ordering::Relaxed);
                let _ = s
                    .write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nupstr")
                    .await;
            }
        });
        let c = DirCache::new(vec![addr]);
        let req = b"GET /tor/server/authority HTTP/1.0\r\n\r\n";
        assert!(c.answer(req).await.starts_with(b"HTTP/1.0 404"));
        c.set_own_descriptor("router me 127.0.0.1 9001 0 0\n");
        let a = c.answer(req).await;
        assert!(a.starts_with(b"HTTP/1.0 200"));
        assert!(a.ends_with(b"router me 127.0.0.1 9001 0 0\n"));
        let z = c
            .answer(b"GET /tor/server/authority.z HTTP/1.0\r\n\r\n")
            .await;
        let head_end = z.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let mut body = String::new();
        use std::io::Read as _;
        flate2::read::ZlibDecoder::new(&z[head_end..])
            .read_to_string(&mut body)
            .unwrap();
        assert_eq!(body, "router me 127.0.0.1 9001 0 0\n");
        assert_eq!(hits.load(Ordering::Relaxed), 0);
    }
}
