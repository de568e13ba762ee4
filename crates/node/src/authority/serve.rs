//! Serving documents on the DirPort and over `BEGIN_DIR`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tracing::{debug, info, warn};

use super::{Authority, hex20, http};
use crate::relay::exit::DirServer;

impl Authority {
    /// Answer one GET path (without compression suffix); `None` is 404.
    pub(super) fn get(&self, path: &str) -> Option<String> {
        let st = self.lock();
        if path == "/tor/status-vote/current/consensus-microdesc"
            || path.starts_with("/tor/status-vote/current/consensus-microdesc/")
        {
            return st.current_text.as_ref().map(|t| t.as_str().to_string());
        }
        if path == "/tor/status-vote/next/authority" || path == "/tor/status-vote/current/authority"
        {
            return st.own_vote.clone();
        }
        if path == "/tor/keys/all" || path == "/tor/keys/authority" {
            let all: String = if path.ends_with("all") {
                st.certs.values().map(|c| c.0.clone()).collect()
            } else {
                st.certs.get(&self.v3ident).map(|c| c.0.clone())?
            };
            return Some(all);
        }
        if let Some(list) = path.strip_prefix("/tor/keys/fp/") {
            let out: String = list
                .split('+')
                .filter_map(hex20)
                .filter_map(|id| st.certs.get(&id).map(|c| c.0.clone()))
                .collect();
            return (!out.is_empty()).then_some(out);
        }
        if let Some(list) = path.strip_prefix("/tor/keys/fp-sk/") {
            let out: String = list
                .split('+')
                .filter_map(|pair| {
                    let (id, sk) = pair.split_once('-')?;
                    let (id, sk) = (hex20(id)?, hex20(sk)?);
                    let c = st.certs.get(&id)?;
                    (c.1.signing_key_fingerprint() == sk).then(|| c.0.clone())
                })
                .collect();
            return (!out.is_empty()).then_some(out);
        }
        if let Some(list) = path.strip_prefix("/tor/micro/d/") {
            let out: String = list
                .split('-')
                .take(1024)
                .filter_map(|d| {
                    let v = base64::Engine::decode(
                        &base64::engine::general_purpose::STANDARD_NO_PAD,
                        d.trim_end_matches('='),
                    )
                    .ok()?;
                    let d: [u8; 32] = v.try_into().ok()?;
                    st.mds.get(&d).cloned()
                })
                .collect();
            return (!out.is_empty()).then_some(out);
        }
        if path == "/tor/server/all" {
            return Some(st.descs.values().map(|s| s.desc.text.clone()).collect());
        }
        if path == "/tor/server/authority" {
            let ctx = self.relay.get()?;
            return st.descs.get(&ctx.rsa_id).map(|s| s.desc.text.clone());
        }
        if let Some(list) = path.strip_prefix("/tor/server/fp/") {
            let out: String = list
                .split('+')
                .filter_map(hex20)
                .filter_map(|id| st.descs.get(&id).map(|s| s.desc.text.clone()))
                .collect();
            return (!out.is_empty()).then_some(out);
        }
        if let Some(list) = path.strip_prefix("/tor/server/d/") {
            let want: Vec<[u8; 20]> = list.split('+').filter_map(hex20).collect();
            let out: String = st
                .descs
                .values()
                .filter(|s| want.contains(&s.desc.digest))
                .map(|s| s.desc.text.clone())
                .collect();
            return (!out.is_empty()).then_some(out);
        }
        None
    }

    /// Answer one raw HTTP request (DirPort or BEGIN_DIR).
    pub fn answer(self: &Arc<Self>, req: &http::Request) -> Vec<u8> {
        match req.method() {
            "GET" => {
                let (path, z) = match req.path().strip_suffix(".z") {
                    Some(p) => (p, true),
                    None => (req.path(), false),
                };
                let deflate = z
                    || req
                        .header("accept-encoding")
                        .is_some_and(|v| v.split(',').any(|e| e.trim() == "deflate"));
                match self.get(path) {
                    Some(body) => http::response(200, "OK", body.as_bytes(), deflate),
                    None => http::response(404, "Not found", b"", false),
                }
            }
            "POST" => {
                let body = String::from_utf8_lossy(&req.body);
                let r = match req.path() {
                    "/tor/" => self.accept_upload(&body),
                    "/tor/post/vote" => self.accept_vote(&body),
                    "/tor/post/consensus-signature" => self.accept_signature(&body),
                    _ => Err("unknown POST target".into()),
                };
                match r {
                    Ok(msg) => http::response(200, msg, b"", false),
                    Err(e) => {
                        info!("{} refused: {e}", req.path());
                        http::response(400, &e, b"", false)
                    }
                }
            }
            _ => http::response(405, "Method not allowed", b"", false),
        }
    }
}

pub(super) struct AuthDir(pub(super) Arc<Authority>);

impl DirServer for AuthDir {
    fn handle_request<'a>(
        &'a self,
        req: &'a [u8],
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Vec<u8>> + Send + 'a>> {
        Box::pin(async move {
            match http::parse_request(req) {
                // GETs and descriptor uploads (tor relays upload over
                // BEGIN_DIR); votes and signatures come to the DirPort.
                Ok(Some(r)) if r.method() == "GET" || r.path() == "/tor/" => self.0.answer(&r),
                Ok(Some(_)) => http::response(400, "POST it to the DirPort", b"", false),
                Ok(None) => http::response(400, "incomplete request", b"", false),
                Err(e) => http::response(400, &e.to_string(), b"", false),
            }
        })
    }
}

pub(super) async fn serve_dirport(auth: Arc<Authority>, listener: TcpListener) {
    loop {
        let (sock, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                warn!("DirPort accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let known = auth.dir_known.contains(peer.ip());
        let permit = match auth.dir_admission.admit(peer.ip(), known, Instant::now()) {
            Ok(p) => p,
            Err(why) => {
                debug!("refused a DirPort connection: {why}");
                continue;
            }
        };
        let auth = auth.clone();
        tokio::spawn(async move {
            let _permit = permit;
            http::serve_one(sock, |req| auth.answer(&req)).await;
        });
    }
}
