//! HSFETCH and HSPOST: the relays `SERVER=` names, the fetches (made by
//! the onion-service client, `client::hs::control_fetch`) and the
//! uploads of a controller's descriptor, as stock tor 0.4.9 makes them
//! (`hs_control_hsfetch_command`, `hs_control_hspost_command`). Both
//! return at once; what happens is reported with `HS_DESC` events. At
//! most [`MAX_CONTROL_HS_REQUESTS`] such HSDir requests are in flight for
//! all controllers together.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::debug;

use onionmix_frontend::control::onion::hs_desc_event;
use onionmix_frontend::control::{CmdError, HsDescEvent, HsDirName, HsFetch, HsPost};
use onionmix_hs::OnionAddress;
use onionmix_hs::ring::RingKind;
use onionmix_netdoc::NetDir;

use super::ClientBackend;
use crate::client::circuit::HopTarget;
use crate::client::control::hub::ControlHub;
use crate::client::dir::DirMgr;
use crate::client::hs::net::{HsNet, hsdir_request};

/// Most HSDir requests started by HSFETCH / HSPOST in flight at once
/// (tor has no limit); more are refused with 551.
pub const MAX_CONTROL_HS_REQUESTS: usize = 32;

/// Largest answer read from an HSDir after an upload.
const UPLOAD_ANSWER_MAX: usize = 64 * 1024;

/// The relay id of a `SERVER=` as tor's `node_get_by_hex_id` reads it:
/// `$FP`, `FP`, or either followed by `~nick` (any nickname of up to 19
/// characters: tor 0.4.9 does not compare it) or `=nick` (names nothing
/// any more: no relay is Named).
pub fn server_id(spec: &str) -> Option<[u8; 20]> {
    let s = spec.strip_prefix('$').unwrap_or(spec);
    let hex_id = s.get(..40)?;
    match s.as_bytes().get(40) {
        None => {}
        Some(b'~') if s.len() <= 40 + 1 + 19 => {}
        Some(_) => return None,
    }
    if !hex_id.bytes().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    hex::decode(hex_id).ok()?.try_into().ok()
}

/// The relay a `SERVER=` names ([`server_id`]); it must be in the
/// consensus with a microdescriptor (to be reached).
pub fn server_hop(nd: &NetDir, spec: &str) -> Option<HopTarget> {
    nd.relay_by_rsa_id(&server_id(spec)?).map(DirMgr::hs_hop)
}

/// HSFETCH requests in flight per service (tor's
/// `directory_request_is_pending`); bounded by the request permits.
#[derive(Debug, Default)]
pub struct PendingFetches(std::sync::Mutex<std::collections::HashMap<[u8; 32], usize>>);

impl PendingFetches {
    fn start(&self, key: &[u8; 32]) {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let n = m.entry(*key).or_insert(0);
        *n = n.saturating_add(1);
    }

    /// One request for `key` ended; how many are still in flight.
    fn finish(&self, key: &[u8; 32]) -> usize {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let left = m.get(key).map_or(0, |n| n.saturating_sub(1));
        if left == 0 {
            m.remove(key);
        } else {
            m.insert(*key, left);
        }
        left
    }
}

/// `n` permits of `sem`, one per request (each released when its request
/// ends), or None if fewer are free.
fn take_permits(sem: &Arc<Semaphore>, n: usize) -> Option<Vec<OwnedSemaphorePermit>> {
    let all = sem
        .clone()
        .try_acquire_many_owned(u32::try_from(n).ok()?)
        .ok()?;
    let mut out = Vec::with_capacity(n);
    let mut all = Some(all);
    for _ in 1..n {
        if let Some(p) = all.as_mut().and_then(|a| a.split(1)) {
            out.push(p);
        }
    }
    out.extend(all);
    Some(out)
}

fn busy() -> CmdError {
    CmdError::new(551, "Too many HSFETCH/HSPOST requests in progress")
}

impl ClientBackend {
    fn server_hops(&self, servers: &[String]) -> Result<Vec<HopTarget>, CmdError> {
        let nd = self.dir().netdir();
        servers
            .iter()
            .map(|s| {
                nd.as_deref()
                    .and_then(|nd| server_hop(nd, s))
                    .ok_or_else(|| CmdError::new(552, format!("Server \"{s}\" not found")))
            })
            .collect()
    }

