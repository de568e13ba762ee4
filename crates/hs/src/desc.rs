//! placeholder
/// Descriptor errors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DescError {
    /// Too large.
    #[error("descriptor of {0} bytes is over the 50 KB limit")]
    TooLarge(usize),
    /// Missing client auth.
    #[error("descriptor requires client authorization")]
    MissingClientAuth,
    /// Wrong client auth.
    #[error("client authorization key does not decrypt the descriptor")]
    WrongClientAuth,
}
