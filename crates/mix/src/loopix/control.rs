//! Authenticated provider control messages (SUBSCRIBE, PULL) and the
//! provider's admission state machine (sans-IO).
//!
//! The reference sends `['SUBSCRIBE', name, host, port]` and `['PULL',
//! name]` in the clear, and answers a PULL with `MAX_RETRIEVE` datagrams to
//! the address the last SUBSCRIBE named: anyone could take a client's inbox
//! or aim a provider at a third party (842x amplification on the `loopix`
//! testnet). Here (wire format in docs/loopix.md):
//!
//! - a request carries a MAC under a key only the client and its provider
//!   can derive (static Diffie-Hellman of their directory keys, HKDF with
//!   both names and both public keys), over the request kind, the client's
//!   name, the provider's name and a millisecond timestamp;
//! - the timestamp must be within `CONTROL_MAX_SKEW` of the provider's clock
//!   and not seen before (a 64-slot sliding window per client, as IPsec's
//!   anti-replay window), so captured requests cannot be replayed;
//! - accepted requests are rate limited per client (`CONTROL_RATE`, by
//!   default twice the honest rate of 2 per `TIME_PULL`; `CONTROL_BURST`);
//! - refused requests are charged to their source IP; a source over its
//!   budget has its refusals counted as `source_limited` and its
//!   unauthenticated (reference-format) requests dropped before any further
//!   work. Authenticated-format requests are always verified (one HMAC), so
//!   spoofing a client's address cannot lock that client out;
//! - nothing is ever sent in reply to a refused request, and accepted ones
//!   are answered only at the client's address in the directory (the caller
//!   does that): the amplification factor for anyone without the client's
//!   key is 0.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hkdf::Hkdf;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use zeroize::Zeroizing;

use super::codec::{PublicKey, SecretKey};
use super::config::LoopixParams;
use crate::directory::Directory;
use crate::sphinx::ct_eq;
use crate::sphinx::msgpack::Value;

/// Version field of authenticated control messages.
pub const VERSION: i128 = 2;
/// Bytes of the request MAC (HMAC-SHA256 truncated).
pub const MAC_LEN: usize = 16;
/// Key-derivation salt and MAC domain separator.
const LABEL: &[u8] = b"onionmix-loopix-control-v2";
/// Refused requests a source may send per second (and in a burst) before
/// its refusals are only counted.
pub const SOURCE_RATE: f64 = 10.0;
pub const SOURCE_BURST: f64 = 50.0;
/// Source addresses tracked at once; beyond it idle entries are purged and
/// new sources share one bucket.
pub const MAX_SOURCES: usize = 4096;

/// What a control request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ControlKind {
    /// Mark the client online (push mode forwards its packets at once).
    Subscribe,
    /// Send the client up to `MAX_RETRIEVE` stored packets (then dummies).
    Pull,
}

impl ControlKind {
    pub fn word(self) -> &'static str {
        match self {
            ControlKind::Subscribe => "SUBSCRIBE",
            ControlKind::Pull => "PULL",
        }
    }

    pub fn from_word(w: &str) -> Option<ControlKind> {
        match w {
            "SUBSCRIBE" => Some(ControlKind::Subscribe),
            "PULL" => Some(ControlKind::Pull),
            _ => None,
        }
    }
}

/// The MAC key a client shares with its provider.
#[derive(Clone)]
pub struct ControlKey(Zeroizing<[u8; 32]>);

impl std::fmt::Debug for ControlKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ControlKey(..)")
    }
}

fn put(v: &mut Vec<u8>, b: &[u8]) {
    let n = u32::try_from(b.len()).unwrap_or(u32::MAX);
    v.extend_from_slice(&n.to_be_bytes());
    v.extend_from_slice(b);
}

impl ControlKey {
    /// `HKDF-SHA256(salt = LABEL, ikm = DH(my_secret, peer), info = LABEL ||
    /// client || provider || client_pub || provider_pub)` (each field with a
    /// u32 length prefix). The client calls it with the provider's public
    /// key as `peer`, the provider with the client's; both get the same key.
    /// `None` when the Diffie-Hellman result is degenerate.
    pub fn derive(
        my_secret: &SecretKey,
        peer: &PublicKey,
        client: &str,
        client_pub: &PublicKey,
        provider: &str,
        provider_pub: &PublicKey,
    ) -> Option<ControlKey> {
        let dh = my_secret.dh(peer)?;
        let mut info = Vec::with_capacity(128);
        put(&mut info, LABEL);
        put(&mut info, client.as_bytes());
        put(&mut info, provider.as_bytes());
        put(&mut info, &client_pub.to_bytes());
        put(&mut info, &provider_pub.to_bytes());
        let hk = Hkdf::<Sha256>::new(Some(LABEL), &dh);
        let mut k = Zeroizing::new([0u8; 32]);
        hk.expand(&info, &mut k[..]).ok()?;
        Some(ControlKey(k))
    }

