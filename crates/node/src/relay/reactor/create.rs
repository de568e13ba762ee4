//! Circuit creation on a relay channel: the per-channel CREATE rate and
//! circuit limits, CREATE_FAST and CREATE2 (ntor, ntor-v3) handshakes, and
//! installing the new circuit as an origin entry.

use super::*;
use onionmix_proto::cc::negotiate;

impl Reactor {
    pub(super) fn refill_tokens(&mut self) {
        let rate = self.ctx.cfg.create_rate_per_channel as f64;
        let now = Instant::now();
        let dt = now.duration_since(self.last_refill).as_secs_f64();
        self.last_refill = now;
        self.create_tokens = (self.create_tokens + dt * rate).min((rate * 2.0).max(1.0));
    }

    /// A client channel's address (IPv6 by /64) and how many connections
    /// it has open; None for relays and known addresses.
    pub(super) fn client_addr(&self) -> Option<(std::net::IpAddr, usize)> {
        if self.me.peer.is_some() {
            return None;
        }
        self._permit.as_ref()?.unknown_addr()
    }

    /// DoS limits for a new circuit: the client address's DoS marking,
    /// per-channel count, creation rate, global count. False (and DESTROY
    /// sent) when over a limit.
    pub(super) fn admit_circuit(&mut self, id: u32) -> bool {
        // The peer's IDs have the high bit of its side of the link
        // (tor-spec 5.1.1: set by the initiator, clear for the responder);
        // tor closes a circuit whose ID has the wrong one.
        let peers_bit = !self.initiated;
        if id == 0
            || (id & 0x8000_0000 != 0) != peers_bit
            || self.origins.contains_key(&id)
            || self.nexts.contains_key(&id)
        {
            self.send_destroy(id, destroy_reason::PROTOCOL);
            return false;
        }
        // Circuit-creation DoS defence (dos-spec): clients only, by the
        // address they connect from.
        if self.me.peer.is_none()
            && let Some((addr, conns)) = self.client_addr()
            && self.ctx.dos_on_create(addr, conns) == onionmix_proto::dos_cc::Verdict::Refuse
        {
            let s = &self.ctx.stats;
            s.creates_refused.fetch_add(1, Ordering::Relaxed);
            s.creates_refused_dos.fetch_add(1, Ordering::Relaxed);
            self.send_destroy(id, destroy_reason::RESOURCELIMIT);
            return false;
        }
        self.refill_tokens();
        let per_chan = self.me.n_circuits.load(Ordering::Relaxed);
        let global = self.ctx.stats.circuits.load(Ordering::Relaxed);
        if per_chan >= self.ctx.cfg.max_circuits_per_channel
            || global >= self.ctx.cfg.max_circuits
            || self.create_tokens < 1.0
        {
            self.ctx
                .stats
                .creates_refused
                .fetch_add(1, Ordering::Relaxed);
            self.send_destroy(id, destroy_reason::RESOURCELIMIT);
            return false;
        }
        self.create_tokens -= 1.0;
        true
    }

