//! The client's onion-service failures, each mapped to the SOCKS5 extended
//! error a stock tor client gives (proposal 304, socks-extensions.txt:
//! 0xF0-0xF7). The async client driver returns an [`HsClientError`] for a
//! failed `.onion` connection and writes [`HsClientError::socks5_reply`]
//! on SOCKS ports with extended errors.

use onionmix_frontend::socks::reply_code;

use crate::addr::AddressError;
use crate::desc::DescError;

/// Why a connection to an onion service failed (client side).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HsClientError {
    /// No responsible HSDir had a descriptor (0xF0).
    #[error("onion service descriptor not found")]
    DescriptorNotFound,
    /// A descriptor was found but could not be parsed, verified or
    /// decrypted with the subcredential (0xF1).
    #[error("onion service descriptor invalid: {0}")]
    DescriptorInvalid(DescError),
    /// Every introduction point failed or refused us (0xF2).
    #[error("introduction failed: {0}")]
    IntroFailed(IntroFailure),
    /// The rendezvous circuit failed or RENDEZVOUS2 did not verify (0xF3).
    #[error("rendezvous failed: {0}")]
    RendFailed(RendFailure),
    /// The descriptor needs client authorization and we have no key for
    /// this service (0xF4).
    #[error("onion service requires client authorization")]
    MissingClientAuth,
    /// We have a client-authorization key but the descriptor was not
    /// encrypted to it (0xF5).
    #[error("client authorization key not accepted")]
    WrongClientAuth,
    /// The address is not a valid v3 onion address (0xF6).
    #[error("{0}")]
    BadAddress(AddressError),
    /// Introduction did not complete in time (0xF7).
    #[error("introduction timed out")]
    IntroTimedOut,
}

/// Why introduction failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum IntroFailure {
    /// The descriptor listed no introduction point we could use.
    #[error("no usable introduction point")]
    NoUsableIntroPoint,
    /// An introduction point answered INTRODUCE_ACK with a failure status.
    #[error("introduction point refused (status {0:#06x})")]
    Nack(u16),
    /// Circuits to every introduction point failed.
    #[error("could not reach an introduction point")]
    Unreachable,
}

/// Why rendezvous failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RendFailure {
    /// The rendezvous circuit closed before RENDEZVOUS2 arrived.
    #[error("rendezvous circuit closed")]
    CircuitClosed,
    /// RENDEZVOUS2's AUTH did not verify (hs-ntor).
    #[error("rendezvous handshake did not verify")]
    BadHandshake,
    /// No RENDEZVOUS2 in time.
    #[error("rendezvous timed out")]
    TimedOut,
}

impl HsClientError {
    /// The SOCKS5 reply code (proposal 304) for this failure.
    pub fn socks5_reply(&self) -> u8 {
        match self {
            HsClientError::DescriptorNotFound => reply_code::ONION_DESC_NOT_FOUND,
            HsClientError::DescriptorInvalid(_) => reply_code::ONION_DESC_INVALID,
            HsClientError::IntroFailed(_) => reply_code::ONION_INTRO_FAILED,
            HsClientError::RendFailed(_) => reply_code::ONION_REND_FAILED,
            HsClientError::MissingClientAuth => reply_code::ONION_MISSING_CLIENT_AUTH,
            HsClientError::WrongClientAuth => reply_code::ONION_WRONG_CLIENT_AUTH,
            HsClientError::BadAddress(_) => reply_code::ONION_BAD_ADDRESS,
            HsClientError::IntroTimedOut => reply_code::ONION_INTRO_TIMEDOUT,
        }
    }
}

impl From<DescError> for HsClientError {
    /// Client-auth failures get their own SOCKS codes; everything else about
    /// a descriptor is "invalid".
    fn from(e: DescError) -> Self {
        match e {
            DescError::MissingClientAuth => HsClientError::MissingClientAuth,
            DescError::WrongClientAuth => HsClientError::WrongClientAuth,
            other => HsClientError::DescriptorInvalid(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_failure_has_its_prop304_code() {
        let cases = [
            (HsClientError::DescriptorNotFound, 0xF0),
            (
                HsClientError::DescriptorInvalid(DescError::TooLarge(60_000)),
                0xF1,
            ),
            (HsClientError::IntroFailed(IntroFailure::Nack(1)), 0xF2),
            (HsClientError::RendFailed(RendFailure::BadHandshake), 0xF3),
            (HsClientError::MissingClientAuth, 0xF4),
            (HsClientError::WrongClientAuth, 0xF5),
            (HsClientError::BadAddress(AddressError::NotOnion), 0xF6),
            (HsClientError::IntroTimedOut, 0xF7),
        ];
        for (e, code) in cases {
            assert_eq!(e.socks5_reply(), code, "{e}");
        }
        assert_eq!(
            HsClientError::from(DescError::MissingClientAuth).socks5_reply(),
            0xF4
        );
        assert_eq!(
            HsClientError::from(DescError::WrongClientAuth).socks5_reply(),
            0xF5
        );
    }
}
