//! Key and certificate renewal while the relay runs, all driven by the
//! node's one wall clock ([`crate::clock`]):
//! - onion keys (ntor and TAP) every `onion_key_rotation_secs`, the previous
//!   ntor key still accepted for `onion_key_grace_secs` (tor's
//!   onion-key-rotation-days and grace period);
//! - the Ed25519 signing key a day before its certificate expires;
//! - the link-authentication key (CERTS type 6) three hours before its
//!   certificate expires;
//! - the TLS key and certificate with the type 5 link certificate every
//!   [`LINK_IDENTITY_MAX_AGE_SECS`] and whenever one of the certificates it
//!   presents comes within three hours of expiry (tor's link-key slop).
//!
//! The loop checks every [`CHECK_EVERY`]; a handshake that finds the link
//! identity expired (after the wall clock jumped, say) renews it first
//! ([`ensure_link_fresh`]). Key changes are saved (0600), installed for new
//! handshakes and channels, and the descriptor is republished at once.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use tracing::{info, warn};

use super::RelayCtx;

/// How often the schedule is checked.
pub const CHECK_EVERY: Duration = Duration::from_secs(30);
/// A TLS identity (key, certificate, link certificates) is replaced after
/// this long even when nothing expires (tor rotates its TLS context every
/// two hours).
pub const LINK_IDENTITY_MAX_AGE_SECS: u64 = 2 * 3600;

/// What a check did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Rotated {
    /// New onion keys.
    pub onion: bool,
    /// The previous ntor key was dropped (grace period over).
    pub dropped_previous: bool,
    /// New signing key.
    pub signing: bool,
    /// New link-authentication key (CERTS type 6).
    pub link_auth: bool,
    /// New TLS identity and link certificates (without other key changes).
    pub link: bool,
}

impl Rotated {
    fn keys_changed(&self) -> bool {
        self.onion || self.dropped_previous || self.signing || self.link_auth
    }
    fn any(&self) -> bool {
        self.keys_changed() || self.link
    }
    /// Whether the descriptor changes (it carries the onion keys and the
    /// signing key's certificate).
    pub fn needs_publish(&self) -> bool {
        self.onion || self.dropped_previous || self.signing
    }
}

/// Whether the TLS identity in use must be replaced at `now_unix`.
pub fn link_due(link: &crate::glue::RelayLinkIdentity, now_unix: u64) -> bool {
    use onionmix_crypto::keys::LINK_CERT_SLOP_SECS;
    link.expires_unix() <= now_unix.saturating_add(LINK_CERT_SLOP_SECS)
        || now_unix >= link.built_unix().saturating_add(LINK_IDENTITY_MAX_AGE_SECS)
        // The clock went back: certificates dated in the future.
        || link.built_unix() > now_unix.saturating_add(LINK_CERT_SLOP_SECS)
}

use crate::clock::now_unix;

/// When the current ntor key was made: the key file's modification time.
pub fn onion_key_time(keys_dir: &Path) -> u64 {
    std::fs::metadata(keys_dir.join("secret_onion_key_ntor"))
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map(|d| d.as_secs())
        .unwrap_or_else(now_unix)
}

/// Rotate what is due at `now_unix`, given when the onion keys were made.
pub fn rotate_if_due(ctx: &RelayCtx, onion_made: u64, now_unix: u64) -> Result<Rotated, String> {
    let mut out = Rotated::default();
    let mut k = ctx.keys();
    let mut rng = rand::rngs::OsRng;
    let age = now_unix.saturating_sub(onion_made);
    if age >= ctx.cfg.onion_key_rotation_secs {
        k.rotate_ntor_key(&mut rng);
        k.rotate_rsa_onion_key(&mut rng)
            .map_err(|e| e.to_string())?;
        out.onion = true;
    } else if age >= ctx.cfg.onion_key_grace_secs && k.ntor_previous.is_some() {
        k.drop_previous_ntor_key();
        out.dropped_previous = true;
    }
    if k.signing_key_needs_rotation(now_unix)
        .map_err(|e| e.to_string())?
    {
        // Also re-certifies the link-authentication key.
        k.rotate_signing_key(&mut rng, now_unix)
            .map_err(|e| e.to_string())?;
        out.signing = true;
    } else if k
        .link_auth_needs_rotation(now_unix)
        .map_err(|e| e.to_string())?
    {
        k.rotate_link_auth_key(&mut rng, now_unix);
        out.link_auth = true;
    }
    if out.keys_changed() {
        k.save(&ctx.cfg.data_dir.join("keys"))
            .map_err(|e| e.to_string())?;
        ctx.replace_keys(k, now_unix)?;
    } else if link_due(&ctx.link().id, now_unix) {
        ctx.renew_link(now_unix)?;
        out.link = true;
    }
    Ok(out)
}

/// Before a handshake: if what we would present has expired (or is about
/// to within a minute: the clock jumped, or the loop has not run yet),
/// renew it now. Cheap when nothing is due.
pub fn ensure_link_fresh(ctx: &Arc<RelayCtx>) {
    let now = now_unix();
    if ctx.link().id.expires_unix() > now.saturating_add(60) {
        return;
    }
    check_now(ctx, now);
}

