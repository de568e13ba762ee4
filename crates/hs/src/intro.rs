//! Introduction and rendezvous messages with their cryptography
//! (rend-spec-v3 §3, §4; proposal 305), built on the codecs in
//! `onionmix_cell::hs` and on [`crate::ntor`]:
//!
//! * service: [`establish_intro`] (HANDSHAKE_AUTH = hs MAC keyed with the
//!   circuit's KH, Ed25519 signature by the introduction-point auth key with
//!   the "Tor establish-intro cell v1" prefix; optional DoS extension);
//!   [`open_introduce2`] (MAC checked in constant time against each
//!   candidate subcredential, then decryption); [`rendezvous1`];
//! * introduction point: [`check_establish_intro`] with the DoS extension
//!   decided as tor does ([`DosDecision`]);
//! * client: [`build_introduce1`] (padding to tor's 246-byte minimum,
//!   encryption, MAC); [`rendezvous2_handshake`].
//!
//! [`ReplayCache`] is the service's bounded INTRODUCE2 replay cache (tor
//! keeps one per introduction point, keyed on the encrypted section).

use onionmix_cell::CellError;
use onionmix_cell::hs::{
    DosParams, ESTABLISH_INTRO_SIG_PREFIX, EXT_DOS_PARAMS, EstablishIntro, Extension, Introduce,
    IntroducePlaintext, MAC_LEN, PowSolution, Rendezvous1,
};
use onionmix_cell::relay::LinkSpec;
use onionmix_crypto::Ed25519Keypair;
use subtle::ConstantTimeEq;
use x25519_dalek::StaticSecret;

use crate::ntor::{HsNtorClient, HsNtorError, HsNtorService, IntroKeys, hs_mac};

/// tor's minimum INTRODUCE1 size (`HS_CELL_INTRODUCE1_MIN_SIZE`): shorter
/// plaintexts are zero-padded so cells don't reveal their content length.
pub const INTRODUCE1_MIN_SIZE: usize = 246;
/// Largest rate or burst the DoS extension may carry (tor: `INT32_MAX`).
pub const DOS_PARAM_MAX: u64 = i32::MAX as u64;

/// Errors in introduction messages.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IntroError {
    /// Malformed message.
    #[error(transparent)]
    Cell(#[from] CellError),
    /// ESTABLISH_INTRO's HANDSHAKE_AUTH is wrong (replayed or forged).
    #[error("ESTABLISH_INTRO handshake MAC does not verify")]
    BadHandshakeMac,
    /// ESTABLISH_INTRO's signature is wrong.
    #[error("ESTABLISH_INTRO signature does not verify")]
    BadSignature,
    /// INTRODUCE2's MAC does not verify with any subcredential.
    #[error("INTRODUCE2 MAC does not verify")]
    BadMac,
    /// INTRODUCE2 is for another introduction point (auth key).
    #[error("INTRODUCE2 names another authentication key")]
    WrongAuthKey,
    /// hs-ntor failed.
    #[error(transparent)]
    Ntor(#[from] HsNtorError),
    /// RENDEZVOUS2's handshake info is too short.
    #[error("RENDEZVOUS2 handshake info must be at least 64 bytes")]
    BadHandshakeInfo,
}

/// Build ESTABLISH_INTRO for the introduction point key `auth`, on a
/// circuit whose handshake gave `kh` (20 bytes for ntor).
pub fn establish_intro(
    auth: &Ed25519Keypair,
    kh: &[u8],
    dos: Option<DosParams>,
) -> Result<Vec<u8>, IntroError> {
    let extensions: Vec<Extension> = dos.iter().map(DosParams::to_extension).collect();
    let auth_key = auth.public();
    let mac_input = EstablishIntro::encode_mac_input(&auth_key, &extensions)?;
    let handshake_auth = hs_mac(kh, &mac_input);
    let mut signed = Vec::with_capacity(ESTABLISH_INTRO_SIG_PREFIX.len() + mac_input.len() + 32);
    signed.extend_from_slice(ESTABLISH_INTRO_SIG_PREFIX);
    signed.extend_from_slice(&mac_input);
    signed.extend_from_slice(&handshake_auth);
    let sig = auth.sign(&signed).to_vec();
    Ok(EstablishIntro {
        auth_key,
        extensions,
        handshake_auth,
        sig,
    }
    .encode()?)
}

/// What an introduction point does about INTRODUCE2 rate limiting on a
/// circuit, from ESTABLISH_INTRO's DoS extension (tor's
/// `handle_establish_intro_cell_dos_extension`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DosDecision {
    /// No extension: the consensus defaults apply.
    ConsensusDefaults,
    /// Rate or burst 0 or missing, or invalid values: no limit on this
    /// circuit.
    Disabled,
    /// Limit INTRODUCE2 to `rate` per second with bursts of `burst`.
    Enabled {
        /// Tokens per second.
        rate: u64,
        /// Bucket size.
        burst: u64,
    },
}

