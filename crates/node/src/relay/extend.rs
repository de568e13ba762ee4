//! EXTEND2 handling: find or open the channel to the next relay (checking
//! its identity), then ask that channel's reactor to send CREATE2.

use std::net::SocketAddr;
use std::sync::Arc;

use tracing::debug;

use onionmix_cell::chan::destroy_reason;
use onionmix_cell::relay::Extend2;

use super::RelayCtx;
use super::reactor::{PrevLink, RCmd};

/// Carry out one extension for the circuit `prev`.
pub async fn extend(ctx: Arc<RelayCtx>, prev: PrevLink, e: Extend2) {
    let fail = |reason: u8| {
        prev.chan.send(RCmd::ExtendFailed {
            circ_id: prev.circ_id,
            shared: prev.shared.clone(),
            reason,
        });
    };
    let Some(rsa_id) = e.rsa_id() else {
        debug!("EXTEND2 without an RSA identity");
        fail(destroy_reason::PROTOCOL);
        return;
    };
    let addr: Option<SocketAddr> = e
        .ipv4()
        .map(SocketAddr::V4)
        .or(e.ipv6().map(SocketAddr::V6));
    let Some(addr) = addr else {
        fail(destroy_reason::PROTOCOL);
        return;
    };
    if addr.port() == 0 || addr.ip().is_unspecified() {
        debug!("EXTEND2 to port 0 or an unspecified address");
        fail(destroy_reason::PROTOCOL);
        return;
    }
    // No relay is at a multicast, broadcast or reserved address, test
    // network or not (a QUIC attempt would put datagrams there).
    if onionmix_proto::netaddr::is_unroutable(addr.ip()) {
        debug!("refusing to extend to a multicast or reserved address");
        fail(destroy_reason::CONNECTFAILED);
        return;
    }
    // As tor without ExtendAllowPrivateAddresses (IPv4-mapped IPv6 too).
    if !ctx.cfg.testing_network && onionmix_proto::netaddr::is_internal(addr.ip()) {
        debug!("refusing to extend to a private address");
        fail(destroy_reason::CONNECTFAILED);
        return;
    }
    if rsa_id == ctx.rsa_id {
        // Extending to ourselves is pointless and tor refuses it.
        fail(destroy_reason::PROTOCOL);
        return;
    }
    // Nor back to the previous hop (by either identity), as tor.
    if let Some(p) = &prev.chan.peer
        && (p.rsa_id == rsa_id || e.ed_id().is_some_and(|ed| ed == p.ed_id))
    {
        debug!("refusing to extend back to the previous hop");
        fail(destroy_reason::PROTOCOL);
        return;
    }
    // onionmix's QUIC hint: the next hop takes QUIC links on this UDP port
    // of the same address.
    let quic = e.quic_port().map(|p| SocketAddr::new(addr.ip(), p));
    match ctx
        .channels
        .get_or_connect(&ctx, rsa_id, e.ed_id(), addr, quic)
        .await
    {
        Ok(next) => {
            next.send(RCmd::CreateFor {
                create2: e.create,
                prev,
            });
        }
        Err(err) => {
            debug!("extend failed: {err}");
            fail(destroy_reason::CONNECTFAILED);
        }
    }
}
