//! Network directory: the reference's SQLite node database and key files,
//! and our own signed directory document.
//!
//! Reference formats (UCL-InfoSec/loopix):
//! - SQLite tables `Mixnodes(id, name, port, host, pubk, groupId)`,
//!   `Providers(id, name, port, host, pubk)`,
//!   `Users(id, name, port, host, pubk, provider)`; `pubk` is a petlib-packed
//!   EcPt (our x25519 networks store the raw 32-byte key there);
//! - `secret*.prv`: petlib-packed Bn; `public*.bin`:
//!   `["mixnode", name, port, host, group, pub]`,
//!   `["provider", name, port, host, pub]`, `["client", name, port, host, pub, provider]`.
//!
//! Signed directory (ours): a JSON file
//! `{"signed": base64(directory JSON), "signing_key": hex(ed25519 public), "signature": hex}`
//! where the signature is Ed25519 over the exact decoded bytes of `signed`.

use std::collections::BTreeMap;
use std::path::Path;

use base64::Engine;
use ed25519_dalek::Signer;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::loopix::codec::{ProfileKind, PublicKey};
use crate::sphinx::msgpack::Value;

#[derive(Debug, Error)]
pub enum DirectoryError {
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
    #[error("bad public key for node {0}")]
    BadKey(String),
    #[error("directory signature does not verify")]
    BadSignature,
    #[error("directory signed by an untrusted key")]
    UntrustedKey,
    #[error("malformed directory: {0}")]
    Malformed(String),
    #[error("directory too large ({0} nodes; limit {1})")]
    TooLarge(usize, usize),
}

/// Upper bound on nodes accepted from any directory source.
pub const MAX_NODES: usize = 100_000;

#[derive(Clone, Debug, PartialEq)]
pub struct NodeInfo {
    pub name: String,
    pub host: String,
    pub port: u16,
    pub key: PublicKey,
}