/// Introduction point: check ESTABLISH_INTRO received on a circuit whose
/// handshake gave `kh`. Returns the message and the DoS decision.
pub fn check_establish_intro(
    d: &[u8],
    kh: &[u8],
) -> Result<(EstablishIntro, DosDecision), IntroError> {
    let (m, mac_len, signed_len) = EstablishIntro::parse(d)?;
    let covered = d
        .get(..mac_len)
        .ok_or(CellError::Truncated("ESTABLISH_INTRO"))?;
    if !bool::from(hs_mac(kh, covered).ct_eq(&m.handshake_auth)) {
        return Err(IntroError::BadHandshakeMac);
    }
    let signed = d
        .get(..signed_len)
        .ok_or(CellError::Truncated("ESTABLISH_INTRO"))?;
    let sig: [u8; 64] = m
        .sig
        .as_slice()
        .try_into()
        .map_err(|_| IntroError::BadSignature)?;
    let mut msg = Vec::with_capacity(ESTABLISH_INTRO_SIG_PREFIX.len() + signed.len());
    msg.extend_from_slice(ESTABLISH_INTRO_SIG_PREFIX);
    msg.extend_from_slice(signed);
    if !onionmix_crypto::ed25519::verify(&m.auth_key, &msg, &sig) {
        return Err(IntroError::BadSignature);
    }
    let mut decision = DosDecision::ConsensusDefaults;
    for e in m.extensions.iter().filter(|e| e.ext_type == EXT_DOS_PARAMS) {
        decision = dos_decision(&e.data);
    }
    Ok((m, decision))
}

/// The DoS extension's effect, as tor's intro point decides it
/// (`handle_establish_intro_cell_dos_extension`): an extension that does
/// not parse, or names a parameter type tor does not know, leaves the
/// consensus defaults in place; a missing or zero rate or burst turns the
/// defence off; values above `INT32_MAX` or a burst below the rate turn it
/// off too; otherwise the given rate and burst apply. Bytes after the
/// parameters are ignored, as tor's parser does.
pub fn dos_decision(data: &[u8]) -> DosDecision {
    let Some((&n, mut rest)) = data.split_first() else {
        return DosDecision::ConsensusDefaults;
    };
    let (mut rate, mut burst) = (0u64, 0u64);
    for _ in 0..n {
        let Some((param, tail)) = rest.split_first_chunk::<9>() else {
            return DosDecision::ConsensusDefaults;
        };
        let (t, v) = param.split_at(1);
        let Ok(v) = <[u8; 8]>::try_from(v) else {
            return DosDecision::ConsensusDefaults;
        };
        let v = u64::from_be_bytes(v);
        match t.first() {
            Some(1) => rate = v,
            Some(2) => burst = v,
            _ => return DosDecision::ConsensusDefaults,
        }
        rest = tail;
    }
    if rate == 0 || burst == 0 {
        DosDecision::Disabled
    } else if rate <= DOS_PARAM_MAX && burst <= DOS_PARAM_MAX && burst >= rate {
        DosDecision::Enabled { rate, burst }
    } else {
        DosDecision::Disabled
    }
}

/// Introduction point: the auth key an INTRODUCE1 names (to find the
/// service's circuit), after checking the format and that LEGACY_KEY_ID is
/// all zeros (v3). The body is then relayed unchanged as INTRODUCE2.
pub fn introduce1_auth_key(d: &[u8]) -> Result<[u8; 32], IntroError> {
    let m = Introduce::parse(d)?;
    if m.legacy_key_id != [0; 20] {
        return Err(CellError::Invalid {
            what: "INTRODUCE1",
            why: "legacy key id is not zero".into(),
        }
        .into());
    }
    Ok(m.auth_key)
}

/// What the client puts in INTRODUCE1 (besides the hs-ntor key).
#[derive(Debug, Clone)]
pub struct Introduce1Input<'a> {
    /// The introduction point's auth key (`KP_hs_ipt_sid`).
    pub auth_key: [u8; 32],
    /// Our rendezvous cookie.
    pub rend_cookie: [u8; 20],
    /// The rendezvous point's ntor onion key.
    pub rend_onion_key: [u8; 32],
    /// How the service reaches the rendezvous point.
    pub rend_link_specifiers: &'a [LinkSpec],
    /// A proof-of-work solution, if the service asked for one.
    pub pow: Option<PowSolution>,
    /// Ask for congestion control on the rendezvous circuit (proposal 324
    /// §9.2): only when the descriptor has a usable `flow-control` line and
    /// our consensus enables `cc_alg`.
    pub cc_request: bool,
}

