//! The process's log as control-port events (control-spec §4.1.5: `DEBUG`,
//! `INFO`, `NOTICE`, `WARN`, `ERR`). [`layer`] is a `tracing` layer that
//! the binary (and the C library's logger) installs beside its log
//! writer: every log record at `info` or above goes, as the event of its
//! severity, to every control port in the process whose controllers asked
//! for that severity, as tor's log messages reach its controllers.
//!
//! Severities: `error` is `ERR`, `warn` is `WARN`, `info` is `NOTICE` (our
//! `info` is what tor logs at notice). Tor's `INFO` and `DEBUG` events are
//! accepted by SETEVENTS but stay silent: forwarding `debug` and `trace`
//! records would make every such call site in the relay's hot paths live.
//!
//! A node that sends a log event of its own ([`EventBus::log`], e.g. the
//! NEWNYM rate-limit notice only its controllers should see) writes the
//! same line to the log under [`MIRRORED`]; the layer skips that target, so
//! no controller sees it twice.
//!
//! [`EventBus::log`]: super::bus::EventBus::log

use std::fmt::Write as _;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

use onionmix_frontend::control::reply;

use super::bus::Subscribers;

/// The log target of lines a control port has already sent as an event.
pub const MIRRORED: &str = "onionmix::control_event";
/// Event buses the forwarder remembers at most (dead ones are pruned first).
const MAX_BUSES: usize = 4096;
/// A forwarded message is cut to this many bytes.
pub const MAX_MESSAGE: usize = 4096;

static BUSES: Mutex<Vec<Weak<Subscribers>>> = Mutex::new(Vec::new());

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Remember a new event bus (held weakly: a dropped node's bus goes).
pub(crate) fn register(core: &Arc<Subscribers>) {
    let mut buses = lock(&BUSES);
    buses.retain(|w| w.strong_count() > 0);
    if buses.len() < MAX_BUSES {
        buses.push(Arc::downgrade(core));
    }
}

/// The control-port severity of a log level.
pub fn severity(level: &Level) -> &'static str {
    match *level {
        Level::ERROR => "ERR",
        Level::WARN => "WARN",
        Level::INFO => "NOTICE",
        Level::DEBUG => "INFO",
        Level::TRACE => "DEBUG",
    }
}

/// Write a line a control port sent as a `severity` event to the log too,
/// under [`MIRRORED`] so that the forwarder leaves it alone.
pub(crate) fn mirror(severity: &str, msg: &str) {
    match severity {
        "ERR" => tracing::error!(target: MIRRORED, "{msg}"),
        "WARN" => tracing::warn!(target: MIRRORED, "{msg}"),
        "NOTICE" => tracing::info!(target: MIRRORED, "{msg}"),
        "INFO" => tracing::debug!(target: MIRRORED, "{msg}"),
        _ => tracing::trace!(target: MIRRORED, "{msg}"),
    }
}

/// The forwarder: log records at `info` and above become control-port log
/// events. Install it beside the log writer, e.g.
/// `tracing_subscriber::registry().with(fmt_layer).with(logs::layer())`.
pub fn layer<S>() -> impl Layer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    Forwarder.with_filter(LevelFilter::INFO)
}

struct Forwarder;

impl<S: Subscriber> Layer<S> for Forwarder {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let meta = event.metadata();
        if meta.target() == MIRRORED {
            return;
        }
        let sev = severity(meta.level());
        let wanted: Vec<Arc<Subscribers>> = lock(&BUSES)
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|b| b.wants(sev))
            .collect();
        if wanted.is_empty() {
            return;
        }
        let mut text = Text::default();
        event.record(&mut text);
        let bytes = reply::log_event(sev, &text.finish());
        for bus in wanted {
            bus.emit(sev, || bytes.clone());
        }
    }
}

/// A record as one line: its message, then its other fields as `k=v`.
#[derive(Default)]
struct Text {
    message: String,
    fields: String,
}

impl Visit for Text {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.fields, " {}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            let _ = write!(self.fields, " {}={value}", field.name());
        }
    }
}

impl Text {
    /// The line, without control characters (a log line may quote what a
    /// peer sent) and at most [`MAX_MESSAGE`] bytes.
    fn finish(mut self) -> String {
        self.message.push_str(&self.fields);
        let mut out = String::with_capacity(self.message.len().min(MAX_MESSAGE));
        for c in self.message.chars() {
            if out.len() + c.len_utf8() > MAX_MESSAGE {
                break;
            }
            out.push(if c.is_control() { ' ' } else { c });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::control::bus::EventBus;
    use onionmix_frontend::control::events::EventMask;
    use tracing_subscriber::layer::SubscriberExt;

    fn mask(names: &[&str]) -> EventMask {
        let mut m = EventMask::default();
        for n in names {
            assert!(m.add(n));
        }
        m
    }

    fn drain(rx: &mut tokio::sync::mpsc::Receiver<Vec<u8>>) -> Vec<String> {
        let mut v = Vec::new();
        while let Ok(b) = rx.try_recv() {
            v.push(String::from_utf8(b).unwrap());
        }
        v
    }

    #[test]
    fn log_records_reach_the_controllers_that_asked() {
        let bus = EventBus::default();
        let (id, mut rx) = bus.subscribe().unwrap();
        bus.set_mask(id, mask(&["WARN", "NOTICE"]));
        // A second bus whose controller asked for ERR only.
        let other = EventBus::default();
        let (oid, mut orx) = other.subscribe().unwrap();
        other.set_mask(oid, mask(&["ERR"]));
        let sub = tracing_subscriber::registry().with(layer());
        let tag = "fwd-test-7c1";
        tracing::subscriber::with_default(sub, || {
            tracing::warn!(peer = 3, "{tag} odd\r\n650 OK \u{1b}[31m");
            tracing::info!(why = "x", "{tag} notice");
            tracing::debug!("{tag} hidden");
            tracing::error!("{tag} broken");
            // A node's own event: one copy, not two.
            bus.log("NOTICE", &format!("{tag} own"));
        });
        let got: Vec<String> = drain(&mut rx)
            .into_iter()
            .filter(|l| l.contains(tag))
            .collect();
        assert_eq!(
            got,
            vec![
                format!("650 WARN {tag} odd  650 OK  [31m peer=3\r\n"),
                format!("650 NOTICE {tag} notice why=x\r\n"),
                format!("650 NOTICE {tag} own\r\n"),
            ]
        );
        let got: Vec<String> = drain(&mut orx)
            .into_iter()
            .filter(|l| l.contains(tag))
            .collect();
        assert_eq!(got, vec![format!("650 ERR {tag} broken\r\n")]);
    }

    #[test]
    fn long_messages_are_cut() {
        let t = Text {
            message: "é".repeat(MAX_MESSAGE),
            fields: String::new(),
        };
        let s = t.finish();
        assert!(s.len() <= MAX_MESSAGE && s.len() > MAX_MESSAGE - 2);
    }

    #[test]
    fn severities_follow_tor() {
        assert_eq!(severity(&Level::ERROR), "ERR");
        assert_eq!(severity(&Level::WARN), "WARN");
        assert_eq!(severity(&Level::INFO), "NOTICE");
        assert_eq!(severity(&Level::DEBUG), "INFO");
        assert_eq!(severity(&Level::TRACE), "DEBUG");
    }
}
