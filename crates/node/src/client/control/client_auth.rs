//! ONION_CLIENT_AUTH_ADD / _REMOVE / _VIEW: the onion-service client's
//! authorization keys, in memory or (`Flags=Permanent`) stored in
//! `client_onion_auth_dir` as `<address>.auth_private`, tor's layout.

use tracing::debug;

use onionmix_frontend::control::{AuthAdded, ClientAuthCred, CmdError};
use onionmix_hs::OnionAddress;

use super::backend::ClientBackend;
use crate::client::hs::ClientAuthKey;

fn address(label: &str) -> Result<OnionAddress, CmdError> {
    OnionAddress::parse_host(&format!("{label}.onion"))
        .map_err(|_| CmdError::new(512, format!("Invalid v3 address \"{label}\"")))
}

impl ClientBackend {
    fn auth_file(&self, label: &str) -> Option<std::path::PathBuf> {
        self.ctx
            .cfg
            .client_onion_auth_dir
            .as_ref()
            .map(|d| d.join(format!("{label}.auth_private")))
    }

    pub(super) fn client_auth_add_impl(
        &mut self,
        cred: ClientAuthCred,
    ) -> Result<AuthAdded, CmdError> {
        let addr = address(&cred.address)?;
        let store_failed = || {
            CmdError::new(
                553,
                format!("Unable to store creds for \"{}\"", cred.address),
            )
        };
        let hs = self.ctx.hs.clone().ok_or_else(store_failed)?;
        if cred.permanent {
            let path = self.auth_file(&cred.address).ok_or_else(store_failed)?;
            let line =
                zeroize::Zeroizing::new(onionmix_hs::auth::client_auth_line(&addr, &cred.secret));
            onionmix_fsutil::write_private_atomic(&path, format!("{}\n", line.as_str())).map_err(
                |e| {
                    debug!("cannot write {}: {e}", path.display());
                    store_failed()
                },
            )?;
        }
        let key = ClientAuthKey {
            secret: cred.secret.clone(),
            permanent: cred.permanent,
            name: cred.name.clone(),
        };
        match hs.add_client_auth(*addr.key(), key) {
            Some(true) => Ok(AuthAdded::Replaced),
            Some(false) => Ok(AuthAdded::Added),
            None => Err(store_failed()),
        }
    }

    pub(super) fn client_auth_remove_impl(&mut self, label: &str) -> Result<bool, CmdError> {
        let addr = address(label)?;
        let Some(hs) = self.ctx.hs.clone() else {
            return Ok(false);
        };
        let Some(old) = hs.remove_client_auth(addr.key()) else {
            return Ok(false);
        };
        if old.permanent
            && let Some(path) = self.auth_file(label)
        {
            let _ = std::fs::remove_file(path);
        }
        Ok(true)
    }

    pub(super) fn client_auth_view_impl(&mut self) -> Vec<ClientAuthCred> {
        let Some(hs) = self.ctx.hs.clone() else {
            return Vec::new();
        };
        hs.client_auth_keys()
            .into_iter()
            .filter_map(|(service, k)| {
                Some(ClientAuthCred {
                    address: OnionAddress::from_key(service).ok()?.label(),
                    secret: k.secret,
                    permanent: k.permanent,
                    name: k.name,
                })
            })
            .collect()
    }
}
