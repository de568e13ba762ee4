use super::*;

fn run(input: &[u8]) -> Result<(Vec<u8>, Option<SocksRequest>), SocksError> {
    let mut h = SocksHandshake::new();
    let mut reply = Vec::new();
    let mut off = 0;
    // Feed byte by byte to exercise partial input handling.
    let mut buf = Vec::new();
    while off < input.len() {
        buf.push(input[off]);
        off += 1;
        let step = h.handle(&buf)?;
        buf.drain(..step.consumed);
        reply.extend(step.reply);
        if step.request.is_some() {
            return Ok((reply, step.request));
        }
    }
    Ok((reply, None))
}

#[test]
fn connect_hostname_with_auth() {
    let mut msg = vec![5, 2, 0, 2];
    msg.extend_from_slice(&[1, 3, b'b', b'o', b'b', 2, b'p', b'w']);
    msg.extend_from_slice(&[5, 1, 0, 3, 11]);
    msg.extend_from_slice(b"Example.COM");
    msg.extend_from_slice(&443u16.to_be_bytes());
    let (reply, req) = run(&msg).unwrap();
    assert_eq!(reply, vec![5, 2, 1, 0]);
    let req = req.unwrap();
    assert_eq!(req.cmd, SocksCmd::Connect);
    assert_eq!(req.host, TargetHost::Hostname("example.com".into()));
    assert_eq!(req.port, 443);
    assert_eq!(req.auth, Some((b"bob".to_vec(), b"pw".to_vec())));
}

#[test]
fn pipelined_request_leaves_application_bytes() {
    // Greeting, username/password, CONNECT and an HTTP request in one
    // write, as an optimistic SOCKS client sends them.
    let mut msg = vec![5, 1, 2];
    msg.extend_from_slice(&[1, 1, b'u', 1, b'p']);
    msg.extend_from_slice(&[5, 1, 0, 1, 127, 0, 0, 1, 0, 80]);
    let req_end = msg.len();
    msg.extend_from_slice(b"GET / HTTP/1.1\r\n\r\n");
    let mut h = SocksHandshake::new();
    let step = h.handle(&msg).unwrap();
    assert_eq!(step.reply, vec![5, 2, 1, 0]);
    assert_eq!(step.consumed, req_end);
    let req = step.request.unwrap();
    assert_eq!(req.auth, Some((b"u".to_vec(), b"p".to_vec())));
    assert_eq!(&msg[step.consumed..], b"GET / HTTP/1.1\r\n\r\n");
    assert!(h.is_done());
    // Nothing more is parsed once the request is complete.
    let again = h.handle(&msg[step.consumed..]).unwrap();
    assert_eq!(again.consumed, 0);
    assert!(again.request.is_none());
}

#[test]
fn connect_ipv6_and_resolve() {
    let mut msg = vec![5, 1, 0, 5, 1, 0, 4];
    msg.extend_from_slice(&"::1".parse::<Ipv6Addr>().unwrap().octets());
    msg.extend_from_slice(&80u16.to_be_bytes());
    let (_, req) = run(&msg).unwrap();
    assert_eq!(req.unwrap().host, TargetHost::Ip("::1".parse().unwrap()));

    let mut msg = vec![5, 1, 0, 5, 0xF0, 0, 3, 4];
    msg.extend_from_slice(b"a.bc");
    msg.extend_from_slice(&0u16.to_be_bytes());
    let (_, req) = run(&msg).unwrap();
    assert_eq!(req.unwrap().cmd, SocksCmd::Resolve);
}

fn socks4(cmd: u8, port: u16, ip: [u8; 4], user: &[u8], host: Option<&[u8]>) -> Vec<u8> {
    let mut m = vec![4, cmd];
    m.extend_from_slice(&port.to_be_bytes());
    m.extend_from_slice(&ip);
    m.extend_from_slice(user);
    m.push(0);
    if let Some(h) = host {
        m.extend_from_slice(h);
        m.push(0);
    }
    m
}

