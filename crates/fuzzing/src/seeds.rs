//! Seed inputs for every target: cells, handshakes and documents made by
//! the project's own builders with the fixture keys, documents and CERTS
//! cells captured from stock tor, and spec examples. `examples/seeds.rs`
//! writes them to `fuzz/corpus/<target>/seed-<name>`; fuzzing grows the
//! corpus from there.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};

use bytes::BytesMut;
use onionmix_cell::chan::{
    AuthChallenge, Certs, Create2, Created2, HTYPE_NTOR, Netinfo, encode_versions,
};
use onionmix_cell::relay::{
    Begin, Connected, End, Extend2, LinkSpec, RelayCmd, RelayMsg, ResolvedAnswer, Sendme,
    TargetHost, end_reason,
};
use onionmix_cell::{CellCodec, ChanCmd, PAYLOAD_LEN, RawCell};
use onionmix_crypto::link_auth::{build_authenticate_payload, encode_certs_payload};
use onionmix_crypto::ntor::{NtorClient, ntor_server_with_ephemeral};
use onionmix_crypto::ntor_v3::{
    EXT_CC_REQUEST, NTOR3_CIRC_VERIFICATION, Ntor3Client, Ntor3Extension, encode_extensions,
};
use onionmix_mix::loopix::codec::{
    self, Control, Dest, Hop, Profile, ProfileKind, RoutingEntry, legacy_pull, legacy_subscribe,
};
use onionmix_mix::loopix::control::{AuthRequest, ControlKey, ControlKind};
use onionmix_mix::sphinx::msgpack::Value;
use onionmix_netdoc::routerdesc::{DescriptorParams, build};
use onionmix_netdoc::vote::{
    RouterEntry, VoteHeader, build_detached, build_vote, default_protocol_lines, sign_consensus,
};
use onionmix_node::glue::RelayInitiatorAuth;
use onionmix_proto::channel::{InitiatorHandshake, ResponderHandshake};

use crate::crypto::AUTH_FIELDS;
use crate::fixtures::{self, NOW};
use crate::netdoc::DETACHED_BODY;

/// A seed: target, file name (without the `seed-` prefix), bytes.
pub type Seed = (&'static str, String, Vec<u8>);

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

fn chunk(b: &[u8]) -> Vec<u8> {
    let mut v = (b.len() as u16).to_be_bytes().to_vec();
    v.extend_from_slice(b);
    v
}

fn cell_bytes(codec: &CellCodec, cells: &[RawCell]) -> Vec<u8> {
    let mut out = BytesMut::new();
    for c in cells {
        codec.encode(c, &mut out).expect("seed cell encodes");
    }
    out.to_vec()
}

fn v45() -> CellCodec {
    let mut c = CellCodec::new();
    c.set_link_version(5);
    c
}

fn relay_body(msg: &RelayMsg<'_>, sid: u16) -> [u8; PAYLOAD_LEN] {
    let mut body = [0u8; PAYLOAD_LEN];
    msg.write_cell(sid, &mut body, |p| p.fill(0))
        .expect("seed message fits");
    body
}

fn trim(body: &[u8]) -> Vec<u8> {
    let end = body.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1);
    body[..end].to_vec()
}

fn stock_certs_payload() -> Vec<u8> {
    hex::decode(fixtures::STOCK_CERTS_HEX.trim()).expect("stock CERTS hex")
}

fn relay_messages() -> Vec<(&'static str, RelayMsg<'static>)> {
    vec![
        (
            "begin-host",
            RelayMsg::Begin(Begin {
                host: TargetHost::Hostname("example.com".into()),
                port: 443,
                flags: 0,
            }),
        ),
        (
            "begin-v6",
            RelayMsg::Begin(Begin {
                host: TargetHost::Ip("2001:db8::1".parse().expect("literal")),
                port: 80,
                flags: 5,
            }),
        ),
        (
            "begin-v4",
            RelayMsg::Begin(Begin {
                host: TargetHost::Ip(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1))),
                port: 8080,
                flags: 0,
            }),
        ),
        ("data", RelayMsg::Data(b"GET / HTTP/1.0\r\n\r\n")),
        (
            "end-exitpolicy",
            RelayMsg::End(End {
                reason: end_reason::EXITPOLICY,
                addr: Some((IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), 300)),
            }),
        ),
        ("end-done", RelayMsg::End(End::new(end_reason::DONE))),
        (
            "connected-v4",
            RelayMsg::Connected(Connected {
                addr: Some((IpAddr::V4(Ipv4Addr::new(93, 184, 216, 34)), 60)),
            }),
        ),
        (
            "connected-v6",
            RelayMsg::Connected(Connected {
                addr: Some(("2001:db8::2".parse().expect("literal"), 60)),
            }),
        ),
        (
            "sendme-v1",
            RelayMsg::Sendme(Sendme::Authenticated([5; 20])),
        ),
        ("sendme-v0", RelayMsg::Sendme(Sendme::Unauthenticated)),
        (
            "extend2",
            RelayMsg::Extend2(Extend2 {
                specs: vec![
                    LinkSpec::Ipv4("127.0.0.1:5000".parse().expect("literal")),
                    LinkSpec::Ipv6("[::1]:5001".parse().expect("literal")),
                    LinkSpec::LegacyId([1; 20]),
                    LinkSpec::Ed25519Id([2; 32]),
                    LinkSpec::Unknown(9, vec![1, 2, 3]),
                ],
                create: Create2 {
                    htype: HTYPE_NTOR,
                    hdata: vec![3; 84],
                },
            }),
        ),
        (
            "extended2",
            RelayMsg::Extended2(Created2 { hdata: vec![4; 64] }),
        ),
        ("truncate", RelayMsg::Truncate),
        ("truncated", RelayMsg::Truncated(8)),
        ("drop", RelayMsg::Drop),
        ("resolve", RelayMsg::Resolve("example.org".into())),
        (
            "resolved",
            RelayMsg::Resolved(vec![
                ResolvedAnswer::Ip(IpAddr::V4(Ipv4Addr::new(1, 2, 3, 4)), 60),
                ResolvedAnswer::Ip("::2".parse().expect("literal"), 60),
                ResolvedAnswer::Hostname("example.net".into(), 30),
                ResolvedAnswer::TransientError,
            ]),
        ),
        ("begin-dir", RelayMsg::BeginDir),
        ("xon", RelayMsg::Unknown(RelayCmd::XON, &[0, 0, 0, 5])),
    ]
}

