//! A raw test client for the relay's onion-service roles: it builds
//! circuits hop by hop (ntor), keeps every hop's tor1 layer and KH, and
//! sends and receives arbitrary relay messages, so tests can act as an
//! onion service or a client at the cell level (including malformed and
//! hostile cells) without the client stack.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use onionmix_cell::chan::{ChanCmd, Create2, Created2, HTYPE_NTOR, destroy_reason};
use onionmix_cell::relay::{self, Extend2, LinkSpec, RelayCmd, RelayMsg};
use onionmix_cell::{CellBody, CellCodec, PAYLOAD_LEN, RELAY_DATA_LEN, RawCell};
use onionmix_crypto::{CircuitKeys, NtorClient, Tor1Layer};
use onionmix_link::{ChannelIo, TlsTransport, spawn_channel_io};
use onionmix_node::client::circuit::HopTarget;
use onionmix_node::relay::dircache::DirCache;
use onionmix_node::relay::exit::DirServer;
use onionmix_node::relay::{self as relay_mod, RelayCtx, config::RelayConfig};
use onionmix_proto::channel::{ExpectedPeer, InitiatorHandshake};
use rand::RngCore;

pub const WAIT: Duration = Duration::from_secs(20);

/// Start an in-process relay (a directory cache without upstreams, so
/// it serves BEGIN_DIR and is an HSDir), with extra config lines.
pub async fn start_relay(
    dir: &std::path::Path,
    nick: &str,
    extra: &str,
) -> (Arc<RelayCtx>, HopTarget) {
    let cfg = RelayConfig::parse(&format!(
        "data_dir = {:?}\nnickname = {nick:?}\nor_listen = \"127.0.0.1:0\"\ntesting_network = true\n{extra}\n",
        dir.join(nick).display().to_string()
    ))
    .unwrap();
    let keys = relay_mod::load_or_generate_keys(&cfg.data_dir).unwrap();
    let cache: Arc<dyn DirServer> = Arc::new(DirCache::new(Vec::new()));
    let ctx = relay_mod::make_ctx(cfg, keys, Some(cache)).unwrap();
    let addr = relay_mod::start(ctx.clone()).await.unwrap();
    let target = HopTarget {
        nickname: nick.into(),
        rsa_id: ctx.rsa_id,
        ed_id: Some(ctx.ed_id),
        or_addr: addr,
        ntor_key: ctx.ntor_keys()[0].public(),
        ntor_v3: false,
        optimistic_data: true,
        flowctrl_cc: false,
        datagram: false,
        params: None,
    };
    (ctx, target)
}

fn link_specs(t: &HopTarget) -> Vec<LinkSpec> {
    let mut v = Vec::new();
    if let SocketAddr::V4(a) = t.or_addr {
        v.push(LinkSpec::Ipv4(a));
    }
    v.push(LinkSpec::LegacyId(t.rsa_id));
    if let Some(ed) = t.ed_id {
        v.push(LinkSpec::Ed25519Id(ed));
    }
    v
}

/// What arrived on a raw circuit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Got {
    /// A relay message recognized by hop `hop`.
    Msg {
        hop: usize,
        cmd: RelayCmd,
        stream: u16,
        data: Vec<u8>,
    },
    /// A relay cell no hop recognized (decrypted by every hop layer):
    /// end-to-end traffic for a layer the caller holds.
    Opaque(Box<CellBody>),
    /// DESTROY with this reason.
    Destroy(u8),
    /// The channel closed.
    Closed,
}

/// A circuit on its own channel.
pub struct RawCirc {
    io: ChannelIo,
    codec: CellCodec,
    pub id: u32,
    hops: Vec<Tor1Layer>,
    /// KH of each hop's handshake.
    pub kh: Vec<[u8; 20]>,
    early_left: u8,
    pending: std::collections::VecDeque<RawCell>,
}

