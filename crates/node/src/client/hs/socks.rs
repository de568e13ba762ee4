//! A SOCKS CONNECT to a `.onion` name: the address was checked when the
//! request arrived (a bad one never gets here); this reaches the service
//! and pumps the stream, or answers with tor's reply for the failure (the
//! proposal 304 code on ports with extended errors, "host unreachable"
//! otherwise, as tor does when it closes onion requests with
//! `END_STREAM_REASON_RESOLVEFAILED`).

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use onionmix_cell::relay::TargetHost;
use onionmix_frontend::socks::{SocksRequest, end_reason_to_reply, reply_code};
use onionmix_hs::OnionAddress;

use super::{HsClient, OnionConnectError};
use crate::client::circmgr::IsolationKey;
use crate::client::control::streams::Tracked;
use onionmix_cell::relay::end_reason;

/// The SOCKS5 reply code for a failed onion connection.
pub fn reply_for_error(e: &OnionConnectError, extended_errors: bool) -> u8 {
    match e {
        OnionConnectError::Hs(h) if extended_errors => h.socks5_reply(),
        OnionConnectError::Hs(_) => reply_code::HOST_UNREACHABLE,
        OnionConnectError::Stream(s) => end_reason_to_reply(s.end_reason()),
    }
}

/// The END reason a failed onion connection is reported with on the
/// control port, and whether the far side gave it: the service's END for
/// a stream it refused; tor's `RESOLVEFAILED` when the service could not
/// be reached (descriptor, introduction or rendezvous failed); TIMEOUT
/// or MISC when the rendezvous circuit failed the stream.
pub fn stream_reason(e: &OnionConnectError) -> (u8, bool) {
    match e {
        OnionConnectError::Hs(_) => (end_reason::RESOLVEFAILED, false),
        OnionConnectError::Stream(s) => (
            s.end_reason(),
            matches!(s, crate::client::stream::StreamError::End(_)),
        ),
    }
}

/// Serve a CONNECT to an onion service; `early` holds what the
/// application sent right behind its request (see [`HsClient::connect`]);
/// `tr` reports the stream to the control port (SENTCONNECT on the
/// rendezvous circuit, SUCCEEDED, CLOSED or FAILED, as tor).
pub async fn connect(
    mut sock: TcpStream,
    hs: &HsClient,
    key: IsolationKey,
    req: SocksRequest,
    early: &[u8],
    extended_errors: bool,
    mut tr: Tracked,
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
        tr.failed(end_reason::RESOLVEFAILED, false);
        return Err("not an onion address".into());
    };
    let res = hs
        .connect_reporting(&addr, req.port, &key, early, &mut |c, retry_after| {
            if let Some(reason) = retry_after {
                tr.detached(reason);
            }
            tr.sent(c)
        })
        .await;
    match res {
        Ok(stream) => {
            tr.succeeded();
            if let Err(e) = sock
                .write_all(&req.reply(reply_code::SUCCEEDED, None))
                .await
            {
                tr.closed();
                return Err(e.to_string());
            }
            crate::client::connect::carry(stream, sock, &mut tr, "onion stream").await;
            Ok(())
        }
        Err(e) => {
            let code = reply_for_error(&e, extended_errors);
            let _ = sock.write_all(&req.reply(code, None)).await;
            let (reason, remote) = stream_reason(&e);
            tr.failed(reason, remote);
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

    #[test]
    fn control_port_reasons() {
        let e = OnionConnectError::Hs(onionmix_hs::HsClientError::DescriptorNotFound);
        assert_eq!(stream_reason(&e), (end_reason::RESOLVEFAILED, false));
        let e = OnionConnectError::Stream(StreamError::End(end_reason::CONNECTREFUSED));
        assert_eq!(stream_reason(&e), (end_reason::CONNECTREFUSED, true));
        let e = OnionConnectError::Stream(StreamError::Timeout);
        assert!(!stream_reason(&e).1);
    }
}
