//! Adapters from `onionmix-crypto` to the interfaces the protocol
//! machines use.

use onionmix_cell::CellBody;
use onionmix_crypto::ntor_v3::Ntor3Extension;
use onionmix_crypto::{NtorClient, Tor1Layer};
use onionmix_proto::cc::CcParams;
use onionmix_proto::channel::{ProvenIds, ResponderVerifier};
use onionmix_proto::layer::{ClientLayer, RelayLayer};

use crate::client::circuit::HopTarget;

/// tor1 relay crypto as a circuit layer (client or relay side).
pub struct Tor1(pub Tor1Layer);

impl ClientLayer for Tor1 {
    fn originate_forward(&mut self, body: &mut CellBody) -> [u8; 20] {
        self.0.originate_forward(body)
    }
    fn encrypt_forward(&mut self, body: &mut CellBody) {
        self.0.encrypt_forward(body)
    }
    fn decrypt_backward(&mut self, body: &mut CellBody) -> Option<[u8; 20]> {
        self.0.decrypt_backward(body)
    }
}

impl RelayLayer for Tor1 {
    fn decrypt_forward(&mut self, body: &mut CellBody) -> Option<[u8; 20]> {
        self.0.decrypt_forward(body)
    }
    fn originate_backward(&mut self, body: &mut CellBody) -> [u8; 20] {
        self.0.originate_backward(body)
    }
    fn encrypt_backward(&mut self, body: &mut CellBody) {
        self.0.encrypt_backward(body)
    }
}

/// A client handshake in progress (ntor or ntor-v3).
pub enum ClientHandshake {
    /// ntor (CREATE2 type 2).
    Ntor(NtorClient),
    /// ntor-v3 (CREATE2 type 3, proposal 332), and whether we asked for
    /// congestion control.
    NtorV3(onionmix_crypto::ntor_v3::Ntor3Client, bool),
}

/// Start a handshake with `hop`: ntor-v3 when the hop supports it (it has
/// an Ed25519 identity and advertises Relay=4), ntor otherwise. With
/// `want_cc` (the hop is a circuit's last, it advertises FlowCtrl=2 and
/// the consensus enables `cc_alg`) the ntor-v3 message asks for congestion
/// control (proposal 324 §10). Returns the state, the CREATE2 handshake
/// type, and the client data.
pub fn handshake_start(hop: &HopTarget, want_cc: bool) -> (ClientHandshake, u16, Vec<u8>) {
    let mut rng = rand::rngs::OsRng;
    if let (true, Some(ed)) = (hop.ntor_v3, hop.ed_id) {
        // The message is an extension list; tor rejects an empty byte
        // string, so without a request send an empty list (N_EXTENSIONS=0).
        let exts: Vec<Ntor3Extension> = onionmix_proto::cc::negotiate::client_extensions(want_cc)
            .into_iter()
            .map(|(ext_type, data)| Ntor3Extension { ext_type, data })
            .collect();
        let msg = onionmix_crypto::ntor_v3::encode_extensions(&exts);
        if let Ok((st, data)) = onionmix_crypto::ntor_v3::Ntor3Client::new(
            ed,
            hop.ntor_key,
            &msg,
            onionmix_crypto::ntor_v3::NTOR3_CIRC_VERIFICATION,
            &mut rng,
        ) {
            return (
                ClientHandshake::NtorV3(st, want_cc),
                onionmix_cell::chan::HTYPE_NTOR_V3,
                data,
            );
        }
    }
    let (st, skin) = NtorClient::new(hop.rsa_id, hop.ntor_key, &mut rng);
    (
        ClientHandshake::Ntor(st),
        onionmix_cell::chan::HTYPE_NTOR,
        skin.to_vec(),
    )
}

/// A finished client handshake: the hop's relay crypto, and the SENDME
/// increment when the hop agreed to congestion control.
pub struct HopKeys {
    /// The layer.
    pub layer: Box<dyn ClientLayer>,
    /// `Some(sendme_inc)`: congestion control on this hop.
    pub cc_sendme_inc: Option<u8>,
    /// The handshake's `KH` (the 20 bytes after the tor1 keys), which
    /// onion services bind ESTABLISH_INTRO to (rend-spec-v3 §3.1.1
    /// `HANDSHAKE_AUTH`).
    pub kh: [u8; 20],
}

