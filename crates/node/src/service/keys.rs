//! The service's key directory in tor's `HiddenServiceDir` layout, so an
//! address survives restarts and moves between tor and onionmix:
//! `hs_ed25519_secret_key` (mode 0600), `hs_ed25519_public_key`,
//! `hostname`, and `authorized_clients/<name>.auth` for client
//! authorization.

use std::path::Path;

use tracing::warn;

use onionmix_hs::keys::ServiceIdentity;

/// Most authorized clients read.
pub const MAX_AUTHORIZED_CLIENTS: usize = onionmix_hs::desc::MAX_AUTH_CLIENTS;

/// Load the identity in `dir`, or create the directory (0700) and a new
/// identity (secret key file 0600) with `hostname`.
pub fn load_or_create(dir: &Path) -> Result<ServiceIdentity, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| format!("cannot restrict {}: {e}", dir.display()))?;
    }
    let secret = dir.join("hs_ed25519_secret_key");
    let id = match std::fs::read(&secret) {
        Ok(bytes) => ServiceIdentity::from_tor_key_file(&bytes)
            .map_err(|e| format!("{}: {e}", secret.display()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let id = ServiceIdentity::generate(&mut rand::rngs::OsRng);
            onionmix_fsutil::write_private_atomic(&secret, id.to_tor_key_file())
                .map_err(|e| format!("cannot write {}: {e}", secret.display()))?;
            id
        }
        Err(e) => return Err(format!("cannot read {}: {e}", secret.display())),
    };
    let public = dir.join("hs_ed25519_public_key");
    onionmix_fsutil::write_atomic(&public, id.to_tor_public_key_file())
        .map_err(|e| format!("cannot write {}: {e}", public.display()))?;
    let addr = id.address().map_err(|e| e.to_string())?;
    let hostname = dir.join("hostname");
    onionmix_fsutil::write_atomic(&hostname, format!("{addr}\n"))
        .map_err(|e| format!("cannot write {}: {e}", hostname.display()))?;
    Ok(id)
}

/// The authorized clients' x25519 public keys from
/// `dir/authorized_clients/*.auth`; `None` when there are none (client
/// authorization off, as in tor).
pub fn authorized_clients(dir: &Path) -> Option<Vec<[u8; 32]>> {
    let d = dir.join("authorized_clients");
    let entries = std::fs::read_dir(&d).ok()?;
    let mut keys = Vec::new();
    for ent in entries.flatten() {
        let path = ent.path();
        if path.extension().and_then(|e| e.to_str()) != Some("auth") {
            continue;
        }
        let parsed = std::fs::read_to_string(&path)
            .ok()
            .filter(|t| t.len() <= 4096)
            .and_then(|t| onionmix_hs::auth::parse_authorized_client(t.trim()).ok());
        match parsed {
            Some(k) if keys.len() < MAX_AUTHORIZED_CLIENTS => keys.push(k),
            Some(_) => warn!("too many authorized clients; ignoring {}", path.display()),
            None => warn!("skipping unreadable authorized client {}", path.display()),
        }
    }
    (!keys.is_empty()).then_some(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_survives_restart_and_files_are_private() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dir = tmp.path().join("hs");
        let a = load_or_create(&dir).expect("create");
        let b = load_or_create(&dir).expect("load");
        assert_eq!(a.public(), b.public());
        let host = std::fs::read_to_string(dir.join("hostname")).expect("hostname");
        assert_eq!(host.trim(), a.address().expect("addr").to_string());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: &Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
            assert_eq!(mode(&dir.join("hs_ed25519_secret_key")), 0o600);
            assert_eq!(mode(&dir), 0o700);
        }
        assert!(authorized_clients(&dir).is_none());
        std::fs::create_dir_all(dir.join("authorized_clients")).expect("mkdir");
        let key = [5u8; 32];
        std::fs::write(
            dir.join("authorized_clients/alice.auth"),
            onionmix_hs::auth::authorized_client_line(&key),
        )
        .expect("write");
        std::fs::write(dir.join("authorized_clients/junk.auth"), "nonsense").expect("write");
        std::fs::write(dir.join("authorized_clients/readme.txt"), "x").expect("write");
        assert_eq!(authorized_clients(&dir), Some(vec![key]));
        std::fs::write(dir.join("hs_ed25519_secret_key"), b"garbage").expect("write");
        assert!(load_or_create(&dir).is_err());
    }
}
