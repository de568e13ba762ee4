//! The embedding API's errors.

use onionmix_cell::relay::end_reason;
use onionmix_node::client::hs::OnionConnectError;
use onionmix_node::client::stream::StreamError;

/// Why an embedding call failed.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// The configuration or the state directory is unusable, or the client
    /// could not start.
    #[error("cannot start the client: {0}")]
    Setup(String),
    /// The client did not bootstrap within the time given.
    #[error("not bootstrapped after {0:?}")]
    BootstrapTimeout(std::time::Duration),
    /// The target is not something a stream can be opened to (empty or
    /// malformed host, port 0).
    #[error("bad target: {0}")]
    BadTarget(String),
    /// The host is a `.onion` name that is not a valid v3 onion address.
    #[error("invalid .onion address: {0}")]
    BadOnion(String),
    /// The host is a `.exit` name (the `.exit` notation is refused, as
    /// stock tor refuses it).
    #[error("refused a .exit name (the .exit notation is disabled)")]
    ExitNotation,
    /// No circuit could be built for the stream.
    #[error("no circuit: {0}")]
    NoCircuit(String),
    /// The exit (or onion service) ended the stream instead of connecting;
    /// the END reason code and its name.
    #[error("stream refused: {name} (END reason {reason})")]
    StreamEnded {
        /// tor-spec END reason code.
        reason: u8,
        /// Its name (`CONNECTREFUSED`, `EXITPOLICY`, ...).
        name: &'static str,
    },
    /// No answer to the stream request in time.
    #[error("timed out waiting for the stream to connect")]
    Timeout,
    /// The circuit or its channel failed under the stream.
    #[error("circuit failed: {0}")]
    Circuit(String),
    /// Reaching the onion service failed (descriptor, introduction,
    /// rendezvous).
    #[error("onion service unreachable: {0}")]
    OnionService(String),
    /// The client has been shut down.
    #[error("the client is shut down")]
    Shutdown,
}

impl From<StreamError> for EmbedError {
    fn from(e: StreamError) -> Self {
        match e {
            StreamError::End(r) => EmbedError::StreamEnded {
                reason: r,
                name: end_reason::name(r),
            },
            StreamError::Timeout => EmbedError::Timeout,
            StreamError::LocalOnly(h) => {
                EmbedError::BadTarget(format!("{h}: a name that never leaves the client"))
            }
            e @ (StreamError::Reactor(_) | StreamError::Unexpected) => {
                EmbedError::Circuit(e.to_string())
            }
        }
    }
}

impl From<OnionConnectError> for EmbedError {
    fn from(e: OnionConnectError) -> Self {
        match e {
            OnionConnectError::Stream(s) => s.into(),
            OnionConnectError::Hs(h) => EmbedError::OnionService(h.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn end_reasons_keep_their_code_and_name() {
        let e = EmbedError::from(StreamError::End(end_reason::CONNECTREFUSED));
        match e {
            EmbedError::StreamEnded { reason, name } => {
                assert_eq!(reason, end_reason::CONNECTREFUSED);
                assert_eq!(name, end_reason::name(end_reason::CONNECTREFUSED));
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(matches!(
            EmbedError::from(StreamError::Timeout),
            EmbedError::Timeout
        ));
        assert!(matches!(
            EmbedError::from(StreamError::Unexpected),
            EmbedError::Circuit(_)
        ));
    }
}
