//! The service's descriptors: one slot per time period (blinded key,
//! signing key, upload schedule, the last descriptor built, the PoW
//! seed and verifier), building with both layers, and uploading to an
//! HSDir with `POST /tor/hs/3/publish` over `BEGIN_DIR`.

use std::sync::Arc;

use rand::rngs::OsRng;
use tokio::sync::mpsc;
use tracing::debug;

use onionmix_hs::desc::service::{DescSigningKey, DescriptorInput, build_descriptor};
use onionmix_hs::desc::{DescError, IntroPointInfo};
use onionmix_hs::keys::{BlindedService, ServiceIdentity};
use onionmix_hs::service::intro::IntroPointSet;
use onionmix_hs::service::publish::UploadSchedule;

use super::{Ev, IntroKeys, OnionServiceConfig, ServiceCtx};
use crate::client::circuit::HopTarget;
use crate::client::hs::net::{HsNet, hsdir_request};

/// The descriptor of one time period.
pub(super) struct DescSlot {
    pub blinded: Arc<BlindedService>,
    signing: DescSigningKey,
    pub schedule: UploadSchedule,
    pub text: Option<Arc<String>>,
    /// PoW verifier and the parameters the descriptor offers.
    #[cfg(feature = "pow")]
    pub pow: Option<(
        onionmix_hs::pow::PowVerifier,
        onionmix_hs::desc::PowParamsV1,
    )>,
}

/// What a descriptor is built from.
pub(super) struct BuildInput<'a> {
    pub intros: &'a IntroPointSet<Arc<IntroKeys>>,
    pub net: &'a HsNet,
    pub now: u64,
    pub is_current: bool,
    pub auth_clients: Option<&'a [[u8; 32]]>,
}

/// How long a PoW seed is offered (tor rotates seeds every few hours;
/// onionmix uses one per time period, valid past the period's end).
#[cfg(feature = "pow")]
const POW_SEED_LIFETIME: u64 = 24 * 3600;

impl DescSlot {
    pub fn new(
        id: &ServiceIdentity,
        net: &HsNet,
        period: u64,
        testing: bool,
        cfg: &OnionServiceConfig,
    ) -> Result<Self, String> {
        let blinded = id.blind(&net.schedule, period).map_err(|e| e.to_string())?;
        #[cfg(feature = "pow")]
        let pow = cfg.pow_defenses.then(|| {
            let seed: [u8; 32] = rand::random();
            let params = onionmix_hs::desc::PowParamsV1 {
                seed,
                suggested_effort: cfg.pow_suggested_effort,
                expires: crate::clock::now_unix().saturating_add(POW_SEED_LIFETIME),
            };
            (
                onionmix_hs::pow::PowVerifier::new(*blinded.public(), seed),
                params,
            )
        });
        #[cfg(not(feature = "pow"))]
        let _ = cfg;
        Ok(Self {
            blinded: Arc::new(blinded),
            signing: DescSigningKey::generate(&mut OsRng),
            schedule: UploadSchedule::new(period, testing),
            text: None,
            #[cfg(feature = "pow")]
            pow,
        })
    }

    /// Build a new descriptor (new revision counter) from the established
    /// introduction points.
    pub fn rebuild(&mut self, b: &BuildInput<'_>) -> Result<(), DescError> {
        let ips: Vec<IntroPointInfo> = b
            .intros
            .established()
            .map(|p| IntroPointInfo {
                link_specifiers: p.keys.hop.link_specs(),
                onion_key: p.keys.hop.ntor_key,
                auth_key: p.keys.auth.public(),
                enc_key: p.keys.enc_pub,
            })
            .collect();
        let revision =
            self.blinded
                .revision_counter(&b.net.schedule, b.net.valid_after, b.now, b.is_current);
        let mut input = DescriptorInput::new(&self.blinded, &self.signing, revision, b.now, &ips);
        input.auth_clients = b.auth_clients;
        // Proposal 324 §9.1: advertise congestion control (and the
        // SENDME increment clients must use) only while it is enabled.
        input.flow_control_sendme_inc = b.net.cc.onion_descriptor_sendme_inc();
        #[cfg(feature = "pow")]
        {
            input.pow_v1 = self.pow.as_ref().map(|(_, p)| *p);
        }
        let text = build_descriptor(&input, &mut OsRng)?;
        debug!(
            "built the descriptor of period {} (revision {revision}, {} introduction points)",
            self.schedule.period(),
            ips.len()
        );
        self.text = Some(Arc::new(text));
        Ok(())
    }
}

/// Upload `text` to `hsdir` and report the outcome.
pub(super) async fn upload(
    ctx: ServiceCtx,
    hsdir: HopTarget,
    text: Arc<String>,
    period: u64,
    tx: mpsc::Sender<Ev>,
) {
    let mut req = format!(
        "POST {} HTTP/1.0\r\nContent-Length: {}\r\n\r\n",
        onionmix_hs::desc::cache::PUBLISH_PATH,
        text.len()
    )
    .into_bytes();
    req.extend_from_slice(text.as_bytes());
    // The HS_DESC FAILED reasons are tor's (`handle_response_upload_hsdesc`):
    // 400 is UPLOAD_REJECTED, any other answer UNEXPECTED. tor reports
    // nothing when the HSDir cannot be reached; we say UNEXPECTED, so a
    // controller waiting for the upload learns that it failed.
    let asked = hsdir_request(
        &ctx.dir,
        &ctx.circmgr,
        &hsdir,
        &req,
        64 * 1024,
        ("HS_SERVICE_HSDIR", ctx.rend_query.as_deref()),
    );
    let failure = match asked.await {
        Ok((200, _)) => None,
        Ok((status, body)) => {
            debug!(
                "HSDir {} refused the descriptor: {status} {}",
                hsdir.nickname,
                onionmix_http::sanitize(&String::from_utf8_lossy(&body), 200)
            );
            Some(if status == 400 {
                "UPLOAD_REJECTED"
            } else {
                "UNEXPECTED"
            })
        }
        Err(e) => {
            debug!("upload to HSDir {} failed: {e}", hsdir.nickname);
            Some("UNEXPECTED")
        }
    };
    let _ = tx
        .send(Ev::Uploaded {
            period,
            hsdir: hsdir.rsa_id,
            nickname: hsdir.nickname.clone(),
            failure,
        })
        .await;
}