fn cells(out: &mut Vec<Seed>) {
    let rf = fixtures::relay();
    let codec = v45();
    out.push((
        "cell_codec",
        "versions-v3".into(),
        cat(&[&[0], &[0, 0, 7, 0, 4], &encode_versions(&[3, 4, 5])]),
    ));
    let netinfo = Netinfo {
        time: NOW as u32,
        other_addr: Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        my_addrs: vec![
            IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)),
            "::1".parse().expect("literal"),
        ],
    };
    let handshake = [
        RawCell::var(0, ChanCmd::CERTS, certs_payload(rf)).expect("var"),
        RawCell::var(
            0,
            ChanCmd::AUTH_CHALLENGE,
            &AuthChallenge {
                challenge: [9; 32],
                methods: vec![1, 3],
            }
            .encode(),
        )
        .expect("var"),
        RawCell::fixed(0, ChanCmd::NETINFO, &netinfo.encode()).expect("fixed"),
        RawCell::var(0, ChanCmd::VPADDING, &[0; 16]).expect("var"),
    ];
    out.push((
        "cell_codec",
        "handshake-v5".into(),
        cat(&[&[2], &cell_bytes(&codec, &handshake)]),
    ));
    out.push((
        "cell_codec",
        "stock-certs".into(),
        cat(&[
            &[1],
            &cell_bytes(
                &codec,
                &[RawCell::var(0, ChanCmd::CERTS, &stock_certs_payload()).expect("var")],
            ),
        ]),
    ));
    let circuit = [
        RawCell::fixed(
            0x8000_0001,
            ChanCmd::CREATE2,
            &Create2 {
                htype: HTYPE_NTOR,
                hdata: vec![7; 84],
            }
            .encode(),
        )
        .expect("fixed"),
        RawCell::fixed(
            0x8000_0001,
            ChanCmd::CREATED2,
            &Created2 { hdata: vec![8; 64] }.encode(),
        )
        .expect("fixed"),
        RawCell::fixed(
            0x8000_0001,
            ChanCmd::RELAY,
            &relay_body(&relay_messages()[0].1, 3),
        )
        .expect("fixed"),
        RawCell::fixed(
            0x8000_0001,
            ChanCmd::RELAY_EARLY,
            &relay_body(&relay_messages()[10].1, 0),
        )
        .expect("fixed"),
        RawCell::fixed(0x8000_0001, ChanCmd::DESTROY, &[1]).expect("fixed"),
        RawCell::fixed(0, ChanCmd::PADDING, &[]).expect("fixed"),
        RawCell::var(
            0,
            ChanCmd::AUTHENTICATE,
            &build_authenticate_payload(
                &AUTH_FIELDS,
                &fixtures::peer_relay().keys.ed_link_auth,
                &mut fixtures::rng(1),
            ),
        )
        .expect("var"),
    ];
    out.push((
        "cell_codec",
        "circuit-v4".into(),
        cat(&[&[1], &cell_bytes(&codec, &circuit)]),
    ));
    for (name, m) in relay_messages() {
        out.push(("relay_msg", name.into(), trim(&relay_body(&m, 7))));
    }
}

fn certs_payload(rf: &fixtures::RelayFixture) -> &[u8] {
    use onionmix_proto::channel::ResponderIdentity;
    rf.link.certs_payload()
}