    fn permits(&self, n: usize) -> Result<Vec<OwnedSemaphorePermit>, CmdError> {
        take_permits(&self.ctx.hs_requests, n).ok_or_else(busy)
    }

    pub(super) fn hs_server_known_impl(&self, server: &str) -> bool {
        self.dir()
            .netdir()
            .is_some_and(|nd| server_hop(&nd, server).is_some())
    }

    pub(super) fn hs_fetch_impl(&self, req: &HsFetch) -> Result<(), CmdError> {
        let hs = self
            .ctx
            .hs
            .clone()
            .ok_or_else(|| CmdError::new(551, "Onion services are disabled"))?;
        let addr = OnionAddress::from_key(req.key)
            .map_err(|_| CmdError::new(513, format!("Invalid argument \"{}\"", req.address)))?;
        let mut targets = self.server_hops(&req.servers)?;
        let n = targets.len().max(1);
        let mut permits = self.permits(n)?;
        if targets.is_empty() {
            match hs.control_fetch_pick(&addr, true) {
                Some(h) => targets.push(h),
                None => return Ok(()),
            }
        }
        for hsdir in targets {
            let (hs, addr, permit) = (hs.clone(), addr, permits.pop());
            let pending = self.ctx.hs_pending.clone();
            pending.start(addr.key());
            tokio::spawn(async move {
                hs.control_fetch_from(&addr, &hsdir).await;
                // tor: a request that ends without a usable descriptor,
                // none other pending, is followed by one to the next
                // responsible HSDir not asked recently, until none is left.
                while pending.finish(addr.key()) == 0 && !hs.control_has_desc(&addr) {
                    let Some(next) = hs.control_fetch_pick(&addr, false) else {
                        break;
                    };
                    pending.start(addr.key());
                    hs.control_fetch_from(&addr, &next).await;
                }
                drop(permit);
            });
        }
        Ok(())
    }

    pub(super) fn hs_post_impl(&self, req: HsPost) -> Result<(), CmdError> {
        let invalid = || CmdError::new(554, "Invalid descriptor");
        let text = std::str::from_utf8(&req.body).map_err(|_| invalid())?;
        let now = crate::clock::now_unix();
        // As tor: only the plaintext part is checked (what an HSDir
        // checks before storing).
        let outer = onionmix_hs::desc::hsdir::parse_outer(text, now).map_err(|e| {
            debug!("HSPOST: {e}");
            invalid()
        })?;
        let blinded = outer.blinded_key;
        let mut targets = self.server_hops(&req.servers)?;
        if req.servers.is_empty() {
            // tor: the current time period, the first store ring.
            if let Ok(net) = HsNet::current(self.dir()) {
                targets = net.responsible(RingKind::StoreFirst, &blinded, net.plan.fetch.period);
            }
        }
        if targets.is_empty() {
            return Ok(());
        }
        let mut permits = self.permits(targets.len())?;
        let mut http = format!(
            "POST {} HTTP/1.0\r\nContent-Length: {}\r\n\r\n",
            onionmix_hs::desc::cache::PUBLISH_PATH,
            req.body.len()
        )
        .into_bytes();
        http.extend_from_slice(&req.body);
        let http = Arc::new(http);
        for hsdir in targets {
            let permit = permits.pop();
            let (hub, dir, circmgr) = (
                self.ctx.hub.clone(),
                self.ctx.dir.clone(),
                self.ctx.circmgr.clone(),
            );
            let (address, http) = (req.address.clone(), http.clone());
            tokio::spawn(async move {
                let purpose = ("HS_SERVICE_HSDIR", Some(address.as_str()));
                let r =
                    hsdir_request(&dir, &circmgr, &hsdir, &http, UPLOAD_ANSWER_MAX, purpose).await;
                report_upload(&hub, &address, &blinded, &hsdir, r);
                drop(permit);
            });
        }
        Ok(())
    }
}

