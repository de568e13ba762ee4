//! Consensus parameters for congestion control (proposal 324 §6.5),
//! stream flow control (XON/XOFF) and SENDME versions, with the defaults
//! and bounds tor 0.4.9 applies when a parameter is absent or out of range.
//!
//! The defaults are those of tor's `congestion_control_common.c`,
//! `congestion_control_vegas.c` and `congestion_control_flow.c` in the
//! releases after 0.4.8 (Vegas on by default, `cc_cwnd_inc` 1 applied about
//! once per SENDME through `cc_cwnd_inc_rate` 31, `cc_cwnd_min` 124). They
//! differ from proposal 324's tables, which predate the tuning; a stock
//! tor 0.4.9.11 client in a network whose consensus has no `params` line
//! behaves as these say (slow start grows its window by 31 cells per SENDME
//! from 124; steady state moves it by one cell at a time).

use std::collections::BTreeMap;

/// `OUTBUF_CELLS` in tor: two TLS records of cells (2 * 31).
pub const OUTBUF_CELLS: u32 = 62;
/// Cells in one TLS record (`TLS_RECORD_MAX_CELLS`), the default SENDME
/// increment.
pub const TLS_RECORD_MAX_CELLS: u32 = 31;
/// Bytes of stream data in one relay cell (`RELAY_PAYLOAD_SIZE`).
pub const RELAY_PAYLOAD_SIZE: u32 = 498;

/// `cc_alg` value for the fixed SENDME windows.
pub const CC_ALG_SENDME: u32 = 0;
/// `cc_alg` value for Tor-Vegas.
pub const CC_ALG_VEGAS: u32 = 2;

/// Which kind of circuit a Vegas instance runs on (its queue thresholds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CcPath {
    /// Three-hop exit circuits (clients and exits).
    Exit,
    /// Onion-service circuits.
    Onion,
    /// Two-hop bandwidth-scanner circuits.
    Sbws,
}

/// Vegas queue thresholds for one path type, in cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VegasQueue {
    /// Below this queue use (and with a full window) the window grows.
    pub alpha: u32,
    /// Above this it shrinks by `cc_cwnd_inc`.
    pub beta: u32,
    /// In slow start, above this slow start ends.
    pub gamma: u32,
    /// Above this the window drops to BDP + delta.
    pub delta: u32,
    /// RFC 3742 cap: above this window slow start grows more slowly.
    pub ss_cwnd_cap: u32,
}

