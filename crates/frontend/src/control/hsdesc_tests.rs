//! HSFETCH / HSPOST against the mock backend. The expected replies were
//! recorded from stock tor 0.4.9.
#![allow(clippy::unwrap_used)]

use super::{authed, run};

/// tor's unit-test onion address (valid, nobody runs it).
const ADDR: &str = "25njqamcweflpvkl73j4szahhihoc4xt3ktcgjnpaingr5yhkenl5sid";
const FP0: &str = "$0000000000000000000000000000000000000000";
const FP1: &str = "$1111111111111111111111111111111111111111";

fn one(input: &str) -> (String, super::Mock) {
    let (mut s, mut m, a) = authed();
    m.servers.push(FP1.into());
    let (r, closed) = run(&mut s, &mut m, &a, input);
    assert!(!closed, "{input:?}");
    (r, m)
}

#[test]
fn hsfetch_errors_like_tor() {
    let bad_sum = format!("{}aaid", &ADDR[..52]);
    let cases: Vec<(String, String)> = vec![
        (
            "HSFETCH".into(),
            "512 Bad arguments to HSFETCH: Need at least 1 argument(s)".into(),
        ),
        (
            "hsfetch".into(),
            "512 Bad arguments to hsfetch: Need at least 1 argument(s)".into(),
        ),
        (
            "HSFETCH notanaddress".into(),
            "513 Invalid argument \"notanaddress\"".into(),
        ),
        (
            format!("HSFETCH {ADDR}.onion"),
            format!("513 Invalid argument \"{ADDR}.onion\""),
        ),
        (
            format!("HSFETCH {bad_sum}"),
            format!("513 Invalid argument \"{bad_sum}\""),
        ),
        (
            "HSFETCH v3-abc".into(),
            "513 Invalid argument \"v3-abc\"".into(),
        ),
        (
            format!("HSFETCH {ADDR} SERVER={FP0}"),
            format!("552 Server \"{FP0}\" not found"),
        ),
        (
            format!("HSFETCH {ADDR} server={FP0}~nick"),
            format!("552 Server \"{FP0}~nick\" not found"),
        ),
        (
            format!("HSFETCH {ADDR} SERVER="),
            "552 Server \"\" not found".into(),
        ),
        (
            format!("HSFETCH {ADDR} SERVER={FP1} SERVER=nick"),
            "552 Server \"nick\" not found".into(),
        ),
        (
            format!("HSFETCH {ADDR} Bogus=1"),
            "512 Bad arguments to HSFETCH: Unrecognized keyword argument \"Bogus\"".into(),
        ),
        (
            format!("HSFETCH {ADDR} b"),
            "512 Bad arguments to HSFETCH: Cannot parse keyword argument(s)".into(),
        ),
        (
            "HSFETCH a b".into(),
            "512 Bad arguments to HSFETCH: Cannot parse keyword argument(s)".into(),
        ),
        (
            format!("HSFETCH {ADDR} SERVER=\"{FP1}\""),
            "512 Bad arguments to HSFETCH: Cannot parse keyword argument(s)".into(),
        ),
        (
            format!("HSFETCH {ADDR} SERVER={FP0}").replace(ADDR, "bad"),
            "513 Invalid argument \"bad\"".into(),
        ),
    ];
    for (cmd, want) in cases {
        let (r, m) = one(&format!("{cmd}\r\n"));
        assert_eq!(r, format!("{want}\r\n"), "{cmd}");
        assert!(m.fetches.is_empty(), "{cmd}");
    }
}

#[test]
fn hsfetch_starts_fetches() {
    let (r, m) = one(&format!("HSFETCH  {}  \r\n", ADDR.to_ascii_uppercase()));
    assert_eq!(r, "250 OK\r\n");
    let f = m.fetches.first().unwrap();
    assert_eq!(f.address, ADDR);
    assert!(f.servers.is_empty());
    let (r, m) = one(&format!("HSFETCH {ADDR} SERVER={FP1} Server={FP1}\r\n"));
    assert_eq!(r, "250 OK\r\n");
    assert_eq!(m.fetches.first().unwrap().servers, vec![FP1, FP1]);
}

