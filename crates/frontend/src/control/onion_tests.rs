//! ADD_ONION / DEL_ONION argument parsing and the HS_DESC lines.
#![allow(clippy::unwrap_used)]

use super::*;

fn reply_of(args: &str) -> String {
    match parse_add_onion(args) {
        Ok(r) => panic!("{args:?} parsed: {r:?}"),
        Err(o) => String::from_utf8(o.reply).unwrap(),
    }
}

fn key_b64(fill: u8) -> String {
    STANDARD.encode([fill; 64])
}

#[test]
fn new_keys_and_ports() {
    let r = parse_add_onion("NEW:BEST Port=80").unwrap();
    assert!(matches!(r.key, OnionKey::Generate));
    assert_eq!(r.ports, vec![(80, "127.0.0.1:80".parse().unwrap())]);
    let r = parse_add_onion(
        "new:ed25519-v3 Flags=DiscardPK,Detach MaxStreams=7 Port=22 Port=80,8080 Port=443,127.0.0.2:8443 Port=81,[::1]:9 Port=82,localhost:99 Port=83,127.0.0.1",
    )
    .unwrap();
    assert!(r.discard_pk && r.detach && !r.max_streams_close_circuit);
    assert_eq!(r.max_streams, 7);
    let want: Vec<(u16, SocketAddr)> = vec![
        (22, "127.0.0.1:22".parse().unwrap()),
        (80, "127.0.0.1:8080".parse().unwrap()),
        (443, "127.0.0.2:8443".parse().unwrap()),
        (81, "[::1]:9".parse().unwrap()),
        (82, "127.0.0.1:99".parse().unwrap()),
        (83, "127.0.0.1:83".parse().unwrap()),
    ];
    assert_eq!(r.ports, want);
}

#[test]
fn given_key_with_and_without_padding() {
    let b = key_b64(7);
    assert!(b.ends_with("=="));
    for blob in [b.as_str(), b.trim_end_matches('=')] {
        let r = parse_add_onion(&format!("ED25519-V3:{blob} Port=80")).unwrap();
        match r.key {
            OnionKey::Given(k) => assert_eq!(*k, [7u8; 64]),
            OnionKey::Generate => panic!("generated"),
        }
    }
}

#[test]
fn key_errors_as_tor() {
    assert_eq!(
        reply_of("ED25519-V3:not*base64 Port=80"),
        "512 Failed to decode ED25519-V3 key\r\n"
    );
    let short = STANDARD.encode([1u8; 32]);
    assert_eq!(
        reply_of(&format!("ED25519-V3:{short} Port=80")),
        "512 Failed to decode ED25519-V3 key\r\n"
    );
    let long = STANDARD.encode([1u8; 65]);
    assert_eq!(
        reply_of(&format!("ED25519-V3:{long} Port=80")),
        "512 Failed to decode ED25519-V3 key\r\n"
    );
    assert_eq!(reply_of("NEW:RSA1024 Port=80"), "513 Invalid key type\r\n");
    assert_eq!(reply_of("RSA1024:abcd Port=80"), "513 Invalid key type\r\n");
    assert_eq!(reply_of("NEW Port=80"), "512 Invalid key type/blob\r\n");
    assert_eq!(reply_of("NEW: Port=80"), "512 Invalid key type/blob\r\n");
    assert_eq!(
        reply_of("NEW:BEST:X Port=80"),
        "512 Invalid key type/blob\r\n"
    );
}

