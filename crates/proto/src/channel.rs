//! The in-protocol channel handshake (tor-spec §4), initiator side, sans-IO.
//!
//! The driver runs TLS, then calls [`InitiatorHandshake::start`] and feeds
//! every byte read into [`InitiatorHandshake::handle`] until it returns
//! [`Established`]. Certificate checking is delegated to a
//! [`ResponderVerifier`] so the crypto stays in `onionmix-crypto`.

use bytes::BytesMut;
use sha2::{Digest, Sha256};

use onionmix_cell::chan::{AuthChallenge, Certs, Netinfo, encode_versions, parse_versions};
use onionmix_cell::{CellCodec, CellError, ChanCmd, RawCell};

/// Link protocol versions we speak (4 and 5: 4-byte circuit IDs).
pub const LINK_VERSIONS: &[u16] = &[4, 5];
/// Largest handshake (bytes read before NETINFO) we accept.
pub const MAX_HANDSHAKE_BYTES: usize = 64 * 1024;

/// Who we expect at the other end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectedPeer {
    /// RSA identity digest (SHA-1 of the DER public key).
    pub rsa_id: [u8; 20],
    /// Ed25519 identity, when the directory lists one.
    pub ed_id: Option<[u8; 32]>,
}

/// The identities a peer proved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProvenIds {
    /// RSA identity digest (SHA-1 of the DER public key).
    pub rsa_id: [u8; 20],
    /// Ed25519 identity.
    pub ed_id: [u8; 32],
    /// SHA-256 of the RSA identity key's DER (used in AUTHENTICATE).
    pub rsa_key_sha256: [u8; 32],
}

/// Checks a responder's CERTS cell (tor-spec §4.2, Ed25519 + RSA case).
pub trait ResponderVerifier: Send + Sync {
    /// Verify the chain and that the link certificate certifies
    /// `tls_cert_sha256`; return the proven identities.
    fn verify(
        &self,
        certs: &Certs,
        tls_cert_sha256: &[u8; 32],
        now_unix: u64,
    ) -> Result<ProvenIds, String>;
}

/// A relay initiator's authentication material (CERTS + AUTHENTICATE).
pub trait InitiatorAuth: Send + Sync {
    /// The CERTS cell payload to send (types 2, 4, 6, 7).
    fn certs_payload(&self) -> Vec<u8>;
    /// Build the AUTHENTICATE payload from the handshake transcript.
    fn authenticate_payload(&self, t: &AuthTranscript) -> Result<Vec<u8>, String>;
}

/// What an AUTHENTICATE (method 3) body is computed over, apart from
/// TLSSECRETS: the initiator's driver exports that from TLS before the
/// handshake (its context is CID, the SHA-256 of the initiator's own RSA
/// identity key, as tor does) and its
/// [`InitiatorAuth`] implementation carries it.
#[derive(Debug, Clone)]
pub struct AuthTranscript {
    /// Responder's proven identities.
    pub responder: ProvenIds,
    /// SHA-256 of the responder's RSA identity key (DER), the SID field.
    pub responder_rsa_key_sha256: [u8; 32],
    /// SHA-256 of everything the responder sent up to AUTH_CHALLENGE.
    pub slog: [u8; 32],
    /// SHA-256 of everything we sent so far (VERSIONS, CERTS).
    pub clog: [u8; 32],
    /// SHA-256 of the responder's TLS certificate.
    pub scert: [u8; 32],
}

/// Handshake failures.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    /// No common link version.
    #[error("no common link protocol version (peer offers {0:?})")]
    NoCommonVersion(Vec<u16>),
    /// Unexpected cell.
    #[error("unexpected {0:?} during handshake")]
    Unexpected(ChanCmd),
    /// Cell did not parse.
    #[error("malformed handshake cell: {0}")]
    Cell(#[from] CellError),
    /// Certificates did not check out.
    #[error("certificate check failed: {0}")]
    Certs(String),
    /// The proven identity is not the one we wanted.
    #[error("relay identity mismatch: expected {expected}, got {got}")]
    IdentityMismatch {
        /// Expected identity (hex).
        expected: String,
        /// Proven identity (hex).
        got: String,
    },
    /// The responder does not offer an authentication method we can use.
    #[error("responder offers no usable authentication method")]
    NoAuthMethod,
    /// Too much data.
    #[error("handshake too long")]
    TooLong,
}