/// Everything a circuit's congestion and flow control reads from the
/// consensus. Build it with [`CcParams::from_consensus`]; `Default` is the
/// value for a consensus without any of these parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CcParams {
    /// `cc_alg`: 0 = fixed windows, 2 = Vegas (anything else: the default).
    pub cc_alg: u32,
    /// `cc_sendme_inc`: cells acknowledged by each SENDME.
    pub sendme_inc: u8,
    /// `cc_cwnd_init`.
    pub cwnd_init: u32,
    /// `cc_cwnd_inc_pct_ss`: slow-start increment, percent of `sendme_inc`.
    pub cwnd_inc_pct_ss: u32,
    /// `cc_cwnd_inc`: steady-state step.
    pub cwnd_inc: u32,
    /// `cc_cwnd_inc_rate`: steady-state updates per window, as a divisor.
    pub cwnd_inc_rate: u32,
    /// `cc_cwnd_min`.
    pub cwnd_min: u32,
    /// `cc_cwnd_max`.
    pub cwnd_max: u32,
    /// `cc_ewma_cwnd_pct`.
    pub ewma_cwnd_pct: u32,
    /// `cc_ewma_max` (tor keeps it in 8 bits; values above 255 are 255).
    pub ewma_max: u32,
    /// `cc_ewma_ss` (8 bits in tor, as above).
    pub ewma_ss: u32,
    /// `cc_rtt_reset_pct`.
    pub rtt_reset_pct: u32,
    /// `cc_vegas_*_exit`, `cc_sscap_exit`.
    pub vegas_exit: VegasQueue,
    /// `cc_vegas_*_onion`, `cc_sscap_onion`.
    pub vegas_onion: VegasQueue,
    /// `cc_vegas_*_sbws`, `cc_sscap_sbws`.
    pub vegas_sbws: VegasQueue,
    /// `cc_ss_max`: hard cap on the window in slow start.
    pub ss_max: u32,
    /// `cc_cwnd_full_gap`, in SENDME increments.
    pub cwnd_full_gap: u32,
    /// `cc_cwnd_full_minpct`.
    pub cwnd_full_minpct: u32,
    /// `cc_cwnd_full_per_cwnd`.
    pub cwnd_full_per_cwnd: bool,
    /// `orconn_high` (bytes): with `cellq_high`, when a channel counts as
    /// blocked (a congestion signal).
    pub orconn_high: u32,
    /// `cellq_high` (cells).
    pub cellq_high: u32,
    /// `cc_xoff_client` (cells): a client's stream buffer above this sends XOFF.
    pub xoff_client: u32,
    /// `cc_xoff_exit` (cells): an exit's stream buffer above this sends XOFF.
    pub xoff_exit: u32,
    /// `cc_xon_rate` (cells): how much must drain before a rate is known,
    /// and at most how often advisory XONs go out.
    pub xon_rate: u32,
    /// `cc_xon_change_pct`: drain-rate change that earns an advisory XON.
    pub xon_change_pct: u32,
    /// `cc_xon_ewma_cnt`: N of the drain-rate N-EWMA.
    pub xon_ewma_cnt: u32,
    /// `sendme_accept_min_version`: SENDMEs older than this are refused.
    pub sendme_accept_min_version: u8,
    /// `sendme_emit_min_version`: the version we send (we only emit 1).
    pub sendme_emit_min_version: u8,
}

impl Default for CcParams {
    fn default() -> Self {
        Self::from_consensus(&BTreeMap::new())
    }
}

/// tor's `networkstatus_get_param`: the value if present, clamped to
/// `[min, max]`; the default otherwise.
pub(crate) fn get(p: &BTreeMap<String, i32>, name: &str, dflt: i64, min: i64, max: i64) -> i64 {
    match p.get(name) {
        Some(&v) => i64::from(v).clamp(min, max),
        None => dflt,
    }
}

pub(crate) fn get_u32(p: &BTreeMap<String, i32>, name: &str, dflt: u32, min: u32, max: u32) -> u32 {
    let v = get(p, name, i64::from(dflt), i64::from(min), i64::from(max));
    u32::try_from(v).unwrap_or(dflt)
}

const I32_MAX: u32 = i32::MAX as u32;

fn queue(p: &BTreeMap<String, i32>, suffix: &str, dflt: (u32, u32, u32, u32, u32)) -> VegasQueue {
    let g = |k: &str, d: u32, max: u32| get_u32(p, &format!("cc_vegas_{k}_{suffix}"), d, 0, max);
    VegasQueue {
        alpha: g("alpha", dflt.0, 1000),
        beta: g("beta", dflt.1, 1000),
        gamma: g("gamma", dflt.2, 1000),
        delta: g("delta", dflt.3, I32_MAX),
        ss_cwnd_cap: get_u32(p, &format!("cc_sscap_{suffix}"), dflt.4, 100, I32_MAX),
    }
}