    /// `HMAC-SHA256(key, LABEL || kind || client || provider || ts_ms u64be)[:16]`.
    fn mac(&self, kind: ControlKind, client: &str, provider: &str, ts_ms: u64) -> [u8; MAC_LEN] {
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&self.0[..])
            .unwrap_or_else(|_| unreachable!("HMAC takes any key length"));
        let mut input = Vec::with_capacity(64);
        put(&mut input, LABEL);
        put(&mut input, kind.word().as_bytes());
        put(&mut input, client.as_bytes());
        put(&mut input, provider.as_bytes());
        input.extend_from_slice(&ts_ms.to_be_bytes());
        m.update(&input);
        let d = m.finalize().into_bytes();
        let mut out = [0u8; MAC_LEN];
        out.copy_from_slice(&d[..MAC_LEN]);
        out
    }
}

/// An authenticated SUBSCRIBE or PULL: msgpack `[kind, 2, client, provider,
/// ts_ms, mac]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthRequest {
    pub kind: ControlKind,
    pub client: String,
    pub provider: String,
    /// Client wall clock, milliseconds since the Unix epoch; strictly
    /// increasing per client.
    pub ts_ms: u64,
    pub mac: [u8; MAC_LEN],
}

impl AuthRequest {
    pub fn sign(
        key: &ControlKey,
        kind: ControlKind,
        client: &str,
        provider: &str,
        ts_ms: u64,
    ) -> AuthRequest {
        AuthRequest {
            kind,
            client: client.to_string(),
            provider: provider.to_string(),
            ts_ms,
            mac: key.mac(kind, client, provider, ts_ms),
        }
    }

    /// Checks the MAC in constant time.
    pub fn verify(&self, key: &ControlKey) -> bool {
        ct_eq(
            &self.mac,
            &key.mac(self.kind, &self.client, &self.provider, self.ts_ms),
        )
    }

    pub fn encode(&self) -> Vec<u8> {
        Value::Array(vec![
            Value::str(self.kind.word()),
            Value::Int(VERSION),
            Value::str(&self.client),
            Value::str(&self.provider),
            Value::Int(i128::from(self.ts_ms)),
            Value::Bin(self.mac.to_vec()),
        ])
        .encode()
    }

    /// Reads the items of a decoded control array (`a[0]` is the kind).
    pub(crate) fn from_items(kind: ControlKind, a: &[Value]) -> Option<AuthRequest> {
        if a.len() != 6 || a[1].as_int()? != VERSION {
            return None;
        }
        Some(AuthRequest {
            kind,
            client: a[2].as_text()?.to_string(),
            provider: a[3].as_text()?.to_string(),
            ts_ms: u64::try_from(a[4].as_int()?).ok()?,
            mac: a[5].as_bin()?.try_into().ok()?,
        })
    }
}

/// Why a control request was refused (each is a counter in the stats).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// Reference-format request without authentication.
    Unauthenticated,
    /// Names another provider.
    WrongProvider,
    /// Names no client of this provider.
    UnknownClient,
    /// MAC does not verify.
    BadMac,
    /// Timestamp outside the allowed clock skew.
    Stale,
    /// Timestamp seen before (or older than the window).
    Replay,
    /// Authentic but over the client's rate.
    RateLimited,
    /// Refused while its source address was over its refusal budget.
    SourceLimited,
}

/// A token bucket (`rate` tokens per second, at most `burst`).
#[derive(Clone, Debug)]
pub struct TokenBucket {
    tokens: f64,
    last: Instant,
    rate: f64,
    burst: f64,
}

impl TokenBucket {
    pub fn new(now: Instant, rate: f64, burst: f64) -> TokenBucket {
        let burst = burst.max(1.0);
        TokenBucket {
            tokens: burst,
            last: now,
            rate: rate.max(0.0),
            burst,
        }
    }