impl HandshakeError {
    /// Whether the peer failed authentication (its certificates or
    /// AUTHENTICATE did not check out, it proved another identity, or it
    /// offers no authentication we can use), as opposed to breaking the
    /// handshake's protocol (versions, framing, cell order, size).
    pub fn is_auth_failure(&self) -> bool {
        matches!(
            self,
            HandshakeError::Certs(_)
                | HandshakeError::IdentityMismatch { .. }
                | HandshakeError::NoAuthMethod
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    WaitVersions,
    WaitCerts,
    WaitAuthChallenge,
    WaitNetinfo,
    Done,
}

/// The result of a completed handshake.
#[derive(Debug, Clone)]
pub struct Established {
    /// Negotiated link version.
    pub link_version: u16,
    /// The codec to use from now on.
    pub codec: CellCodec,
    /// Proven identities of the peer.
    pub peer: ProvenIds,
    /// The peer's NETINFO.
    pub netinfo: Netinfo,
}

/// Initiator side of the v3+ link handshake.
pub struct InitiatorHandshake<'a> {
    expected: Option<ExpectedPeer>,
    verifier: &'a dyn ResponderVerifier,
    auth: Option<&'a dyn InitiatorAuth>,
    tls_cert_sha256: [u8; 32],
    peer_addr: Option<std::net::IpAddr>,
    my_addrs: Vec<std::net::IpAddr>,
    now_unix: u64,
    codec: CellCodec,
    state: State,
    link_version: u16,
    slog: Sha256,
    clog: Sha256,
    peer: Option<ProvenIds>,
    read: usize,
}

impl std::fmt::Debug for InitiatorHandshake<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InitiatorHandshake")
            .field("state", &self.state)
            .finish()
    }
}

impl<'a> InitiatorHandshake<'a> {
    /// Prepare a handshake. `expected` None accepts any identity (used by
    /// tests and by bootstrap to fallback directories only).
    pub fn new(
        expected: Option<ExpectedPeer>,
        verifier: &'a dyn ResponderVerifier,
        tls_cert_sha256: [u8; 32],
        now_unix: u64,
    ) -> Self {
        InitiatorHandshake {
            expected,
            verifier,
            auth: None,
            tls_cert_sha256,
            peer_addr: None,
            my_addrs: Vec::new(),
            now_unix,
            codec: CellCodec::new(),
            state: State::WaitVersions,
            link_version: 0,
            slog: Sha256::new(),
            clog: Sha256::new(),
            peer: None,
            read: 0,
        }
    }
    /// Authenticate as a relay (send CERTS + AUTHENTICATE).
    pub fn with_auth(
        mut self,
        auth: &'a dyn InitiatorAuth,
        my_addrs: Vec<std::net::IpAddr>,
    ) -> Self {
        self.auth = Some(auth);
        self.my_addrs = my_addrs;
        self
    }
    /// Record the peer's address for our NETINFO.
    pub fn with_peer_addr(mut self, a: std::net::IpAddr) -> Self {
        self.peer_addr = Some(a);
        self
    }

    fn emit(&mut self, cell: &RawCell, out: &mut BytesMut) -> Result<(), HandshakeError> {
        let start = out.len();
        self.codec.encode(cell, out)?;
        self.clog.update(&out[start..]);
        Ok(())
    }

    /// Write our VERSIONS cell.
    pub fn start(&mut self, out: &mut BytesMut) -> Result<(), HandshakeError> {
        let cell = RawCell::var(0, ChanCmd::VERSIONS, &encode_versions(LINK_VERSIONS))?;
        self.emit(&cell, out)
    }