#[test]
fn argument_errors_as_tor() {
    assert_eq!(
        reply_of(""),
        "512 Bad arguments to ADD_ONION: Need at least 1 argument(s)\r\n"
    );
    assert_eq!(reply_of("NEW:BEST"), "512 Missing 'Port' argument\r\n");
    assert_eq!(
        reply_of("NEW:BEST Flags=Detach"),
        "512 Missing 'Port' argument\r\n"
    );
    assert_eq!(
        reply_of("NEW:BEST Port=80 Bogus=1"),
        "512 Bad arguments to ADD_ONION: Unrecognized keyword argument \"Bogus\"\r\n"
    );
    assert_eq!(
        reply_of("NEW:BEST Port=80 Detach"),
        "512 Bad arguments to ADD_ONION: Cannot parse keyword argument(s)\r\n"
    );
    for bad in [
        "0",
        "65536",
        "x",
        "80,0",
        "80,70000",
        "80,foo",
        "80,unix:/tmp/s",
        "80,1.2.3:5",
        "80,127.0.0.1:99999",
        "-1",
        "",
    ] {
        assert_eq!(
            reply_of(&format!("NEW:BEST Port={bad}")),
            "512 Invalid VIRTPORT/TARGET\r\n",
            "{bad}"
        );
    }
    for bad in ["x", "65536", "-1", ""] {
        assert_eq!(
            reply_of(&format!("NEW:BEST Port=80 MaxStreams={bad}")),
            "512 Invalid MaxStreams\r\n"
        );
    }
    assert_eq!(
        parse_add_onion("NEW:BEST Port=80 MaxStreams=65535")
            .unwrap()
            .max_streams,
        65535
    );
    // Port errors come before key errors, as tor parses keywords first.
    assert_eq!(
        reply_of("NEW:RSA1024 Port=0"),
        "512 Invalid VIRTPORT/TARGET\r\n"
    );
}

#[test]
fn flags() {
    let r = parse_add_onion("NEW:BEST Flags=discardpk,DiscardPK,,MaxStreamsCloseCircuit Port=1")
        .unwrap();
    assert!(r.discard_pk && r.max_streams_close_circuit && !r.detach);
    assert_eq!(
        reply_of("NEW:BEST Flags= Port=1"),
        "512 Invalid 'Flags' argument\r\n"
    );
    assert_eq!(
        reply_of("NEW:BEST Flags=, Port=1"),
        "512 Invalid 'Flags' argument\r\n"
    );
    assert_eq!(
        reply_of("NEW:BEST Flags=Detach,BasicAuth Port=1"),
        "512 Invalid 'Flags' argument: \"BasicAuth\"\r\n"
    );
    assert_eq!(
        reply_of("NEW:BEST Flags=NonAnonymous Port=1"),
        "512 Tor is in anonymous hidden service mode\r\n"
    );
}

#[test]
fn client_auth_v3() {
    let key = "PU2LBWJNX7VRHPR7NBPXTTDJ3ZOKSU6ZI7DXFEDQAQLQGA3GSRJQ";
    let r = parse_add_onion(&format!(
        "NEW:BEST Flags=V3Auth Port=80 ClientAuthV3={key} ClientAuthV3={}",
        key.to_ascii_lowercase()
    ))
    .unwrap();
    assert_eq!(r.client_auth_v3.len(), 2);
    assert_eq!(r.client_auth_v3[0].1, r.client_auth_v3[1].1);
    assert_eq!(r.client_auth_v3[0].0, key);
    assert_eq!(
        reply_of(&format!("NEW:BEST Port=80 ClientAuthV3={key}")),
        "512 No auth type specified\r\n"
    );
    assert_eq!(
        reply_of("NEW:BEST Flags=V3Auth Port=80"),
        "512 No auth clients specified\r\n"
    );
    assert_eq!(
        reply_of("NEW:BEST Flags=V3Auth Port=80 ClientAuthV3=abc"),
        "512 Cannot decode v3 client auth key\r\n"
    );
    let added = AddedOnion {
        service_id: "x".into(),
        generated: None,
    };
    let text = String::from_utf8(add_onion_reply(&r, &added).encode()).unwrap();
    assert_eq!(
        text,
        format!(
            "250-ServiceID=x\r\n250-ClientAuthV3={key}\r\n250-ClientAuthV3={}\r\n250 OK\r\n",
            key.to_ascii_lowercase()
        )
    );
}

