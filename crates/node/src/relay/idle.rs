//! When a relay channel without circuits is closed (tor closes idle client
//! channels after 3-4.5 minutes and relay-to-relay channels after about an
//! hour), so completed handshakes cannot hold slots and memory forever.

use rand::Rng;

/// Longest idle timeout (larger settings are cut to this, so deadline
/// arithmetic cannot overflow).
pub const MAX_IDLE: std::time::Duration = std::time::Duration::from_secs(365 * 86400);

/// The idle timeout of a new channel: relay channels (authenticated peer or
/// opened by us) get `idle_relay_channel_secs`, client channels
/// `idle_client_channel_secs`, each stretched by a random 0-50% so channels
/// opened together do not all close together.
pub fn idle_timeout_for(
    cfg: &super::config::RelayConfig,
    relay_peer: bool,
    rng: &mut impl Rng,
) -> std::time::Duration {
    let base = if relay_peer {
        cfg.idle_relay_channel_secs
    } else {
        cfg.idle_client_channel_secs
    };
    let ms = base.saturating_mul(1000);
    let extra = rng.gen_range(0..=ms / 2);
    std::time::Duration::from_millis(ms.saturating_add(extra)).min(MAX_IDLE)
}

/// Sleep until `t`, or forever if there is no deadline.
pub async fn sleep_until_opt(t: Option<tokio::time::Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use rand::SeedableRng;

    fn cfg() -> super::super::config::RelayConfig {
        super::super::config::RelayConfig::parse(
            "data_dir = \"/tmp/x\"\nnickname = \"x\"\nor_listen = \"127.0.0.1:1\"\n",
        )
        .unwrap()
    }

    #[test]
    fn client_and_relay_channels_get_their_own_randomized_timeouts() {
        let c = cfg();
        assert_eq!(c.idle_client_channel_secs, 180);
        assert_eq!(c.idle_relay_channel_secs, 3600);
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..200 {
            let t = idle_timeout_for(&c, false, &mut rng).as_secs_f64();
            assert!((180.0..=270.0).contains(&t), "{t}");
            seen.insert(t as u64);
            let r = idle_timeout_for(&c, true, &mut rng).as_secs_f64();
            assert!((3600.0..=5400.0).contains(&r), "{r}");
        }
        // Spread, not one value.
        assert!(seen.len() > 20);
    }

    #[test]
    fn zero_means_at_once_and_huge_values_saturate() {
        let mut c = cfg();
        c.idle_client_channel_secs = 0;
        c.idle_relay_channel_secs = u64::MAX;
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        assert_eq!(idle_timeout_for(&c, false, &mut rng).as_millis(), 0);
        assert_eq!(idle_timeout_for(&c, true, &mut rng), MAX_IDLE);
    }

    #[tokio::test]
    async fn no_deadline_never_fires() {
        let ms = std::time::Duration::from_millis;
        let r = tokio::time::timeout(ms(50), sleep_until_opt(None)).await;
        assert!(r.is_err());
        let t = tokio::time::Instant::now() + ms(10);
        tokio::time::timeout(ms(30_000), sleep_until_opt(Some(t)))
            .await
            .unwrap();
    }
}
