//! The event fan-out every control port has (client, relay, authority):
//! each control connection subscribes with a bounded queue and a mask of
//! the events it asked for (SETEVENTS). An event is formatted only when
//! some connection wants it (one atomic load otherwise); a connection
//! whose queue fills is dropped rather than letting memory grow.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::mpsc;

use onionmix_frontend::control::events::EventMask;
use onionmix_frontend::control::reply;

/// Depth of one control connection's event queue; a controller that lets
/// it fill is disconnected rather than letting memory grow.
pub const EVENT_QUEUE: usize = 4096;
/// Most control connections subscribed to events.
pub const MAX_SUBSCRIBERS: usize = 256;

struct Subscriber {
    id: u64,
    mask: u64,
    tx: mpsc::Sender<Vec<u8>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Who subscribed to what; shared with the process-wide log forwarder
/// (`control::logs`), which holds it weakly.
#[derive(Default)]
pub(crate) struct Subscribers {
    interest: AtomicU64,
    subs: Mutex<Vec<Subscriber>>,
    /// Control connections dropped for a full event queue.
    pub(crate) overflow: AtomicU64,
}

impl Subscribers {
    fn recompute_interest(&self, subs: &[Subscriber]) {
        let m = subs.iter().fold(0, |a, s| a | s.mask);
        self.interest.store(m, Ordering::Relaxed);
    }

    /// Whether anyone wants `event`.
    pub(crate) fn wants(&self, event: &str) -> bool {
        EventMask::bit(event).is_some_and(|b| self.interest.load(Ordering::Relaxed) & b != 0)
    }

    /// Send an event (built only if someone wants it).
    pub(crate) fn emit(&self, event: &str, make: impl FnOnce() -> Vec<u8>) {
        let Some(bit) = EventMask::bit(event) else {
            return;
        };
        if self.interest.load(Ordering::Relaxed) & bit == 0 {
            return;
        }
        let bytes = make();
        let mut subs = lock(&self.subs);
        let before = subs.len();
        // A full queue drops the subscriber: its connection sees the
        // channel close and hangs up.
        subs.retain(|s| s.mask & bit == 0 || s.tx.try_send(bytes.clone()).is_ok());
        if subs.len() != before {
            self.overflow
                .fetch_add((before - subs.len()) as u64, Ordering::Relaxed);
            self.recompute_interest(&subs);
        }
    }
}

/// Subscribers and what they want; counters for the metrics endpoint.
/// Every bus also receives the process's log as NOTICE/WARN/ERR events
/// when the log forwarder is installed ([`crate::control::logs`]).
pub struct EventBus {
    core: Arc<Subscribers>,
    next_sub: AtomicU64,
    /// Control connections refused at the connection limit.
    pub refused: AtomicU64,
    /// Unauthenticated control connections closed to make room for new
    /// ones.
    pub evicted: AtomicU64,
}

impl std::fmt::Debug for EventBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventBus").finish()
    }
}

impl Default for EventBus {
    fn default() -> Self {
        let core = Arc::new(Subscribers::default());
        crate::control::logs::register(&core);
        EventBus {
            core,
            next_sub: AtomicU64::new(1),
            refused: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
        }
    }
}

impl EventBus {
    /// Register a control connection; its id and event queue (None past
    /// [`MAX_SUBSCRIBERS`]).
    pub fn subscribe(&self) -> Option<(u64, mpsc::Receiver<Vec<u8>>)> {
        let mut subs = lock(&self.core.subs);
        if subs.len() >= MAX_SUBSCRIBERS {
            return None;
        }
        let (tx, rx) = mpsc::channel(EVENT_QUEUE);
        let id = self.next_sub.fetch_add(1, Ordering::Relaxed);
        subs.push(Subscriber { id, mask: 0, tx });
        Some((id, rx))
    }

    /// Change what a connection wants.
    pub fn set_mask(&self, id: u64, mask: EventMask) {
        let mut subs = lock(&self.core.subs);
        if let Some(s) = subs.iter_mut().find(|s| s.id == id) {
            s.mask = mask.0;
        }
        self.core.recompute_interest(&subs);
    }

    /// Forget a connection.
    pub fn unsubscribe(&self, id: u64) {
        let mut subs = lock(&self.core.subs);
        subs.retain(|s| s.id != id);
        self.core.recompute_interest(&subs);
    }

    /// Whether anyone wants `event`.
    pub fn wants(&self, event: &str) -> bool {
        self.core.wants(event)
    }

    /// Send an event (built only if someone wants it).
    pub fn emit(&self, event: &str, make: impl FnOnce() -> Vec<u8>) {
        self.core.emit(event, make);
    }

    /// Control connections dropped for a full event queue.
    pub fn overflow(&self) -> &AtomicU64 {
        &self.core.overflow
    }

    /// A NOTICE/WARN/ERR log event for this bus's controllers only, also
    /// written to the log (not forwarded again by the log forwarder).
    pub fn log(&self, severity: &str, msg: &str) {
        crate::control::logs::mirror(severity, msg);
        self.emit(severity, || reply::log_event(severity, msg));
    }
}
