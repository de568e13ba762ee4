//! What the tunnel's driver needs to carry a flow over a client's SOCKS5
//! port (ours or stock tor's): the isolation key as SOCKS5
//! username/password (both clients isolate on it by default,
//! IsolateSOCKSAuth), and the SOCKS5 reply code of a failed CONNECT as the
//! END reason the flow table turns into a RST or an ICMP unreachable.

use crate::flows::IsolationKey;
use onionmix_cell::relay::end_reason;
use onionmix_frontend::socks::reply_code as reply;

/// The SOCKS5 username every tunnel flow sends; the password carries the
/// isolation key.
pub const SOCKS_USER: &str = "onionmix-tunnel";

/// Longest SOCKS5 username or password (one length octet, RFC 1929).
pub const MAX_AUTH_FIELD: usize = 255;

/// The SOCKS5 password for `key`: distinct keys give distinct passwords
/// (the kind is a prefix). `None` when it would not fit a SOCKS5 field
/// (a destination name past 253 bytes, which DNS does not allow); the
/// driver then refuses the flow rather than share a circuit.
pub fn socks_password(key: &IsolationKey) -> Option<String> {
    let p = match key {
        IsolationKey::Destination(h) => format!("d:{h}"),
        IsolationKey::App(a) => format!("a:{a}"),
        IsolationKey::Flow(f) => format!("f:{f}"),
        IsolationKey::UdpFlow(f) => format!("u:{f}"),
    };
    (p.len() <= MAX_AUTH_FIELD).then_some(p)
}

/// The END reason behind a failed SOCKS5 CONNECT, the inverse of the
/// client's END reason -> reply mapping (`onionmix_frontend::socks::
/// end_reason_to_reply`, as stock tor's); `None` for success.
pub fn end_reason_for_reply(code: u8) -> Option<u8> {
    Some(match code {
        reply::SUCCEEDED => return None,
        reply::NOT_ALLOWED => end_reason::EXITPOLICY,
        reply::NET_UNREACHABLE => end_reason::NOROUTE,
        reply::HOST_UNREACHABLE => end_reason::RESOLVEFAILED,
        reply::CONNECTION_REFUSED => end_reason::CONNECTREFUSED,
        reply::TTL_EXPIRED => end_reason::TIMEOUT,
        // The onion service could not be reached: host unreachable.
        reply::ONION_DESC_NOT_FOUND..=reply::ONION_INTRO_TIMEDOUT => end_reason::RESOLVEFAILED,
        // General failure, command or address type not supported, unknown.
        _ => end_reason::MISC,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flows::{Reject, reject_for_end};
    use crate::packet::Unreachable;
    use onionmix_frontend::socks::end_reason_to_reply;

    #[test]
    fn inverse_of_the_clients_mapping() {
        // Every END reason survives the round trip up to the refusal an
        // application sees.
        for r in 0u8..=255 {
            let back = end_reason_for_reply(end_reason_to_reply(r)).expect("a failure");
            assert_eq!(
                reject_for_end(back),
                reject_for_end(match r {
                    end_reason::NOROUTE => end_reason::RESOLVEFAILED,
                    end_reason::CONNRESET => end_reason::CONNECTREFUSED,
                    end_reason::DONE => end_reason::MISC,
                    x => x,
                }),
                "reason {r}"
            );
        }
    }

    #[test]
    fn replies_become_what_a_direct_connect_would_see() {
        assert_eq!(end_reason_for_reply(reply::SUCCEEDED), None);
        let r = |c| end_reason_for_reply(c).map(reject_for_end);
        assert_eq!(r(reply::CONNECTION_REFUSED), Some(Reject::Rst));
        assert_eq!(
            r(reply::HOST_UNREACHABLE),
            Some(Reject::Icmp(Unreachable::Host))
        );
        assert_eq!(
            r(reply::NET_UNREACHABLE),
            Some(Reject::Icmp(Unreachable::Net))
        );
        assert_eq!(
            r(reply::NOT_ALLOWED),
            Some(Reject::Icmp(Unreachable::Prohibited))
        );
        assert_eq!(r(reply::TTL_EXPIRED), Some(Reject::Icmp(Unreachable::Host)));
        assert_eq!(r(0xF2), Some(Reject::Icmp(Unreachable::Host)));
        for c in [reply::GENERAL_FAILURE, 0x07, 0x08, 0x09, 0xEF, 0xF8, 0xFF] {
            assert_eq!(end_reason_for_reply(c), Some(end_reason::MISC), "{c:#x}");
        }
    }

    #[test]
    fn passwords_keep_keys_apart_and_fit() {
        let d = socks_password(&IsolationKey::Destination("7".into()));
        let a = socks_password(&IsolationKey::App(7));
        let f = socks_password(&IsolationKey::Flow(7));
        let u = socks_password(&IsolationKey::UdpFlow(7));
        assert!(d != a && a != f && d != f && u != f && u != a && u != d);
        let long = "a".repeat(253);
        let p = socks_password(&IsolationKey::Destination(long)).expect("fits");
        assert!(p.len() <= MAX_AUTH_FIELD);
        assert_eq!(
            socks_password(&IsolationKey::Destination("a".repeat(254))),
            None
        );
        assert!(SOCKS_USER.len() <= MAX_AUTH_FIELD);
    }
}