impl CcParams {
    /// Read the parameters from a consensus `params` line.
    pub fn from_consensus(p: &BTreeMap<String, i32>) -> Self {
        const OC: u32 = OUTBUF_CELLS;
        const TC: u32 = TLS_RECORD_MAX_CELLS;
        let cc_alg = match get_u32(p, "cc_alg", CC_ALG_VEGAS, 0, 3) {
            CC_ALG_SENDME => CC_ALG_SENDME,
            // Westwood and NOLA are gone from tor; it falls back to the
            // default (Vegas) for them.
            _ => CC_ALG_VEGAS,
        };
        let sendme_inc = get_u32(p, "cc_sendme_inc", TC, 1, 254);
        CcParams {
            cc_alg,
            sendme_inc: u8::try_from(sendme_inc).unwrap_or(31),
            cwnd_init: get_u32(p, "cc_cwnd_init", 4 * TC, TC, 10_000),
            cwnd_inc_pct_ss: get_u32(p, "cc_cwnd_inc_pct_ss", 100, 1, 500),
            cwnd_inc: get_u32(p, "cc_cwnd_inc", 1, 1, 1000),
            cwnd_inc_rate: get_u32(p, "cc_cwnd_inc_rate", TC, 1, 250),
            cwnd_min: get_u32(p, "cc_cwnd_min", 4 * TC, TC, 1000),
            cwnd_max: get_u32(p, "cc_cwnd_max", I32_MAX, 500, I32_MAX),
            ewma_cwnd_pct: get_u32(p, "cc_ewma_cwnd_pct", 50, 1, 255),
            ewma_max: get_u32(p, "cc_ewma_max", 10, 2, I32_MAX).min(255),
            ewma_ss: get_u32(p, "cc_ewma_ss", 2, 2, I32_MAX).min(255),
            rtt_reset_pct: get_u32(p, "cc_rtt_reset_pct", 100, 0, 100),
            vegas_exit: queue(p, "exit", (2 * OC, 4 * OC, 3 * OC, 6 * OC, 500)),
            vegas_onion: queue(p, "onion", (3 * OC, 7 * OC, 5 * OC, 9 * OC, 600)),
            vegas_sbws: queue(p, "sbws", (2 * OC - TC, 2 * OC + TC, 2 * OC, 4 * OC, 400)),
            ss_max: get_u32(p, "cc_ss_max", 5000, 500, I32_MAX),
            cwnd_full_gap: get_u32(p, "cc_cwnd_full_gap", 1, 0, i16::MAX as u32),
            cwnd_full_minpct: get_u32(p, "cc_cwnd_full_minpct", 75, 0, 100),
            cwnd_full_per_cwnd: get_u32(p, "cc_cwnd_full_per_cwnd", 1, 0, 1) == 1,
            orconn_high: get_u32(p, "orconn_high", 32 * 1024, 509, I32_MAX),
            cellq_high: get_u32(p, "cellq_high", 256, 1, 1000),
            xoff_client: get_u32(p, "cc_xoff_client", 500, 1, 10_000),
            xoff_exit: get_u32(p, "cc_xoff_exit", 500, 1, 10_000),
            xon_rate: get_u32(p, "cc_xon_rate", 500, 1, 5000),
            xon_change_pct: get_u32(p, "cc_xon_change_pct", 25, 1, 99),
            xon_ewma_cnt: get_u32(p, "cc_xon_ewma_cnt", 2, 2, 100),
            sendme_accept_min_version: u8::try_from(get_u32(
                p,
                "sendme_accept_min_version",
                0,
                0,
                255,
            ))
            .unwrap_or(0),
            sendme_emit_min_version: u8::try_from(get_u32(p, "sendme_emit_min_version", 1, 0, 255))
                .unwrap_or(1),
        }
    }

    /// Whether congestion control is to be negotiated (`cc_alg` not 0).
    pub fn enabled(&self) -> bool {
        self.cc_alg != CC_ALG_SENDME
    }

    /// The Vegas thresholds for a path type.
    pub fn vegas_queue(&self, path: CcPath) -> VegasQueue {
        match path {
            CcPath::Exit => self.vegas_exit,
            CcPath::Onion => self.vegas_onion,
            CcPath::Sbws => self.vegas_sbws,
        }
    }

    /// Whether a `sendme_inc` offered by an exit is acceptable: not 0 and
    /// within a factor of two of ours (proposal 324 §10.5, as tor checks).
    pub fn sendme_inc_acceptable(&self, inc: u8) -> bool {
        let ours = u32::from(self.sendme_inc);
        let inc = u32::from(inc);
        inc != 0 && inc <= 2 * ours && inc >= ours / 2
    }