/// tor's events for an upload's end (`handle_response_upload_hsdesc`):
/// 200 UPLOADED, 400 FAILED `UPLOAD_REJECTED`, any other answer FAILED
/// `UNEXPECTED`. tor reports nothing when the HSDir cannot be reached; we
/// say `UNEXPECTED`, so a controller learns the upload ended.
fn report_upload(
    hub: &ControlHub,
    address: &str,
    blinded: &[u8; 32],
    hsdir: &HopTarget,
    r: Result<(u16, Vec<u8>), String>,
) {
    let name = HsDirName {
        rsa_id: hsdir.rsa_id,
        nickname: hsdir.nickname.clone(),
    };
    let ev = match r {
        Ok((200, _)) => HsDescEvent::Uploaded { hsdir: name },
        Ok((status, _)) => {
            debug!("HSPOST: HSDir {} answered {status}", hsdir.nickname);
            HsDescEvent::UploadFailed {
                hsdir: name,
                reason: if status == 400 {
                    "UPLOAD_REJECTED"
                } else {
                    "UNEXPECTED"
                },
            }
        }
        Err(e) => {
            debug!("HSPOST: HSDir {} unreachable: {e}", hsdir.nickname);
            HsDescEvent::UploadFailed {
                hsdir: name,
                reason: "UNEXPECTED",
            }
        }
    };
    hub.emit("HS_DESC", || hs_desc_event(address, blinded, &ev));
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

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

    #[test]
    fn upload_outcomes_reported_as_tor() {
        let hub = ControlHub::new();
        let (sub, mut rx) = hub.subscribe().unwrap();
        let mut m = onionmix_frontend::control::events::EventMask::default();
        assert!(m.add("HS_DESC"));
        hub.set_mask(sub, m);
        let addr = "a".repeat(56);
        let blinded = [7u8; 32];
        let id = onionmix_frontend::control::onion::desc_id(&blinded);
        let fp = format!("${}~r1", "01".repeat(20));
        let cases = [
            (
                Ok((200, Vec::new())),
                format!("UPLOADED {addr} UNKNOWN {fp}"),
            ),
            (
                Ok((400, Vec::new())),
                format!("FAILED {addr} NO_AUTH {fp} {id} REASON=UPLOAD_REJECTED"),
            ),
            (
                Ok((503, Vec::new())),
                format!("FAILED {addr} NO_AUTH {fp} {id} REASON=UNEXPECTED"),
            ),
            (
                Err("timed out".to_string()),
                format!("FAILED {addr} NO_AUTH {fp} {id} REASON=UNEXPECTED"),
            ),
        ];
        for (r, want) in cases {
            report_upload(&hub, &addr, &blinded, &hop(1), r);
            let got = rx.try_recv().unwrap();
            assert_eq!(
                String::from_utf8(got).unwrap(),
                format!("650 HS_DESC {want}\r\n")
            );
        }
    }

    #[test]
    fn server_ids_as_tor_reads_them() {
        let fp = "0A".repeat(20);
        let id = Some([0x0a; 20]);
        assert_eq!(server_id(&format!("${fp}")), id);
        assert_eq!(server_id(&fp), id);
        assert_eq!(server_id(&format!("${fp}~anynick")), id);
        assert_eq!(server_id(&format!("${fp}~")), id);
        assert_eq!(server_id(&format!("${fp}~{}", "n".repeat(20))), None);
        assert_eq!(server_id(&format!("${fp}=nick")), None);
        assert_eq!(server_id(&format!("${fp}0")), None);
        assert_eq!(server_id(&fp[..39]), None);
        assert_eq!(server_id("nickname"), None);
        assert_eq!(server_id(""), None);
        assert_eq!(server_id(&format!("${}", "ZZ".repeat(20))), None);
        assert_eq!(server_id(&format!("{}é", "0".repeat(39))), None);
    }

    #[test]
    fn pending_fetches_counted_and_forgotten() {
        let p = PendingFetches::default();
        p.start(&[1; 32]);
        p.start(&[1; 32]);
        assert_eq!(p.finish(&[1; 32]), 1);
        assert_eq!(p.finish(&[1; 32]), 0);
        assert_eq!(p.finish(&[1; 32]), 0);
        assert!(p.0.lock().unwrap().is_empty());
    }

    #[test]
    fn permits_one_per_request_and_bounded() {
        let sem = Arc::new(Semaphore::new(4));
        let mut three = take_permits(&sem, 3).unwrap();
        assert_eq!(three.len(), 3);
        assert_eq!(sem.available_permits(), 1);
        assert!(take_permits(&sem, 2).is_none());
        three.pop();
        assert_eq!(sem.available_permits(), 2);
        assert_eq!(take_permits(&sem, 2).unwrap().len(), 2);
        drop(three);
        assert_eq!(sem.available_permits(), 4);
    }
}
