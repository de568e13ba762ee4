//! The one certificate policy for every TLS-based link transport (TLS over
//! TCP and QUIC): no PKI, so any certificate chain is accepted, but the
//! handshake signature must verify against the key in the presented
//! certificate. That makes the SHA-256 of the certificate meaningful: the
//! peer holds its key, and the in-protocol CERTS exchange (type 5 link
//! certificate) binds that digest to the relay's identity keys.

use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

/// The crypto provider every link transport uses (ring).
pub(crate) fn provider() -> Arc<CryptoProvider> {
    static P: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    P.get_or_init(|| Arc::new(rustls::crypto::ring::default_provider()))
        .clone()
}

/// The SNI a link initiator sends. Tor does not check it; a plausible
/// name avoids standing out.
pub(crate) const SNI: &str = "www.onionmix.invalid";

/// Accepts any certificate chain but checks handshake signatures.
#[derive(Debug)]
pub(crate) struct TorCertVerifier(Arc<CryptoProvider>);

impl TorCertVerifier {
    /// The verifier, as rustls wants it.
    pub(crate) fn shared() -> Arc<Self> {
        Arc::new(TorCertVerifier(provider()))
    }
}

impl ServerCertVerifier for TorCertVerifier {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