    /// Consume bytes read from the peer; write replies to `out`. Returns
    /// the established channel when the handshake completes; unconsumed
    /// bytes stay in `input`.
    pub fn handle(
        &mut self,
        input: &mut BytesMut,
        out: &mut BytesMut,
    ) -> Result<Option<Established>, HandshakeError> {
        loop {
            if self.state == State::Done {
                return Ok(None);
            }
            let before = input.clone();
            let Some(cell) = self.codec.decode(input)? else {
                // A cell that would take the handshake past its limit is
                // refused now, not once it arrived.
                let pending = self.codec.frame_len(input).unwrap_or(0).max(input.len());
                if self.read.saturating_add(pending) > MAX_HANDSHAKE_BYTES {
                    return Err(HandshakeError::TooLong);
                }
                return Ok(None);
            };
            let used = before.len() - input.len();
            self.read += used;
            if self.read > MAX_HANDSHAKE_BYTES {
                return Err(HandshakeError::TooLong);
            }
            // Everything the responder sends before AUTHENTICATE is logged.
            if self.state != State::WaitNetinfo {
                self.slog.update(&before[..used]);
            }
            if cell.cmd == ChanCmd::VPADDING {
                continue;
            }
            match (self.state, cell.cmd) {
                (State::WaitVersions, ChanCmd::VERSIONS) => {
                    let theirs = parse_versions(&cell.payload)?;
                    let v = LINK_VERSIONS
                        .iter()
                        .copied()
                        .filter(|v| theirs.contains(v))
                        .max()
                        .ok_or(HandshakeError::NoCommonVersion(theirs))?;
                    self.link_version = v;
                    self.codec.set_link_version(v);
                    self.state = State::WaitCerts;
                }
                (State::WaitCerts, ChanCmd::CERTS) => {
                    let certs = Certs::parse(&cell.payload)?;
                    let ids = self
                        .verifier
                        .verify(&certs, &self.tls_cert_sha256, self.now_unix)
                        .map_err(HandshakeError::Certs)?;
                    if let Some(exp) = &self.expected {
                        if exp.rsa_id != ids.rsa_id {
                            return Err(HandshakeError::IdentityMismatch {
                                expected: hex(&exp.rsa_id),
                                got: hex(&ids.rsa_id),
                            });
                        }
                        if let Some(ed) = exp.ed_id
                            && ed != ids.ed_id
                        {
                            return Err(HandshakeError::IdentityMismatch {
                                expected: hex(&ed),
                                got: hex(&ids.ed_id),
                            });
                        }
                    }
                    self.peer = Some(ids);
                    self.state = State::WaitAuthChallenge;
                }
                (State::WaitAuthChallenge, ChanCmd::AUTH_CHALLENGE) => {
                    let ch = AuthChallenge::parse(&cell.payload)?;
                    if let Some(auth) = self.auth {
                        if !ch.methods.contains(&3) {
                            return Err(HandshakeError::NoAuthMethod);
                        }
                        let certs = RawCell::var(0, ChanCmd::CERTS, &auth.certs_payload())?;
                        self.emit(&certs, out)?;
                        let responder = self
                            .peer
                            .clone()
                            .ok_or(HandshakeError::Unexpected(cell.cmd))?;
                        let t = AuthTranscript {
                            responder_rsa_key_sha256: responder.rsa_key_sha256,
                            responder,
                            slog: self.slog.clone().finalize().into(),
                            clog: self.clog.clone().finalize().into(),
                            scert: self.tls_cert_sha256,
                        };
                        let body = auth
                            .authenticate_payload(&t)
                            .map_err(HandshakeError::Certs)?;
                        let a = RawCell::var(0, ChanCmd::AUTHENTICATE, &body)?;
                        self.emit(&a, out)?;
                    }
                    self.state = State::WaitNetinfo;
                }
                (State::WaitNetinfo, ChanCmd::NETINFO) => {
                    let netinfo = Netinfo::parse(&cell.payload)?;
                    let mine = Netinfo {
                        time: if self.auth.is_some() {
                            self.now_unix as u32
                        } else {
                            0
                        },
                        other_addr: self.peer_addr,
                        my_addrs: self.my_addrs.clone(),
                    };
                    let cell = RawCell::fixed(0, ChanCmd::NETINFO, &mine.encode())?;
                    self.codec.encode(&cell, out)?;
                    self.state = State::Done;
                    let peer = self
                        .peer
                        .clone()
                        .ok_or(HandshakeError::Unexpected(ChanCmd::NETINFO))?;
                    return Ok(Some(Established {
                        link_version: self.link_version,
                        codec: self.codec.clone(),
                        peer,
                        netinfo,
                    }));
                }
                (_, cmd) => return Err(HandshakeError::Unexpected(cmd)),
            }
        }
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02X}")).collect()
}

