//! Tor's control protocol (control-spec.txt), sans-IO: framing of the
//! controller's commands, the argument grammar, replies and events byte for
//! byte as stock tor 0.4.9 sends them, authentication secrets, and the
//! per-connection state machine. The client's side of the commands is a
//! [`session::Backend`] implemented in `onionmix-node`.

pub mod auth;
pub mod client_auth;
mod commands;
pub mod events;
pub mod framing;
pub mod hsdesc;
pub mod onion;
pub mod reply;
pub mod session;
pub mod syntax;

#[cfg(test)]
mod session_tests;

pub use client_auth::{AuthAdded, ClientAuthCred};
pub use framing::{FrameError, Framer, RawCommand};
pub use hsdesc::{HsFetch, HsPost};
pub use onion::{AddOnion, AddedOnion, HsDescEvent, HsDirName, OnionKey};
pub use reply::Reply;
pub use session::{AuthConfig, Backend, CmdError, ConfError, Info, Outcome, Session, Signal};

/// The reply for a framing error, after which the connection is closed.
pub fn frame_error_reply(e: FrameError) -> Vec<u8> {
    match e {
        FrameError::LineTooLong => Reply::single(500, "Line too long.").encode(),
        FrameError::DataTooLong => Reply::single(500, "Command too long.").encode(),
    }
}