    fn refill(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + dt * self.rate).min(self.burst);
        self.last = self.last.max(now);
    }

    /// Takes one token if there is one.
    pub fn take(&mut self, now: Instant) -> bool {
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    fn is_full(&mut self, now: Instant) -> bool {
        self.refill(now);
        self.tokens >= self.burst
    }
}

/// Accepts each timestamp once: the highest seen and a 64-slot window of
/// the ones just below it (reordering by up to 63 ms is tolerated).
#[derive(Clone, Debug, Default)]
pub struct ReplayWindow {
    high: u64,
    seen: u64,
}

impl ReplayWindow {
    /// Records `ts`; `false` when it was seen or is below the window.
    pub fn check_and_set(&mut self, ts: u64) -> bool {
        if ts > self.high || (self.high == 0 && self.seen == 0) {
            let shift = ts - self.high.min(ts);
            self.seen = if shift >= 64 { 0 } else { self.seen << shift };
            self.seen |= 1;
            self.high = ts;
            return true;
        }
        let d = self.high - ts;
        if d >= 64 {
            return false;
        }
        let bit = 1u64 << d;
        if self.seen & bit != 0 {
            return false;
        }
        self.seen |= bit;
        true
    }
}

/// Per-source-IP budgets for refused requests (bounded table).
#[derive(Clone)]
struct SourceLimiter {
    map: HashMap<IpAddr, TokenBucket>,
    overflow: TokenBucket,
    last_purge: Instant,
}

impl SourceLimiter {
    fn new(now: Instant) -> SourceLimiter {
        SourceLimiter {
            map: HashMap::new(),
            overflow: TokenBucket::new(now, SOURCE_RATE, SOURCE_BURST),
            last_purge: now,
        }
    }

    fn bucket(&mut self, now: Instant, ip: IpAddr) -> &mut TokenBucket {
        if !self.map.contains_key(&ip)
            && self.map.len() >= MAX_SOURCES
            && now.saturating_duration_since(self.last_purge) >= Duration::from_secs(1)
        {
            self.last_purge = now;
            self.map.retain(|_, b| !b.is_full(now));
        }
        if self.map.contains_key(&ip) || self.map.len() < MAX_SOURCES {
            self.map
                .entry(ip)
                .or_insert_with(|| TokenBucket::new(now, SOURCE_RATE, SOURCE_BURST))
        } else {
            &mut self.overflow
        }
    }

    /// Charges one refusal; `false` when the source is over its budget.
    fn charge(&mut self, now: Instant, ip: IpAddr) -> bool {
        self.bucket(now, ip).take(now)
    }

    fn len(&self) -> usize {
        self.map.len()
    }
}

#[derive(Clone)]
struct ClientState {
    public: PublicKey,
    /// Derived on the first request (one DH per client, ever).
    key: Option<ControlKey>,
    window: ReplayWindow,
    bucket: TokenBucket,
}

/// A provider's view of its clients' control requests.
#[derive(Clone)]
pub struct ProviderAuth {
    name: String,
    secret: Arc<SecretKey>,
    public: PublicKey,
    clients: HashMap<String, ClientState>,
    sources: SourceLimiter,
    max_skew_ms: u64,
}

impl ProviderAuth {
    /// Every client the directory assigns to provider `name`.
    pub fn new(
        name: &str,
        secret: Arc<SecretKey>,
        public: PublicKey,
        dir: &Directory,
        params: &LoopixParams,
        now: Instant,
    ) -> ProviderAuth {
        let clients = dir
            .clients
            .iter()
            .filter(|c| c.provider == name)
            .map(|c| {
                (
                    c.node.name.clone(),
                    ClientState {
                        public: c.node.key,
                        key: None,
                        window: ReplayWindow::default(),
                        bucket: TokenBucket::new(
                            now,
                            params.effective_control_rate(),
                            params.control_burst,
                        ),
                    },
                )
            })
            .collect();
        ProviderAuth {
            name: name.to_string(),
            secret,
            public,
            clients,
            sources: SourceLimiter::new(now),
            max_skew_ms: (params.control_max_skew.clamp(0.0, 1e9) * 1000.0) as u64,
        }
    }

    /// Whether `name` is one of this provider's clients.
    pub fn is_client(&self, name: &str) -> bool {
        self.clients.contains_key(name)
    }