    /// Onion services (proposal 324 §9.1): the `sendme_inc` a service's
    /// descriptor advertises in its `flow-control` line, `None` (no line)
    /// while congestion control is disabled.
    pub fn onion_descriptor_sendme_inc(&self) -> Option<u8> {
        self.enabled().then_some(self.sendme_inc)
    }

    /// Onion-service client (proposal 324 §9.1-9.2): whether to request
    /// congestion control in INTRODUCE1 and with which SENDME increment,
    /// given the descriptor's `flow-control` increment: only when our
    /// consensus enables it and the advertised value is acceptable; the
    /// descriptor's value is the one both ends use.
    pub fn onion_client_sendme_inc(&self, advertised: Option<u8>) -> Option<u8> {
        advertised.filter(|inc| self.enabled() && self.sendme_inc_acceptable(*inc))
    }

    /// Onion service (proposal 324 §9.4): congestion control on a
    /// rendezvous circuit only when the client requested it and ours is
    /// enabled (the case in which our descriptor offered it), with our
    /// `sendme_inc`.
    pub fn onion_service_sendme_inc(&self, requested: bool) -> Option<u8> {
        if requested {
            self.onion_descriptor_sendme_inc()
        } else {
            None
        }
    }

    /// Bytes queued towards a channel above which a circuit counts as
    /// blocked on it: tor's `orconn_high` outbuf plus `cellq_high` cells of
    /// circuit queue (tor blocks a circuit's streams when both fill).
    pub fn chan_blocked_bytes(&self) -> usize {
        let cells = usize::try_from(self.cellq_high).unwrap_or(256);
        usize::try_from(self.orconn_high)
            .unwrap_or(32 * 1024)
            .saturating_add(cells.saturating_mul(514))
    }

    /// XOFF threshold in bytes for a client (or onion service) stream.
    pub fn xoff_client_bytes(&self) -> usize {
        cells_to_bytes(self.xoff_client)
    }
    /// XOFF threshold in bytes for an exit stream.
    pub fn xoff_exit_bytes(&self) -> usize {
        cells_to_bytes(self.xoff_exit)
    }
    /// `cc_xon_rate` in bytes.
    pub fn xon_rate_bytes(&self) -> usize {
        cells_to_bytes(self.xon_rate)
    }
}