#[test]
fn socks4_connect_with_user_id() {
    let (reply, req) = run(&socks4(1, 80, [10, 0, 0, 7], b"alice", None)).unwrap();
    assert!(reply.is_empty(), "SOCKS4 has no greeting reply");
    let req = req.unwrap();
    assert_eq!(req.version, SocksVersion::V4);
    assert_eq!(req.cmd, SocksCmd::Connect);
    assert_eq!(req.host, TargetHost::Ip("10.0.0.7".parse().unwrap()));
    assert_eq!(req.port, 80);
    assert_eq!(req.auth, Some((b"alice".to_vec(), Vec::new())));
    assert_eq!(
        req.reply(
            reply_code::SUCCEEDED,
            Some(("10.0.0.7".parse().unwrap(), 80))
        ),
        vec![0, 90, 0, 80, 10, 0, 0, 7]
    );
    assert_eq!(
        req.reply(reply_code::HOST_UNREACHABLE, None),
        vec![0, 91, 0, 0, 0, 0, 0, 0]
    );
}

#[test]
fn socks4a_hostname_and_resolve() {
    let (_, req) = run(&socks4(1, 443, [0, 0, 0, 1], b"", Some(b"Example.com"))).unwrap();
    let req = req.unwrap();
    assert_eq!(req.host, TargetHost::Hostname("example.com".into()));
    assert_eq!(req.auth, None);
    let (_, req) = run(&socks4(0xF0, 0, [0, 0, 0, 9], b"u", Some(b"a.example"))).unwrap();
    let req = req.unwrap();
    assert_eq!(req.cmd, SocksCmd::Resolve);
    // A 4a name that is an address literal is an address.
    let (_, req) = run(&socks4(1, 80, [0, 0, 0, 1], b"", Some(b"127.0.0.1"))).unwrap();
    assert_eq!(
        req.unwrap().host,
        TargetHost::Ip("127.0.0.1".parse().unwrap())
    );
}

#[test]
fn socks4_errors_reply_in_socks4() {
    let mut h = SocksHandshake::new();
    let e = h
        .handle(&socks4(2, 80, [1, 2, 3, 4], b"", None))
        .unwrap_err();
    assert_eq!(e, SocksError::Command(2));
    assert_eq!(h.error_reply(&e), Some(vec![0, 91, 0, 0, 0, 0, 0, 0]));
    // Port 0, over-long fields.
    assert!(run(&socks4(1, 0, [1, 2, 3, 4], b"", None)).is_err());
    let long = vec![b'a'; MAX_SOCKS4_FIELD + 1];
    assert_eq!(
        run(&socks4(1, 80, [1, 2, 3, 4], &long, None)).unwrap_err(),
        SocksError::Malformed("SOCKS4 field too long")
    );
    assert_eq!(
        run(&socks4(1, 80, [0, 0, 0, 1], b"", Some(&long))).unwrap_err(),
        SocksError::Malformed("SOCKS4 field too long")
    );
    let max = vec![b'a'; MAX_SOCKS4_FIELD];
    let m = socks4(1, 80, [0, 0, 0, 1], &max, Some(b"x.example"));
    assert!(m.len() <= MAX_MSG);
    assert!(run(&m).unwrap().1.is_some());
    // Destination 0.0.0.0 (not SOCKS4a), and RESOLVE_PTR, which tor
    // refuses over SOCKS4.
    assert!(run(&socks4(1, 80, [0, 0, 0, 0], b"", None)).is_err());
    assert_eq!(
        run(&socks4(0xF1, 0, [1, 2, 3, 4], b"", None)).unwrap_err(),
        SocksError::Command(0xF1)
    );
    // Garbage: no reply is possible.
    let mut h = SocksHandshake::new();
    let e = h.handle(&[7, 1, 0]).unwrap_err();
    assert_eq!(e, SocksError::Version(7));
    assert_eq!(h.error_reply(&e), None);
}

#[test]
fn http_requests_get_an_http_error() {
    for req in [
        &b"GET http://example.com/ HTTP/1.1\r\n"[..],
        b"HEAD / HTTP/1.0\r\n",
        b"POST / HTTP/1.1\r\n",
        b"PUT / HTTP/1.1\r\n",
        b"CONNECT example.com:443 HTTP/1.1\r\n",
    ] {
        let mut h = SocksHandshake::new();
        let e = h.handle(req).unwrap_err();
        assert_eq!(e, SocksError::HttpRequest);
        let reply = h.error_reply(&e).unwrap();
        assert!(reply.starts_with(b"HTTP/1.0 501 Tor is not an HTTP Proxy\r\n"));
        assert!(reply.windows(4).any(|w| w == b"\r\n\r\n"));
    }
}

