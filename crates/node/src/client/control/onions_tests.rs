//! The ephemeral-service registry without a network: services start (and
//! wait for a bootstrap that never comes), belong to their connection,
//! collide, are bounded, and stop.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use onionmix_frontend::control::onion::parse_add_onion;
use onionmix_hs::keys::ServiceIdentity;

use super::{MAX_EPHEMERAL_SERVICES, Onions};
use crate::client::circmgr::{CircMgr, CircMgrConfig};
use crate::client::config::test_config;
use crate::client::dir::DirMgr;
use crate::service::ServiceCtx;

fn ctx(data: &std::path::Path) -> (ServiceCtx, tokio::sync::watch::Sender<bool>) {
    let cfg = Arc::new(test_config(data, ""));
    let dir = Arc::new(DirMgr::new(cfg).unwrap());
    let chanmgr =
        crate::client::chanmgr::ChanMgr::new(onionmix_link::TlsTransport::client().unwrap());
    let circmgr = CircMgr::new(
        CircMgrConfig {
            learn_build_timeout: false,
            build_timeout: Duration::from_secs(10),
            max_dirtiness: Duration::from_secs(600),
            preemptive: false,
            prediction_base: Duration::from_secs(60),
            state_path: None,
        },
        chanmgr,
        Arc::new(|_, _| Err("no network in this test".into())),
        Arc::new(|_, _| false),
        Arc::new(|_, _| {}),
    );
    let (tx, ready) = tokio::sync::watch::channel(false);
    (
        ServiceCtx {
            dir,
            circmgr,
            ready,
            hub: None,
            rend_query: None,
        },
        tx,
    )
}

fn add(o: &Onions, conn: u64, args: &str) -> Result<onionmix_frontend::control::AddedOnion, u16> {
    let req = parse_add_onion(args).unwrap();
    o.add(conn, &req).map_err(|e| e.code)
}

#[tokio::test]
async fn ownership_collisions_and_limits() {
    let tmp = tempfile::tempdir().unwrap();
    let (sctx, _ready) = ctx(tmp.path());
    let o = Onions::new(Some(sctx), &[]);

    // A generated key comes back, and the address is the one it implies.
    let a = add(&o, 1, "NEW:BEST Port=80").unwrap();
    let key = a.generated.clone().unwrap();
    let id = ServiceIdentity::from_expanded(&key).unwrap();
    assert_eq!(id.address().unwrap().label(), a.service_id);
    assert_eq!(a.service_id.len(), 56);

    // The same key again collides (550), from any connection.
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(key.as_slice());
    assert_eq!(
        add(&o, 2, &format!("ED25519-V3:{b64} Port=80")).unwrap_err(),
        550
    );

    // A given key: its address, no key in the answer.
    let given = ServiceIdentity::generate(&mut rand::rngs::OsRng);
    let file = given.to_tor_key_file();
    let b64 = base64::engine::general_purpose::STANDARD.encode(&file[32..96]);
    let d = add(
        &o,
        2,
        &format!("ED25519-V3:{b64} Flags=Detach Port=80,8080"),
    )
    .unwrap();
    assert!(d.generated.is_none());
    assert_eq!(d.service_id, given.address().unwrap().label());

    assert_eq!(o.list(Some(1)), a.service_id);
    assert_eq!(o.list(Some(2)), "");
    assert_eq!(o.list(None), d.service_id);

    // Another connection cannot remove connection 1's service; anyone
    // may remove a detached one.
    assert_eq!(o.remove(2, &a.service_id).unwrap_err().code, 552);
    let handles = o.handles();
    o.remove(3, &d.service_id).unwrap();
    assert_eq!(o.remove(3, &d.service_id).unwrap_err().code, 552);
    assert!(handles.iter().any(|h| h.is_stopped()));

    // Closing connection 1 stops its service.
    let b = add(&o, 1, "NEW:ED25519-V3 Flags=DiscardPK Port=81").unwrap();
    assert_eq!(
        o.list(Some(1)),
        format!("{}\r\n{}", a.service_id, b.service_id)
    );
    let handles = o.handles();
    o.connection_closed(1);
    assert!(o.is_empty());
    assert!(handles.iter().all(|h| h.is_stopped()));

    // Bounded.
    for _ in 0..MAX_EPHEMERAL_SERVICES {
        add(&o, 4, "NEW:BEST Port=80").unwrap();
    }
    assert_eq!(add(&o, 4, "NEW:BEST Port=80").unwrap_err(), 551);
    o.connection_closed(4);
    assert!(o.is_empty());
}

#[tokio::test]
async fn configured_addresses_collide_and_no_ctx_fails() {
    let given = ServiceIdentity::generate(&mut rand::rngs::OsRng);
    let addr = given.address().unwrap().to_string();
    let tmp = tempfile::tempdir().unwrap();
    let (sctx, _ready) = ctx(tmp.path());
    let o = Onions::new(Some(sctx), &[addr]);
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(&given.to_tor_key_file()[32..96]);
    assert_eq!(
        add(&o, 1, &format!("ED25519-V3:{b64} Port=80")).unwrap_err(),
        550
    );
    let none = Onions::new(None, &[]);
    assert_eq!(add(&none, 1, "NEW:BEST Port=80").unwrap_err(), 551);
}