/// Client: build INTRODUCE1, encrypted to the service with `ntor`.
pub fn build_introduce1(
    ntor: &HsNtorClient,
    input: &Introduce1Input<'_>,
) -> Result<Vec<u8>, IntroError> {
    let keys = ntor.intro_keys()?;
    let mut cell = Introduce {
        legacy_key_id: [0; 20],
        auth_key: input.auth_key,
        extensions: Vec::new(),
        encrypted: Vec::new(),
    };
    let header = cell.encode_header()?;
    let mut pt = IntroducePlaintext {
        rend_cookie: input.rend_cookie,
        extensions: input
            .cc_request
            .then(cc_request_extension)
            .into_iter()
            .chain(input.pow.iter().map(PowSolution::to_extension))
            .collect(),
        onion_key: input.rend_onion_key,
        link_specifiers: input.rend_link_specifiers.to_vec(),
        pad_len: 0,
    };
    let unpadded = pt.encode()?.len();
    // tor: header + CLIENT_PK + plaintext + MAC at least 246 bytes.
    let full = header.len() + 32 + unpadded + MAC_LEN;
    pt.pad_len = INTRODUCE1_MIN_SIZE.saturating_sub(full);
    let mut data = pt.encode()?;
    keys.crypt(&mut data);
    let mut enc = Vec::with_capacity(32 + data.len() + MAC_LEN);
    enc.extend_from_slice(&ntor.client_pk());
    enc.extend_from_slice(&data);
    let mut mac_input = header;
    mac_input.extend_from_slice(&enc);
    let mac = keys.mac(&mac_input);
    enc.extend_from_slice(&mac);
    cell.encrypted = enc;
    Ok(cell.encode()?)
}

/// A decrypted INTRODUCE2.
#[derive(Debug, Clone)]
pub struct OpenedIntroduce {
    /// The decrypted content (rendezvous cookie, point, extensions).
    pub plaintext: IntroducePlaintext,
    /// `CLIENT_PK`, for [`HsNtorService::rendezvous`].
    pub client_pk: [u8; 32],
    /// Which of the candidate subcredentials matched.
    pub subcredential_index: usize,
    /// The proof-of-work extension, if any (v1).
    pub pow: Option<PowSolution>,
    /// The client asked for congestion control on the rendezvous circuit.
    pub cc_requested: bool,
}

/// The congestion-control request extension (type 1, empty body).
fn cc_request_extension() -> Extension {
    Extension {
        ext_type: onionmix_cell::hs::EXT_CC_REQUEST,
        data: Vec::new(),
    }
}

/// Service: check and decrypt INTRODUCE2 received on the circuit of the
/// introduction point whose keys are `enc_secret` (`KS_hss_ntor`) and
/// `auth_key`. Each subcredential in `subcredentials` is tried (tor tries
/// those of the current and the previous time period); the MAC comparison
/// does not reveal which one matched.
pub fn open_introduce2(
    d: &[u8],
    enc_secret: &StaticSecret,
    auth_key: &[u8; 32],
    subcredentials: &[[u8; 32]],
) -> Result<OpenedIntroduce, IntroError> {
    let m = Introduce::parse(d)?;
    if !bool::from(m.auth_key.ct_eq(auth_key)) {
        return Err(IntroError::WrongAuthKey);
    }
    let (Some(client_pk), Some(mac)) = (m.client_pk(), m.mac()) else {
        return Err(CellError::Truncated("INTRODUCE2").into());
    };
    let covered = d
        .len()
        .checked_sub(MAC_LEN)
        .and_then(|n| d.get(..n))
        .ok_or(CellError::Truncated("INTRODUCE2"))?;
    let mut found: Option<(usize, IntroKeys)> = None;
    for (i, sc) in subcredentials.iter().enumerate() {
        let keys = HsNtorService::new(enc_secret, auth_key, sc).intro_keys(&client_pk)?;
        if keys.check_mac(covered, &mac) && found.is_none() {
            found = Some((i, keys));
        }
    }
    let Some((subcredential_index, keys)) = found else {
        return Err(IntroError::BadMac);
    };
    let mut data = m
        .encrypted_data()
        .ok_or(CellError::Truncated("INTRODUCE2"))?
        .to_vec();
    keys.crypt(&mut data);
    let plaintext = IntroducePlaintext::parse(&data)?;
    let mut pow = None;
    for e in plaintext
        .extensions
        .iter()
        .filter(|e| e.ext_type == onionmix_cell::hs::EXT_POW)
    {
        pow = PowSolution::parse(&e.data)?;
    }
    // Proposal 324 §9.2: the extension's presence is the request; any
    // body is ignored (tor does not read one).
    let cc_requested = plaintext
        .extensions
        .iter()
        .any(|e| e.ext_type == onionmix_cell::hs::EXT_CC_REQUEST);
    Ok(OpenedIntroduce {
        plaintext,
        client_pk,
        subcredential_index,
        pow,
        cc_requested,
    })
}