#[test]
fn extended_usernames_other_than_legacy_are_refused() {
    let msg = |user: &[u8]| {
        let mut m = vec![5, 1, 2, 1, user.len() as u8];
        m.extend_from_slice(user);
        m.extend_from_slice(&[1, b'k', 5, 1, 0, 1, 127, 0, 0, 1, 0, 80]);
        m
    };
    let (_, req) = run(&msg(b"<torS0X>0")).unwrap();
    assert_eq!(
        req.unwrap().auth,
        Some((b"<torS0X>0".to_vec(), b"k".to_vec()))
    );
    for bad in [&b"<torS0X>1"[..], b"<torS0X>", b"<torS0X>0x"] {
        let mut h = SocksHandshake::new();
        let e = h.handle(&msg(bad)).unwrap_err();
        assert_eq!(e, SocksError::ExtendedUsername);
        // The method reply is still owed; then closed, no auth reply.
        assert_eq!(h.error_reply(&e), Some(vec![5, 2]));
    }
    // A name that merely contains the prefix is an ordinary one.
    let (_, req) = run(&msg(b"x<torS0X>1")).unwrap();
    assert!(req.unwrap().auth.is_some());
}

#[test]
fn username_password_after_no_auth_is_taken() {
    // The client offered only "no authentication", then sends a
    // username/password message anyway (socks-extensions §1.1).
    let mut msg = vec![5, 1, 0];
    msg.extend_from_slice(&[1, 1, b'u', 1, b'p']);
    msg.extend_from_slice(&[5, 1, 0, 1, 127, 0, 0, 1, 0, 80]);
    let (reply, req) = run(&msg).unwrap();
    assert_eq!(reply, vec![5, 0, 1, 0]);
    assert_eq!(req.unwrap().auth, Some((b"u".to_vec(), b"p".to_vec())));
    // Only once.
    let mut msg = vec![5, 1, 0, 1, 0, 0, 1, 0, 0];
    msg.extend_from_slice(&[5, 1, 0, 1, 127, 0, 0, 1, 0, 80]);
    assert_eq!(run(&msg).unwrap_err(), SocksError::Version(1));
}

#[test]
fn socks5_request_with_a_bad_version_gets_a_failure_reply() {
    let mut h = SocksHandshake::new();
    let e = h
        .handle(&[5, 1, 0, 4, 1, 0, 1, 1, 2, 3, 4, 0, 80])
        .unwrap_err();
    assert_eq!(e, SocksError::Version(4));
    // The method reply it was owed, then the failure.
    let mut want = vec![5, 0];
    want.extend_from_slice(&reply(reply_code::GENERAL_FAILURE, None));
    assert_eq!(h.error_reply(&e), Some(want));
}

#[test]
fn errors() {
    assert_eq!(run(&[5, 1, 1]).unwrap_err(), SocksError::NoMethod);
    assert_eq!(
        run(&[5, 1, 0, 5, 2, 0, 1, 1, 2, 3, 4, 0, 80]).unwrap_err(),
        SocksError::Command(2)
    );
    assert_eq!(
        run(&[5, 1, 0, 5, 1, 0, 9, 1]).unwrap_err(),
        SocksError::AddrType(9)
    );
    assert!(matches!(
        run(&[5, 1, 0, 5, 1, 0, 3, 3, b'a', b' ', b'b', 0, 80]).unwrap_err(),
        SocksError::Hostname(_)
    ));
    // RESOLVE_PTR of a name: "address type not supported", as tor.
    let e = run(&[5, 1, 0, 5, 0xF1, 0, 3, 3, b'a', b'.', b'b', 0, 0]).unwrap_err();
    assert_eq!(e.reply_code(), Some(reply_code::ADDRTYPE_NOT_SUPPORTED));
}

#[test]
fn ptr_names() {
    assert_eq!(
        ptr_name("127.0.0.1".parse().unwrap()),
        "1.0.0.127.in-addr.arpa"
    );
    assert!(ptr_name("::1".parse().unwrap()).starts_with("1.0.0.0."));
}

proptest::proptest! {
    #[test]
    fn never_panics(data in proptest::collection::vec(proptest::num::u8::ANY, 0..600)) {
        let mut h = SocksHandshake::new();
        let _ = h.handle(&data);
        let mut h = SocksHandshake::new();
        let mut d = vec![5, 1, 0];
        d.extend_from_slice(&data);
        let _ = h.handle(&d);
        let mut h = SocksHandshake::new();
        let mut d = vec![4, 1];
        d.extend_from_slice(&data);
        if let Err(e) = h.handle(&d) {
            let _ = h.error_reply(&e);
        }
    }
}
