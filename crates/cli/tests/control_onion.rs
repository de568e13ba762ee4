//! Ephemeral onion services over the control port (ADD_ONION, DEL_ONION,
//! `onions/current|detached`, HS_DESC events) with stem, against the
//! onionmix client and a stock tor client in one all-onionmix-relay
//! network (onionmix authorities, HSDirs, introduction and rendezvous
//! points): the same script (`scripts/stem/onion_check.py`) runs against
//! both and the reports must agree. Each service is created with
//! `await_publication=True` in front of the sink's HTTP server and
//! fetched (1 MiB, SHA-256 verified) through the other implementation's
//! client and a second onionmix client (the watched fetching client's
//! STREAM events: NEW, SENTCONNECT and SUCCEEDED on the rendezvous
//! circuit, CLOSED; that circuit's PURPOSE=HS_CLIENT_REND,
//! HS_STATE=HSCR_JOINED and REND_QUERY in `circuit-status`; the
//! service's HS_SERVICE_INTRO and HS_SERVICE_REND circuits in its own);
//! the key
//! ADD_ONION returns gives
//! the same address again, and our key derivation gives stock tor's
//! address from stock tor's key. A `V3Auth` service is refused to a
//! client without the key and reached by the other implementation's
//! client once ONION_CLIENT_AUTH_ADD gave it the key; a fetching client's
//! `HSDIR_INDEX` equals the one the other implementation's service
//! uploaded with.
//!
//! HSFETCH / HSPOST (`scripts/stem/hsfetch_check.py`) run against the
//! onionmix client and the stock tor client of a second network: argument
//! errors byte for byte, stem's `get_hidden_service_descriptor` of a
//! running service (with and without `SERVER=`) and of an address nobody
//! runs, and HSPOST of the fetched descriptor (to the responsible HSDirs,
//! and to one that does not hold it, which stores it); the reports must
//! agree.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: failures should panic

mod common_net;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use base64::Engine;
use common_net::{CONTROL_PASSWORD, control_spec, node_addr as addr, run_json};
use onionmix_testbed::netinfo::NodeInfo;
use onionmix_testbed::spec::Implementation;
use onionmix_testsupport as ts;

/// Run the script with a deadline; its last stdout line as JSON.
fn onion_report(
    py: &Path,
    host: &NodeInfo,
    fetchers: &[&NodeInfo],
    sink: &str,
) -> serde_json::Value {
    let mut cmd = Command::new(py);
    cmd.arg(ts::repo_root().join("scripts/stem/onion_check.py"))
        .args(["--control", &addr(host, host.control_port)])
        .args(["--password", CONTROL_PASSWORD])
        .args(["--sink", sink]);
    for f in fetchers {
        cmd.args(["--fetch-socks", &addr(f, f.socks_port)]);
    }
    // Watch the fetches of the other implementation's client if there is
    // one (its REQUESTED index is checked against the host's UPLOAD).
    if let Some(f) = fetchers
        .iter()
        .find(|f| f.implementation != host.implementation)
        .or(fetchers.first())
    {
        cmd.args(["--fetch-control", &addr(f, f.control_port)])
            .args(["--fetch-control-socks", &addr(f, f.socks_port)]);
    }
    run_json(
        cmd,
        &format!("stem against {}", host.name),
        Duration::from_secs(1500),
    )
}

/// Checks that must hold for both implementations.
const TRUE: &[&str] = &[
    "published",
    "event_created_seen",
    "event_created_format",
    "event_upload_seen",
    "event_upload_format",
    "event_uploaded_seen",
    "event_uploaded_format",
    "listed_current",
    "all_downloads_ok",
    "fetch_event_requested_format",
    "fetch_event_received_format",
    "fetch_stream_events",
    "fetch_rend_circuit_status",
    "service_intro_circuit_status",
    "service_rend_circuit_status",
    "hsdir_index_agrees",
    "removed",
    "unlisted_after_removal",
    "unreachable_after_removal",
    "same_id_from_key",
    "v3auth_published",
    "v3auth_refused_without_key",
    "v3auth_download_with_key",
    "no_key_when_given",
    "discard_pk_has_no_key",
    "detached_listed",
    "detached_not_current",
    "detached_survives",
    "detached_removed",
];

