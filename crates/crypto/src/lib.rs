//! onionmix-crypto: every piece of Tor cryptography the link and circuit
//! layers need, for both the client and the relay side.
//!
//! The crate is sans-IO: no sockets, no async runtime, no wall clock. Time
//! is passed in as seconds since the Unix epoch (`now_unix`), randomness as a
//! [`rand_core::CryptoRngCore`] so tests can fix it. The only module that
//! touches the file system is [`keys`] (saving and loading key directories).
//!
//! | module | what |
//! |---|---|
//! | [`kdf`] | KDF-RFC5869 (HKDF-SHA256) and KDF-TOR (SHA-1 counter KDF) |
//! | [`ntor`] | the ntor circuit handshake (tor-spec 5.1.4), client and relay |
//! | [`ntor_v3`] | the ntor-v3 handshake with extension messages (proposal 332) |
//! | [`relay_crypto`] | tor1 relay cell crypto (AES-128-CTR + running SHA-1), in place |
//! | [`relay_crypto_hs`] | the onion-service virtual hop (AES-256-CTR + running SHA3-256) |
//! | [`ed25519`] | Ed25519 key pairs in tor's expanded form, curve25519 conversion |
//! | [`certs`] | Ed25519 certificates (cert-spec) and the RSA->Ed25519 cross-certificate |
//! | [`rsa_id`] | RSA identity / onion keys, fingerprints, tor's raw PKCS#1 signatures |
//! | [`x509`] | X.509 link and identity certificates (CERTS types 1, 2), TLS identity |
//! | [`link_auth`] | AUTHENTICATE method 3 (Ed25519-SHA256-RFC5705), CERTS checks |
//! | [`keys`] | relay key sets and authority key certificates, on-disk storage |
//! | [`timefmt`] | tor's document time (`YYYY-MM-DD HH:MM:SS` UTC), via the `time` crate |

#![warn(missing_docs)]

pub mod certs;
pub mod ed25519;
pub mod kdf;
pub mod keys;
pub mod link_auth;
pub mod ntor;
pub mod ntor_v3;
pub mod relay_crypto;
pub mod relay_crypto_hs;
pub mod rsa_id;
pub mod timefmt;
pub mod x509;

pub use certs::{CertError, CertType, Ed25519Cert, RsaCrosscert};
pub use ed25519::Ed25519Keypair;
pub use keys::{AuthorityKeys, RelayKeys};
pub use link_auth::{Auth3Fields, LinkAuthError, PeerIdentity};
pub use ntor::{CircuitKeys, NtorClient, NtorError, NtorSecretKey, ntor_server};
pub use ntor_v3::{Ntor3Client, Ntor3Keystream, ntor3_server};
pub use relay_crypto::{ClientCircuitCrypto, RelayCircuitCrypto, Tor1Layer};
pub use relay_crypto_hs::{HsCircuitKeys, HsRelayLayer};
pub use rsa_id::{RsaError, RsaKeypair, RsaPublic};
pub use x509::{TlsIdentity, X509Cert};
