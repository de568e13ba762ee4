//! Key rotation while the relay runs: onion keys (ntor and TAP) every
//! `onion_key_rotation_secs` with the previous ntor key still accepted for
//! `onion_key_grace_secs` (tor's onion-key-rotation-days and grace period),
//! and the Ed25519 signing key before its certificate expires. Each change
//! is saved (0600), installed for new handshakes and channels, and the
//! descriptor is republished at once.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use tracing::{info, warn};

use super::RelayCtx;

/// How often the schedule is checked.
pub const CHECK_EVERY: Duration = Duration::from_secs(60);

/// What a check did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Rotated {
    /// New onion keys.
    pub onion: bool,
    /// The previous ntor key was dropped (grace period over).
    pub dropped_previous: bool,
    /// New signing key.
    pub signing: bool,
}

impl Rotated {
    fn any(&self) -> bool {
        self.onion || self.dropped_previous || self.signing
    }
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
        k.rotate_signing_key(&mut rng, now_unix)
            .map_err(|e| e.to_string())?;
        out.signing = true;
    }
    if out.any() {
        k.save(&ctx.cfg.data_dir.join("keys"))
            .map_err(|e| e.to_string())?;
        ctx.replace_keys(k)?;
    }
    Ok(out)
}

/// Check the schedule every minute; republish after a change.
pub async fn rotation_loop(ctx: Arc<RelayCtx>) {
    loop {
        tokio::time::sleep(CHECK_EVERY).await;
        let dir = ctx.cfg.data_dir.join("keys");
        match rotate_if_due(&ctx, onion_key_time(&dir), now_unix()) {
            Ok(r) if r.any() => {
                info!(
                    "rotated keys (onion: {}, previous ntor dropped: {}, signing: {})",
                    r.onion, r.dropped_previous, r.signing
                );
                super::publish::publish_once(&ctx).await;
            }
            Ok(_) => {}
            Err(e) => warn!("key rotation failed: {e}"),
        }
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
}