/// What differs between runs (addresses, keys, timings, examples).
fn comparable(v: &serde_json::Value) -> serde_json::Value {
    let mut v = v.clone();
    let o = v.as_object_mut().unwrap();
    o.retain(|k, _| {
        !(k.ends_with("_example")
            || matches!(
                k.as_str(),
                "service_id"
                    | "private_key"
                    | "publish_secs"
                    | "downloads"
                    | "collision"
                    | "hsdir_index_pairs"
            ))
    });
    v
}

fn check_key(r: &serde_json::Value, who: &str) {
    assert_eq!(r["private_key_type"], "ED25519-V3", "{who}: {r}");
    let b64 = r["private_key"].as_str().unwrap();
    assert_eq!(b64.len(), 88, "{who}: padded base64 of 64 bytes");
    let key: [u8; 64] = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap()
        .try_into()
        .unwrap();
    let id = onionmix_hs::keys::ServiceIdentity::from_expanded(&key).unwrap();
    assert_eq!(
        id.address().unwrap().label(),
        r["service_id"].as_str().unwrap(),
        "{who}: the key implies the ServiceID"
    );
    assert_eq!(r["collision"], "550 Onion address collision", "{who}: {r}");
}

/// Run `hsfetch_check.py` against `client`; its report.
fn hsfetch_report(py: &Path, client: &NodeInfo, sink: &str) -> serde_json::Value {
    let mut cmd = Command::new(py);
    cmd.arg(ts::repo_root().join("scripts/stem/hsfetch_check.py"))
        .args(["--control", &addr(client, client.control_port)])
        .args(["--hsdirs", &HSFETCH_HSDIRS.to_string()])
        .args(["--password", CONTROL_PASSWORD])
        .args(["--sink", sink]);
    run_json(
        cmd,
        &format!("stem HSFETCH/HSPOST against {}", client.name),
        Duration::from_secs(1200),
    )
}

/// Relays of the HSFETCH network (3 authorities, 6 relays, 2 exits), all
/// HSDirs once the authorities have seen them.
const HSFETCH_HSDIRS: usize = 11;

/// HSFETCH / HSPOST checks that must hold for both implementations.
const HSFETCH_TRUE: &[&str] = &[
    "hsdirs_known",
    "published",
    "fetch_ok",
    "fetch_requested_format",
    "fetch_received_format",
    "fetch_v3_parses",
    "fetch_desc_has_signature",
    "fetch_server_ok",
    "unknown_failed_format",
    "unknown_every_request_failed",
    "post_answers_from_every_responsible",
    "post_server_format",
    "post_format",
    "post_descid_is_fetched",
];

