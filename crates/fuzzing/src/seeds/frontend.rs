//! Seeds for the frontend (SOCKS, control protocol) and HTTP targets.

use super::{Seed, cat};

pub(super) fn frontend(out: &mut Vec<Seed>) {
    // Control port: first byte odd = authenticated with the cookie first;
    // its upper bits choose the read sizes (254: whole).
    for (name, sel, text) in [
        (
            "protocolinfo-auth",
            254u8,
            "PROTOCOLINFO 1\r\nAUTHENTICATE \"wrong\"\r\nGETINFO version\r\n",
        ),
        (
            "getinfo-conf",
            255,
            "GETINFO version circuit-status address nope\r\nGETCONF DisableNetwork SocksPort\r\nSETCONF DisableNetwork=1\r\nRESETCONF DisableNetwork\r\nQUIT\r\n",
        ),
        (
            "events-signal",
            9,
            "SETEVENTS CIRC STREAM BW\r\nSIGNAL NEWNYM\r\nSIGNAL BOGUS\r\nSETEVENTS NOPE\r\n",
        ),
        (
            "circuits",
            255,
            "EXTENDCIRCUIT 0 $AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA purpose=general\r\nATTACHSTREAM 3 7\r\nCLOSESTREAM 3 1\r\nCLOSECIRCUIT 7 IfUnused\r\nSETCIRCUITPURPOSE 7 purpose=controller\r\n",
        ),
        (
            "onion",
            255,
            "ADD_ONION NEW:ED25519-V3 Flags=DiscardPK Port=80,127.0.0.1:8080\r\nDEL_ONION aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\nONION_CLIENT_AUTH_VIEW\r\nHSFETCH 25njqamcweflpvkl73j4szahhihoc4xt3ktcgjnpaingr5yhkenl5sid\r\n",
        ),
        (
            "quoting-data",
            255,
            "SETCONF DisableNetwork=\"1\\\"x\"\r\n+HSPOST\r\nhs-descriptor 3\r\n..dotted\r\n.\r\nTAKEOWNERSHIP\r\nDROPOWNERSHIP\r\nMAPADDRESS a=b\r\n",
        ),
    ] {
        out.push(("control_port", name.into(), cat(&[&[sel], text.as_bytes()])));
    }
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

pub(super) fn http(out: &mut Vec<Seed>) {
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