/// Finish the handshake and build the hop's layer. The relay's ntor-v3
/// message is checked against what we asked (`params` judges its
/// `sendme_inc`); a response we did not ask for, or a bad one, fails the
/// handshake.
pub fn handshake_finish(
    st: ClientHandshake,
    reply: &[u8],
    params: &CcParams,
) -> Result<HopKeys, String> {
    let (keys, cc_sendme_inc) = match st {
        ClientHandshake::Ntor(st) => (st.finish(reply).map_err(|e| e.to_string())?, None),
        ClientHandshake::NtorV3(st, requested) => {
            let (server_msg, ks) = st.finish(reply).map_err(|e| e.to_string())?;
            // An empty message carries no extensions.
            let exts = if server_msg.is_empty() {
                Vec::new()
            } else {
                onionmix_crypto::ntor_v3::parse_extensions(&server_msg)
                    .map_err(|e| format!("relay's ntor-v3 message: {e}"))?
            };
            let inc = onionmix_proto::cc::negotiate::client_check_response(
                requested,
                exts.iter().map(|e| (e.ext_type, e.data.as_slice())),
                |i| params.sendme_inc_acceptable(i),
            )
            .map_err(|e| e.to_string())?;
            (ks.circuit_keys(), inc)
        }
    };
    Ok(HopKeys {
        layer: Box::new(Tor1(Tor1Layer::new(&keys))),
        cc_sendme_inc,
        kh: keys.kh,
    })
}

/// The onion-service virtual hop's relay crypto as a circuit layer.
pub struct HsHop(pub onionmix_crypto::relay_crypto_hs::HsRelayLayer);

impl ClientLayer for HsHop {
    fn originate_forward(&mut self, body: &mut CellBody) -> [u8; 20] {
        self.0.originate_forward(body)
    }
    fn encrypt_forward(&mut self, body: &mut CellBody) {
        self.0.encrypt_forward(body)
    }
    fn decrypt_backward(&mut self, body: &mut CellBody) -> Option<[u8; 20]> {
        self.0.decrypt_backward(body)
    }
}

/// Checks responder CERTS cells with `onionmix-crypto`.
pub struct CryptoVerifier;

impl ResponderVerifier for CryptoVerifier {
    fn verify(
        &self,
        certs: &onionmix_cell::chan::Certs,
        tls_cert_sha256: &[u8; 32],
        now_unix: u64,
    ) -> Result<ProvenIds, String> {
        let ids = onionmix_crypto::link_auth::verify_responder_certs(
            &certs.certs,
            tls_cert_sha256,
            now_unix,
        )
        .map_err(|e| e.to_string())?;
        Ok(ProvenIds {
            rsa_id: ids.rsa_id,
            ed_id: ids.ed_id,
            rsa_key_sha256: sha256(&ids.rsa_key.to_der()),
        })
    }
}

/// The verifier clients use.
pub fn responder_verifier() -> Box<dyn ResponderVerifier> {
    Box::new(CryptoVerifier)
}

/// A relay's link identity: its keys and TLS certificate, and the CERTS
/// payloads derived from them.
pub struct RelayLinkIdentity {
    keys: onionmix_crypto::keys::RelayKeys,
    responder_certs: Vec<u8>,
    initiator_certs: Vec<u8>,
    sid: [u8; 32],
    scert: [u8; 32],
    built_unix: u64,
    expires_unix: u64,
}

impl RelayLinkIdentity {
    /// Build from a relay's keys and its current TLS identity.
    pub fn new(
        keys: onionmix_crypto::keys::RelayKeys,
        tls: &onionmix_crypto::x509::TlsIdentity,
        now_unix: u64,
    ) -> Result<Self, String> {
        use onionmix_crypto::link_auth::encode_certs_payload;
        let mut rng = rand::rngs::OsRng;
        let responder = keys
            .responder_certs(&mut rng, tls, now_unix)
            .map_err(|e| e.to_string())?;
        let initiator = keys
            .initiator_certs(&mut rng, now_unix)
            .map_err(|e| e.to_string())?;
        let sid = sha256(&keys.rsa_identity.public().to_der());
        // The identity is usable until the first of its certificates runs
        // out: the TLS certificate, the type 5 link certificate, the type 6
        // authentication certificate, the signing key's certificate.
        let ed_expiry = |c: &[u8]| {
            onionmix_crypto::certs::Ed25519Cert::parse(c)
                .map(|c| c.expires_unix())
                .unwrap_or(0)
        };
        let link_cert = keys.tls_link_cert(&tls.cert_sha256, now_unix);
        let expires_unix = [
            tls.not_after,
            ed_expiry(&link_cert),
            ed_expiry(&keys.ed_link_auth_cert),
            keys.signing_cert_expires().unwrap_or(0),
        ]
        .into_iter()
        .min()
        .unwrap_or(0);
        Ok(RelayLinkIdentity {
            responder_certs: encode_certs_payload(&responder).map_err(|e| e.to_string())?,
            initiator_certs: encode_certs_payload(&initiator).map_err(|e| e.to_string())?,
            sid,
            scert: tls.cert_sha256,
            keys,
            built_unix: now_unix,
            expires_unix,
        })
    }
    /// When this identity was built (Unix seconds).
    pub fn built_unix(&self) -> u64 {
        self.built_unix
    }
    /// When its first certificate expires (Unix seconds).
    pub fn expires_unix(&self) -> u64 {
        self.expires_unix
    }
    /// The relay keys.
    pub fn keys(&self) -> &onionmix_crypto::keys::RelayKeys {
        &self.keys
    }
    /// SHA-256 of our RSA identity key (CID when we initiate, SID when we
    /// respond), also the TLS exporter context when we initiate.
    pub fn cid(&self) -> [u8; 32] {
        self.sid
    }
}

