//! Event names and the status lines shared by events and GETINFO
//! (control-spec §4.1): `CIRC`, `STREAM`, `ORCONN`, `BW`, `CIRC_BW`, status
//! events. Formats follow stock tor 0.4.9 (`control_events.c`,
//! `control_fmt.c`), including its extra fields where we have them.

use super::syntax::quote;

/// Every event name tor 0.4.9 accepts in SETEVENTS, in its order (what
/// `GETINFO events/names` lists).
pub const EVENT_NAMES: &[&str] = &[
    "CIRC",
    "CIRC_MINOR",
    "STREAM",
    "ORCONN",
    "BW",
    "DEBUG",
    "INFO",
    "NOTICE",
    "WARN",
    "ERR",
    "NEWDESC",
    "ADDRMAP",
    "DESCCHANGED",
    "NS",
    "STATUS_GENERAL",
    "STATUS_CLIENT",
    "STATUS_SERVER",
    "GUARD",
    "STREAM_BW",
    "CLIENTS_SEEN",
    "NEWCONSENSUS",
    "BUILDTIMEOUT_SET",
    "SIGNAL",
    "CONF_CHANGED",
    "CONN_BW",
    "CELL_STATS",
    "CIRC_BW",
    "TRANSPORT_LAUNCHED",
    "HS_DESC",
    "HS_DESC_CONTENT",
    "NETWORK_LIVENESS",
];

/// A set of event names, as a bit mask over [`EVENT_NAMES`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventMask(pub u64);

impl EventMask {
    /// The bit of an event name (case-insensitive), if tor knows it.
    pub fn bit(name: &str) -> Option<u64> {
        EVENT_NAMES
            .iter()
            .position(|n| n.eq_ignore_ascii_case(name))
            .and_then(|i| 1u64.checked_shl(u32::try_from(i).ok()?))
    }
    /// Whether `name` is in the set.
    pub fn has(self, name: &str) -> bool {
        Self::bit(name).is_some_and(|b| self.0 & b != 0)
    }
    /// Add `name`; false if unknown.
    pub fn add(&mut self, name: &str) -> bool {
        match Self::bit(name) {
            Some(b) => {
                self.0 |= b;
                true
            }
            None => false,
        }
    }
}

/// A relay in a path: `$FINGERPRINT~nickname` (tor's LongName).
pub fn long_name(rsa_id: &[u8; 20], nickname: &str) -> String {
    let mut s = String::with_capacity(62);
    s.push('$');
    for b in rsa_id {
        s.push_str(&format!("{b:02X}"));
    }
    if !nickname.is_empty() {
        s.push('~');
        s.push_str(nickname);
    }
    s
}

/// Everything a `CIRC` event or `circuit-status` line says about a circuit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CircStatus {
    /// Controller-visible circuit id.
    pub id: u64,
    /// LAUNCHED, EXTENDED, BUILT, FAILED, CLOSED.
    pub status: &'static str,
    /// Hops built so far, as LongNames.
    pub path: Vec<String>,
    /// BUILD_FLAGS entries (ONEHOP_TUNNEL, IS_INTERNAL, NEED_CAPACITY...).
    pub build_flags: Vec<&'static str>,
    /// GENERAL, CONTROLLER, HS_CLIENT_REND...
    pub purpose: &'static str,
    /// HS_STATE of an onion-service circuit (HSCR_JOINED...).
    pub hs_state: Option<&'static str>,
    /// REND_QUERY: the onion service's address without `.onion`.
    pub rend_query: Option<String>,
    /// TIME_CREATED, already formatted (ISOTime2Frac).
    pub time_created: String,
    /// REASON for FAILED/CLOSED.
    pub reason: Option<&'static str>,
    /// REMOTE_REASON when the far end closed it.
    pub remote_reason: Option<&'static str>,
    /// SOCKS username / password the circuit is isolated by.
    pub socks_auth: Option<(Vec<u8>, Vec<u8>)>,
}