/// A relay's side of the responder handshake: what it presents and how it
/// checks an authenticating initiator.
pub trait ResponderIdentity: Send + Sync {
    /// The CERTS payload to send (types 1, 2, 4, 5, 7).
    fn certs_payload(&self) -> &[u8];
    /// Check an initiator's CERTS + AUTHENTICATE. `exporter(ctx)` returns
    /// the TLS exporter output for a context (CID: the SHA-256 of the
    /// initiator's RSA identity key).
    fn verify_initiator(
        &self,
        certs: &Certs,
        authenticate: &[u8],
        slog: [u8; 32],
        clog: [u8; 32],
        exporter: &dyn Fn(&[u8; 32]) -> Option<[u8; 32]>,
        now_unix: u64,
    ) -> Result<ProvenIds, String>;
}

/// The result of a completed responder handshake.
#[derive(Debug, Clone)]
pub struct Accepted {
    /// Negotiated link version.
    pub link_version: u16,
    /// The codec to use from now on.
    pub codec: CellCodec,
    /// The initiator's proven identity (None: an unauthenticated client).
    pub peer: Option<ProvenIds>,
    /// The initiator's NETINFO.
    pub netinfo: Netinfo,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RState {
    WaitVersions,
    WaitInitiator,
    Done,
}

/// Responder side of the v3+ link handshake (a relay accepting a link).
pub struct ResponderHandshake<'a> {
    id: &'a dyn ResponderIdentity,
    now_unix: u64,
    my_addrs: Vec<std::net::IpAddr>,
    peer_addr: Option<std::net::IpAddr>,
    codec: CellCodec,
    state: RState,
    link_version: u16,
    slog: Sha256,
    slog_final: [u8; 32],
    clog: Sha256,
    certs: Option<Certs>,
    peer: Option<ProvenIds>,
    read: usize,
}

impl std::fmt::Debug for ResponderHandshake<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponderHandshake")
            .field("state", &self.state)
            .finish()
    }
}

impl<'a> ResponderHandshake<'a> {
    /// Prepare to answer an initiator.
    pub fn new(
        id: &'a dyn ResponderIdentity,
        now_unix: u64,
        my_addrs: Vec<std::net::IpAddr>,
        peer_addr: Option<std::net::IpAddr>,
    ) -> Self {
        ResponderHandshake {
            id,
            now_unix,
            my_addrs,
            peer_addr,
            codec: CellCodec::new(),
            state: RState::WaitVersions,
            link_version: 0,
            slog: Sha256::new(),
            slog_final: [0; 32],
            clog: Sha256::new(),
            certs: None,
            peer: None,
            read: 0,
        }
    }

    fn emit(
        &mut self,
        cell: &RawCell,
        out: &mut BytesMut,
        log: bool,
    ) -> Result<(), HandshakeError> {
        let start = out.len();
        self.codec.encode(cell, out)?;
        if log {
            self.slog.update(&out[start..]);
        }
        Ok(())
    }