fn cells_to_bytes(cells: u32) -> usize {
    usize::try_from(cells)
        .unwrap_or(usize::MAX)
        .saturating_mul(RELAY_PAYLOAD_SIZE as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn onion_service_negotiation() {
        let on = CcParams::default();
        let mut map = BTreeMap::new();
        map.insert("cc_alg".to_string(), 0);
        let off = CcParams::from_consensus(&map);
        assert!(!off.enabled());
        // The descriptor line only while enabled.
        assert_eq!(on.onion_descriptor_sendme_inc(), Some(31));
        assert_eq!(off.onion_descriptor_sendme_inc(), None);
        // Client: the descriptor's value when acceptable and enabled.
        assert_eq!(on.onion_client_sendme_inc(Some(31)), Some(31));
        assert_eq!(on.onion_client_sendme_inc(Some(20)), Some(20));
        assert_eq!(on.onion_client_sendme_inc(None), None);
        assert_eq!(on.onion_client_sendme_inc(Some(0)), None);
        assert_eq!(on.onion_client_sendme_inc(Some(200)), None);
        assert_eq!(off.onion_client_sendme_inc(Some(31)), None);
        // Service: only on request, only while enabled.
        assert_eq!(on.onion_service_sendme_inc(true), Some(31));
        assert_eq!(on.onion_service_sendme_inc(false), None);
        assert_eq!(off.onion_service_sendme_inc(true), None);
    }

    #[test]
    fn defaults_when_absent_are_tor_0_4_9s() {
        let p = CcParams::default();
        assert_eq!(p.cc_alg, CC_ALG_VEGAS);
        assert!(p.enabled());
        assert_eq!(p.sendme_inc, 31);
        assert_eq!(p.cwnd_init, 124);
        assert_eq!(p.cwnd_inc_pct_ss, 100);
        assert_eq!(p.cwnd_inc, 1);
        assert_eq!(p.cwnd_inc_rate, 31);
        assert_eq!(p.cwnd_min, 124);
        assert_eq!(p.cwnd_max, i32::MAX as u32);
        assert_eq!((p.ewma_cwnd_pct, p.ewma_max, p.ewma_ss), (50, 10, 2));
        assert_eq!(p.rtt_reset_pct, 100);
        assert_eq!(
            p.vegas_exit,
            VegasQueue {
                alpha: 124,
                beta: 248,
                gamma: 186,
                delta: 372,
                ss_cwnd_cap: 500
            }
        );
        assert_eq!(
            (p.vegas_onion.alpha, p.vegas_onion.beta, p.vegas_onion.gamma),
            (186, 434, 310)
        );
        assert_eq!((p.vegas_onion.delta, p.vegas_onion.ss_cwnd_cap), (558, 600));
        assert_eq!(
            (p.vegas_sbws.alpha, p.vegas_sbws.beta, p.vegas_sbws.delta),
            (93, 155, 248)
        );
        assert_eq!(p.ss_max, 5000);
        assert_eq!((p.cwnd_full_gap, p.cwnd_full_minpct), (1, 75));
        assert!(p.cwnd_full_per_cwnd);
        assert_eq!((p.xoff_client, p.xoff_exit, p.xon_rate), (500, 500, 500));
        assert_eq!((p.xon_change_pct, p.xon_ewma_cnt), (25, 2));
        assert_eq!(p.xoff_exit_bytes(), 500 * 498);
        assert_eq!(
            (p.sendme_accept_min_version, p.sendme_emit_min_version),
            (0, 1)
        );
        assert_eq!(p.chan_blocked_bytes(), 32 * 1024 + 256 * 514);
    }

    #[test]
    fn consensus_values_are_read_and_clamped() {
        let mut m = BTreeMap::new();
        m.insert("cc_alg".to_string(), 0);
        m.insert("cc_sendme_inc".to_string(), 300);
        m.insert("cc_cwnd_min".to_string(), 5);
        m.insert("cc_vegas_alpha_exit".to_string(), 100);
        m.insert("cc_xoff_exit".to_string(), 250);
        m.insert("cc_ewma_max".to_string(), 100_000);
        m.insert("sendme_accept_min_version".to_string(), 1);
        let p = CcParams::from_consensus(&m);
        assert!(!p.enabled());
        assert_eq!(p.sendme_inc, 254);
        assert_eq!(p.cwnd_min, 31);
        assert_eq!(p.vegas_exit.alpha, 100);
        assert_eq!(p.vegas_exit.beta, 248);
        assert_eq!(p.xoff_exit, 250);
        assert_eq!(p.ewma_max, 255);
        assert_eq!(p.sendme_accept_min_version, 1);
        // Westwood (1) and NOLA (3) are no longer run: tor uses Vegas.
        for alg in [1, 3, 99] {
            m.insert("cc_alg".to_string(), alg);
            assert_eq!(CcParams::from_consensus(&m).cc_alg, CC_ALG_VEGAS);
        }
    }

    #[test]
    fn sendme_inc_within_a_factor_of_two() {
        let p = CcParams::default();
        assert!(p.sendme_inc_acceptable(31));
        assert!(p.sendme_inc_acceptable(15));
        assert!(p.sendme_inc_acceptable(62));
        assert!(!p.sendme_inc_acceptable(14));
        assert!(!p.sendme_inc_acceptable(63));
        assert!(!p.sendme_inc_acceptable(0));
    }
}
