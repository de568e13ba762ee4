//! Circuit creation on a relay channel: the per-channel CREATE rate and
//! circuit limits, CREATE_FAST and CREATE2 (ntor, ntor-v3) handshakes, and
//! installing the new circuit as an origin entry.

use super::*;

impl Reactor {
    pub(super) fn refill_tokens(&mut self) {
        let rate = self.ctx.cfg.create_rate_per_channel as f64;
        let now = Instant::now();
        let dt = now.duration_since(self.last_refill).as_secs_f64();
        self.last_refill = now;
        self.create_tokens = (self.create_tokens + dt * rate).min((rate * 2.0).max(1.0));
    }

    /// DoS limits for a new circuit: per-channel count, creation rate,
    /// global count. False (and DESTROY sent) when over a limit.
    pub(super) fn admit_circuit(&mut self, id: u32) -> bool {
        if id == 0 || self.origins.contains_key(&id) || self.nexts.contains_key(&id) {
            self.send_destroy(id, destroy_reason::PROTOCOL);
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
        self.install_origin(id, Cmd::CREATED_FAST, &reply, &ckeys);
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
        let res = match c.htype {
            HTYPE_NTOR => onionmix_crypto::ntor_server(
                &self.ctx.rsa_id,
                &keys,
                &c.hdata,
                &mut rand::rngs::OsRng,
            )
            .map(|(r, k)| (r.to_vec(), k)),
            HTYPE_NTOR_V3 => {
                // No extensions are accepted yet (no congestion control, so
                // no CC_RESPONSE: the client keeps using SENDME windows).
                let mut answer =
                    |_client_msg: &[u8]| Some(onionmix_crypto::ntor_v3::encode_extensions(&[]));
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
        self.install_origin(id, Cmd::CREATED2, &created.encode(), &ckeys);
    }

    /// Answer a CREATE*/CREATE_FAST with `cmd`/`payload` and start the
    /// circuit with `ckeys`.
    pub(super) fn install_origin(
        &mut self,
        id: u32,
        cmd: Cmd,
        payload: &[u8],
        ckeys: &onionmix_crypto::CircuitKeys,
    ) {
        let shared = Arc::new(Mutex::new(Shared {
            layer: Tor1Layer::new(ckeys),
            pkg: PackageWindow::circuit(),
        }));
        if let Ok(cell) = RawCell::fixed(id, cmd, payload)
            && let Some(b) = cell.body()
        {
            let b = *b;
            self.me.codec.encode_fixed(id, cmd, &b, &mut self.out);
        }
        self.origins.insert(
            id,
            Origin {
                circ: RelayCircuit::new(Box::new(SharedFwd(shared.clone()))),
                shared,
                next: None,
                streams: HashMap::new(),
                circ_credits: Arc::new(Semaphore::new(CIRC_WINDOW_START as usize)),
                hs: hs::HsState::new(ckeys.kh),
            },
        );
        self.circuit_added();
        self.ctx
            .stats
            .circuits_created
            .fetch_add(1, Ordering::Relaxed);
    }
}
