//! The hub without a network: event fan-out, bounded queues, circuit and
//! stream bookkeeping, NEWNYM's rate limit.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use onionmix_frontend::control::events::{EventMask, StreamStatus};

use super::hub::{ControlHub, EVENT_QUEUE};
use crate::client::circuit::HopTarget;

fn hop(n: u8) -> HopTarget {
    HopTarget {
        nickname: format!("r{n}"),
        rsa_id: [n; 20],
        ed_id: None,
        or_addr: "127.0.0.1:5000".parse().unwrap(),
        ntor_key: [0; 32],
        ntor_v3: false,
        optimistic_data: false,
        flowctrl_cc: false,
        quic_port: None,
        datagram: false,
        params: None,
    }
}

fn mask(names: &[&str]) -> EventMask {
    let mut m = EventMask::default();
    for n in names {
        assert!(m.add(n));
    }
    m
}

#[test]
fn circuit_events_and_status() {
    let hub = ControlHub::new();
    let (sub, mut rx) = hub.subscribe().unwrap();
    hub.set_mask(sub, mask(&["CIRC"]));
    let path = vec![hop(1), hop(2), hop(3)];
    let id = hub.circ_launched(&path, false);
    hub.circ_extended(id, &path, 1);
    hub.circ_extended(id, &path, 3);
    assert!(hub.circuit_status().starts_with(&format!("{id} EXTENDED ")));
    assert!(
        !hub.circ_extending(id),
        "a circuit still building was re-extended"
    );
    let (chan, _rx) = crate::reactor::ChannelHandle::for_tests();
    let credits = std::sync::Arc::new(tokio::sync::Semaphore::new(1));
    hub.circ_built(id, chan, 7, credits, Duration::from_millis(5));
    let got: Vec<String> = (0..4)
        .map(|_| String::from_utf8(rx.try_recv().unwrap()).unwrap())
        .collect();
    assert!(got[0].starts_with(&format!(
        "650 CIRC {id} LAUNCHED BUILD_FLAGS=NEED_CAPACITY PURPOSE=GENERAL TIME_CREATED="
    )));
    assert!(got[1].starts_with(&format!("650 CIRC {id} EXTENDED ${}~r1 ", "01".repeat(20))));
    assert!(got[2].starts_with(&format!("650 CIRC {id} EXTENDED ")));
    assert!(got[2].contains(&format!("~r2,${}~r3 ", "03".repeat(20))));
    assert!(got[3].starts_with(&format!("650 CIRC {id} BUILT ")));
    assert!(got[3].contains(&format!("~r2,${}~r3 ", "03".repeat(20))));
    assert!(hub.circuit_status().starts_with(&format!("{id} BUILT ")));

    // A controller adds a fourth hop: EXTENDED in circuit-status (no
    // event), EXTENDED with four hops, BUILT again.
    assert!(hub.circ_extending(id));
    assert!(!hub.circ_extending(id), "two extensions at once");
    assert!(hub.circuit_status().starts_with(&format!("{id} EXTENDED ")));
    assert!(rx.try_recv().is_err());
    let longer = vec![hop(1), hop(2), hop(3), hop(4)];
    hub.circ_extended(id, &longer, 4);
    hub.circ_reopened(id, &longer);
    let e = String::from_utf8(rx.try_recv().unwrap()).unwrap();
    assert!(e.starts_with(&format!("650 CIRC {id} EXTENDED ")), "{e}");
    assert!(e.contains(&format!("~r3,${}~r4 ", "04".repeat(20))), "{e}");
    let b = String::from_utf8(rx.try_recv().unwrap()).unwrap();
    assert!(b.starts_with(&format!("650 CIRC {id} BUILT ")), "{b}");
    assert!(b.contains(&format!("~r3,${}~r4 ", "04".repeat(20))), "{b}");
    assert_eq!(hub.with_circ(id, |e| e.relays.len()), Some(4));
    hub.circ_failed(id, "TIMEOUT");
    let f = String::from_utf8(rx.try_recv().unwrap()).unwrap();
    assert!(
        f.starts_with(&format!("650 CIRC {id} FAILED ")) && f.ends_with(" REASON=TIMEOUT\r\n"),
        "{f}"
    );
    assert_eq!(hub.circuit_status(), "");
}