async fn connect(first: &HopTarget) -> (ChannelIo, CellCodec) {
    let transport = TlsTransport::client().unwrap();
    let (mut tls, info) = transport.connect(first.or_addr).await.unwrap();
    let digest = info.responder_cert_digest().unwrap();
    let verifier = onionmix_node::glue::responder_verifier();
    let hs = InitiatorHandshake::new(
        Some(ExpectedPeer {
            rsa_id: first.rsa_id,
            ed_id: first.ed_id,
        }),
        verifier.as_ref(),
        digest,
        now(),
    );
    let (est, leftover) = onionmix_node::glue::drive_initiator_handshake(&mut tls, hs, WAIT)
        .await
        .unwrap();
    let io = spawn_channel_io(tls, est.codec.clone(), leftover);
    (io, est.codec)
}

pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

impl RawCirc {
    /// Build a circuit along `path` (ntor at every hop).
    pub async fn build(path: &[&HopTarget]) -> RawCirc {
        let (io, codec) = connect(path[0]).await;
        let mut c = RawCirc {
            io,
            codec,
            id: 0x8000_0000 | (rand::random::<u32>() & 0x7fff_ffff).max(1),
            hops: Vec::new(),
            kh: Vec::new(),
            early_left: 8,
            pending: Default::default(),
        };
        let (st, skin) = NtorClient::new(path[0].rsa_id, path[0].ntor_key, &mut rand::rngs::OsRng);
        let create = Create2 {
            htype: HTYPE_NTOR,
            hdata: skin.to_vec(),
        };
        c.send_raw(ChanCmd::CREATE2, &create.encode());
        let created = loop {
            let cell = c.next_cell().await.expect("CREATED2");
            if cell.circ_id == c.id && cell.cmd == ChanCmd::CREATED2 {
                break Created2::parse(&cell.payload).unwrap();
            }
            assert_ne!(cell.cmd, ChanCmd::DESTROY, "CREATE2 refused");
        };
        c.add_hop(st.finish(&created.hdata).unwrap());
        for hop in &path[1..] {
            let (st, skin) = NtorClient::new(hop.rsa_id, hop.ntor_key, &mut rand::rngs::OsRng);
            let e = Extend2 {
                specs: link_specs(hop),
                create: Create2 {
                    htype: HTYPE_NTOR,
                    hdata: skin.to_vec(),
                },
            };
            let last = c.hops.len() - 1;
            c.send(last, RelayCmd::EXTEND2, 0, &e.encode().unwrap());
            match c.recv().await {
                Got::Msg { cmd, data, .. } if cmd == RelayCmd::EXTENDED2 => {
                    let created = Created2::parse(&data).unwrap();
                    c.add_hop(st.finish(&created.hdata).unwrap());
                }
                other => panic!("EXTEND2 to {} failed: {other:?}", hop.nickname),
            }
        }
        c
    }

    fn add_hop(&mut self, keys: CircuitKeys) {
        self.kh.push(keys.kh);
        self.hops.push(Tor1Layer::new(&keys));
    }

    /// Tear the circuit down (DESTROY to the first hop).
    pub fn destroy(&self) {
        self.send_raw(ChanCmd::DESTROY, &[destroy_reason::REQUESTED]);
    }

    /// Number of hops.
    pub fn len(&self) -> usize {
        self.hops.len()
    }

    fn send_raw(&self, cmd: ChanCmd, payload: &[u8]) {
        let mut body = [0u8; PAYLOAD_LEN];
        body[..payload.len()].copy_from_slice(payload);
        let mut buf = bytes::BytesMut::new();
        self.codec.encode_fixed(self.id, cmd, &body, &mut buf);
        self.io.tx.send_now(buf);
    }

    /// Send an already built (still plaintext) relay body to `hop`.
    pub fn send_body(&mut self, hop: usize, mut body: CellBody) {
        self.hops[hop].originate_forward(&mut body);
        self.send_sealed(hop, body);
    }

    /// Encrypt `body` with the layers of hops `..=hop` (the caller set the
    /// digest, or it is end-to-end traffic for a layer beyond) and send.
    pub fn send_sealed(&mut self, hop: usize, mut body: CellBody) {
        for h in self.hops[..=hop].iter_mut().rev() {
            h.encrypt_forward(&mut body);
        }
        // RELAY_EARLY for the first cells, as tor clients do (EXTEND2
        // must be one).
        let cmd = if self.early_left > 0 {
            self.early_left -= 1;
            ChanCmd::RELAY_EARLY
        } else {
            ChanCmd::RELAY
        };
        let mut buf = bytes::BytesMut::new();
        self.codec.encode_fixed(self.id, cmd, &body, &mut buf);
        self.io.tx.send_now(buf);
    }