#[test]
fn replies_like_tor() {
    let r = parse_add_onion("NEW:BEST Port=80").unwrap();
    let added = AddedOnion {
        service_id: "a".repeat(56),
        generated: Some(Zeroizing::new([0xAB; 64])),
    };
    let text = String::from_utf8(add_onion_reply(&r, &added).encode()).unwrap();
    assert_eq!(
        text,
        format!(
            "250-ServiceID={}\r\n250-PrivateKey=ED25519-V3:{}\r\n250 OK\r\n",
            "a".repeat(56),
            key_b64(0xAB)
        )
    );
    // 64 bytes: 88 characters with "==", as tor's base64_encode writes.
    assert_eq!(key_b64(0xAB).len(), 88);
    let r = parse_add_onion("NEW:BEST Flags=DiscardPK Port=80").unwrap();
    let text = String::from_utf8(add_onion_reply(&r, &added).encode()).unwrap();
    assert_eq!(
        text,
        format!("250-ServiceID={}\r\n250 OK\r\n", "a".repeat(56))
    );
}

#[test]
fn hs_desc_lines() {
    let addr = "a".repeat(56);
    let blinded = [0x11u8; 32];
    let id = desc_id(&blinded);
    assert_eq!(id.len(), 43);
    let d = HsDirName {
        rsa_id: [0xAA; 20],
        nickname: "dir1".into(),
    };
    let fp = format!("${}~dir1", "AA".repeat(20));
    let s = |ev: HsDescEvent| String::from_utf8(hs_desc_event(&addr, &blinded, &ev)).unwrap();
    assert_eq!(
        s(HsDescEvent::Requested {
            hsdir: d.clone(),
            hsdir_index: [0xC3; 32]
        }),
        format!(
            "650 HS_DESC REQUESTED {addr} NO_AUTH {fp} {id} HSDIR_INDEX={}\r\n",
            "C3".repeat(32)
        )
    );
    assert_eq!(
        s(HsDescEvent::Received { hsdir: d.clone() }),
        format!("650 HS_DESC RECEIVED {addr} NO_AUTH {fp} {id}\r\n")
    );
    assert_eq!(
        s(HsDescEvent::FetchFailed {
            hsdir: Some(d.clone()),
            reason: "NOT_FOUND"
        }),
        format!("650 HS_DESC FAILED {addr} NO_AUTH {fp} {id} REASON=NOT_FOUND\r\n")
    );
    assert_eq!(
        s(HsDescEvent::FetchFailed {
            hsdir: None,
            reason: "QUERY_NO_HSDIR"
        }),
        format!("650 HS_DESC FAILED {addr} NO_AUTH UNKNOWN {id} REASON=QUERY_NO_HSDIR\r\n")
    );
    assert_eq!(
        s(HsDescEvent::Created),
        format!("650 HS_DESC CREATED {addr} UNKNOWN UNKNOWN {id}\r\n")
    );
    assert_eq!(
        s(HsDescEvent::Upload {
            hsdir: d.clone(),
            hsdir_index: [0x0F; 32]
        }),
        format!(
            "650 HS_DESC UPLOAD {addr} UNKNOWN {fp} {id} HSDIR_INDEX={}\r\n",
            "0F".repeat(32)
        )
    );
    assert_eq!(
        s(HsDescEvent::Uploaded { hsdir: d.clone() }),
        format!("650 HS_DESC UPLOADED {addr} UNKNOWN {fp}\r\n")
    );
    assert_eq!(
        s(HsDescEvent::UploadFailed {
            hsdir: d.clone(),
            reason: "UPLOAD_REJECTED"
        }),
        format!("650 HS_DESC FAILED {addr} NO_AUTH {fp} {id} REASON=UPLOAD_REJECTED\r\n")
    );
    assert_eq!(
        String::from_utf8(hs_desc_content_event(&addr, &blinded, Some(&d), "a\n.b\n")).unwrap(),
        format!("650+HS_DESC_CONTENT {addr} {id} {fp}\r\na\r\n..b\r\n.\r\n650 OK\r\n")
    );
    assert_eq!(
        String::from_utf8(hs_desc_content_event(&addr, &blinded, None, "")).unwrap(),
        format!("650+HS_DESC_CONTENT {addr} {id} UNKNOWN\r\n\r\n.\r\n650 OK\r\n")
    );
}

proptest::proptest! {
    #[test]
    fn add_onion_never_panics(s in "\\PC{0,120}") {
        let _ = parse_add_onion(&s);
        let _ = parse_port(&s);
    }
}
