//! Fixed keys, identities and captured documents the targets use.
//!
//! Keys come from a seeded RNG, so every process (the libFuzzer build,
//! the stable test, the seed generator) has the same ones and seeds made
//! by `examples/seeds.rs` verify everywhere. They are built once per
//! process (a few RSA key generations) and never leave it. Documents made
//! by stock tor come from the other crates' test data.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rand::SeedableRng;
use rand::rngs::StdRng;

use onionmix_crypto::keys::{AuthorityKeys, RelayKeys, key_certificate};
use onionmix_crypto::rsa_id::RsaKeypair;
use onionmix_crypto::x509::TlsIdentity;
use onionmix_mix::directory::{ClientInfo, Directory, MixInfo, NodeInfo};
use onionmix_mix::loopix::codec::{ProfileKind, SecretKey};
use onionmix_netdoc::{AuthCertificate, AuthorityConfig};
use onionmix_node::glue::RelayLinkIdentity;

/// The clock of every target that checks lifetimes: when the stock tor
/// CERTS cell in `crates/crypto/tests/data` was captured (2026-11-22
/// 13:46:04 UTC); our own keys are made valid at this time too.
pub const NOW: u64 = 1_795_355_164;

/// A time inside the captured stock tor consensus' validity (valid-after
/// 2026-11-22 13:44:20 UTC plus 5 s).
pub const NETDOC_NOW: u64 = 1_795_355_065;

/// [`NOW`] as a `SystemTime`.
pub fn now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(NOW)
}

/// [`NETDOC_NOW`] as a `SystemTime`.
pub fn netdoc_now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(NETDOC_NOW)
}

/// A deterministic RNG (keys, ephemeral secrets, path choices).
pub fn rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}

// ---------------------------------------------------------------- stock tor

/// Stock tor 0.4.9 microdesc consensus (crates/netdoc/tests/data).
pub const STOCK_CONSENSUS: &str = include_str!("../../netdoc/tests/data/consensus-microdesc");
/// The three authority key certificates that signed it.
pub const STOCK_KEYS: &str = include_str!("../../netdoc/tests/data/keys-all");
/// The network's microdescriptors.
pub const STOCK_MICRODESCS: &str = include_str!("../../netdoc/tests/data/microdescs");
/// The `DirAuthority` lines of that network.
pub const STOCK_DIRAUTHORITIES: &str = include_str!("../../netdoc/tests/data/dirauthorities.txt");
/// A CERTS cell payload a stock tor relay sent as responder (hex).
pub const STOCK_CERTS_HEX: &str =
    include_str!("../../crypto/tests/data/tor_certs_cell/certs_payload.hex");
/// The TLS certificate that relay presented.
pub const STOCK_TLS_CERT: &[u8] =
    include_bytes!("../../crypto/tests/data/tor_certs_cell/tls_cert.der");
/// A key certificate made by stock `tor-gencert`.
pub const STOCK_GENCERT: &str =
    include_str!("../../crypto/tests/data/tor_gencert/authority_certificate");

/// The configured authorities of the stock network.
pub fn stock_authorities() -> &'static [AuthorityConfig] {
    static A: OnceLock<Vec<AuthorityConfig>> = OnceLock::new();
    A.get_or_init(|| {
        STOCK_DIRAUTHORITIES
            .lines()
            .filter(|l| !l.trim().is_empty())
            .filter_map(|l| AuthorityConfig::from_dirauthority_line(l).ok())
            .collect()
    })
}

/// The stock network's authority certificates, verified at [`NETDOC_NOW`].
pub fn stock_certs() -> &'static [AuthCertificate] {
    static C: OnceLock<Vec<AuthCertificate>> = OnceLock::new();
    C.get_or_init(|| {
        AuthCertificate::parse_all(STOCK_KEYS, netdoc_now())
            .into_iter()
            .filter_map(Result::ok)
            .collect()
    })
}

/// SHA-256 of the stock relay's TLS certificate (computed once).
pub fn stock_tls_sha256() -> [u8; 32] {
    static H: OnceLock<[u8; 32]> = OnceLock::new();
    *H.get_or_init(|| {
        use sha2::Digest;
        sha2::Sha256::digest(STOCK_TLS_CERT).into()
    })
}

// ---------------------------------------------------------------- relays

/// A relay: keys, TLS identity and the link identity built from them.
pub struct RelayFixture {
    /// The relay's keys.
    pub keys: RelayKeys,
    /// Its TLS certificate.
    pub tls: TlsIdentity,
    /// CERTS payloads and AUTHENTICATE checking.
    pub link: RelayLinkIdentity,
}