    /// Number of source addresses being tracked.
    pub fn sources_tracked(&self) -> usize {
        self.sources.len()
    }

    /// A reference-format (unauthenticated) request from `from`: always
    /// refused; `SourceLimited` once the source is over its budget.
    pub fn unauthenticated(&mut self, now: Instant, from: IpAddr) -> Refusal {
        self.refuse(now, from, Refusal::Unauthenticated)
    }

    fn refuse(&mut self, now: Instant, from: IpAddr, r: Refusal) -> Refusal {
        if self.sources.charge(now, from) {
            r
        } else {
            Refusal::SourceLimited
        }
    }

    /// Admits or refuses an authenticated request. `unix_ms` is the
    /// provider's wall clock. On `Ok` the caller acts for `req.client` and
    /// answers only at that client's directory address.
    pub fn check(
        &mut self,
        now: Instant,
        unix_ms: u64,
        from: IpAddr,
        req: &AuthRequest,
    ) -> Result<(), Refusal> {
        if req.provider != self.name {
            return Err(self.refuse(now, from, Refusal::WrongProvider));
        }
        let verdict = match self.clients.get_mut(&req.client) {
            None => Err(Refusal::UnknownClient),
            Some(c) => {
                if c.key.is_none() {
                    c.key = ControlKey::derive(
                        &self.secret,
                        &c.public,
                        &req.client,
                        &c.public,
                        &self.name,
                        &self.public,
                    );
                }
                match &c.key {
                    None => Err(Refusal::UnknownClient),
                    Some(k) if !req.verify(k) => Err(Refusal::BadMac),
                    Some(_) if req.ts_ms.abs_diff(unix_ms) > self.max_skew_ms => {
                        Err(Refusal::Stale)
                    }
                    Some(_) if !c.window.check_and_set(req.ts_ms) => Err(Refusal::Replay),
                    // Authentic and fresh: the client's own budget decides,
                    // and the source is not charged.
                    Some(_) if !c.bucket.take(now) => return Err(Refusal::RateLimited),
                    Some(_) => Ok(()),
                }
            }
        };
        verdict.map_err(|r| self.refuse(now, from, r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::directory::{ClientInfo, NodeInfo};
    use crate::loopix::codec::ProfileKind;

    struct Setup {
        dir: Directory,
        keys: HashMap<String, SecretKey>,
    }

    fn setup(kind: ProfileKind) -> Setup {
        let mut rng = rand::thread_rng();
        let mut keys = HashMap::new();
        let mut node = |name: &str, port: u16| {
            let k = SecretKey::generate(kind, &mut rng);
            let info = NodeInfo {
                name: name.into(),
                host: "127.0.0.1".into(),
                port,
                key: k.public(),
            };
            keys.insert(name.to_string(), k);
            info
        };
        let p0 = node("provider0", 1000);
        let p1 = node("provider1", 1001);
        let c0 = node("client0", 2000);
        let c1 = node("client1", 2001);
        let c2 = node("client2", 2002);
        let dir = Directory {
            profile: kind,
            mixes: vec![],
            providers: vec![p0, p1],
            clients: vec![
                ClientInfo {
                    node: c0,
                    provider: "provider0".into(),
                },
                ClientInfo {
                    node: c1,
                    provider: "provider0".into(),
                },
                ClientInfo {
                    node: c2,
                    provider: "provider1".into(),
                },
            ],
        };
        Setup { dir, keys }
    }

    impl Setup {
        fn provider(&self, name: &str, params: &LoopixParams, now: Instant) -> ProviderAuth {
            let k = self.keys[name].clone();
            let public = k.public();
            ProviderAuth::new(name, Arc::new(k), public, &self.dir, params, now)
        }

        /// The key as the client derives it.
        fn client_key(&self, client: &str, provider: &str) -> ControlKey {
            let c = self.keys[client].public();
            let p = self.keys[provider].public();
            ControlKey::derive(&self.keys[client], &p, client, &c, provider, &p).expect("key")
        }
    }

    const T0: u64 = 1_800_000_000_000;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([192, 0, 2, last])
    }

    #[test]
    fn both_sides_derive_the_same_key_both_profiles() {
        for kind in [ProfileKind::Sphinxmix, ProfileKind::X25519] {
            let s = setup(kind);
            let now = Instant::now();
            let mut p = s.provider("provider0", &LoopixParams::default(), now);
            let key = s.client_key("client0", "provider0");
            let req = AuthRequest::sign(&key, ControlKind::Pull, "client0", "provider0", T0);
            assert_eq!(p.check(now, T0, ip(1), &req), Ok(()), "{kind}");
            // wire round trip
            let parsed = super::super::codec::Control::parse(&req.encode());
            assert_eq!(
                parsed,
                Some(super::super::codec::Control::Auth(req.clone())),
                "{kind}"
            );
        }
    }

    #[test]
    fn forged_and_misdirected_requests_are_refused() {
        let s = setup(ProfileKind::Sphinxmix);
        let now = Instant::now();
        let mut p = s.provider("provider0", &LoopixParams::default(), now);
        let k0 = s.client_key("client0", "provider0");
        // client1 (a real client with its own key) claims to be client0
        let k1 = s.client_key("client1", "provider0");
        let forged = AuthRequest::sign(&k1, ControlKind::Subscribe, "client0", "provider0", T0);
        assert_eq!(p.check(now, T0, ip(1), &forged), Err(Refusal::BadMac));
        // random MAC
        let mut r = AuthRequest::sign(&k0, ControlKind::Pull, "client0", "provider0", T0);
        r.mac = [0x55; MAC_LEN];
        assert_eq!(p.check(now, T0, ip(1), &r), Err(Refusal::BadMac));
        // a valid request with its kind flipped no longer verifies
        let mut flip = AuthRequest::sign(&k0, ControlKind::Subscribe, "client0", "provider0", T0);
        flip.kind = ControlKind::Pull;
        assert_eq!(p.check(now, T0, ip(1), &flip), Err(Refusal::BadMac));
        // client2 belongs to provider1
        let k2 = s.client_key("client2", "provider1");
        let other = AuthRequest::sign(&k2, ControlKind::Pull, "client2", "provider1", T0);
        assert_eq!(p.check(now, T0, ip(1), &other), Err(Refusal::WrongProvider));
        let k2here = s.client_key("client2", "provider0");
        let notmine = AuthRequest::sign(&k2here, ControlKind::Pull, "client2", "provider0", T0);
        assert_eq!(
            p.check(now, T0, ip(1), &notmine),
            Err(Refusal::UnknownClient)
        );
        let nobody = AuthRequest::sign(&k0, ControlKind::Pull, "mallory", "provider0", T0);
        assert_eq!(
            p.check(now, T0, ip(1), &nobody),
            Err(Refusal::UnknownClient)
        );
        // the genuine request still works after all that
        let ok = AuthRequest::sign(&k0, ControlKind::Pull, "client0", "provider0", T0 + 1);
        assert_eq!(p.check(now, T0, ip(1), &ok), Ok(()));
    }

    #[test]
    fn replays_and_stale_timestamps_are_refused() {
        let s = setup(ProfileKind::X25519);
        let now = Instant::now();
        let mut p = s.provider("provider0", &LoopixParams::default(), now);
        let k = s.client_key("client0", "provider0");
        let sign = |kind, ts| AuthRequest::sign(&k, kind, "client0", "provider0", ts);
        let a = sign(ControlKind::Subscribe, T0);
        let b = sign(ControlKind::Pull, T0 + 1);
        // reordered delivery within the window is fine
        assert_eq!(p.check(now, T0, ip(1), &b), Ok(()));
        assert_eq!(p.check(now, T0, ip(1), &a), Ok(()));
        // each one only once
        assert_eq!(p.check(now, T0, ip(1), &a), Err(Refusal::Replay));
        assert_eq!(p.check(now, T0, ip(1), &b), Err(Refusal::Replay));
        // far below the newest accepted one
        let c = sign(ControlKind::Pull, T0 + 1000);
        assert_eq!(p.check(now, T0, ip(1), &c), Ok(()));
        let old = sign(ControlKind::Pull, T0 + 500);
        assert_eq!(p.check(now, T0, ip(1), &old), Err(Refusal::Replay));
        // outside the skew allowed (default 120 s) either way
        let skew = 120_000;
        let future = sign(ControlKind::Pull, T0 + skew + 2000);
        assert_eq!(p.check(now, T0, ip(1), &future), Err(Refusal::Stale));
        let past = sign(ControlKind::Pull, T0 - skew - 1);
        assert_eq!(p.check(now, T0, ip(1), &past), Err(Refusal::Stale));
        // a stale request did not advance the window
        let next = sign(ControlKind::Pull, T0 + 1001);
        assert_eq!(p.check(now, T0, ip(1), &next), Ok(()));
    }

    #[test]
    fn pulls_are_rate_limited_per_client() {
        let s = setup(ProfileKind::Sphinxmix);
        let t = Instant::now();
        let params = LoopixParams {
            control_rate: 2.0,
            control_burst: 5.0,
            ..LoopixParams::default()
        };
        let mut p = s.provider("provider0", &params, t);
        let k0 = s.client_key("client0", "provider0");
        let k1 = s.client_key("client1", "provider0");
        let mut ts = T0;
        let mut pull = |p: &mut ProviderAuth, k: &ControlKey, who: &str, now: Instant| {
            ts += 1;
            let r = AuthRequest::sign(k, ControlKind::Pull, who, "provider0", ts);
            p.check(now, T0, ip(1), &r)
        };
        let accepted = (0..100)
            .filter(|_| pull(&mut p, &k0, "client0", t).is_ok())
            .count();
        assert_eq!(accepted, 5, "the burst");
        assert_eq!(pull(&mut p, &k0, "client0", t), Err(Refusal::RateLimited));
        // another client is unaffected
        assert_eq!(pull(&mut p, &k1, "client1", t), Ok(()));
        // 2 per second come back
        let later = t + Duration::from_millis(1500);
        let n = (0..10)
            .filter(|_| pull(&mut p, &k0, "client0", later).is_ok())
            .count();
        assert_eq!(n, 3);
    }

    #[test]
    fn refusals_are_budgeted_per_source_without_locking_out_clients() {
        let s = setup(ProfileKind::Sphinxmix);
        let t = Instant::now();
        let mut p = s.provider("provider0", &LoopixParams::default(), t);
        let burst = SOURCE_BURST as usize;
        let mut seen = HashMap::new();
        for _ in 0..burst + 20 {
            *seen.entry(p.unauthenticated(t, ip(9))).or_insert(0) += 1;
        }
        assert_eq!(seen[&Refusal::Unauthenticated], burst);
        assert_eq!(seen[&Refusal::SourceLimited], 20);
        // another source has its own budget
        assert_eq!(p.unauthenticated(t, ip(10)), Refusal::Unauthenticated);
        // a genuine request from the exhausted (perhaps spoofed) source is
        // still verified and accepted
        let k = s.client_key("client0", "provider0");
        let r = AuthRequest::sign(&k, ControlKind::Pull, "client0", "provider0", T0);
        assert_eq!(p.check(t, T0, ip(9), &r), Ok(()));
        // forgeries from it are refused as source-limited
        let mut f = r.clone();
        f.ts_ms += 1;
        f.mac = [0; MAC_LEN];
        assert_eq!(p.check(t, T0, ip(9), &f), Err(Refusal::SourceLimited));
        // the budget refills
        let later = t + Duration::from_secs(1);
        assert_eq!(p.unauthenticated(later, ip(9)), Refusal::Unauthenticated);
    }

    #[test]
    fn source_table_is_bounded() {
        let s = setup(ProfileKind::Sphinxmix);
        let t = Instant::now();
        let mut p = s.provider("provider0", &LoopixParams::default(), t);
        for i in 0..(MAX_SOURCES as u32 + 500) {
            let a = IpAddr::from((0x0a00_0000u32 + i).to_be_bytes());
            p.unauthenticated(t, a);
        }
        assert_eq!(p.sources_tracked(), MAX_SOURCES);
        // once idle buckets have refilled they are purged for new sources
        let later = t + Duration::from_secs(60);
        p.unauthenticated(later, ip(77));
        assert!(p.sources_tracked() <= 1, "{}", p.sources_tracked());
    }

    #[test]
    fn replay_window_edges() {
        let mut w = ReplayWindow::default();
        assert!(w.check_and_set(0));
        assert!(!w.check_and_set(0));
        assert!(w.check_and_set(100));
        assert!(w.check_and_set(37)); // 63 below: inside
        assert!(!w.check_and_set(36)); // 64 below: outside
        assert!(w.check_and_set(1000)); // jump clears the window
        assert!(!w.check_and_set(100));
        assert!(w.check_and_set(999));
        assert!(!w.check_and_set(999));
    }
}