    /// Consume initiator bytes; write our replies to `out`.
    pub fn handle(
        &mut self,
        input: &mut BytesMut,
        out: &mut BytesMut,
        exporter: &dyn Fn(&[u8; 32]) -> Option<[u8; 32]>,
    ) -> Result<Option<Accepted>, HandshakeError> {
        loop {
            if self.state == RState::Done {
                return Ok(None);
            }
            let before_len = input.len();
            let snapshot = input.clone();
            let Some(cell) = self.codec.decode(input)? else {
                // A cell that would take the handshake past its limit is
                // refused now, not once it arrived.
                let pending = self.codec.frame_len(input).unwrap_or(0).max(input.len());
                if self.read.saturating_add(pending) > MAX_HANDSHAKE_BYTES {
                    return Err(HandshakeError::TooLong);
                }
                return Ok(None);
            };
            let used = before_len - input.len();
            self.read += used;
            if self.read > MAX_HANDSHAKE_BYTES {
                return Err(HandshakeError::TooLong);
            }
            let raw = &snapshot[..used];
            match (self.state, cell.cmd) {
                (RState::WaitVersions, ChanCmd::VERSIONS) => {
                    self.clog.update(raw);
                    let theirs = parse_versions(&cell.payload)?;
                    let v = LINK_VERSIONS
                        .iter()
                        .copied()
                        .filter(|v| theirs.contains(v))
                        .max()
                        .ok_or(HandshakeError::NoCommonVersion(theirs))?;
                    // Our VERSIONS uses the 2-byte circuit ID format.
                    let versions =
                        RawCell::var(0, ChanCmd::VERSIONS, &encode_versions(LINK_VERSIONS))?;
                    self.emit(&versions, out, true)?;
                    self.link_version = v;
                    self.codec.set_link_version(v);
                    let certs = RawCell::var(0, ChanCmd::CERTS, self.id.certs_payload())?;
                    self.emit(&certs, out, true)?;
                    let mut challenge = [0u8; 32];
                    rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut challenge);
                    let ch = AuthChallenge {
                        challenge,
                        methods: vec![3],
                    };
                    let ch = RawCell::var(0, ChanCmd::AUTH_CHALLENGE, &ch.encode())?;
                    self.emit(&ch, out, true)?;
                    self.slog_final = self.slog.clone().finalize().into();
                    let ni = Netinfo {
                        time: self.now_unix as u32,
                        other_addr: self.peer_addr,
                        my_addrs: self.my_addrs.clone(),
                    };
                    let ni = RawCell::fixed(0, ChanCmd::NETINFO, &ni.encode())?;
                    self.emit(&ni, out, false)?;
                    self.state = RState::WaitInitiator;
                }
                (RState::WaitInitiator, ChanCmd::VPADDING) => {
                    if self.peer.is_none() {
                        self.clog.update(raw);
                    }
                }
                (RState::WaitInitiator, ChanCmd::CERTS) => {
                    if self.certs.is_some() {
                        return Err(HandshakeError::Unexpected(cell.cmd));
                    }
                    self.clog.update(raw);
                    self.certs = Some(Certs::parse(&cell.payload)?);
                }
                (RState::WaitInitiator, ChanCmd::AUTHENTICATE) => {
                    let Some(certs) = self.certs.as_ref() else {
                        return Err(HandshakeError::Unexpected(cell.cmd));
                    };
                    if self.peer.is_some() {
                        return Err(HandshakeError::Unexpected(cell.cmd));
                    }
                    let clog: [u8; 32] = self.clog.clone().finalize().into();
                    let ids = self
                        .id
                        .verify_initiator(
                            certs,
                            &cell.payload,
                            self.slog_final,
                            clog,
                            exporter,
                            self.now_unix,
                        )
                        .map_err(HandshakeError::Certs)?;
                    self.peer = Some(ids);
                }
                (RState::WaitInitiator, ChanCmd::NETINFO) => {
                    if self.certs.is_some() && self.peer.is_none() {
                        // CERTS without AUTHENTICATE: refuse.
                        return Err(HandshakeError::Certs(
                            "CERTS sent without AUTHENTICATE".into(),
                        ));
                    }
                    let netinfo = Netinfo::parse(&cell.payload)?;
                    self.state = RState::Done;
                    return Ok(Some(Accepted {
                        link_version: self.link_version,
                        codec: self.codec.clone(),
                        peer: self.peer.clone(),
                        netinfo,
                    }));
                }
                (_, ChanCmd::VPADDING) | (_, ChanCmd::PADDING) => {}
                (_, cmd) => return Err(HandshakeError::Unexpected(cmd)),
            }
        }
    }
}