/// One check under the rotation lock; republishes in the background when
/// the descriptor changed.
fn check_now(ctx: &Arc<RelayCtx>, now: u64) {
    let r = {
        let _g = ctx.rotation.lock().unwrap_or_else(|e| e.into_inner());
        let dir = ctx.cfg.data_dir.join("keys");
        rotate_if_due(ctx, onion_key_time(&dir), now)
    };
    match r {
        Ok(r) if r.any() => {
            info!(
                "renewed keys (onion: {}, previous ntor dropped: {}, signing: {}, link auth: {}, TLS identity: {})",
                r.onion,
                r.dropped_previous,
                r.signing,
                r.link_auth,
                r.link || r.keys_changed()
            );
            if r.needs_publish() {
                let ctx = ctx.clone();
                tokio::spawn(async move {
                    super::publish::publish_once(&ctx).await;
                });
            }
        }
        Ok(_) => {}
        Err(e) => warn!("key renewal failed: {e}"),
    }
}

/// Check the schedule every [`CHECK_EVERY`]; republish after a change.
pub async fn rotation_loop(ctx: Arc<RelayCtx>) {
    loop {
        tokio::time::sleep(CHECK_EVERY).await;
        check_now(&ctx, now_unix());
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn onion_keys_rotate_then_the_old_one_is_dropped() {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = super::super::config::RelayConfig::parse(&format!(
            "data_dir = {:?}\nnickname = \"r\"\nor_listen = \"127.0.0.1:0\"\n\
             onion_key_rotation_secs = 100\nonion_key_grace_secs = 30\n",
            tmp.path().display().to_string()
        ))
        .unwrap();
        let keys = super::super::load_or_generate_keys(tmp.path()).unwrap();
        let ctx = super::super::make_ctx(cfg, keys, None).unwrap();
        let t0 = now_unix();
        let first = ctx.ntor_keys();
        assert_eq!(first.len(), 1);
        // Not due.
        assert_eq!(
            rotate_if_due(&ctx, t0, t0 + 10).unwrap(),
            Rotated::default()
        );
        // Due: a new current key, the old one kept; saved and republishable.
        let r = rotate_if_due(&ctx, t0, t0 + 100).unwrap();
        assert!(r.onion && !r.signing);
        let after = ctx.ntor_keys();
        assert_eq!(after.len(), 2);
        assert_eq!(after[1].public(), first[0].public());
        assert_ne!(after[0].public(), first[0].public());
        let desc = super::super::publish::descriptor(&ctx).unwrap();
        let u = onionmix_netdoc::routerdesc::verify_upload(&desc, now_unix()).unwrap();
        assert_eq!(u.ntor_onion_key, after[0].public());
        let reloaded = super::super::load_or_generate_keys(tmp.path()).unwrap();
        assert_eq!(reloaded.ntor_keys().len(), 2);
        // After the grace period the previous key goes.
        let t1 = t0 + 100;
        let r = rotate_if_due(&ctx, t1, t1 + 30).unwrap();
        assert!(r.dropped_previous && !r.onion);
        assert_eq!(ctx.ntor_keys().len(), 1);
        // Bad schedules are refused.
        assert!(
            super::super::config::RelayConfig::parse(
                "data_dir = \"/x\"\nnickname = \"r\"\nor_listen = \"127.0.0.1:0\"\n\
                 onion_key_rotation_secs = 100\nonion_key_grace_secs = 100\n"
            )
            .is_err()
        );
    }

    /// The wall clock jumps 3, 10 and 40 days: every certificate the relay
    /// presents is renewed and valid at the new time.
    #[test]
    fn certificates_are_renewed_across_clock_jumps() {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = super::super::config::RelayConfig::parse(&format!(
            "data_dir = {:?}\nnickname = \"r\"\nor_listen = \"127.0.0.1:0\"\n",
            tmp.path().display().to_string()
        ))
        .unwrap();
        let keys = super::super::load_or_generate_keys(tmp.path()).unwrap();
        let ctx = super::super::make_ctx(cfg, keys, None).unwrap();
        let t0 = now_unix();
        // Nothing is due at first.
        assert_eq!(
            rotate_if_due(&ctx, t0, t0 + 60).unwrap(),
            Rotated::default()
        );
        // Two hours on: a new TLS identity, nothing else.
        let before = ctx.link().id.built_unix();
        let r = rotate_if_due(&ctx, t0, t0 + LINK_IDENTITY_MAX_AGE_SECS).unwrap();
        assert!(r.link && !r.keys_changed(), "{r:?}");
        assert!(ctx.link().id.built_unix() > before);
        let mut onion_made = t0;
        for days in [3u64, 10, 40] {
            let now = t0 + days * 86_400;
            assert!(
                link_due(&ctx.link().id, now),
                "+{days}d: the old identity must be due"
            );
            let r = rotate_if_due(&ctx, onion_made, now).unwrap();
            if r.onion {
                onion_made = now;
            }
            let k = ctx.keys();
            let link = ctx.link().id;
            // The link identity's first expiry covers the link and
            // authentication certificates and the signing certificate.
            assert!(
                link.expires_unix() > now + 3600,
                "+{days}d: link identity expires {} <= now {now}",
                link.expires_unix()
            );
            assert!(!k.link_auth_needs_rotation(now).unwrap(), "+{days}d");
            assert!(!k.signing_key_needs_rotation(now).unwrap(), "+{days}d");
            assert!(!link_due(&link, now), "+{days}d");
            if days == 40 {
                assert!(r.signing && r.onion, "+40d: {r:?}");
            } else {
                assert!(r.link_auth && !r.signing, "+{days}d: {r:?}");
            }
            // What was renewed is on disk too.
            let reloaded = super::super::load_or_generate_keys(tmp.path()).unwrap();
            assert!(!reloaded.link_auth_needs_rotation(now).unwrap());
        }
    }
}
