//! Ephemeral onion services (ADD_ONION / DEL_ONION, `GETINFO
//! onions/current` and `onions/detached`): which control connection owns
//! which service, bounded, and stopping a connection's services when it
//! closes, as tor does.

use std::sync::Mutex;

use rand::rngs::OsRng;
use tracing::{debug, info};
use zeroize::Zeroizing;

use onionmix_frontend::control::{AddOnion, AddedOnion, CmdError, OnionKey};
use onionmix_hs::keys::ServiceIdentity;

use super::backend::ClientBackend;
use crate::service::{OnionServiceConfig, ServiceCtx, ServiceHandle};

/// Most ephemeral services at once (tor has no limit; each one keeps
/// introduction circuits and uploads descriptors).
pub const MAX_EPHEMERAL_SERVICES: usize = 64;

struct Entry {
    /// The address without `.onion`.
    id: String,
    /// The control connection (event subscription id) that owns it; None:
    /// detached.
    owner: Option<u64>,
    handle: ServiceHandle,
}

/// The ephemeral services and what they need to start.
pub struct Onions {
    ctx: Option<ServiceCtx>,
    /// Addresses (without `.onion`) of the services from the config file.
    configured: Vec<String>,
    entries: Mutex<Vec<Entry>>,
}

impl std::fmt::Debug for Onions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Onions").finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Onions {
    /// A registry starting services with `ctx` (None: ADD_ONION fails with
    /// 551), next to the configured services at `configured`
    /// (`<56>.onion`).
    pub fn new(ctx: Option<ServiceCtx>, configured: &[String]) -> Self {
        Onions {
            ctx,
            configured: configured
                .iter()
                .map(|a| a.trim_end_matches(".onion").to_string())
                .collect(),
            entries: Mutex::new(Vec::new()),
        }
    }

    /// `onions/current` (owned by `owner`) or `onions/detached` (None):
    /// the addresses, in creation order, one per line.
    pub fn list(&self, owner: Option<u64>) -> String {
        lock(&self.entries)
            .iter()
            .filter(|e| e.owner == owner)
            .map(|e| e.id.as_str())
            .collect::<Vec<_>>()
            .join("\r\n")
    }

    /// Number of ephemeral services.
    pub fn len(&self) -> usize {
        lock(&self.entries).len()
    }

    /// True if there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// ADD_ONION for connection `conn`.
    pub fn add(&self, conn: u64, req: &AddOnion) -> Result<AddedOnion, CmdError> {
        let failed = || CmdError::new(551, "Failed to add Onion Service");
        let ctx = self.ctx.clone().ok_or_else(failed)?;
        let (id, generated) = match &req.key {
            OnionKey::Generate => {
                let id = ServiceIdentity::generate(&mut OsRng);
                let file = Zeroizing::new(id.to_tor_key_file());
                let mut k = Zeroizing::new([0u8; 64]);
                let src = file
                    .get(file.len().saturating_sub(64)..)
                    .filter(|s| s.len() == 64)
                    .ok_or_else(failed)?;
                k.copy_from_slice(src);
                (id, Some(k))
            }
            OnionKey::Given(k) => (
                ServiceIdentity::from_expanded(k)
                    .map_err(|_| CmdError::new(551, "Failed to generate onion address"))?,
                None,
            ),
        };
        let service_id = id
            .address()
            .map_err(|_| CmdError::new(551, "Failed to generate onion address"))?
            .label();
        let mut entries = lock(&self.entries);
        if self.configured.contains(&service_id) || entries.iter().any(|e| e.id == service_id) {
            return Err(CmdError::new(550, "Onion address collision"));
        }
        if entries.len() >= MAX_EPHEMERAL_SERVICES {
            info!("ADD_ONION refused: {MAX_EPHEMERAL_SERVICES} ephemeral onion services already");
            return Err(failed());
        }
        let ports = req.ports.iter().map(|(v, t)| format!("{v} {t}")).collect();
        let cfg = OnionServiceConfig::ephemeral(
            ports,
            usize::from(req.max_streams),
            req.max_streams_close_circuit,
        );
        let auth = (!req.client_auth_v3.is_empty())
            .then(|| req.client_auth_v3.iter().map(|(_, k)| *k).collect());
        let handle = crate::service::start_ephemeral(ctx, cfg, id, auth).map_err(|e| {
            debug!("ADD_ONION: {e}");
            failed()
        })?;
        entries.push(Entry {
            id: service_id.clone(),
            owner: (!req.detach).then_some(conn),
            handle,
        });
        Ok(AddedOnion {
            service_id,
            generated,
        })
    }

    /// DEL_ONION from connection `conn`: a service it owns or a detached
    /// one.
    pub fn remove(&self, conn: u64, service_id: &str) -> Result<(), CmdError> {
        let mut entries = lock(&self.entries);
        let pos = entries
            .iter()
            .position(|e| e.id == service_id && e.owner.is_none_or(|o| o == conn))
            .ok_or_else(|| CmdError::new(552, "Unknown Onion Service id"))?;
        let e = entries.remove(pos);
        e.handle.stop();
        Ok(())
    }

    /// The connection `conn` closed: stop the services it owns.
    pub fn connection_closed(&self, conn: u64) {
        let mut entries = lock(&self.entries);
        entries.retain(|e| {
            if e.owner == Some(conn) {
                e.handle.stop();
                false
            } else {
                true
            }
        });
    }

    /// The running ephemeral services (for the status file).
    pub fn handles(&self) -> Vec<ServiceHandle> {
        lock(&self.entries)
            .iter()
            .map(|e| e.handle.clone())
            .collect()
    }
}

impl ClientBackend {
    pub(super) fn add_onion_impl(&mut self, req: &AddOnion) -> Result<AddedOnion, CmdError> {
        self.ctx.onions.add(self.sub_id, req)
    }

    pub(super) fn del_onion_impl(&mut self, service_id: &str) -> Result<(), CmdError> {
        self.ctx.onions.remove(self.sub_id, service_id)
    }
}

#[cfg(test)]
#[path = "onions_tests.rs"]
mod tests;