fn sha256(b: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(b).into()
}

impl onionmix_proto::channel::ResponderIdentity for RelayLinkIdentity {
    fn certs_payload(&self) -> &[u8] {
        &self.responder_certs
    }
    fn verify_initiator(
        &self,
        certs: &onionmix_cell::chan::Certs,
        authenticate: &[u8],
        slog: [u8; 32],
        clog: [u8; 32],
        exporter: &dyn Fn(&[u8; 32]) -> Option<[u8; 32]>,
        now_unix: u64,
    ) -> Result<ProvenIds, String> {
        use onionmix_crypto::link_auth::{
            Auth3Fields, verify_authenticate, verify_initiator_certs,
        };
        let peer = verify_initiator_certs(&certs.certs, now_unix).map_err(|e| e.to_string())?;
        let auth_key = peer
            .auth_key
            .ok_or("initiator sent no authentication key")?;
        let cid = sha256(&peer.rsa_key.to_der());
        let tlssecrets = exporter(&cid).ok_or("TLS exporter unavailable")?;
        let fields = Auth3Fields {
            cid,
            sid: self.sid,
            cid_ed: peer.ed_id,
            sid_ed: self.keys.ed_id(),
            slog,
            clog,
            scert: self.scert,
            tlssecrets,
        };
        verify_authenticate(&fields, authenticate, &auth_key).map_err(|e| e.to_string())?;
        Ok(ProvenIds {
            rsa_id: peer.rsa_id,
            ed_id: peer.ed_id,
            rsa_key_sha256: sha256(&peer.rsa_key.to_der()),
        })
    }
}

/// A relay initiator's authentication for one connection (the TLS
/// exporter output is per connection).
pub struct RelayInitiatorAuth<'a> {
    /// Our identity.
    pub id: &'a RelayLinkIdentity,
    /// RFC 5705 exporter output with our Ed25519 identity as context.
    pub tlssecrets: [u8; 32],
}

impl onionmix_proto::channel::InitiatorAuth for RelayInitiatorAuth<'_> {
    fn certs_payload(&self) -> Vec<u8> {
        self.id.initiator_certs.clone()
    }
    fn authenticate_payload(
        &self,
        t: &onionmix_proto::channel::AuthTranscript,
    ) -> Result<Vec<u8>, String> {
        use onionmix_crypto::link_auth::{Auth3Fields, build_authenticate_payload};
        let fields = Auth3Fields {
            cid: self.id.sid,
            sid: t.responder_rsa_key_sha256,
            cid_ed: self.id.keys.ed_id(),
            sid_ed: t.responder.ed_id,
            slog: t.slog,
            clog: t.clog,
            scert: t.scert,
            tlssecrets: self.tlssecrets,
        };
        Ok(build_authenticate_payload(
            &fields,
            &self.id.keys.ed_link_auth,
            &mut rand::rngs::OsRng,
        ))
    }
}