impl CircStatus {
    /// `<id> <status> [path] [BUILD_FLAGS=..] PURPOSE=.. TIME_CREATED=..
    /// [SOCKS_USERNAME=..] [REASON=..]`: the text after `650 CIRC `, and a
    /// `GETINFO circuit-status` line.
    pub fn line(&self) -> String {
        let mut s = format!("{} {}", self.id, self.status);
        let d = self.describe();
        if !d.is_empty() {
            s.push(' ');
            s.push_str(&d);
        }
        match (self.reason, self.remote_reason) {
            (_, Some(r)) => s.push_str(&format!(" REASON=DESTROYED REMOTE_REASON={r}")),
            (Some(r), None) => s.push_str(&format!(" REASON={r}")),
            (None, None) => {}
        }
        s
    }

    /// `650 CIRC_MINOR <id> PURPOSE_CHANGED ...` after the purpose changed
    /// from `old` (with its HS_STATE), without the `650 `.
    pub fn purpose_changed_line(&self, old: &str, old_hs_state: Option<&str>) -> String {
        let mut s = format!("CIRC_MINOR {} PURPOSE_CHANGED", self.id);
        let d = self.describe();
        if !d.is_empty() {
            s.push(' ');
            s.push_str(&d);
        }
        s.push_str(&format!(" OLD_PURPOSE={old}"));
        if let Some(h) = old_hs_state {
            s.push_str(&format!(" OLD_HS_STATE={h}"));
        }
        s
    }

    /// Path, BUILD_FLAGS, PURPOSE, HS_STATE, REND_QUERY, TIME_CREATED and
    /// the SOCKS credentials, as tor's
    /// `circuit_describe_status_for_controller`.
    fn describe(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        if !self.path.is_empty() {
            parts.push(self.path.join(","));
        }
        if !self.build_flags.is_empty() {
            parts.push(format!("BUILD_FLAGS={}", self.build_flags.join(",")));
        }
        parts.push(format!("PURPOSE={}", self.purpose));
        if let Some(h) = self.hs_state {
            parts.push(format!("HS_STATE={h}"));
        }
        if let Some(q) = &self.rend_query {
            parts.push(format!("REND_QUERY={q}"));
        }
        parts.push(format!("TIME_CREATED={}", self.time_created));
        if let Some((u, p)) = &self.socks_auth {
            if !u.is_empty() {
                parts.push(format!("SOCKS_USERNAME={}", quote(u)));
            }
            if !p.is_empty() {
                parts.push(format!("SOCKS_PASSWORD={}", quote(p)));
            }
        }
        parts.join(" ")
    }
}

/// A `STREAM` event or `stream-status` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamStatus {
    /// Controller-visible stream id.
    pub id: u64,
    /// NEW, NEWRESOLVE, SENTCONNECT, SENTRESOLVE, SUCCEEDED, FAILED,
    /// CLOSED, DETACHED, CONTROLLER_WAIT.
    pub status: &'static str,
    /// The circuit it is attached to (0: none).
    pub circ_id: u64,
    /// `address:port`.
    pub target: String,
    /// REASON (and REMOTE_REASON when the exit sent END).
    pub reason: Option<&'static str>,
    /// The exit's END reason.
    pub remote_reason: Option<&'static str>,
    /// SOURCE_ADDR for NEW/NEWRESOLVE.
    pub source_addr: Option<String>,
    /// PURPOSE for NEW/NEWRESOLVE (USER, DNS_REQUEST, DIR_FETCH).
    pub purpose: Option<&'static str>,
    /// SOCKS username / password.
    pub socks_auth: Option<(Vec<u8>, Vec<u8>)>,
    /// CLIENT_PROTOCOL (SOCKS4, SOCKS5).
    pub client_protocol: &'static str,
    /// NYM_EPOCH.
    pub nym_epoch: u64,
}

impl StreamStatus {
    /// The `GETINFO stream-status` form: `id status circ target`.
    pub fn short_line(&self) -> String {
        format!(
            "{} {} {} {}",
            self.id, self.status, self.circ_id, self.target
        )
    }

