#![allow(clippy::unwrap_used)]

use super::*;

#[test]
fn query_and_parse() {
    let q = build_query(7, "sink.onionmix.test", 1).unwrap();
    // A hand-made answer: header, the question, one A record by pointer.
    let mut r = q.clone();
    r[2] = 0x81;
    r[3] = 0x80;
    r[7] = 1;
    r.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 127, 0, 0, 1]);
    assert_eq!(
        parse_answer(&r, 7).unwrap(),
        vec![IpAddr::V4(Ipv4Addr::LOCALHOST)]
    );
    assert!(parse_answer(&r, 8).is_none());
    assert!(parse_answer(&r[..20], 7).is_none());
    assert!(build_query(1, &"a".repeat(64), 1).is_none());
    // Longer than a DNS name may be (found by the exit_dns fuzz target:
    // 130 labels, which the answer parser then could not skip).
    assert!(build_query(1, &"a.".repeat(130), 1).is_none());
    let longest = format!("{}a", "a.".repeat(126));
    let q = build_query(2, &longest, 1).unwrap();
    let mut r = q.clone();
    r[2] |= 0x80;
    assert_eq!(parse_answer(&r, 2), Some(Vec::new()));
    // The server side reads the longest name back.
    assert_eq!(parse_query(&q).unwrap().hostname(), Some(longest.as_str()));
}

#[test]
fn read_a_query_and_answer_it() {
    let q = build_query(0xbeef, "Example.COM.", TYPE_AAAA).unwrap();
    let parsed = parse_query(&q).unwrap();
    assert_eq!(parsed.id, 0xbeef);
    assert_eq!(parsed.hostname(), Some("example.com"));
    assert_eq!(
        (parsed.qtype, parsed.qclass, parsed.opcode, parsed.rd),
        (TYPE_AAAA, CLASS_IN, 0, true)
    );
    let v6: IpAddr = "fd6f::5".parse().unwrap();
    let v4: IpAddr = "198.18.0.5".parse().unwrap();
    let r = build_answer(&parsed, Rcode::NoError, &[v4, v6], 10);
    // The exit's parser reads what the tunnel writes; the A record was
    // not written for an AAAA question.
    assert_eq!(parse_answer(&r, 0xbeef), Some(vec![v6]));
    assert_eq!(r[2], 0x81, "QR, RD echoed");
    assert_eq!(r[3], 0x80, "RA, NOERROR");
    assert_eq!(&r[HEADER_LEN..q.len()], &q[HEADER_LEN..], "question echoed");
    // TTL of the record.
    assert_eq!(&r[q.len() + 6..q.len() + 10], &10u32.to_be_bytes());
    let nx = build_answer(&parsed, Rcode::NxDomain, &[], 10);
    assert_eq!(nx[3] & 0x0f, 3);
    assert_eq!(parse_answer(&nx, 0xbeef), Some(vec![]));
}

#[test]
fn edns_and_odd_queries() {
    // dig's query: an OPT record in the additional section is ignored.
    let mut q = build_query(1, "a.onion", TYPE_A).unwrap();
    q[11] = 1;
    q.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(parse_query(&q).unwrap().hostname(), Some("a.onion"));
    // A response is not a query; nor is a short datagram.
    let mut resp = q.clone();
    resp[2] |= 0x80;
    assert_eq!(parse_query(&resp), Err(WireError::NotQuery));
    assert!(formerr(&resp).is_none());
    assert_eq!(parse_query(&q[..11]), Err(WireError::Short));
    assert!(formerr(&q[..11]).is_none());
    // Two questions, none, a truncated one, a pointer: FORMERR.
    for bad in [
        {
            let mut b = q.clone();
            b[5] = 2;
            b
        },
        {
            let mut b = q.clone();
            b[5] = 0;
            b
        },
        q[..15].to_vec(),
        q[..q.len() - 13].to_vec(),
        {
            let mut b = q[..12].to_vec();
            b.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1]);
            b
        },
    ] {
        assert_eq!(parse_query(&bad), Err(WireError::Malformed), "{bad:?}");
        let r = formerr(&bad).unwrap();
        assert_eq!((r[0], r[1], r[3] & 0x0f), (0, 1, 1));
        assert_eq!(r.len(), HEADER_LEN);
    }
    // A label with a byte no hostname has: read, but no text name.
    let mut b = build_query(3, "ab.test", TYPE_A).unwrap();
    b[13] = 0;
    let p = parse_query(&b).unwrap();
    assert_eq!((p.hostname(), p.name.as_str()), (None, "?b.test"));
    assert_eq!(p.question_end(), b.len());
}

proptest::proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
        let id = data.first().copied().map_or(0, u16::from);
        let _ = parse_answer(&data, id);
        let _ = formerr(&data);
        if let Ok(q) = parse_query(&data) {
            let r = build_answer(&q, Rcode::NoError, &[IpAddr::V4(Ipv4Addr::LOCALHOST)], 10);
            // What we answer, the exit's parser reads.
            proptest::prop_assert!(parse_answer(&r, q.id).is_some());
        }
    }

    #[test]
    fn names_round_trip(labels in proptest::collection::vec("[a-z0-9_-]{1,20}", 1..8)) {
        let name = labels.join(".");
        let q = build_query(9, &name, TYPE_A).unwrap();
        let parsed = parse_query(&q).unwrap();
        proptest::prop_assert_eq!(parsed.hostname(), Some(name.as_str()));
    }
}