/// Why driving a link handshake as initiator failed.
#[derive(Debug, thiserror::Error)]
pub enum DriveError {
    /// Reading or writing the transport failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The peer broke the handshake protocol or failed verification.
    #[error("{0}")]
    Handshake(#[from] onionmix_proto::channel::HandshakeError),
    /// The peer closed the connection mid-handshake.
    #[error("connection closed during handshake")]
    Closed,
    /// It did not finish in time.
    #[error("link handshake timed out")]
    TimedOut,
}

impl DriveError {
    /// The application code a QUIC link whose handshake failed this way is
    /// closed with (`docs/quic-links.md` §1, error codes): AUTH_FAILED
    /// when the peer failed authentication, PROTOCOL when it broke the
    /// handshake (bad versions or cells, a reset control stream, no
    /// answer in time), NO_ERROR when it closed first.
    pub fn quic_close_code(&self) -> u32 {
        use onionmix_link::quic::codes;
        match self {
            DriveError::Handshake(e) if e.is_auth_failure() => codes::AUTH_FAILED,
            DriveError::Handshake(_) | DriveError::Io(_) | DriveError::TimedOut => codes::PROTOCOL,
            DriveError::Closed => codes::NO_ERROR,
        }
    }
}

/// Run an initiator link handshake (VERSIONS, CERTS, AUTH_CHALLENGE,
/// optional AUTHENTICATE, NETINFO) over an established TLS stream, within
/// `limit`. Returns the established channel and the bytes already read past
/// the handshake. The one copy of this loop: relays extending, the client's
/// channel manager and tests use it.
pub async fn drive_initiator_handshake<S>(
    tls: &mut S,
    mut hs: onionmix_proto::channel::InitiatorHandshake<'_>,
    limit: std::time::Duration,
) -> Result<(onionmix_proto::channel::Established, bytes::BytesMut), DriveError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fut = async {
        let mut out = bytes::BytesMut::new();
        hs.start(&mut out)?;
        tls.write_all(&out).await?;
        tls.flush().await?;
        out.clear();
        let mut input = bytes::BytesMut::with_capacity(16 * 1024);
        loop {
            if tls.read_buf(&mut input).await? == 0 {
                return Err(DriveError::Closed);
            }
            let done = hs.handle(&mut input, &mut out)?;
            if !out.is_empty() {
                tls.write_all(&out).await?;
                tls.flush().await?;
                out.clear();
            }
            if let Some(est) = done {
                return Ok((est, input));
            }
        }
    };
    tokio::time::timeout(limit, fut)
        .await
        .map_err(|_| DriveError::TimedOut)?
}

/// Run a responder link handshake (answer VERSIONS with VERSIONS, CERTS,
/// AUTH_CHALLENGE, NETINFO; check the initiator's CERTS + AUTHENTICATE
/// when it authenticates) over an established transport stream, within
/// `limit`. `exporter(stream, cid)` returns the transport's TLS exporter
/// output for AUTHENTICATE's TLSSECRETS (from the TLS stream itself, or
/// from the QUIC connection the control stream belongs to). Returns the
/// accepted channel and the bytes already read past the handshake. The
/// one copy of this loop: the relay's TLS listener and QUIC links use it.
pub async fn drive_responder_handshake<S, E>(
    stream: &mut S,
    mut hs: onionmix_proto::channel::ResponderHandshake<'_>,
    exporter: E,
    limit: std::time::Duration,
) -> Result<(onionmix_proto::channel::Accepted, bytes::BytesMut), DriveError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    E: Fn(&S, &[u8; 32]) -> Option<[u8; 32]>,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fut = async {
        let mut input = bytes::BytesMut::with_capacity(16 * 1024);
        let mut out = bytes::BytesMut::new();
        loop {
            if stream.read_buf(&mut input).await? == 0 {
                return Err(DriveError::Closed);
            }
            let done = {
                let s = &*stream;
                let export = |ctx: &[u8; 32]| exporter(s, ctx);
                hs.handle(&mut input, &mut out, &export)?
            };
            if !out.is_empty() {
                stream.write_all(&out).await?;
                stream.flush().await?;
                out.clear();
            }
            if let Some(acc) = done {
                return Ok((acc, input));
            }
        }
    };
    tokio::time::timeout(limit, fut)
        .await
        .map_err(|_| DriveError::TimedOut)?
}

#[cfg(test)]
mod tests {
    use super::DriveError;
    use onionmix_cell::ChanCmd;
    use onionmix_link::quic::codes;
    use onionmix_proto::channel::HandshakeError;

    #[test]
    fn a_failed_handshake_closes_a_quic_link_with_the_code_of_its_failure() {
        let code = |e: DriveError| e.quic_close_code();
        for auth in [
            HandshakeError::Certs("bad signature".into()),
            HandshakeError::IdentityMismatch {
                expected: "AA".into(),
                got: "BB".into(),
            },
            HandshakeError::NoAuthMethod,
        ] {
            assert_eq!(code(auth.into()), codes::AUTH_FAILED);
        }
        for proto in [
            HandshakeError::NoCommonVersion(vec![1, 2]),
            HandshakeError::Unexpected(ChanCmd::RELAY),
            HandshakeError::TooLong,
        ] {
            assert_eq!(code(proto.into()), codes::PROTOCOL);
        }
        assert_eq!(code(DriveError::TimedOut), codes::PROTOCOL);
        let reset = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "stream reset");
        assert_eq!(code(reset.into()), codes::PROTOCOL);
        assert_eq!(code(DriveError::Closed), codes::NO_ERROR);
    }
}