    /// Send a relay message to `hop`.
    pub fn send(&mut self, hop: usize, cmd: RelayCmd, stream: u16, data: &[u8]) {
        self.send_body(hop, body(cmd, stream, data));
    }

    async fn next_cell(&mut self) -> Option<RawCell> {
        loop {
            if let Some(c) = self.pending.pop_front() {
                return Some(c);
            }
            match tokio::time::timeout(WAIT, self.io.rx.recv()).await {
                Ok(Some(Ok(cells))) => self.pending.extend(cells),
                Ok(Some(Err(_))) | Ok(None) => return None,
                Err(_) => panic!("nothing received within {WAIT:?}"),
            }
        }
    }

    /// The next event on this circuit (SENDME and DROP are skipped).
    pub async fn recv(&mut self) -> Got {
        loop {
            let Some(mut cell) = self.next_cell().await else {
                return Got::Closed;
            };
            if cell.circ_id != self.id {
                continue;
            }
            match cell.cmd {
                ChanCmd::DESTROY => {
                    return Got::Destroy(cell.payload.first().copied().unwrap_or(0));
                }
                ChanCmd::RELAY | ChanCmd::RELAY_EARLY => {}
                _ => continue,
            }
            let Some(b) = cell.body_mut() else { continue };
            let mut hop = None;
            for (i, h) in self.hops.iter_mut().enumerate() {
                if h.decrypt_backward(b).is_some() {
                    hop = Some(i);
                    break;
                }
            }
            let Some(hop) = hop else {
                return Got::Opaque(Box::new(*b));
            };
            let (stream, msg) = RelayMsg::decode(b).expect("relay message");
            let cmd = msg.cmd();
            if cmd == RelayCmd::SENDME || cmd == RelayCmd::DROP {
                continue;
            }
            return Got::Msg {
                hop,
                cmd,
                stream,
                data: msg.encode_body().unwrap(),
            };
        }
    }

    /// The next relay message, which must be `cmd` from the last hop.
    pub async fn expect(&mut self, cmd: RelayCmd) -> Vec<u8> {
        let last = self.hops.len() - 1;
        match self.recv().await {
            Got::Msg {
                hop, cmd: c, data, ..
            } if c == cmd && hop == last => data,
            other => panic!("expected {cmd:?}, got {other:?}"),
        }
    }

    /// Whether the circuit is torn down (DESTROY or channel closed) before
    /// anything else arrives.
    pub async fn expect_destroyed(&mut self) -> u8 {
        match self.recv().await {
            Got::Destroy(r) => r,
            Got::Closed => 0,
            other => panic!("expected DESTROY, got {other:?}"),
        }
    }

    /// A BEGIN_DIR request at the last hop: the raw HTTP answer.
    pub async fn dir_request(&mut self, stream: u16, req: &[u8]) -> Vec<u8> {
        let last = self.hops.len() - 1;
        self.send(last, RelayCmd::BEGIN_DIR, stream, &[]);
        match self.recv().await {
            Got::Msg { cmd, .. } if cmd == RelayCmd::CONNECTED => {}
            other => panic!("BEGIN_DIR: {other:?}"),
        }
        for chunk in req.chunks(CELL_DATA) {
            self.send(last, RelayCmd::DATA, stream, chunk);
        }
        let mut out = Vec::new();
        loop {
            match self.recv().await {
                Got::Msg { cmd, data, .. } if cmd == RelayCmd::DATA => out.extend(data),
                Got::Msg { cmd, .. } if cmd == RelayCmd::END => return out,
                other => panic!("BEGIN_DIR answer: {other:?}"),
            }
        }
    }
}

/// A plaintext relay body.
pub fn body(cmd: RelayCmd, stream: u16, data: &[u8]) -> CellBody {
    let mut b = [0u8; PAYLOAD_LEN];
    relay::write(&mut b, cmd, stream, data, |p| {
        rand::rngs::OsRng.fill_bytes(p)
    })
    .unwrap();
    b
}

/// Largest data in one relay cell.
pub const CELL_DATA: usize = RELAY_DATA_LEN;