fn handshakes(out: &mut Vec<Seed>) {
    let rf = fixtures::relay();
    let peer = fixtures::peer_relay();
    let exporter = |_: &[u8; 32]| Some([7u8; 32]);
    // A relay (peer) authenticating to our responder (rf).
    let auth = RelayInitiatorAuth {
        id: &peer.link,
        tlssecrets: [7; 32],
    };
    let verifier = onionmix_node::glue::CryptoVerifier;
    let mut ini = InitiatorHandshake::new(None, &verifier, rf.tls.cert_sha256, NOW)
        .with_auth(&auth, vec![IpAddr::V4(Ipv4Addr::LOCALHOST)]);
    let mut resp = ResponderHandshake::new(
        &rf.link,
        NOW,
        vec![IpAddr::V4(Ipv4Addr::LOCALHOST)],
        Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
    );
    let mut i_out = BytesMut::new();
    ini.start(&mut i_out).expect("start");
    let mut initiator_bytes = i_out.to_vec();
    let mut r_out = BytesMut::new();
    let mut r_in = BytesMut::from(&i_out[..]);
    let _ = resp.handle(&mut r_in, &mut r_out, &exporter);
    let responder_bytes = r_out.to_vec();
    let mut i_in = BytesMut::from(&r_out[..]);
    let mut i_out2 = BytesMut::new();
    let est = ini.handle(&mut i_in, &mut i_out2);
    assert!(matches!(est, Ok(Some(_))), "seed handshake completes");
    initiator_bytes.extend_from_slice(&i_out2);
    let tls = rf.tls.cert_sha256;
    for flags in [0x00u8, 0x01, 0x03, 0x05, 0x0b, 0x21] {
        out.push((
            "chan_initiator",
            format!("responder-flags{flags:02x}"),
            cat(&[&[flags], &tls, &responder_bytes]),
        ));
    }
    // Stock tor's CERTS cell in a responder transcript.
    let codec = v45();
    let stock = cat(&[
        &[0, 0, 7, 0, 6],
        &encode_versions(&[3, 4, 5]),
        &cell_bytes(
            &codec,
            &[
                RawCell::var(0, ChanCmd::CERTS, &stock_certs_payload()).expect("var"),
                RawCell::var(
                    0,
                    ChanCmd::AUTH_CHALLENGE,
                    &AuthChallenge {
                        challenge: [1; 32],
                        methods: vec![3],
                    }
                    .encode(),
                )
                .expect("var"),
                RawCell::fixed(
                    0,
                    ChanCmd::NETINFO,
                    &Netinfo {
                        time: NOW as u32,
                        other_addr: Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
                        my_addrs: vec![IpAddr::V4(Ipv4Addr::LOCALHOST)],
                    }
                    .encode(),
                )
                .expect("fixed"),
            ],
        ),
    ]);
    out.push((
        "chan_initiator",
        "stock-tor".into(),
        cat(&[&[0x01], &fixtures::stock_tls_sha256(), &stock]),
    ));
    for flags in [0x00u8, 0x01, 0x09, 0x19] {
        out.push((
            "chan_responder",
            format!("relay-flags{flags:02x}"),
            cat(&[&[flags], &initiator_bytes]),
        ));
    }
    // A client: VERSIONS, then NETINFO without CERTS.
    let client = cat(&[
        &[0, 0, 7, 0, 4],
        &encode_versions(&[4, 5]),
        &cell_bytes(
            &codec,
            &[RawCell::fixed(
                0,
                ChanCmd::NETINFO,
                &Netinfo {
                    time: 0,
                    other_addr: Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
                    my_addrs: vec![],
                }
                .encode(),
            )
            .expect("fixed")],
        ),
    ]);
    out.push(("chan_responder", "client".into(), cat(&[&[0], &client])));
    let _ = responder_bytes;
}

/// A circuit-machine operation carrying a cell body.
fn op_cell(op: u8, body: &[u8]) -> Vec<u8> {
    let mut b = body.to_vec();
    if b.len() % 2 == 1 {
        b.push(0);
    }
    cat(&[&[op, (b.len() / 2) as u8], &b])
}

fn circuits(out: &mut Vec<Seed>) {
    let m = relay_messages();
    let body = |i: usize, sid: u16| trim(&relay_body(&m[i].1, sid));
    // Relay side: EXTEND2 in RELAY_EARLY, extended, then a forwarded cell.
    out.push((
        "circ_relay",
        "extend".into(),
        cat(&[&op_cell(1, &body(10, 0)), &[2, 1], &op_cell(0, &[1, 1, 1])]),
    ));
    // Exit: BEGIN, DATA x3, SENDME, END; BEGIN_DIR; RESOLVE.
    let mut exit = op_cell(0, &body(0, 1));
    for _ in 0..3 {
        exit.extend(op_cell(0, &body(3, 1)));
    }
    exit.extend(op_cell(0, &body(8, 0)));
    exit.extend([5, 0, 1]);
    exit.extend(op_cell(0, &body(5, 1)));
    exit.extend(op_cell(0, &body(17, 2)));
    exit.extend(op_cell(0, &body(15, 3)));
    exit.extend([4, 0, 2]);
    out.push(("circ_relay", "exit".into(), exit));
    // Client: open streams, get CONNECTED/DATA/RESOLVED/END, extend.
    // Stream IDs 1-16 in inbound cells name the streams opened so far;
    // the first Digest byte names the hop.
    let at_hop = |mut b: Vec<u8>, hop: u8| {
        b.resize(b.len().max(11), 0);
        b[5] = hop;
        b
    };
    let mut client = vec![1, 0, 0, 80];
    client.extend(op_cell(0, &at_hop(body(6, 1), 0)));
    client.extend(op_cell(0, &at_hop(body(3, 1), 0)));
    client.extend([4, 0, 100]);
    client.extend([2]);
    client.extend(op_cell(0, &at_hop(body(6, 2), 0)));
    client.extend([3]);
    client.extend(op_cell(0, &at_hop(body(16, 3), 0)));
    client.extend([6, 0]);
    client.extend([7]);
    client.extend(op_cell(0, &at_hop(body(11, 0), 0)));
    client.extend([8, 1, 1, 1, 187]);
    client.extend(op_cell(0, &at_hop(body(6, 3), 1)));
    client.extend(op_cell(0, &at_hop(body(5, 1), 0)));
    client.extend(op_cell(0, &at_hop(body(9, 3), 1)));
    client.extend(op_cell(0, &at_hop(body(13, 0), 1)));
    out.push(("circ_client", "streams".into(), client));
}

