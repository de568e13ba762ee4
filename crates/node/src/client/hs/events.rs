//! `HS_DESC` / `HS_DESC_CONTENT` events of the client's descriptor
//! fetches (control-spec §4.1.25-26), formatted by
//! `onionmix_frontend::control::onion` and sent only when a controller
//! asked for them.

use onionmix_frontend::control::onion::{hs_desc_content_event, hs_desc_event};
use onionmix_frontend::control::{HsDescEvent, HsDirName};
use onionmix_hs::OnionAddress;
use onionmix_hs::ring::{RingKind, RingSpec, hsdir_index};

use super::net::HsNet;
use crate::client::circuit::HopTarget;
use crate::client::control::hub::ControlHub;

/// The events of one descriptor fetch.
pub(super) struct FetchEvents<'a> {
    hub: Option<&'a ControlHub>,
    address: String,
    blinded: [u8; 32],
    spec: RingSpec,
    period_len: u64,
}

impl FetchEvents<'_> {
    /// The service's address without `.onion`.
    pub(super) fn address(&self) -> &str {
        &self.address
    }
}

fn name(h: &HopTarget) -> HsDirName {
    HsDirName {
        rsa_id: h.rsa_id,
        nickname: h.nickname.clone(),
    }
}

impl<'a> FetchEvents<'a> {
    pub fn new(
        hub: Option<&'a ControlHub>,
        addr: &OnionAddress,
        blinded: &[u8; 32],
        net: &HsNet,
    ) -> Self {
        FetchEvents {
            hub,
            address: addr.label(),
            blinded: *blinded,
            spec: net.plan.spec(RingKind::Fetch),
            period_len: net.schedule.period_length_minutes(),
        }
    }

    fn emit(&self, ev: HsDescEvent) {
        if let Some(hub) = self.hub {
            hub.emit("HS_DESC", || {
                hs_desc_event(&self.address, &self.blinded, &ev)
            });
        }
    }

    fn content(&self, h: Option<&HopTarget>, body: &[u8]) {
        if let Some(hub) = self.hub {
            hub.emit("HS_DESC_CONTENT", || {
                hs_desc_content_event(
                    &self.address,
                    &self.blinded,
                    h.map(name).as_ref(),
                    &String::from_utf8_lossy(body),
                )
            });
        }
    }

    /// A request to `h` starts (`HSDIR_INDEX`: its fetch-ring index).
    pub fn requested(&self, h: &HopTarget) {
        let Some(ed) = &h.ed_id else {
            return;
        };
        let idx = hsdir_index(ed, &self.spec.srv, self.spec.period, self.period_len);
        self.emit(HsDescEvent::Requested {
            hsdir: name(h),
            hsdir_index: idx,
        });
    }

    /// `h` gave a usable descriptor.
    pub fn received(&self, h: &HopTarget, body: &[u8]) {
        self.emit(HsDescEvent::Received { hsdir: name(h) });
        self.content(Some(h), body);
    }

    /// The request to `h` failed with `reason` (tor's: NOT_FOUND for 404,
    /// QUERY_REJECTED for 400, UNEXPECTED, BAD_DESC); None: no HSDir at
    /// all (QUERY_NO_HSDIR).
    pub fn failed(&self, h: Option<&HopTarget>, reason: &'static str) {
        self.emit(HsDescEvent::FetchFailed {
            hsdir: h.map(name),
            reason,
        });
        if h.is_some() {
            self.content(h, b"");
        }
    }
}

/// tor's HS_DESC FAILED reason for an HSDir's HTTP status.
pub(super) fn status_reason(status: u16) -> &'static str {
    match status {
        404 => "NOT_FOUND",
        400 => "QUERY_REJECTED",
        _ => "UNEXPECTED",
    }
}