#[test]
fn nothing_is_formatted_for_nobody_and_full_queues_drop_the_subscriber() {
    let hub = ControlHub::new();
    let mut called = false;
    hub.emit("BW", || {
        called = true;
        Vec::new()
    });
    assert!(!called, "an event nobody asked for was built");
    let (sub, rx) = hub.subscribe().unwrap();
    hub.set_mask(sub, mask(&["BW"]));
    assert!(hub.wants("BW") && !hub.wants("CIRC"));
    for _ in 0..=EVENT_QUEUE {
        hub.tick_bandwidth();
    }
    assert!(
        !hub.wants("BW"),
        "the subscriber with a full queue was not dropped"
    );
    assert_eq!(
        hub.bus
            .overflow()
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    drop(rx);
}

#[test]
fn stream_lifecycle() {
    let hub = ControlHub::new();
    let (sub, mut rx) = hub.subscribe().unwrap();
    hub.set_mask(sub, mask(&["STREAM"]));
    let id = hub.stream_new(StreamStatus {
        id: 0,
        status: "NEW",
        circ_id: 0,
        target: "127.0.0.1:80".into(),
        reason: None,
        remote_reason: None,
        source_addr: Some("127.0.0.1:4000".into()),
        purpose: Some("USER"),
        socks_auth: None,
        client_protocol: "SOCKS5",
        nym_epoch: 0,
    });
    assert_eq!(hub.stream_status_text(), format!("{id} NEW 0 127.0.0.1:80"));
    hub.stream_status(id, "SENTCONNECT", Some(7), None, None);
    hub.stream_status(id, "FAILED", None, None, Some("CONNECTREFUSED"));
    assert_eq!(hub.stream_status_text(), "");
    let evs: Vec<String> = (0..4)
        .map(|_| String::from_utf8(rx.try_recv().unwrap()).unwrap())
        .collect();
    assert!(evs[0].starts_with(&format!(
        "650 STREAM {id} NEW 0 127.0.0.1:80 SOURCE_ADDR=127.0.0.1:4000 PURPOSE=USER"
    )));
    assert!(evs[1].starts_with(&format!("650 STREAM {id} SENTCONNECT 7 127.0.0.1:80 ")));
    assert!(evs[2].starts_with(&format!(
        "650 STREAM {id} FAILED 7 127.0.0.1:80 REASON=END REMOTE_REASON=CONNECTREFUSED"
    )));
    // Then CLOSED with the same reasons, as tor sends it.
    assert!(evs[3].starts_with(&format!(
        "650 STREAM {id} CLOSED 7 127.0.0.1:80 REASON=END REMOTE_REASON=CONNECTREFUSED"
    )));
    assert!(rx.try_recv().is_err());
}

#[test]
fn newnym_rate_limit_like_tor() {
    let hub = ControlHub::new();
    assert_eq!(hub.newnym_due(), Some(Duration::ZERO));
    hub.newnym_apply();
    let d = hub.newnym_due().unwrap();
    assert!(d > Duration::ZERO && d <= Duration::from_secs(10));
    assert_eq!(hub.newnym_due(), None, "one deferred NEWNYM at a time");
    hub.newnym_apply();
    assert_eq!(hub.epoch.load(std::sync::atomic::Ordering::Relaxed), 2);
}

#[test]
fn bootstrap_events_follow_the_phases() {
    let hub = ControlHub::new();
    let mut rx = hub.bootstrap_events();
    assert_eq!(rx.borrow_and_update().progress, 0);
    hub.bootstrap(5, "conn", "Connecting to a relay");
    assert!(rx.has_changed().unwrap());
    assert_eq!(rx.borrow_and_update().tag, "conn");
    hub.bootstrap(100, "done", "Done");
    let late = hub.bootstrap_events();
    assert_eq!(late.borrow().progress, 100);
    assert_eq!(rx.borrow_and_update().summary, "Done");
    assert_eq!(hub.bootstrap_progress(), 100);
}

#[test]
fn onion_service_purposes_and_newnym_avoidance() {
    let hub = ControlHub::new();
    let (sub, mut rx) = hub.subscribe().unwrap();
    hub.set_mask(sub, mask(&["CIRC_MINOR"]));
    let built = |path: &[HopTarget], internal: bool| {
        let id = hub.circ_launched_as(path, false, internal);
        hub.circ_extended(id, path, path.len());
        let (chan, _rx) = crate::reactor::ChannelHandle::for_tests();
        let credits = std::sync::Arc::new(tokio::sync::Semaphore::new(1));
        hub.circ_built(id, chan, 7, credits, Duration::from_millis(5));
        id
    };
    let stream_on = |circ: u64| {
        let s = hub.stream_new(StreamStatus {
            id: 0,
            status: "NEW",
            circ_id: 0,
            target: "example.com:80".into(),
            reason: None,
            remote_reason: None,
            source_addr: None,
            purpose: Some("USER"),
            socks_auth: None,
            client_protocol: "SOCKS5",
            nym_epoch: 0,
        });
        hub.stream_status(s, "SENTCONNECT", Some(circ), None, None);
    };
    let avoided = || hub.newnym_avoid.lock().unwrap().clone();
    // A stream through exit r3, then NEWNYM: r3 is avoided.
    let a = built(&[hop(1), hop(2), hop(3)], false);
    stream_on(a);
    hub.newnym_apply();
    assert_eq!(avoided(), [[3u8; 20]].into_iter().collect());

    // A pooled circuit becomes a rendezvous circuit: CIRC_MINOR
    // PURPOSE_CHANGED once; a new HS_STATE alone is no event.
    let b = built(&[hop(1), hop(2), hop(4)], true);
    hub.circ_purpose(b, "HS_CLIENT_REND", Some("HSCR_CONNECTING"), None);
    let e = String::from_utf8(rx.try_recv().unwrap()).unwrap();
    assert!(
        e.starts_with(&format!("650 CIRC_MINOR {b} PURPOSE_CHANGED $"))
            && e.contains(" BUILD_FLAGS=IS_INTERNAL,NEED_CAPACITY,NEED_UPTIME PURPOSE=HS_CLIENT_REND HS_STATE=HSCR_CONNECTING TIME_CREATED=")
            && e.ends_with(" OLD_PURPOSE=GENERAL\r\n"),
        "{e}"
    );
    let q = "a".repeat(56);
    hub.circ_purpose(b, "HS_CLIENT_REND", Some("HSCR_JOINED"), Some(&q));
    assert!(rx.try_recv().is_err(), "an HS_STATE change was announced");
    let row = hub.circuit_status();
    let row = row
        .lines()
        .find(|l| l.starts_with(&format!("{b} ")))
        .unwrap();
    assert!(
        row.contains(&format!(
            " PURPOSE=HS_CLIENT_REND HS_STATE=HSCR_JOINED REND_QUERY={q} "
        )),
        "{row}"
    );
    // An onion stream on it neither ends the avoidance nor makes its
    // rendezvous point an exit to avoid later.
    stream_on(b);
    assert_eq!(avoided(), [[3u8; 20]].into_iter().collect());
    assert!(!hub.used_exits().contains(&[4u8; 20]));
    // The first stream through another exit ends it.
    // A pre-built internal circuit still GENERAL is no exit circuit either.
    let d = built(&[hop(1), hop(2), hop(6)], true);
    stream_on(d);
    assert_eq!(avoided(), [[3u8; 20]].into_iter().collect());
    let c = built(&[hop(1), hop(2), hop(5)], false);
    stream_on(c);
    assert!(avoided().is_empty());
    assert_eq!(
        hub.used_exits(),
        [[3u8; 20], [5u8; 20]].into_iter().collect()
    );
}