fn crypto(out: &mut Vec<Seed>) {
    let rf = fixtures::relay();
    let peer = fixtures::peer_relay();
    let k = &rf.keys;
    let (ntor_cc, _) = k.ntor_onion_key_crosscert(NOW, 86_400);
    for (name, c) in [
        ("type4", k.ed_signing_cert.clone()),
        ("type6", k.ed_link_auth_cert.clone()),
        ("type5", k.tls_link_cert(&rf.tls.cert_sha256, NOW)),
        ("ntor-crosscert", ntor_cc),
    ] {
        out.push(("ed25519_cert", name.into(), cat(&[&[0], &c])));
    }
    out.push((
        "ed25519_cert",
        "rsa-crosscert".into(),
        cat(&[&[1], &k.rsa_crosscert(NOW).expect("crosscert")]),
    ));
    let stock = Certs::parse(&stock_certs_payload()).expect("stock CERTS parse");
    for (t, c) in &stock.certs {
        match t {
            4 | 5 => out.push(("ed25519_cert", format!("stock-type{t}"), cat(&[&[0], c]))),
            7 => out.push(("ed25519_cert", "stock-type7".into(), cat(&[&[1], c]))),
            _ => out.push(("x509_cert", format!("stock-type{t}"), c.clone())),
        }
    }
    out.push(("x509_cert", "tls".into(), rf.tls.cert_der.clone()));
    out.push((
        "x509_cert",
        "identity".into(),
        k.rsa_identity_cert(&mut fixtures::rng(2), NOW)
            .expect("cert"),
    ));
    out.push((
        "x509_cert",
        "rsa-key".into(),
        k.rsa_identity.public().to_der(),
    ));
    // CERTS checks.
    out.push((
        "link_certs",
        "responder".into(),
        cat(&[&[1], certs_payload(rf)]),
    ));
    out.push((
        "link_certs",
        "stock-responder".into(),
        cat(&[&[0], &stock_certs_payload()]),
    ));
    let ini = peer
        .keys
        .initiator_certs(&mut fixtures::rng(3), NOW)
        .expect("certs");
    out.push((
        "link_certs",
        "initiator".into(),
        cat(&[&[2], &encode_certs_payload(&ini).expect("encode")]),
    ));
    out.push((
        "link_certs",
        "authenticate".into(),
        cat(&[
            &[4],
            &build_authenticate_payload(
                &AUTH_FIELDS,
                &peer.keys.ed_link_auth,
                &mut fixtures::rng(4),
            ),
        ]),
    ));
    // Circuit handshakes.
    let y = [0x11u8; 32];
    let x = [0x22u8; 32];
    let (client, skin) = NtorClient::with_ephemeral(k.rsa_id(), k.ntor.public(), &x);
    let (reply, _) =
        ntor_server_with_ephemeral(&k.rsa_id(), &k.ntor_keys(), &skin, &y).expect("ntor");
    drop(client);
    out.push((
        "circuit_handshake",
        "ntor-server".into(),
        cat(&[&[0], &y, &skin]),
    ));
    out.push((
        "circuit_handshake",
        "ntor-client".into(),
        cat(&[&[1], &y, &x, &reply]),
    ));
    let cc = encode_extensions(&[Ntor3Extension {
        ext_type: EXT_CC_REQUEST,
        data: vec![],
    }]);
    let (_, hs) =
        Ntor3Client::with_ephemeral(k.ed_id(), k.ntor.public(), &cc, NTOR3_CIRC_VERIFICATION, &x)
            .expect("ntor3");
    out.push((
        "circuit_handshake",
        "ntor3-server".into(),
        cat(&[&[2], &y, &hs]),
    ));
    out.push((
        "circuit_handshake",
        "ntor3-client".into(),
        cat(&[&[3], &y, &x, &chunk(&cc), &[0x33; 64]]),
    ));
    out.push((
        "circuit_handshake",
        "ntor3-exts".into(),
        cat(&[&[4], &y, &cc]),
    ));
    out.push((
        "circuit_handshake",
        "ntor-pair".into(),
        cat(&[&[5], &y, &x]),
    ));
    out.push((
        "circuit_handshake",
        "ntor3-pair".into(),
        cat(&[&[6], &y, &x, &chunk(&cc)]),
    ));
}

/// A descriptor of the fixture relay with both signatures replaced by
/// markers.
pub fn descriptor_template(policy: &[&str], family: &[&str]) -> String {
    let k = &fixtures::relay().keys;
    let p = DescriptorParams {
        nickname: "fuzzrelay".into(),
        address: Ipv4Addr::new(127, 0, 0, 1),
        or_port: 5000,
        dir_port: 0,
        platform: "Tor 0.4.9.11 on Linux".into(),
        protocols: "Cons=1-2 Desc=1-2 DirCache=2 FlowCtrl=1-2 HSDir=2 HSIntro=4-5 HSRend=1-2 Link=1-5 LinkAuth=1,3 Microdesc=1-2 Padding=2 Relay=1-4".into(),
        published: NOW - 60,
        uptime: 3600,
        bandwidth: (1 << 20, 2 << 20, 500_000),
        exit_policy: policy.iter().map(|s| s.to_string()).collect(),
        family: family.iter().map(|s| s.to_string()).collect(),
        contact: Some("fuzz@example.invalid".into()),
        tunnelled_dir_server: true,
        hidden_service_dir: false,
        ntor_crosscert_lifetime: 7 * 86_400,
    };
    let d = build(k, &p).expect("descriptor");
    let ed_at = d.find("router-sig-ed25519 ").expect("ed sig") + "router-sig-ed25519 ".len();
    format!("{}@EDSIG@\nrouter-signature\n@RSASIG@\n", &d[..ed_at])
}

