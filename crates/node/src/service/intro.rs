//! One introduction point's circuit: three hops of ours and the point,
//! ESTABLISH_INTRO bound to the point's handshake (`KH`) and signed by the
//! point's auth key (with the DoS extension when configured), then
//! INTRODUCE2 cells passed to the service until the circuit ends.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tracing::debug;

use onionmix_cell::hs::DosParams;
use onionmix_cell::relay::RelayCmd;
use onionmix_hs::intro::establish_intro;

use super::{Ev, IntroKeys, ServiceCtx};
use crate::client::hs::net::{HsCirc, build_circuit};
use crate::reactor::hs::HsEvent;

/// Wait for INTRO_ESTABLISHED.
pub const INTRO_ESTABLISHED_TIMEOUT: Duration = Duration::from_secs(30);

pub(super) async fn run(
    ctx: ServiceCtx,
    id: u64,
    keys: Arc<IntroKeys>,
    dos: Option<DosParams>,
    tx: mpsc::Sender<Ev>,
) {
    let res: Result<(), String> = async {
        let circ = build_circuit(&ctx.dir, &ctx.circmgr, Some(&keys.hop), None, &|_| true)
            .await
            .map_err(|e| e.to_string())?;
        let kh = circ.last_hop_kh();
        let query = ctx.rend_query.as_deref();
        circ.set_control_purpose("HS_SERVICE_INTRO", Some("HSSI_CONNECTING"), query);
        let mut hs = HsCirc::attach(circ).await.map_err(|e| e.to_string())?;
        let msg = establish_intro(&keys.auth, &kh, dos).map_err(|e| e.to_string())?;
        hs.send(RelayCmd::ESTABLISH_INTRO, msg, None)
            .await
            .map_err(|e| e.to_string())?;
        hs.expect(RelayCmd::INTRO_ESTABLISHED, INTRO_ESTABLISHED_TIMEOUT)
            .await
            .map_err(|e| format!("INTRO_ESTABLISHED: {e}"))?;
        hs.circ
            .set_control_purpose("HS_SERVICE_INTRO", Some("HSSI_ESTABLISHED"), None);
        if tx.send(Ev::IntroUp(id)).await.is_err() {
            return Ok(());
        }
        while let Some(ev) = hs.next_event().await {
            if let HsEvent::Msg {
                cmd: RelayCmd::INTRODUCE2,
                data,
                ..
            } = ev
                && tx.try_send(Ev::Introduce2(id, data)).is_err()
            {
                debug!("service busy: dropping an INTRODUCE2");
            }
        }
        Err("introduction circuit closed".into())
    }
    .await;
    if let Err(e) = res {
        debug!("introduction point {id} ({}): {e}", keys.hop.nickname);
    }
    let _ = tx.send(Ev::IntroDown(id)).await;
}
