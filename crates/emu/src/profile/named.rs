//! The built-in named link profiles (`lan`, `wifi`, `4g-down`, `transatlantic`, ...).

use super::{JitterDist, LinkProfile};

/// Built-in named profiles. Values and their sources are documented in
/// `docs/emulator.md` ("Named profiles"); one-way values per direction.
pub fn named_profile(name: &str) -> Option<LinkProfile> {
    let p = match name {
        // No impairment at all.
        "none" | "loopback" => LinkProfile::default(),
        // Switched gigabit Ethernet LAN.
        "lan" => LinkProfile {
            delay_ms: 0.25,
            rate_mbit: Some(1000.0),
            queue_bytes: Some(1_000_000),
            ..Default::default()
        },
        // Home Wi-Fi hop (client to access point), 802.11ac class.
        "wifi" => LinkProfile {
            delay_ms: 3.0,
            jitter_ms: 2.0,
            jitter_dist: JitterDist::Normal,
            loss: 0.001,
            rate_mbit: Some(100.0),
            queue_bytes: Some(250_000),
            ..Default::default()
        },
        // Busy Wi-Fi (many stations, contention), per Sui et al. 2016.
        "wifi-busy" => LinkProfile {
            delay_ms: 10.0,
            jitter_ms: 10.0,
            jitter_dist: JitterDist::Normal,
            loss: 0.01,
            rate_mbit: Some(20.0),
            queue_bytes: Some(250_000),
            ..Default::default()
        },
        // Home fixed broadband access (cable/fibre), asymmetric.
        "broadband-down" => LinkProfile {
            delay_ms: 7.5,
            jitter_ms: 1.0,
            loss: 0.001,
            rate_mbit: Some(100.0),
            queue_bytes: Some(500_000),
            ..Default::default()
        },
        "broadband-up" => LinkProfile {
            delay_ms: 7.5,
            jitter_ms: 1.0,
            loss: 0.001,
            rate_mbit: Some(20.0),
            queue_bytes: Some(250_000),
            ..Default::default()
        },
        // 4G/LTE mobile access, asymmetric.
        "4g-down" => LinkProfile {
            delay_ms: 25.0,
            jitter_ms: 8.0,
            jitter_dist: JitterDist::Normal,
            loss: 0.005,
            rate_mbit: Some(20.0),
            queue_bytes: Some(250_000),
            ..Default::default()
        },
        "4g-up" => LinkProfile {
            delay_ms: 25.0,
            jitter_ms: 8.0,
            jitter_dist: JitterDist::Normal,
            loss: 0.005,
            rate_mbit: Some(10.0),
            queue_bytes: Some(125_000),
            ..Default::default()
        },
        // Same continent, between data centres (e.g. Frankfurt-Amsterdam).
        "continental" => LinkProfile {
            delay_ms: 10.0,
            jitter_ms: 0.5,
            ..Default::default()
        },
        // Transatlantic (e.g. New York-London).
        "transatlantic" => LinkProfile {
            delay_ms: 37.5,
            jitter_ms: 1.0,
            ..Default::default()
        },
        // Intercontinental long haul (e.g. Europe-East Asia).
        "intercontinental" => LinkProfile {
            delay_ms: 100.0,
            jitter_ms: 2.0,
            loss: 0.001,
            ..Default::default()
        },
        _ => return None,
    };
    Some(p)
}

/// Names accepted by [`named_profile`].
pub const NAMED_PROFILES: &[&str] = &[
    "none",
    "loopback",
    "lan",
    "wifi",
    "wifi-busy",
    "broadband-down",
    "broadband-up",
    "4g-down",
    "4g-up",
    "continental",
    "transatlantic",
    "intercontinental",
];
