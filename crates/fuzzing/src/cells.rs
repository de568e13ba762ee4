//! crates/cell: channel cell framing, the channel-level messages, and relay
//! messages.

use std::net::{IpAddr, Ipv4Addr};

use bytes::BytesMut;
use onionmix_cell::chan::{
    AuthChallenge, Authenticate, Certs, Create2, Created2, Netinfo, encode_versions, parse_versions,
};
use onionmix_cell::relay::{self, Begin, Connected, Extend2, RelayMsg, Sendme, parse_resolved};
use onionmix_cell::{CellBody, CellCodec, ChanCmd, PAYLOAD_LEN, RawCell};

/// A byte stream from a peer, framed into cells with the codec of link
/// version 3 (2-byte circuit IDs), 4 or 5 (first byte selects). Every cell
/// must re-encode to exactly the bytes it came from, and its payload goes
/// through every channel-level parser (each re-encoding what it decoded).
pub fn cell_codec(data: &[u8]) {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let mut codec = CellCodec::new();
    codec.set_link_version(match sel % 3 {
        0 => 3,
        1 => 4,
        _ => 5,
    });
    let mut buf = BytesMut::from(rest);
    // Every cell consumes at least a header, so this ends.
    loop {
        let before = buf.clone();
        let cell = match codec.decode(&mut buf) {
            Ok(Some(c)) => c,
            Ok(None) | Err(_) => break,
        };
        let used = before.len() - buf.len();
        let mut out = BytesMut::new();
        codec
            .encode(&cell, &mut out)
            .expect("a decoded cell encodes");
        assert_eq!(&out[..], &before[..used], "cell does not re-encode");
        channel_payload(&cell);
    }
}

/// Run every channel-level parser over one payload.
fn channel_payload(cell: &RawCell) {
    let p = &cell.payload[..];
    if let Ok(v) = parse_versions(p) {
        assert_eq!(encode_versions(&v), p, "VERSIONS round trip");
    }
    if let Ok(c) = Certs::parse(p) {
        let enc = c.encode().expect("parsed CERTS encode");
        assert!(p.starts_with(&enc), "CERTS round trip");
        assert_eq!(Certs::parse(&enc).as_ref(), Ok(&c));
    }
    if let Ok(c) = AuthChallenge::parse(p) {
        assert!(p.starts_with(&c.encode()), "AUTH_CHALLENGE round trip");
    }
    if let Ok(a) = Authenticate::parse(p) {
        let enc = a.encode().expect("parsed AUTHENTICATE encodes");
        assert!(p.starts_with(&enc), "AUTHENTICATE round trip");
    }
    if let Ok(n) = Netinfo::parse(p) {
        let back = Netinfo::parse(&n.encode()).expect("encoded NETINFO parses");
        assert_eq!(back.time, n.time);
        // Encoding writes 0.0.0.0 for a missing address and at most 8 of ours.
        assert_eq!(
            back.other_addr,
            Some(n.other_addr.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)))
        );
        assert_eq!(back.my_addrs[..], n.my_addrs[..n.my_addrs.len().min(8)]);
    }
    if let Ok(c) = Create2::parse(p) {
        assert!(p.starts_with(&c.encode()), "CREATE2 round trip");
    }
    if let Ok(c) = Created2::parse(p) {
        assert!(p.starts_with(&c.encode()), "CREATED2 round trip");
    }
    if (cell.cmd == ChanCmd::RELAY || cell.cmd == ChanCmd::RELAY_EARLY)
        && let Some(body) = cell.body()
    {
        relay_body(body);
    }
}

/// A decrypted relay cell body (the input padded or cut to 509 bytes):
/// decode the message, write it into a new cell, decode that again, and
/// require the same message. The individual body parsers also run on the
/// raw bytes.
pub fn relay_msg(data: &[u8]) {
    let mut body = [0u8; PAYLOAD_LEN];
    let n = data.len().min(PAYLOAD_LEN);
    body[..n].copy_from_slice(&data[..n]);
    relay_body(&body);
    // The parsers on their own, on unframed bytes.
    let _ = Begin::parse(data);
    let _ = Connected::parse(data);
    let _ = Sendme::parse(data);
    let _ = Extend2::parse(data).map(|e| {
        let enc = e.encode();
        // The encoder refuses what does not fit a cell; the rest must parse back.
        if let Ok(enc) = enc {
            assert_eq!(Extend2::parse(&enc).as_ref(), Ok(&e), "EXTEND2 round trip");
        }
    });
    let _ = parse_resolved(data);
}

fn relay_body(body: &CellBody) {
    let _ = relay::header(body);
    let Ok((sid, msg)) = RelayMsg::decode(body) else {
        return;
    };
    let mut again = [0u8; PAYLOAD_LEN];
    msg.write_cell(sid, &mut again, |p| p.fill(0xA5))
        .expect("a decoded relay message encodes");
    let (sid2, msg2) = RelayMsg::decode(&again).expect("an encoded relay message decodes");
    assert_eq!(sid2, sid);
    match (&msg, &msg2) {
        // Error answers re-encode with tor's longer text, so a full list
        // may come back cut short.
        (RelayMsg::Resolved(a), RelayMsg::Resolved(b)) => {
            assert!(a.starts_with(b), "RESOLVED round trip");
        }
        _ => assert_eq!(msg, msg2, "relay message round trip"),
    }
}