    /// The text after `650 STREAM `.
    pub fn event_line(&self) -> String {
        let mut s = self.short_line();
        match (self.reason, self.remote_reason) {
            (_, Some(r)) => s.push_str(&format!(" REASON=END REMOTE_REASON={r}")),
            (Some(r), None) => s.push_str(&format!(" REASON={r}")),
            (None, None) => {}
        }
        if let Some(a) = &self.source_addr {
            s.push_str(&format!(" SOURCE_ADDR={a}"));
        }
        if let Some(p) = self.purpose {
            s.push_str(&format!(" PURPOSE={p}"));
        }
        if let Some((u, p)) = &self.socks_auth {
            if !u.is_empty() {
                s.push_str(&format!(" SOCKS_USERNAME={}", quote(u)));
            }
            if !p.is_empty() {
                s.push_str(&format!(" SOCKS_PASSWORD={}", quote(p)));
            }
        }
        s.push_str(&format!(
            " CLIENT_PROTOCOL={} NYM_EPOCH={} SESSION_GROUP=-1 ISO_FIELDS=SOCKS_USERNAME,SOCKS_PASSWORD,NYM_EPOCH",
            self.client_protocol, self.nym_epoch
        ));
        s
    }
}

/// tor-spec END reasons as the control port names them.
pub fn stream_reason_name(reason: u8) -> &'static str {
    match reason {
        1 => "MISC",
        2 => "RESOLVEFAILED",
        3 => "CONNECTREFUSED",
        4 => "EXITPOLICY",
        5 => "DESTROY",
        6 => "DONE",
        7 => "TIMEOUT",
        8 => "NOROUTE",
        9 => "HIBERNATING",
        10 => "INTERNAL",
        11 => "RESOURCELIMIT",
        12 => "CONNRESET",
        13 => "TORPROTOCOL",
        14 => "NOTDIRECTORY",
        _ => "MISC",
    }
}

/// tor-spec DESTROY reasons as the control port names them.
pub fn circ_reason_name(reason: u8) -> &'static str {
    match reason {
        0 => "NONE",
        1 => "TORPROTOCOL",
        2 => "INTERNAL",
        3 => "REQUESTED",
        4 => "HIBERNATING",
        5 => "RESOURCELIMIT",
        6 => "CONNECTFAILED",
        7 => "OR_IDENTITY",
        8 => "CHANNEL_CLOSED",
        9 => "FINISHED",
        10 => "TIMEOUT",
        11 => "DESTROYED",
        12 => "NOSUCHSERVICE",
        _ => "NONE",
    }
}

/// `ORCONN <name> <status> [REASON=..] [NCIRCS=..] ID=<n>`.
pub fn orconn_line(
    name: &str,
    status: &str,
    reason: Option<&str>,
    ncircs: usize,
    id: u64,
) -> String {
    let mut s = format!("ORCONN {name} {status}");
    if let Some(r) = reason {
        s.push_str(&format!(" REASON={r}"));
    }
    if ncircs > 0 && matches!(status, "FAILED" | "CLOSED") {
        s.push_str(&format!(" NCIRCS={ncircs}"));
    }
    s.push_str(&format!(" ID={id}"));
    s
}

/// `CIRC_BW` with tor 0.4.9's fields (no congestion-control fields: we do
/// not negotiate congestion control).
#[allow(clippy::too_many_arguments)]
pub fn circ_bw_line(
    id: u64,
    read: u64,
    written: u64,
    time: &str,
    delivered_read: u64,
    overhead_read: u64,
    delivered_written: u64,
    overhead_written: u64,
) -> String {
    format!(
        "CIRC_BW ID={id} READ={read} WRITTEN={written} TIME={time} DELIVERED_READ={delivered_read} OVERHEAD_READ={overhead_read} DELIVERED_WRITTEN={delivered_written} OVERHEAD_WRITTEN={overhead_written}"
    )
}

/// The bootstrap status text (`NOTICE BOOTSTRAP PROGRESS=.. TAG=..
/// SUMMARY=".."`), for `status/bootstrap-phase` and `STATUS_CLIENT`.
pub fn bootstrap_text(progress: u8, tag: &str, summary: &str) -> String {
    format!(
        "NOTICE BOOTSTRAP PROGRESS={progress} TAG={tag} SUMMARY={}",
        quote(summary.as_bytes())
    )
}

