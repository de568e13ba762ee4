//! A SOCKS CONNECT to a `.onion` name: the address was checked when the
//! request arrived (a bad one never gets here); this reaches the service
//! and pumps the stream, or answers with tor's reply for the failure (the
//! proposal 304 code on ports with extended errors, "host unreachable"
//! otherwise, as tor does when it closes onion requests with
//! `END_STREAM_REASON_RESOLVEFAILED`).

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tracing::debug;

use onionmix_cell::relay::TargetHost;
use onionmix_frontend::socks::{SocksRequest, end_reason_to_reply, reply_code};
use onionmix_hs::OnionAddress;

use super::{HsClient, OnionConnectError};
use crate::client::circmgr::IsolationKey;
use crate::client::socks::STREAM_IDLE_TIMEOUT;

/// The SOCKS5 reply code for a failed onion connection.
pub fn reply_for_error(e: &OnionConnectError, extended_errors: bool) -> u8 {
    match e {
        OnionConnectError::Hs(h) if extended_errors => h.socks5_reply(),
        OnionConnectError::Hs(_) => reply_code::HOST_UNREACHABLE,
        OnionConnectError::Stream(s) => end_reason_to_reply(s.end_reason()),
    }
}

/// Serve a CONNECT to an onion service; `early` holds what the
/// application sent right behind its request (see [`HsClient::connect`]).
pub async fn connect(
    mut sock: TcpStream,
    hs: &HsClient,
    key: IsolationKey,
    req: SocksRequest,
    early: &[u8],
    extended_errors: bool,
) -> Result<(), String> {
    let addr = match &req.host {
        TargetHost::Hostname(h) => OnionAddress::parse_host(h).ok(),
        TargetHost::Ip(_) => None,
    };
    let Some(addr) = addr else {
        let code = if extended_errors {
            reply_code::ONION_BAD_ADDRESS
        } else {
            reply_code::GENERAL_FAILURE
        };
        let _ = sock.write_all(&req.reply(code, None)).await;
        return Err("not an onion address".into());
    };
    match hs.connect(&addr, req.port, &key, early).await {
        Ok(stream) => {
            sock.write_all(&req.reply(reply_code::SUCCEEDED, None))
                .await
                .map_err(|e| e.to_string())?;
            let (up, down) = stream.pump(sock, STREAM_IDLE_TIMEOUT).await;
            debug!("onion stream closed: {up} bytes up, {down} bytes down");
            Ok(())
        }
        Err(e) => {
            let code = reply_for_error(&e, extended_errors);
            let _ = sock.write_all(&req.reply(code, None)).await;
            Err(format!("onion connect failed: {e}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::stream::StreamError;
    use onionmix_cell::relay::end_reason;
    use onionmix_hs::error::IntroFailure;

    #[test]
    fn replies() {
        let e = OnionConnectError::Hs(onionmix_hs::HsClientError::WrongClientAuth);
        assert_eq!(reply_for_error(&e, true), 0xF5);
        assert_eq!(reply_for_error(&e, false), reply_code::HOST_UNREACHABLE);
        let e = OnionConnectError::Hs(onionmix_hs::HsClientError::IntroFailed(
            IntroFailure::Unreachable,
        ));
        assert_eq!(reply_for_error(&e, true), 0xF2);
        let e = OnionConnectError::Stream(StreamError::End(end_reason::CONNECTREFUSED));
        assert_eq!(reply_for_error(&e, true), reply_code::CONNECTION_REFUSED);
    }
}