#[test]
fn stem_hsfetch_and_hspost_on_both_clients() {
    let _g = ts::serial();
    let stem = ts::stem_python_check();
    let have_tor = ts::tor_check();
    if !ts::require_or_skip(
        "stem_hsfetch_and_hspost_on_both_clients",
        stem.clone().map(|_| ()).and(have_tor),
    ) {
        return;
    }
    let py = stem.unwrap();
    let dir = tempfile::tempdir().expect("tempdir");
    // More HSDirs than a descriptor is stored on (8), so that some do not
    // hold it and accept it from HSPOST.
    let spec = common_net::control_spec_with_relays(
        "control-hsfetch",
        "onionmix-hs's relays; an onionmix client and a stock tor client, with control ports",
        1,
        6,
    );
    let net = common_net::start_spec(&spec, dir.path());
    let info = net.info().clone();
    let sink = info.sink.clone().expect("sink").http.to_string();
    let ours = info.clients(Some(Implementation::Onionmix))[0].clone();
    let stock = info.clients(Some(Implementation::Tor))[0].clone();
    let r_ours = hsfetch_report(&py, &ours, &sink);
    eprintln!("HSFETCH/HSPOST against onionmix: {r_ours}");
    let r_tor = hsfetch_report(&py, &stock, &sink);
    eprintln!("HSFETCH/HSPOST against stock tor: {r_tor}");
    for (who, r) in [("onionmix", &r_ours), ("stock tor", &r_tor)] {
        for k in HSFETCH_TRUE {
            assert_eq!(r[*k], true, "{who}: {k} in {r}");
        }
        assert_eq!(r["fetch_requested_count"], 1, "{who}: {r}");
        assert_eq!(r["fetch_received_count"], 1, "{who}: {r}");
        assert_eq!(
            r["fetch_server_asked"],
            serde_json::json!([true]),
            "{who}: {r}"
        );
        assert_eq!(
            r["unknown_fetch_error"], "No running hidden service at <id>.onion",
            "{who}: {r}"
        );
        assert_eq!(r["post_reply"], "250 OK", "{who}: {r}");
        assert_eq!(r["post_upload_events"], 0, "{who}: {r}");
        assert_eq!(r["post_server_answer_count"], 1, "{who}: {r}");
        // The HSDir named by SERVER= stores the descriptor (UPLOADED), or
        // refuses it because the service or the post above already put
        // this revision there: which HSDirs hold it depends on where the
        // network is in its time period, so either answer is right.
        let o = &r["post_server_outcomes"];
        assert!(
            *o == serde_json::json!(["UPLOADED"]) || *o == serde_json::json!(["FAILED"]),
            "{who}: {r}"
        );
        for o in r["post_outcomes"].as_array().unwrap() {
            assert!(
                o == "UPLOADED" || o == "FAILED UPLOAD_REJECTED",
                "{who}: {r}"
            );
        }
    }
    let strip = |v: &serde_json::Value| {
        let mut v = v.clone();
        v.as_object_mut().unwrap().retain(|k, _| {
            !(k.ends_with("_example")
                || matches!(
                    k.as_str(),
                    "unknown_failed_count"
                        | "unknown_requested_count"
                        | "post_outcomes"
                        | "post_server_outcomes"
                        | "post_nonholder_exists"
                ))
        });
        v
    };
    assert_eq!(strip(&r_ours), strip(&r_tor));
    drop(net);
}

#[test]
fn stem_ephemeral_onion_services_on_both_clients() {
    let _g = ts::serial();
    let stem = ts::stem_python_check();
    let have_tor = ts::tor_check();
    if !ts::require_or_skip(
        "stem_ephemeral_onion_services_on_both_clients",
        stem.clone().map(|_| ()).and(have_tor),
    ) {
        return;
    }
    let py = stem.unwrap();
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = control_spec(
        "control-onion",
        "onionmix-hs's relays; two onionmix clients and a stock tor client, with control ports",
        2,
    );
    let net = common_net::start_spec(&spec, dir.path());
    let info = net.info().clone();
    let sink = info.sink.clone().expect("sink").http.to_string();
    let ours = info.clients(Some(Implementation::Onionmix));
    let (a, b) = (ours[0].clone(), ours[1].clone());
    let stock = info.clients(Some(Implementation::Tor))[0].clone();

    let r_ours = onion_report(&py, &a, &[&b, &stock], &sink);
    eprintln!("stem against onionmix: {r_ours}");
    // Our fetching client first: its control port is watched.
    let r_tor = onion_report(&py, &stock, &[&b, &a], &sink);
    eprintln!("stem against stock tor: {r_tor}");
    for (who, r) in [("onionmix", &r_ours), ("stock tor", &r_tor)] {
        for k in TRUE {
            assert_eq!(r[*k], true, "{who}: {k} in {r}");
        }
        assert_eq!(r["removed_again"], false, "{who}: {r}");
        check_key(r, who);
    }
    // Same answers, byte for byte where stem shows them (error replies,
    // GETINFO onions/*, DEL_ONION of a service whose connection closed).
    assert_eq!(comparable(&r_ours), comparable(&r_tor));
    drop(net);
}