/// ISOTime2Frac (`2012-12-06T13:51:11.433755`) for a Unix time in
/// microseconds.
pub fn iso_time_usec(unix_micros: u64) -> String {
    let secs = i64::try_from(unix_micros / 1_000_000).unwrap_or(i64::MAX);
    let micros = unix_micros % 1_000_000;
    match time::OffsetDateTime::from_unix_timestamp(secs) {
        Ok(t) => format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{micros:06}",
            t.year(),
            u8::from(t.month()),
            t.day(),
            t.hour(),
            t.minute(),
            t.second()
        ),
        Err(_) => "9999-12-31T23:59:59.000000".into(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn circ_line_like_tor() {
        let c = CircStatus {
            id: 19,
            status: "BUILT",
            path: vec![long_name(&[0xAB; 20], "a"), long_name(&[1; 20], "b")],
            build_flags: vec!["NEED_CAPACITY"],
            purpose: "GENERAL",
            hs_state: None,
            rend_query: None,
            time_created: iso_time_usec(1_354_801_871_433_755),
            reason: None,
            remote_reason: None,
            socks_auth: None,
        };
        assert_eq!(
            c.line(),
            "19 BUILT $ABABABABABABABABABABABABABABABABABABABAB~a,$0101010101010101010101010101010101010101~b BUILD_FLAGS=NEED_CAPACITY PURPOSE=GENERAL TIME_CREATED=2012-12-06T13:51:11.433755"
        );
        let mut f = c.clone();
        f.status = "CLOSED";
        f.path.clear();
        f.build_flags.clear();
        f.remote_reason = Some("FINISHED");
        f.socks_auth = Some((b"u".to_vec(), Vec::new()));
        assert_eq!(
            f.line(),
            "19 CLOSED PURPOSE=GENERAL TIME_CREATED=2012-12-06T13:51:11.433755 SOCKS_USERNAME=\"u\" REASON=DESTROYED REMOTE_REASON=FINISHED"
        );
        // An onion-service circuit, and its purpose change (control-spec
        // 4.1.1 and 4.1.14; tor's fields in tor's order).
        let mut h = c.clone();
        h.path.truncate(1);
        h.purpose = "HS_CLIENT_REND";
        h.hs_state = Some("HSCR_CONNECTING");
        h.rend_query = Some("a".repeat(56));
        assert_eq!(
            h.line(),
            format!(
                "19 BUILT $ABABABABABABABABABABABABABABABABABABABAB~a BUILD_FLAGS=NEED_CAPACITY PURPOSE=HS_CLIENT_REND HS_STATE=HSCR_CONNECTING REND_QUERY={} TIME_CREATED=2012-12-06T13:51:11.433755",
                "a".repeat(56)
            )
        );
        h.rend_query = None;
        assert_eq!(
            h.purpose_changed_line("GENERAL", None),
            "CIRC_MINOR 19 PURPOSE_CHANGED $ABABABABABABABABABABABABABABABABABABABAB~a BUILD_FLAGS=NEED_CAPACITY PURPOSE=HS_CLIENT_REND HS_STATE=HSCR_CONNECTING TIME_CREATED=2012-12-06T13:51:11.433755 OLD_PURPOSE=GENERAL"
        );
        h.purpose = "HS_CLIENT_INTRO";
        assert!(
            h.purpose_changed_line("HS_CLIENT_REND", Some("HSCR_CONNECTING"))
                .ends_with(" OLD_PURPOSE=HS_CLIENT_REND OLD_HS_STATE=HSCR_CONNECTING")
        );
    }

    #[test]
    fn stream_lines() {
        let s = StreamStatus {
            id: 7,
            status: "NEW",
            circ_id: 0,
            target: "example.com:80".into(),
            reason: None,
            remote_reason: None,
            source_addr: Some("127.0.0.1:5555".into()),
            purpose: Some("USER"),
            socks_auth: None,
            client_protocol: "SOCKS5",
            nym_epoch: 0,
        };
        assert_eq!(s.short_line(), "7 NEW 0 example.com:80");
        assert!(s.event_line().starts_with(
            "7 NEW 0 example.com:80 SOURCE_ADDR=127.0.0.1:5555 PURPOSE=USER CLIENT_PROTOCOL=SOCKS5"
        ));
    }

    #[test]
    fn masks() {
        let mut m = EventMask::default();
        assert!(m.add("circ"));
        assert!(!m.add("FOO"));
        assert!(m.has("CIRC"));
        assert!(!m.has("STREAM"));
        assert!(EVENT_NAMES.len() < 64);
    }

    #[test]
    fn bootstrap() {
        assert_eq!(
            bootstrap_text(100, "done", "Done"),
            "NOTICE BOOTSTRAP PROGRESS=100 TAG=done SUMMARY=\"Done\""
        );
        assert_eq!(iso_time_usec(0), "1970-01-01T00:00:00.000000");
    }
}
