//! The HSDir role over `BEGIN_DIR` (rend-spec-v3 §2.2.6, tor's
//! `dircache.c`): `POST /tor/hs/3/publish` stores a descriptor after the
//! checks of `onionmix_hs::desc::hsdir` (certificate chain, signature,
//! lifetime, size, revision counter: only a higher one replaces),
//! `GET /tor/hs/3/<blinded key in base64>` answers 200 with it or 404.
//!
//! As stock tor, both are refused (503) on a circuit whose previous hop is
//! a client (a one-hop "anonymous" request is not anonymous), unless the
//! relay allows single-hop streams (a benchmark knob).

use std::sync::atomic::Ordering;

use onionmix_hs::desc::DescError;
use onionmix_hs::desc::cache::{FETCH_PREFIX, PUBLISH_PATH, StoreError, parse_fetch_path};
use onionmix_http::Limits;
use tracing::debug;

use super::HsRelay;
use crate::authority::http::response;

/// Everything under this path belongs to the onion-service directory.
pub const HS_PREFIX: &str = "/tor/hs/";

/// Answer `req` if it is an onion-service directory request; `None` for
/// anything else (the directory cache answers those). `anonymous`: the
/// circuit's previous hop is a relay. `now` is Unix time.
pub fn answer(hs: &HsRelay, req: &[u8], anonymous: bool, now: u64) -> Option<Vec<u8>> {
    let r =
        onionmix_http::parse_request(req, &Limits::DEFAULT, super::super::exit::MAX_DIR_REQUEST)
            .ok()
            .flatten()?;
    if !r.path().starts_with(HS_PREFIX) {
        return None;
    }
    let st = &hs.stats;
    match r.method() {
        "GET" => {
            if !anonymous {
                st.hsdir_single_hop_refused.fetch_add(1, Ordering::Relaxed);
                return Some(response(
                    503,
                    "Rejecting single hop HS v3 descriptor request",
                    b"",
                    false,
                ));
            }
            let found = r
                .path()
                .strip_prefix(FETCH_PREFIX)
                .and_then(|_| parse_fetch_path(r.path()))
                .and_then(|key| hs.hsdir_get(&key, now));
            Some(match found {
                Some(text) => {
                    st.hsdir_fetch_served.fetch_add(1, Ordering::Relaxed);
                    response(200, "OK", text.as_bytes(), false)
                }
                None => {
                    st.hsdir_fetch_not_found.fetch_add(1, Ordering::Relaxed);
                    response(404, "Not found", b"", false)
                }
            })
        }
        "POST" => {
            if !anonymous {
                st.hsdir_single_hop_refused.fetch_add(1, Ordering::Relaxed);
                return Some(response(
                    503,
                    "Rejecting single hop HS descriptor post",
                    b"",
                    false,
                ));
            }
            let result = if r.path() != PUBLISH_PATH {
                Err("not a v3 publish path".to_string())
            } else {
                match std::str::from_utf8(&r.body) {
                    Err(_) => Err("descriptor is not UTF-8".to_string()),
                    Ok(text) => match hs.hsdir_store(text, now) {
                        Ok(()) => Ok(()),
                        Err(e) => {
                            match &e {
                                StoreError::NotNewer { .. } => &st.hsdir_not_newer,
                                StoreError::Invalid(DescError::TooLarge(_)) => &st.hsdir_too_large,
                                StoreError::Invalid(_) => &st.hsdir_invalid,
                            }
                            .fetch_add(1, Ordering::Relaxed);
                            Err(e.to_string())
                        }
                    },
                }
            };
            Some(match result {
                Ok(()) => {
                    st.hsdir_stored.fetch_add(1, Ordering::Relaxed);
                    response(200, "HS descriptor stored successfully.", b"", false)
                }
                Err(why) => {
                    debug!("HS descriptor upload refused: {why}");
                    st.hsdir_rejected.fetch_add(1, Ordering::Relaxed);
                    response(400, "Invalid HS descriptor. Rejected.", b"", false)
                }
            })
        }
        _ => None,
    }
}