    /// CREATE_FAST (tor-spec 5.1.1): tor clients use it for one-hop
    /// directory circuits to relays whose onion key they do not know yet
    /// (e.g. fetching microdescriptors from a directory guard).
    pub(super) fn handle_create_fast(&mut self, id: u32, payload: &[u8]) {
        if !self.admit_circuit(id) {
            return;
        }
        let Some(x) = payload.get(..20).and_then(|x| <[u8; 20]>::try_from(x).ok()) else {
            self.send_destroy(id, destroy_reason::PROTOCOL);
            return;
        };
        let mut y = [0u8; 20];
        rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut y);
        let ckeys = onionmix_crypto::CircuitKeys::from_create_fast(&x, &y);
        let mut reply = Vec::with_capacity(40);
        reply.extend_from_slice(&y);
        reply.extend_from_slice(&ckeys.kh);
        self.install_origin(id, Cmd::CREATED_FAST, &reply, &ckeys, None);
    }

    pub(super) fn handle_create2(&mut self, id: u32, payload: &[u8]) {
        if !self.admit_circuit(id) {
            return;
        }
        let Ok(c) = Create2::parse(payload) else {
            self.send_destroy(id, destroy_reason::PROTOCOL);
            return;
        };
        let keys = self.ctx.ntor_keys();
        let params = self.ctx.cc_params();
        // Set when the client asked for congestion control and we agreed.
        let mut cc: Option<u8> = None;
        let res = match c.htype {
            HTYPE_NTOR => onionmix_crypto::ntor_server(
                &self.ctx.rsa_id,
                &keys,
                &c.hdata,
                &mut rand::rngs::OsRng,
            )
            .map(|(r, k)| (r.to_vec(), k)),
            HTYPE_NTOR_V3 => {
                // The client's message is an extension list (an unparsable
                // one fails the handshake, as in tor). We answer a
                // congestion-control request with our consensus view of
                // `cc_sendme_inc` when the consensus enables `cc_alg`.
                let mut answer = |client_msg: &[u8]| {
                    let exts = onionmix_crypto::ntor_v3::parse_extensions(client_msg).ok()?;
                    let asked =
                        negotiate::client_requested(exts.iter().map(|e| (e.ext_type, &e.data[..])));
                    cc = (asked && params.enabled()).then_some(params.sendme_inc);
                    let reply: Vec<onionmix_crypto::ntor_v3::Ntor3Extension> =
                        negotiate::exit_extensions(cc)
                            .into_iter()
                            .map(
                                |(ext_type, data)| onionmix_crypto::ntor_v3::Ntor3Extension {
                                    ext_type,
                                    data,
                                },
                            )
                            .collect();
                    Some(onionmix_crypto::ntor_v3::encode_extensions(&reply))
                };
                onionmix_crypto::ntor_v3::ntor3_server(
                    &self.ctx.ed_id,
                    &keys,
                    &c.hdata,
                    onionmix_crypto::ntor_v3::NTOR3_CIRC_VERIFICATION,
                    &mut answer,
                    &mut rand::rngs::OsRng,
                )
                .map(|(r, ks)| (r, ks.circuit_keys()))
            }
            _ => {
                self.send_destroy(id, destroy_reason::PROTOCOL);
                return;
            }
        };
        let (reply, ckeys) = match res {
            Ok(x) => x,
            Err(e) => {
                debug!("CREATE2 handshake failed: {e}");
                self.send_destroy(id, destroy_reason::PROTOCOL);
                return;
            }
        };
        let created = Created2 { hdata: reply };
        self.install_origin(id, Cmd::CREATED2, &created.encode(), &ckeys, cc);
    }

    /// Answer a CREATE*/CREATE_FAST with `cmd`/`payload` and start the
    /// circuit with `ckeys`; `cc` is the SENDME increment when congestion
    /// control was negotiated.
    pub(super) fn install_origin(
        &mut self,
        id: u32,
        cmd: Cmd,
        payload: &[u8],
        ckeys: &onionmix_crypto::CircuitKeys,
        cc: Option<u8>,
    ) {
        let params = self.ctx.cc_params();
        let shared = Arc::new(Mutex::new(Shared {
            layer: Tor1Layer::new(ckeys),
            sender: new_sender(&params, cc),
            closed: false,
        }));
        if cc.is_some() {
            self.ctx.stats.cc_circuits.fetch_add(1, Ordering::Relaxed);
            debug!("circuit with congestion control (sendme_inc {:?})", cc);
        }
        if let Ok(cell) = RawCell::fixed(id, cmd, payload)
            && let Some(b) = cell.body()
        {
            let b = *b;
            self.me.codec.encode_fixed(id, cmd, &b, &mut self.out);
        }
        self.origins.insert(
            id,
            Origin {
                circ: RelayCircuit::new(
                    Box::new(SharedFwd(shared.clone())),
                    cc.map(|inc| (params.clone(), inc)),
                ),
                shared,
                next: None,
                streams: HashMap::new(),
                hs: hs::HsState::new(ckeys.kh),
                window_open: Arc::new(Notify::new()),
                params,
                leg: None,
                outq: CircQueue::default(),
            },
        );
        self.circuit_added();
        self.ctx
            .stats
            .circuits_created
            .fetch_add(1, Ordering::Relaxed);
    }
}