#[test]
fn hspost_errors_like_tor() {
    let cases: Vec<(String, String)> = vec![
        (
            "HSPOST HSADDRESS=x".into(),
            "510 Unrecognized command \"HSPOST\"".into(),
        ),
        (
            "+HSPOST HSADDRESS=bad\r\nfoo\r\n.".into(),
            "512 Malformed onion address".into(),
        ),
        (
            format!("+HSPOST HSADDRESS={ADDR}.onion\r\nfoo\r\n."),
            "512 Malformed onion address".into(),
        ),
        (
            "+HSPOST HSADDRESS=\r\nfoo\r\n.".into(),
            "512 Malformed onion address".into(),
        ),
        (
            format!("+HSPOST HSADDRESS={ADDR}\r\nfoo\r\n."),
            "554 Invalid descriptor".into(),
        ),
        (
            format!("+HSPOST HSADDRESS={ADDR} SERVER={FP0}\r\nfoo\r\n."),
            format!("552 Server \"{FP0}\" not found"),
        ),
        // Keywords are checked in order.
        (
            format!("+HSPOST SERVER={FP0} HSADDRESS=bad\r\nfoo\r\n."),
            format!("552 Server \"{FP0}\" not found"),
        ),
        (
            format!("+HSPOST HSADDRESS=bad SERVER={FP0}\r\nfoo\r\n."),
            "512 Malformed onion address".into(),
        ),
        (
            format!("+HSPOST HSADDRESS={ADDR} HSADDRESS=bad\r\nfoo\r\n."),
            "512 Malformed onion address".into(),
        ),
        (
            format!("+HSPOST HSADDRESS={ADDR} Bogus=1\r\nfoo\r\n."),
            "512 Bad arguments to +HSPOST: Unrecognized keyword argument \"Bogus\"".into(),
        ),
        (
            "+HSPOST extra\r\nfoo\r\n.".into(),
            "512 Bad arguments to +HSPOST: Cannot parse keyword argument(s)".into(),
        ),
        // The missing body is reported before anything else.
        (
            format!("+HSPOST HSADDRESS={ADDR}\r\n."),
            "512 Bad arguments to +HSPOST: Empty body".into(),
        ),
        (
            "+hspost Bogus=1\r\n.".into(),
            "512 Bad arguments to +hspost: Empty body".into(),
        ),
        // tor sends no reply at all here (a v2 descriptor once).
        ("+HSPOST\r\nfoo\r\n.".into(), "512 Missing HSADDRESS".into()),
    ];
    for (cmd, want) in cases {
        let (r, m) = one(&format!("{cmd}\r\n"));
        assert_eq!(r, format!("{want}\r\n"), "{cmd}");
        assert!(m.posts.is_empty(), "{cmd}");
    }
}

#[test]
fn hspost_takes_the_body() {
    let body = "hs-descriptor 3\r\n..dotted\r\nlast";
    let (r, m) = one(&format!(
        "+HSPOST SERVER={FP1} HSADDRESS={}\r\n{body}\r\n.\r\n",
        ADDR.to_ascii_uppercase()
    ));
    assert_eq!(r, "250 OK\r\n");
    let p = m.posts.first().unwrap();
    assert_eq!(p.address, ADDR);
    assert_eq!(p.servers, vec![FP1]);
    assert_eq!(p.body, b"hs-descriptor 3\n.dotted\nlast\n");
}

#[test]
fn too_many_servers_refused() {
    let many = (0..=super::super::hsdesc::MAX_SERVERS)
        .map(|_| format!("SERVER={FP1}"))
        .collect::<Vec<_>>()
        .join(" ");
    let (r, m) = one(&format!("HSFETCH {ADDR} {many}\r\n"));
    assert_eq!(r, "552 Too many SERVER arguments\r\n");
    assert!(m.fetches.is_empty());
}

#[test]
fn too_long_body_closes_like_a_long_line() {
    // tor: `500 Line too long.` once a command passes 1 MiB; the framer
    // refuses it before the session sees it.
    let mut f = super::Framer::default();
    let mut input = format!("+HSPOST HSADDRESS={ADDR}\r\n").into_bytes();
    input.extend(std::iter::repeat_n(b'y', 1100 * 1024));
    input.extend_from_slice(b"\r\n.\r\n");
    f.push(&input).unwrap();
    assert!(f.next_command().is_err());
}