fn make_relay(seed: u64) -> RelayFixture {
    let mut r = rng(seed);
    let keys = RelayKeys::generate(&mut r, NOW).expect("relay keys");
    // A 1024-bit TLS link key: it only signs the TLS certificate here.
    let link_key = RsaKeypair::generate(&mut r, 1024).expect("link key");
    let tls = TlsIdentity::with_link_key(&mut r, &keys.rsa_identity, &link_key, NOW, 7 * 86_400)
        .expect("TLS identity");
    let link = RelayLinkIdentity::new(keys.clone(), &tls, NOW).expect("link identity");
    RelayFixture { keys, tls, link }
}

/// The relay that targets play (responder, ntor server, descriptor author).
pub fn relay() -> &'static RelayFixture {
    static R: OnceLock<RelayFixture> = OnceLock::new();
    R.get_or_init(|| make_relay(1))
}

/// A second relay (the initiator in seeds for the responder).
pub fn peer_relay() -> &'static RelayFixture {
    static R: OnceLock<RelayFixture> = OnceLock::new();
    R.get_or_init(|| make_relay(2))
}

// ---------------------------------------------------------------- authority

/// A directory authority's keys (1024-bit RSA, the smallest tor-netdoc
/// accepts, so that targets can sign every input quickly) and its parsed
/// key certificate.
pub struct AuthorityFixture {
    /// Keys and certificate text.
    pub keys: AuthorityKeys,
    /// The certificate, parsed.
    pub cert: AuthCertificate,
}

/// The authority that signs votes and detached signatures in targets.
pub fn authority() -> &'static AuthorityFixture {
    static A: OnceLock<AuthorityFixture> = OnceLock::new();
    A.get_or_init(|| {
        let mut r = rng(3);
        let identity = RsaKeypair::generate(&mut r, 1024).expect("identity key");
        let signing = RsaKeypair::generate(&mut r, 1024).expect("signing key");
        let certificate = key_certificate(
            &identity,
            &signing,
            NOW - 86_400,
            NOW + 365 * 86_400,
            Some("127.0.0.1:7000"),
        )
        .expect("key certificate");
        let cert = AuthCertificate::parse(&certificate, now()).expect("own certificate");
        AuthorityFixture {
            keys: AuthorityKeys {
                identity,
                signing,
                certificate,
            },
            cert,
        }
    })
}

// ---------------------------------------------------------------- loopix

/// A small Loopix network: one provider, one mix, two clients.
pub struct LoopixFixture {
    /// The directory.
    pub dir: Arc<Directory>,
    /// The provider's secret key.
    pub provider_key: Arc<SecretKey>,
    /// The mix's secret key.
    pub mix_key: Arc<SecretKey>,
    /// The clients' secret keys (`client0`, `client1`).
    pub client_keys: Vec<SecretKey>,
}

fn make_loopix(kind: ProfileKind, seed: u64) -> LoopixFixture {
    let mut r = rng(seed);
    let mut node = |name: &str, port: u16| {
        let sk = SecretKey::generate(kind, &mut r);
        let info = NodeInfo {
            name: name.into(),
            host: "127.0.0.1".into(),
            port,
            key: sk.public(),
        };
        (sk, info)
    };
    let (provider_key, provider) = node("provider0", 30_000);
    let (mix_key, mix) = node("mix0_0", 30_001);
    let (c0k, c0) = node("client0", 30_002);
    let (c1k, c1) = node("client1", 30_003);
    let dir = Directory {
        profile: kind,
        mixes: vec![MixInfo {
            node: mix,
            layer: 0,
        }],
        providers: vec![provider],
        clients: vec![
            ClientInfo {
                node: c0,
                provider: "provider0".into(),
            },
            ClientInfo {
                node: c1,
                provider: "provider0".into(),
            },
        ],
    };
    LoopixFixture {
        dir: Arc::new(dir),
        provider_key: Arc::new(provider_key),
        mix_key: Arc::new(mix_key),
        client_keys: vec![c0k, c1k],
    }
}

/// The Loopix network of a profile.
pub fn loopix(kind: ProfileKind) -> &'static LoopixFixture {
    static P: OnceLock<LoopixFixture> = OnceLock::new();
    static X: OnceLock<LoopixFixture> = OnceLock::new();
    match kind {
        ProfileKind::Sphinxmix => P.get_or_init(|| make_loopix(kind, 4)),
        ProfileKind::X25519 => X.get_or_init(|| make_loopix(kind, 5)),
    }
}

/// Build every fixture of this module.
pub fn warm_up() {
    let _ = relay();
    let _ = peer_relay();
    let _ = authority();
    let _ = loopix(ProfileKind::Sphinxmix);
    let _ = loopix(ProfileKind::X25519);
    let _ = stock_authorities();
    let _ = stock_certs();
    let _ = stock_tls_sha256();
}
