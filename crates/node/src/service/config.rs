//! `[[onion_service]]` in the client configuration: one onion service
//! hosted by this process, like tor's `HiddenServiceDir` with its
//! `HiddenServicePort` lines.

use std::path::PathBuf;

use serde::Deserialize;

use onionmix_hs::service::PortMap;
use onionmix_hs::service::intro::MAX_INTRO_POINTS;

/// One onion service.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OnionServiceConfig {
    /// Key directory in tor's `HiddenServiceDir` layout
    /// (`hs_ed25519_secret_key`, `hs_ed25519_public_key`, `hostname`,
    /// `authorized_clients/`); created with mode 0700 if missing, and a
    /// new identity generated into it. A directory tor made works as is.
    pub dir: PathBuf,
    /// `"VIRTPORT [ADDR:]PORT"` entries, as tor's `HiddenServicePort`.
    pub ports: Vec<String>,
    /// Introduction points to keep (tor's
    /// `HiddenServiceNumIntroductionPoints`, 3; 1 to 10).
    #[serde(default = "default_intro_points")]
    pub num_intro_points: usize,
    /// Ask introduction points to rate-limit INTRODUCE2 (the DoS
    /// extension of ESTABLISH_INTRO, proposal 305; tor's
    /// `HiddenServiceEnableIntroDoSDefense` with
    /// `HiddenServiceEnableIntroDoSRatePerSec` / `...BurstPerSec`).
    /// Both or neither.
    #[serde(default)]
    pub intro_dos_rate_per_sec: Option<u32>,
    /// See `intro_dos_rate_per_sec`.
    #[serde(default)]
    pub intro_dos_burst_per_sec: Option<u32>,
    /// Offer and check proof of work (proposal 327; tor's
    /// `HiddenServicePoWDefensesEnabled`).
    #[serde(default)]
    pub pow_defenses: bool,
    /// The effort the descriptor suggests when PoW is on.
    #[serde(default)]
    pub pow_suggested_effort: u32,
    /// Streams one rendezvous circuit may carry at once (tor's
    /// `HiddenServiceMaxStreams`; 0: the circuit limit).
    #[serde(default)]
    pub max_streams: usize,
    /// Close the rendezvous circuit when a stream would exceed
    /// `max_streams`, instead of refusing the stream (tor's
    /// `HiddenServiceMaxStreamsCloseCircuit`).
    #[serde(default)]
    pub max_streams_close_circuit: bool,
    /// Keep the circuit open after a BEGIN to a port not in `ports`
    /// (tor's `HiddenServiceAllowUnknownPorts`; off: the circuit closes,
    /// which makes port scans cost a circuit each).
    #[serde(default)]
    pub allow_unknown_ports: bool,
}

fn default_intro_points() -> usize {
    3
}

impl OnionServiceConfig {
    /// The settings of a service with no key directory (ADD_ONION):
    /// `ports` as `VIRTPORT ADDR:PORT` entries, tor's defaults otherwise.
    pub fn ephemeral(ports: Vec<String>, max_streams: usize, close_circuit: bool) -> Self {
        OnionServiceConfig {
            dir: PathBuf::new(),
            ports,
            num_intro_points: default_intro_points(),
            intro_dos_rate_per_sec: None,
            intro_dos_burst_per_sec: None,
            pow_defenses: false,
            pow_suggested_effort: 0,
            max_streams,
            max_streams_close_circuit: close_circuit,
            allow_unknown_ports: false,
        }
    }
}

impl OnionServiceConfig {
    /// Check the entries.
    pub fn validate(&self) -> Result<(), String> {
        let ports = PortMap::parse(&self.ports).map_err(|e| e.to_string())?;
        if ports.is_empty() {
            return Err("no ports".into());
        }
        if !(1..=MAX_INTRO_POINTS).contains(&self.num_intro_points) {
            return Err(format!("num_intro_points must be 1 to {MAX_INTRO_POINTS}"));
        }
        match (self.intro_dos_rate_per_sec, self.intro_dos_burst_per_sec) {
            (None, None) => {}
            (Some(r), Some(b)) if b >= r => {}
            _ => {
                return Err(
                    "intro_dos_rate_per_sec and intro_dos_burst_per_sec go together, burst >= rate"
                        .into(),
                );
            }
        }
        #[cfg(not(feature = "pow"))]
        if self.pow_defenses {
            return Err("pow_defenses needs onionmix built with the `pow` feature".into());
        }
        Ok(())
    }

    /// The port map (valid after [`Self::validate`]).
    pub fn port_map(&self) -> PortMap {
        PortMap::parse(&self.ports).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> Result<OnionServiceConfig, String> {
        let text = format!("dir = \"/tmp/hs\"\nports = [\"80 127.0.0.1:8080\"]\n{extra}");
        let c: OnionServiceConfig = toml::from_str(&text).map_err(|e| e.to_string())?;
        c.validate().map(|_| c)
    }

    #[test]
    fn service_config() {
        let c = parse("").expect("minimal");
        assert_eq!(c.num_intro_points, 3);
        assert!(c.port_map().target(80).is_some());
        assert!(parse("num_intro_points = 0").is_err());
        assert!(parse("num_intro_points = 11").is_err());
        assert!(parse("intro_dos_rate_per_sec = 10").is_err());
        assert!(parse("intro_dos_rate_per_sec = 10\nintro_dos_burst_per_sec = 5").is_err());
        assert!(parse("intro_dos_rate_per_sec = 10\nintro_dos_burst_per_sec = 20").is_ok());
        assert!(parse("bogus = 1").is_err());
        let no_ports: Result<OnionServiceConfig, _> =
            toml::from_str("dir = \"/x\"\nports = []").map_err(|e: toml::de::Error| e.to_string());
        assert!(no_ports.expect("parses").validate().is_err());
    }
}