/// Service: RENDEZVOUS1 for `cookie` with hs-ntor's `SERVER_PK` and `AUTH`.
pub fn rendezvous1(
    cookie: &[u8; 20],
    server_pk: &[u8; 32],
    auth: &[u8; 32],
) -> Result<Vec<u8>, IntroError> {
    let mut handshake_info = server_pk.to_vec();
    handshake_info.extend_from_slice(auth);
    Ok(onionmix_cell::hs::HsMsg::Rendezvous1(Rendezvous1 {
        cookie: *cookie,
        handshake_info,
    })
    .encode()?)
}

/// tor pads RENDEZVOUS1 with random bytes to the size of the legacy
/// (v2) cell, `REND_COOKIE_LEN + DH1024_KEY_LEN + DIGEST_LEN` = 168 bytes
/// (`HS_LEGACY_RENDEZVOUS_CELL_SIZE`), so v3 rendezvous looks like v2.
pub const LEGACY_RENDEZVOUS1_LEN: usize = 20 + 128 + 20;

/// Service: RENDEZVOUS1 as stock tor sends it, padded with random bytes to
/// [`LEGACY_RENDEZVOUS1_LEN`]. The rendezvous point relays everything after
/// the cookie as RENDEZVOUS2, so the client sees 148 bytes of handshake
/// info and reads the first 64.
pub fn rendezvous1_padded(
    cookie: &[u8; 20],
    server_pk: &[u8; 32],
    auth: &[u8; 32],
    rng: &mut dyn rand_core::RngCore,
) -> Result<Vec<u8>, IntroError> {
    let mut out = rendezvous1(cookie, server_pk, auth)?;
    let start = out.len();
    if start < LEGACY_RENDEZVOUS1_LEN {
        out.resize(LEGACY_RENDEZVOUS1_LEN, 0);
        if let Some(pad) = out.get_mut(start..) {
            rng.fill_bytes(pad);
        }
    }
    Ok(out)
}

/// Client: `(SERVER_PK, AUTH)` from RENDEZVOUS2's handshake info: its
/// first 64 bytes (tor's trunnel parser reads a fixed 64-byte field and
/// ignores the padding a stock service adds).
pub fn rendezvous2_handshake(info: &[u8]) -> Result<([u8; 32], [u8; 32]), IntroError> {
    let info = info.get(..64).ok_or(IntroError::BadHandshakeInfo)?;
    let (y, a) = info.split_at(32);
    Ok((
        y.try_into().map_err(|_| IntroError::BadHandshakeInfo)?,
        a.try_into().map_err(|_| IntroError::BadHandshakeInfo)?,
    ))
}

/// A bounded replay cache for INTRODUCE2: remembers a digest of each
/// encrypted section for `window` seconds, at most `max` of them (the
/// oldest are forgotten first when full).
#[derive(Debug)]
pub struct ReplayCache {
    seen: std::collections::HashMap<[u8; 32], u64>,
    order: std::collections::VecDeque<([u8; 32], u64)>,
    max: usize,
    window: u64,
}

impl ReplayCache {
    /// A cache of at most `max` entries, each kept `window` seconds.
    pub fn new(max: usize, window: u64) -> Self {
        Self {
            seen: std::collections::HashMap::new(),
            order: std::collections::VecDeque::new(),
            max: max.max(1),
            window,
        }
    }

    /// Record INTRODUCE2 body `d` received at `now`; `true` if it was seen
    /// within the window (a replay, to be dropped).
    pub fn check_and_add(&mut self, d: &[u8], now: u64) -> bool {
        use sha3::{Digest, Sha3_256};
        while let Some(&(k, t)) = self.order.front() {
            if t.saturating_add(self.window) > now && self.order.len() < self.max {
                break;
            }
            self.order.pop_front();
            if self.seen.get(&k) == Some(&t) {
                self.seen.remove(&k);
            }
        }
        // The encrypted section (everything after the cleartext header)
        // identifies the introduction; hashing the whole body is equivalent
        // for an unmodified relay of it.
        let key: [u8; 32] = Sha3_256::digest(d).into();
        if self.seen.contains_key(&key) {
            return true;
        }
        self.seen.insert(key, now);
        self.order.push_back((key, now));
        false
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// True if empty.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

#[cfg(test)]
#[path = "intro_tests.rs"]
mod tests;