fn vote_template() -> String {
    let a = fixtures::authority();
    let relays: Vec<RouterEntry> = (0..3u8)
        .map(|i| RouterEntry {
            nickname: format!("relay{i}"),
            rsa_id: [i + 1; 20],
            ed_id: [i + 7; 32],
            desc_digest: [i + 3; 20],
            published: NOW - 100,
            address: Ipv4Addr::new(127, 0, 0, i + 1),
            or_port: 5000 + u16::from(i),
            dir_port: 0,
            flags: [
                "Fast", "Running", "Valid", "V2Dir", "Stable", "Guard", "Exit",
            ]
            .iter()
            .take(3 + usize::from(i) * 2)
            .map(|s| s.to_string())
            .collect(),
            version: Some("Tor 0.4.9.11".into()),
            protocols: "Cons=2 Desc=2 Link=4-5 Microdesc=2 Relay=2-4".into(),
            bandwidth_kb: 1000 * u64::from(i + 1),
            policy_summary: if i == 2 {
                "accept 80,443".into()
            } else {
                "reject 1-65535".into()
            },
            md_digest: [i + 9; 32],
        })
        .collect();
    let h = VoteHeader {
        nickname: "fuzzauth".into(),
        v3ident: a.cert.id_fingerprint(),
        address: Ipv4Addr::LOCALHOST,
        dir_port: 7000,
        or_port: 7001,
        contact: "fuzz@example.invalid".into(),
        published: NOW,
        valid_after: NOW,
        fresh_until: NOW + 300,
        valid_until: NOW + 900,
        voting_delay: (20, 20),
        known_flags: [
            "Authority",
            "Exit",
            "Fast",
            "Guard",
            "HSDir",
            "Running",
            "Stable",
            "V2Dir",
            "Valid",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect::<BTreeSet<_>>(),
        protocols: default_protocol_lines(),
        params: [("bwweightscale".to_string(), 10000)].into_iter().collect(),
        shared_rand: Default::default(),
    };
    let v = build_vote(&h, &relays, &a.keys.certificate, &a.keys.signing).expect("vote");
    let sig_at = v.rfind("-----BEGIN SIGNATURE-----").expect("signature");
    let v = format!("{}@SIG@\n", &v[..sig_at]);
    v.replacen(&a.keys.certificate, "@CERT@\n", 1)
        .replace(&hex::encode_upper(a.cert.id_fingerprint()), "@V3@")
        .replace(
            &hex::encode_upper(a.cert.signing_key_fingerprint()),
            "@SKFP@",
        )
}

fn netdoc(out: &mut Vec<Seed>) {
    let consensus = fixtures::STOCK_CONSENSUS.as_bytes();
    out.push(("consensus", "stock-assumed".into(), cat(&[&[0], consensus])));
    out.push((
        "consensus",
        "stock-verified".into(),
        cat(&[&[1], consensus]),
    ));
    out.push((
        "microdesc",
        "stock".into(),
        fixtures::STOCK_MICRODESCS.as_bytes().to_vec(),
    ));
    let first_md = fixtures::STOCK_MICRODESCS
        .split("onion-key\n")
        .nth(1)
        .map(|s| format!("onion-key\n{s}"))
        .unwrap_or_default();
    out.push(("microdesc", "stock-one".into(), first_md.into_bytes()));
    out.push((
        "authcert",
        "stock-keys".into(),
        fixtures::STOCK_KEYS.as_bytes().to_vec(),
    ));
    out.push((
        "authcert",
        "stock-gencert".into(),
        fixtures::STOCK_GENCERT.as_bytes().to_vec(),
    ));
    out.push((
        "authcert",
        "fixture".into(),
        fixtures::authority().keys.certificate.as_bytes().to_vec(),
    ));
    out.push((
        "routerdesc",
        "exit".into(),
        descriptor_template(
            &[
                "accept 127.0.0.0/8:*",
                "accept *:80",
                "accept *:443",
                "reject *:*",
            ],
            &["$0123456789ABCDEF0123456789ABCDEF01234567"],
        )
        .into_bytes(),
    ));
    out.push((
        "routerdesc",
        "non-exit".into(),
        descriptor_template(&["reject *:*"], &[]).into_bytes(),
    ));
    out.push((
        "vote",
        "template".into(),
        cat(&[&[0], vote_template().as_bytes()]),
    ));
    let mut own = vec![1u8, 3];
    for i in 0..3u8 {
        own.extend([5, b'r', b'e', b'l', b'a', i, 0x01, 0xff]);
        own.extend([12]);
        own.extend(b"Tor 0.4.9.11");
        own.extend([2, 0, 80, 0, 80, 0]);
        own.extend([i; 20 + 32 + 20]);
        own.extend([0, 100, 127, 0, 0, 1, 0x13, 0x88, 0, 0, 0, 0, 0x10, 0]);
        own.extend([i + 1; 32]);
    }
    out.push(("vote", "own".into(), own));
    let a = fixtures::authority();
    let sig = sign_consensus(DETACHED_BODY, a.cert.id_fingerprint(), &a.keys.signing).expect("sig");
    let det = build_detached(NOW, NOW + 300, NOW + 900, DETACHED_BODY, &sig);
    let sig_at = det.rfind("-----BEGIN SIGNATURE-----").expect("signature");
    let det = format!("{}@SIG@\n", &det[..sig_at])
        .replace(
            &hex::encode_upper(onionmix_netdoc::vote::consensus_digest(DETACHED_BODY)),
            "@DIGEST@",
        )
        .replace(&hex::encode_upper(a.cert.id_fingerprint()), "@V3@")
        .replace(
            &hex::encode_upper(a.cert.signing_key_fingerprint()),
            "@SKFP@",
        );
    out.push(("detached_sig", "fixture".into(), det.into_bytes()));
    for f in [
        "raw-consensus-deflate.http",
        "raw-consensus-identity.http",
        "raw-keys-deflate.http",
        "raw-micro-deflate.http",
        "raw-micro-404.http",
    ] {
        let path = format!("{}/../netdoc/tests/data/{f}", env!("CARGO_MANIFEST_DIR"));
        if let Ok(b) = std::fs::read(path) {
            out.push((
                "dir_response",
                f.trim_end_matches(".http").into(),
                cat(&[&[3], &b]),
            ));
            out.push((
                "http_response",
                f.trim_end_matches(".http").into(),
                cat(&[&[0], &b]),
            ));
        }
    }
    out.push((
        "dir_response",
        "close-delimited".into(),
        cat(&[
            &[0x21],
            b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\naccept 80\n",
        ]),
    ));
    for (sel, s) in [
        (0u8, "accept 80,443"),
        (
            0,
            "reject 25,119,135-139,445,563,1214,4661-4666,6346-6429,6699,6881-6999",
        ),
        (
            1,
            "Cons=1-2 Desc=1-2 DirCache=2 FlowCtrl=1-2 Link=1-5 Relay=1-4",
        ),
        (
            2,
            "Authority Exit Fast Guard HSDir Running Stable V2Dir Valid",
        ),
        (3, "$73EB8750A9DB5F6931BD2734F577C69D33FC92EC"),
    ] {
        out.push((
            "netdoc_types",
            format!("sel{sel}"),
            cat(&[&[sel], s.as_bytes()]),
        ));
    }
}

fn frontend(out: &mut Vec<Seed>) {
    let socks: [(&str, Vec<u8>); 8] = [
        (
            "v5-host",
            cat(&[&[5, 1, 0], &[5, 1, 0, 3, 11], b"example.com", &[1, 187]]),
        ),
        (
            "v5-userpass",
            cat(&[
                &[5, 2, 0, 2],
                &[1, 3],
                b"bob",
                &[2],
                b"pw",
                &[5, 1, 0, 1, 127, 0, 0, 1, 0, 80],
            ]),
        ),
        (
            "v5-v6",
            cat(&[&[5, 1, 0], &[5, 1, 0, 4], &[0; 15], &[1], &[0, 22]]),
        ),
        (
            "v5-resolve",
            cat(&[&[5, 1, 0], &[5, 0xf0, 0, 3, 11], b"example.org", &[0, 0]]),
        ),
        (
            "v5-ptr",
            cat(&[&[5, 1, 0], &[5, 0xf1, 0, 1, 93, 184, 216, 34, 0, 0]]),
        ),
        ("v4", cat(&[&[4, 1, 0, 80, 10, 0, 0, 1], b"user\0"])),
        (
            "v4a",
            cat(&[&[4, 1, 1, 187, 0, 0, 0, 1], b"\0", b"example.net\0"]),
        ),
        (
            "v5-onion",
            cat(&[
                &[5, 1, 0],
                &[5, 1, 0, 3, 62],
                b"25njqamcweflpvkl73j4szahhihoc4xt3ktcgjnpaingr5yhkenl5sid.onion",
                &[0, 80],
            ]),
        ),
    ];
    for (name, b) in socks {
        out.push(("socks", name.into(), cat(&[&[0x30], &b])));
    }
    for (name, s) in [
        (
            "onion",
            "25njqamcweflpvkl73j4szahhihoc4xt3ktcgjnpaingr5yhkenl5sid.onion",
        ),
        (
            "onion-sub",
            "www.25NJQAMCWEFLPVKL73J4SZAHHIHOC4XT3KTCGJNPAINGR5YHKENL5SID.onion.",
        ),
        (
            "label",
            "25njqamcweflpvkl73j4szahhihoc4xt3ktcgjnpaingr5yhkenl5sid",
        ),
        (
            "exit",
            "www.example.com.$73EB8750A9DB5F6931BD2734F577C69D33FC92EC.exit",
        ),
        ("public", "example.com"),
    ] {
        out.push(("onion_addr", name.into(), s.as_bytes().to_vec()));
    }
}

fn http(out: &mut Vec<Seed>) {
    for (name, r) in [
        (
            "get-dir",
            "GET /tor/status-vote/current/consensus-microdesc HTTP/1.0\r\nHost: 127.0.0.1\r\nAccept-Encoding: deflate, identity\r\n\r\n",
        ),
        (
            "get-keepalive",
            "GET /bytes/1024 HTTP/1.1\r\nHost: sink.onionmix.test\r\nUser-Agent: onionmix\r\n\r\nGET / HTTP/1.1\r\n\r\n",
        ),
        (
            "post-upload",
            "POST /tor/ HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\nContent-Length: 11\r\n\r\nrouter x y\n",
        ),
        (
            "post-chunked",
            "POST /tor/post/vote HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        ),
        (
            "head-close",
            "HEAD /stream/5 HTTP/1.1\r\nConnection: keep-alive, close\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n",
        ),
    ] {
        out.push(("http_request", name.into(), cat(&[&[0x40], r.as_bytes()])));
        out.push(("dir_request", name.into(), r.as_bytes().to_vec()));
        out.push(("sink_http", name.into(), r.as_bytes().to_vec()));
    }
    for (name, r) in [
        (
            "chunked",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Onionmix-Sha256: 00\r\n\r\n4;ext=1\r\nabcd\r\n3\r\nefg\r\n0\r\nTrailer: x\r\n\r\n",
        ),
        (
            "length",
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
        ),
        (
            "no-content",
            "HTTP/1.1 204 No Content\r\nContent-Length: 10\r\n\r\n",
        ),
    ] {
        out.push(("http_response", name.into(), cat(&[&[0x40], r.as_bytes()])));
    }
    for (name, b) in [
        ("simple", "5\r\nhello\r\n0\r\n\r\n"),
        (
            "ext-trailer",
            "A;name=value\r\n0123456789\r\n1\r\nx\r\n0\r\nExpires: never\r\nX: y\r\n\r\nNEXT",
        ),
        (
            "upper-hex",
            "1F\r\n0123456789abcdef0123456789abcde\r\n0\r\n\r\n",
        ),
    ] {
        out.push(("http_chunked", name.into(), cat(&[&[0x2c], b.as_bytes()])));
    }
}

fn node(out: &mut Vec<Seed>) {
    let q = onionmix_node::relay::dns::query(0x4242, "sink.onionmix.test", 1).expect("query");
    let a = onionmix_testbed::sink::dns_answer(&q, Ipv4Addr::new(10, 9, 8, 7)).expect("answer");
    out.push(("exit_dns", "answer-a".into(), a.clone()));
    let q6 = onionmix_node::relay::dns::query(0x4343, "example.com", 28).expect("query");
    let mut a6 = q6.clone();
    a6[2] = 0x81;
    a6[3] = 0x80;
    a6[7] = 1;
    a6.extend([0xc0, 0x0c, 0, 28, 0, 1, 0, 0, 0, 60, 0, 16]);
    a6.extend([0x20, 1, 0x0d, 0xb8].iter().chain(&[0; 11]).chain(&[1]));
    out.push(("exit_dns", "answer-aaaa".into(), a6));
    out.push(("exit_dns", "name".into(), b"Sink.OnionMix.Test.".to_vec()));
    out.push(("sink_dns", "query-a".into(), q));
    out.push(("sink_dns", "query-aaaa".into(), q6));
    out.push((
        "sink_dns",
        "name".into(),
        b"a.b.sink.onionmix.test".to_vec(),
    ));
    for (name, p) in [
        ("summary-accept", "accept 80,443,6660-6669"),
        ("summary-reject", "reject 25,119,135-139,445"),
        (
            "policy",
            "reject 0.0.0.0/8:*\naccept 127.0.0.0/8:*\naccept *:80-81\naccept6 [2001:db8::]/32:443\nreject *4:*\nreject *:*",
        ),
        ("policy-v6", "accept [::1]:22\naccept *6:443\nreject *:*"),
    ] {
        out.push(("exit_policy", name.into(), p.as_bytes().to_vec()));
    }
}

fn mix(out: &mut Vec<Seed>) {
    for kind in [ProfileKind::Sphinxmix, ProfileKind::X25519] {
        let f = fixtures::loopix(kind);
        let profile = Profile::loopix(kind);
        let prov = &f.dir.providers[0];
        let mixn = &f.dir.mixes[0].node;
        let c = &f.dir.clients[1].node;
        let entry = |n: &onionmix_mix::directory::NodeInfo| RoutingEntry {
            host: n.host.clone(),
            port: n.port,
            drop: false,
            type_flag: Some(codec::TYPE_REAL),
            delay: 0.25,
            name: n.name.clone(),
        };
        let path = [
            Hop {
                entry: entry(mixn),
                key: mixn.key,
            },
            Hop {
                entry: entry(prov),
                key: prov.key,
            },
            Hop {
                entry: entry(c),
                key: c.key,
            },
        ];
        let dest = Dest {
            host: c.host.clone(),
            port: c.port,
            name: c.name.clone(),
        };
        let built = codec::build_packet(
            &profile,
            &path,
            &dest,
            b"hello loopix",
            &mut fixtures::rng(6),
        )
        .expect("packet");
        let routing: Vec<Vec<u8>> = path.iter().map(|h| h.entry.encode(kind)).collect();
        let (target, dest_bytes) = match kind {
            ProfileKind::Sphinxmix => (
                "sphinxmix",
                Value::Array(vec![
                    Value::str(&c.host),
                    Value::Int(i128::from(c.port)),
                    Value::str(&c.name),
                ])
                .encode(),
            ),
            ProfileKind::X25519 => ("sphinx_x25519", b"\x75\x33\x09127.0.0.1client1".to_vec()),
        };
        out.push((target, "datagram".into(), cat(&[&[0], &built.bytes])));
        for sel in [1u8, 2] {
            let n = 1 + usize::from(sel & 1);
            let mut s = vec![sel];
            for r in routing.iter().take(n) {
                s.extend(chunk(r));
            }
            s.extend(chunk(&dest_bytes));
            s.extend(chunk(b"message"));
            s.extend([0x42; 40]);
            out.push((target, format!("build{n}"), s));
        }
        // Nodes: subscribe, a packet for client0 and client1, pull, time.
        let sel = u8::from(kind == ProfileKind::Sphinxmix);
        let mut ops = vec![sel];
        ops.extend([3, 0, 0, 0, 0, 0, 0, 0]); // SUBSCRIBE client0, on time
        ops.extend([4, 0]);
        ops.extend(chunk(b"to client0"));
        ops.extend([4, 1]);
        ops.extend(chunk(b"to client1"));
        ops.extend([3, 0, 1, 0, 0, 0, 5, 0]); // PULL client0
        ops.extend([3, 1, 1, 0, 0, 0, 9, 0]); // PULL client1
        ops.extend([5, 0, 200]);
        ops.extend([3, 0, 1, 0xff, 0xff, 0, 0, 1]);
        ops.extend(chunk(b"provider9"));
        ops.extend([0]);
        ops.extend(chunk(&legacy_pull("client0")));
        ops.extend([5, 0, 200]);
        out.push(("loopix_nodes", format!("{kind}"), ops));
    }
    let f = fixtures::loopix(ProfileKind::X25519);
    let prov = &f.dir.providers[0];
    let c = &f.dir.clients[0].node;
    let k = ControlKey::derive(
        &f.client_keys[0],
        &prov.key,
        &c.name,
        &c.key,
        &prov.name,
        &prov.key,
    )
    .expect("control key");
    let sub = Control::Auth(AuthRequest::sign(
        &k,
        ControlKind::Subscribe,
        &c.name,
        &prov.name,
        NOW * 1000,
    ))
    .encode();
    for (name, b) in [
        ("subscribe", sub.clone()),
        (
            "pull",
            Control::Auth(AuthRequest::sign(
                &k,
                ControlKind::Pull,
                &c.name,
                &prov.name,
                NOW * 1000 + 1,
            ))
            .encode(),
        ),
        (
            "legacy-subscribe",
            legacy_subscribe("client0", "127.0.0.1", 9999),
        ),
        ("legacy-pull", legacy_pull("client0")),
        ("dummy", Control::dummy(8, &mut fixtures::rng(8))),
    ] {
        out.push(("loopix_control", name.into(), b.clone()));
        out.push(("msgpack", name.into(), b));
    }
    let values = Value::Array(vec![
        Value::Nil,
        Value::Bool(true),
        Value::Int(-1),
        Value::Int(300),
        Value::Int(-40_000),
        Value::Int(1 << 40),
        Value::F64(0.25),
        Value::Map(vec![(Value::str("k"), Value::bin(b"v"))]),
        Value::Ext(2, vec![1, 2, 3, 4]),
        Value::Ext(5, vec![0; 20]),
        Value::Str(vec![b'x'; 40]),
    ]);
    out.push(("msgpack", "kinds".into(), values.encode()));
}

fn emu(out: &mut Vec<Seed>) {
    // Flags: bit 0 fix addresses, bits 1-3 destination, bits 4-7 source.
    let udp = |len: usize| {
        let total = 20 + 8 + len;
        let mut p = vec![0u8; total];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        p[8] = 64;
        p[9] = 17;
        p
    };
    let mut ops = Vec::new();
    for (from, to, len, dt) in [
        (0u8, 1u8, 100usize, 0u16),
        (1, 2, 1400, 1),
        (2, 0, 60, 5),
        (0, 3, 500, 0),
        (3, 1, 40, 100),
    ] {
        ops.push((from << 4) | (to << 1) | 1);
        ops.extend(dt.to_be_bytes());
        ops.extend(chunk(&udp(len)));
    }
    let mut v6 = vec![0u8; 48];
    v6[0] = 0x60;
    v6[5] = 8;
    ops.extend([0x10, 0, 1]);
    ops.extend(chunk(&v6));
    out.push(("emu_packet", "flows".into(), ops));
}

fn testbed(out: &mut Vec<Seed>) {
    for (name, l) in [
        (
            "built",
            "650 CIRC 5 BUILT $73EB8750A9DB5F6931BD2734F577C69D33FC92EC~auth1,$51E3600DA3BF9282F08D887F8DABA637C5083153~auth2 BUILD_FLAGS=NEED_CAPACITY PURPOSE=GENERAL TIME_CREATED=2026-11-22T13:44:20.123456",
        ),
        (
            "launched",
            "650 CIRC 6 LAUNCHED BUILD_FLAGS=ONEHOP_TUNNEL,IS_INTERNAL,NEED_CAPACITY PURPOSE=GENERAL TIME_CREATED=2026-11-22T13:44:21",
        ),
        ("time", "2026-02-28T23:59:59.999999999"),
    ] {
        out.push(("torctl_event", name.into(), l.as_bytes().to_vec()));
    }
}

/// Every seed of every target.
pub fn all() -> Vec<Seed> {
    let mut out = Vec::new();
    cells(&mut out);
    handshakes(&mut out);
    circuits(&mut out);
    crypto(&mut out);
    netdoc(&mut out);
    frontend(&mut out);
    http(&mut out);
    node(&mut out);
    mix(&mut out);
    emu(&mut out);
    testbed(&mut out);
    out
}