#[derive(Clone, Debug, PartialEq)]
pub struct MixInfo {
    pub node: NodeInfo,
    pub layer: u32,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ClientInfo {
    pub node: NodeInfo,
    pub provider: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Directory {
    pub profile: ProfileKind,
    pub mixes: Vec<MixInfo>,
    pub providers: Vec<NodeInfo>,
    pub clients: Vec<ClientInfo>,
}

impl Directory {
    /// Mixes grouped by layer, layers in ascending order (the reference's
    /// `group_layered_topology`).
    pub fn layers(&self) -> Vec<Vec<&NodeInfo>> {
        let mut m: BTreeMap<u32, Vec<&NodeInfo>> = BTreeMap::new();
        for x in &self.mixes {
            m.entry(x.layer).or_default().push(&x.node);
        }
        m.into_values().collect()
    }

    pub fn layer_index_of(&self, name: &str) -> Option<usize> {
        let layer = self.mixes.iter().find(|m| m.node.name == name)?.layer;
        let mut ls: Vec<u32> = self.mixes.iter().map(|m| m.layer).collect();
        ls.sort_unstable();
        ls.dedup();
        ls.iter().position(|l| *l == layer)
    }

    pub fn provider(&self, name: &str) -> Option<&NodeInfo> {
        self.providers.iter().find(|p| p.name == name)
    }

    pub fn client(&self, name: &str) -> Option<&ClientInfo> {
        self.clients.iter().find(|c| c.node.name == name)
    }

    pub fn mix(&self, name: &str) -> Option<&NodeInfo> {
        self.mixes
            .iter()
            .find(|m| m.node.name == name)
            .map(|m| &m.node)
    }

    fn check_size(&self) -> Result<(), DirectoryError> {
        let n = self.mixes.len() + self.providers.len() + self.clients.len();
        if n > MAX_NODES {
            return Err(DirectoryError::TooLarge(n, MAX_NODES));
        }
        Ok(())
    }

    // ------------------------------------------------------------ SQLite

    /// Reads the reference's node database (`example.db`).
    pub fn from_sqlite(path: &Path, profile: ProfileKind) -> Result<Directory, DirectoryError> {
        let db = rusqlite::Connection::open_with_flags(
            path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
        )?;
        let text = |v: rusqlite::types::Value| -> Result<String, DirectoryError> {
            match v {
                rusqlite::types::Value::Text(s) => Ok(s),
                rusqlite::types::Value::Blob(b) => String::from_utf8(b)
                    .map_err(|_| DirectoryError::Malformed("non-UTF-8 name".into())),
                rusqlite::types::Value::Integer(i) => Ok(i.to_string()),
                _ => Err(DirectoryError::Malformed("name/host column".into())),
            }
        };
        let blob = |v: rusqlite::types::Value| -> Result<Vec<u8>, DirectoryError> {
            match v {
                rusqlite::types::Value::Blob(b) => Ok(b),
                rusqlite::types::Value::Text(s) => Ok(s.into_bytes()),
                _ => Err(DirectoryError::Malformed("pubk column".into())),
            }
        };
        let key = |name: &str, b: &[u8]| {
            PublicKey::from_bytes(profile, b).map_err(|_| DirectoryError::BadKey(name.to_string()))
        };
        let port =
            |p: i64| u16::try_from(p).map_err(|_| DirectoryError::Malformed(format!("port {p}")));

        let mut dir = Directory {
            profile,
            mixes: vec![],
            providers: vec![],
            clients: vec![],
        };
        let mut st =
            db.prepare("SELECT name, port, host, pubk, groupId FROM Mixnodes LIMIT 100001")?;
        let rows = st.query_map([], |r| {
            Ok((
                r.get::<_, rusqlite::types::Value>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, rusqlite::types::Value>(2)?,
                r.get::<_, rusqlite::types::Value>(3)?,
                r.get::<_, i64>(4)?,
            ))
        })?;
        for row in rows {
            let (n, p, h, k, g) = row?;
            let name = text(n)?;
            let key = key(&name, &blob(k)?)?;
            let layer =
                u32::try_from(g).map_err(|_| DirectoryError::Malformed(format!("groupId {g}")))?;
            dir.mixes.push(MixInfo {
                node: NodeInfo {
                    name,
                    host: text(h)?,
                    port: port(p)?,
                    key,
                },
                layer,
            });
        }
        let mut st = db.prepare("SELECT name, port, host, pubk FROM Providers LIMIT 100001")?;
        let rows = st.query_map([], |r| {
            Ok((
                r.get::<_, rusqlite::types::Value>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, rusqlite::types::Value>(2)?,
                r.get::<_, rusqlite::types::Value>(3)?,
            ))
        })?;
        for row in rows {
            let (n, p, h, k) = row?;
            let name = text(n)?;
            let key = key(&name, &blob(k)?)?;
            dir.providers.push(NodeInfo {
                name,
                host: text(h)?,
                port: port(p)?,
                key,
            });
        }
        let mut st =
            db.prepare("SELECT name, port, host, pubk, provider FROM Users LIMIT 100001")?;
        let rows = st.query_map([], |r| {
            Ok((
                r.get::<_, rusqlite::types::Value>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, rusqlite::types::Value>(2)?,
                r.get::<_, rusqlite::types::Value>(3)?,
                r.get::<_, rusqlite::types::Value>(4)?,
            ))
        })?;
        for row in rows {
            let (n, p, h, k, pr) = row?;
            let name = text(n)?;
            let key = key(&name, &blob(k)?)?;
            dir.clients.push(ClientInfo {
                node: NodeInfo {
                    name,
                    host: text(h)?,
                    port: port(p)?,
                    key,
                },
                provider: text(pr)?,
            });
        }
        dir.check_size()?;
        Ok(dir)
    }

    /// Writes a database in the reference's schema (as `fabfile.readFiles`).
    pub fn to_sqlite(&self, path: &Path) -> Result<(), DirectoryError> {
        if path.exists() {
            std::fs::remove_file(path)?;
        }
        let mut db = rusqlite::Connection::open(path)?;
        let tx = db.transaction()?;
        tx.execute_batch(
            "CREATE TABLE IF NOT EXISTS Users (id INTEGER PRIMARY KEY, name blob, port integer, host text, pubk blob, provider blob);
             CREATE TABLE IF NOT EXISTS Providers (id INTEGER PRIMARY KEY, name blob, port integer, host text, pubk blob);
             CREATE TABLE IF NOT EXISTS Mixnodes (id INTEGER PRIMARY KEY, name blob, port integer, host text, pubk blob, groupId integer);",
        )?;
        for c in &self.clients {
            tx.execute(
                "INSERT INTO Users VALUES (NULL, ?1, ?2, ?3, ?4, ?5)",
                rusqlite::params![
                    c.node.name,
                    c.node.port,
                    c.node.host,
                    c.node.key.to_bytes(),
                    c.provider
                ],
            )?;
        }
        for p in &self.providers {
            tx.execute(
                "INSERT INTO Providers VALUES (NULL, ?1, ?2, ?3, ?4)",
                rusqlite::params![p.name, p.port, p.host, p.key.to_bytes()],
            )?;
        }
        for m in &self.mixes {
            tx.execute(
                "INSERT INTO Mixnodes VALUES (NULL, ?1, ?2, ?3, ?4, ?5)",
                rusqlite::params![
                    m.node.name,
                    m.node.port,
                    m.node.host,
                    m.node.key.to_bytes(),
                    m.layer
                ],
            )?;
        }
        tx.commit()?;
        Ok(())
    }

    // ------------------------------------------------------------ signed JSON

    fn to_doc(&self) -> DirDoc {
        let n = |x: &NodeInfo| DocNode {
            name: x.name.clone(),
            host: x.host.clone(),
            port: x.port,
            public_key: hex::encode(x.key.to_bytes()),
            layer: None,
            provider: None,
        };
        DirDoc {
            version: 1,
            profile: self.profile,
            mixes: self
                .mixes
                .iter()
                .map(|m| DocNode {
                    layer: Some(m.layer),
                    ..n(&m.node)
                })
                .collect(),
            providers: self.providers.iter().map(n).collect(),
            clients: self
                .clients
                .iter()
                .map(|c| DocNode {
                    provider: Some(c.provider.clone()),
                    ..n(&c.node)
                })
                .collect(),
        }
    }

    fn from_doc(d: DirDoc) -> Result<Directory, DirectoryError> {
        if d.version != 1 {
            return Err(DirectoryError::Malformed(format!("version {}", d.version)));
        }
        let node = |x: &DocNode| -> Result<NodeInfo, DirectoryError> {
            let kb =
                hex::decode(&x.public_key).map_err(|_| DirectoryError::BadKey(x.name.clone()))?;
            let key = PublicKey::from_bytes(d.profile, &kb)
                .map_err(|_| DirectoryError::BadKey(x.name.clone()))?;
            Ok(NodeInfo {
                name: x.name.clone(),
                host: x.host.clone(),
                port: x.port,
                key,
            })
        };
        let mut dir = Directory {
            profile: d.profile,
            mixes: vec![],
            providers: vec![],
            clients: vec![],
        };
        for m in &d.mixes {
            let layer = m.layer.ok_or_else(|| {
                DirectoryError::Malformed(format!("mix {} without layer", m.name))
            })?;
            dir.mixes.push(MixInfo {
                node: node(m)?,
                layer,
            });
        }
        for p in &d.providers {
            dir.providers.push(node(p)?);
        }
        for c in &d.clients {
            let provider = c.provider.clone().ok_or_else(|| {
                DirectoryError::Malformed(format!("client {} without provider", c.name))
            })?;
            dir.clients.push(ClientInfo {
                node: node(c)?,
                provider,
            });
        }
        dir.check_size()?;
        Ok(dir)
    }

    /// Serialises and signs the directory.
    pub fn sign(&self, key: &ed25519_dalek::SigningKey) -> Result<String, DirectoryError> {
        let body = serde_json::to_vec(&self.to_doc())?;
        let sig = key.sign(&body);
        let env = SignedEnvelope {
            signed: base64::engine::general_purpose::STANDARD.encode(&body),
            signing_key: hex::encode(key.verifying_key().to_bytes()),
            signature: hex::encode(sig.to_bytes()),
        };
        Ok(serde_json::to_string_pretty(&env)?)
    }

    /// Verifies and parses a signed directory. `trusted` is the hex Ed25519
    /// key the operator trusts; `None` accepts any valid self-signature
    /// (test networks only).
    pub fn from_signed(text: &str, trusted: Option<&str>) -> Result<Directory, DirectoryError> {
        if text.len() > 64 << 20 {
            return Err(DirectoryError::TooLarge(text.len(), 64 << 20));
        }
        let env: SignedEnvelope = serde_json::from_str(text)?;
        if let Some(t) = trusted
            && !t.eq_ignore_ascii_case(&env.signing_key)
        {
            return Err(DirectoryError::UntrustedKey);
        }
        let kb: [u8; 32] = hex::decode(&env.signing_key)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or(DirectoryError::BadSignature)?;
        let vk = ed25519_dalek::VerifyingKey::from_bytes(&kb)
            .map_err(|_| DirectoryError::BadSignature)?;
        let sb: [u8; 64] = hex::decode(&env.signature)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or(DirectoryError::BadSignature)?;
        let body = base64::engine::general_purpose::STANDARD
            .decode(&env.signed)
            .map_err(|_| DirectoryError::BadSignature)?;
        vk.verify_strict(&body, &ed25519_dalek::Signature::from_bytes(&sb))
            .map_err(|_| DirectoryError::BadSignature)?;
        Directory::from_doc(serde_json::from_slice(&body)?)
    }
}

#[derive(Serialize, Deserialize)]
struct SignedEnvelope {
    signed: String,
    signing_key: String,
    signature: String,
}

#[derive(Serialize, Deserialize)]
struct DirDoc {
    version: u32,
    profile: ProfileKind,
    mixes: Vec<DocNode>,
    providers: Vec<DocNode>,
    clients: Vec<DocNode>,
}

#[derive(Serialize, Deserialize)]
struct DocNode {
    name: String,
    host: String,
    port: u16,
    public_key: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    layer: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    provider: Option<String>,
}

/// The reference's public key file (`public*.bin`).
pub fn public_file_bytes(
    kind: &str,
    n: &NodeInfo,
    layer: Option<u32>,
    provider: Option<&str>,
) -> Vec<u8> {
    let pubv = Value::decode(&n.key.to_bytes()).unwrap_or_else(|_| Value::Bin(n.key.to_bytes()));
    let mut v = vec![
        Value::str(kind),
        Value::str(&n.name),
        Value::Int(i128::from(n.port)),
        Value::str(&n.host),
    ];
    match kind {
        "mixnode" => {
            v.push(Value::Int(i128::from(layer.unwrap_or(0))));
            v.push(pubv);
        }
        "client" => {
            v.push(pubv);
            v.push(Value::str(provider.unwrap_or("")));
        }
        _ => v.push(pubv),
    }
    Value::Array(v).encode()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loopix::codec::SecretKey;

    fn sample(kind: ProfileKind) -> Directory {
        let mut rng = rand::thread_rng();
        let mut n = |name: &str, port: u16| NodeInfo {
            name: name.into(),
            host: "127.0.0.1".into(),
            port,
            key: SecretKey::generate(kind, &mut rng).public(),
        };
        Directory {
            profile: kind,
            mixes: vec![
                MixInfo {
                    node: n("m0", 1),
                    layer: 0,
                },
                MixInfo {
                    node: n("m1", 2),
                    layer: 1,
                },
            ],
            providers: vec![n("p0", 3)],
            clients: vec![ClientInfo {
                node: n("c0", 4),
                provider: "p0".into(),
            }],
        }
    }

    #[test]
    fn sqlite_roundtrip() {
        let d = tempfile::tempdir().expect("tempdir");
        for kind in [ProfileKind::Sphinxmix, ProfileKind::X25519] {
            let dir = sample(kind);
            let p = d.path().join(format!("{kind}.db"));
            dir.to_sqlite(&p).expect("write");
            assert_eq!(Directory::from_sqlite(&p, kind).expect("read"), dir);
        }
    }

    #[test]
    fn signed_roundtrip_and_tamper() {
        let dir = sample(ProfileKind::Sphinxmix);
        let key = ed25519_dalek::SigningKey::from_bytes(&[9u8; 32]);
        let text = dir.sign(&key).expect("sign");
        let trusted = hex::encode(key.verifying_key().to_bytes());
        assert_eq!(
            Directory::from_signed(&text, Some(&trusted)).expect("verify"),
            dir
        );
        assert!(matches!(
            Directory::from_signed(&text, Some(&"00".repeat(32))),
            Err(DirectoryError::UntrustedKey)
        ));
        let mut env: serde_json::Value = serde_json::from_str(&text).expect("json");
        let sig = env["signature"].as_str().expect("sig").to_string();
        let flipped = format!(
            "{}{}",
            if sig.starts_with('0') { "1" } else { "0" },
            &sig[1..]
        );
        env["signature"] = serde_json::Value::String(flipped);
        assert!(Directory::from_signed(&env.to_string(), None).is_err());
    }
}
