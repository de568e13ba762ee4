//! The client side of the control commands: signals, circuit and stream
//! commands here; GETINFO keys in `info`, the options GETCONF/SETCONF know
//! in `conf`.

mod conf;
pub mod hsdesc;
mod info;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tracing::{debug, info};

use onionmix_frontend::control::events::EventMask;
use onionmix_frontend::control::{
    AddOnion, AddedOnion, AuthAdded, Backend, ClientAuthCred, CmdError, ConfError, HsFetch, HsPost,
    Info, Signal,
};
use onionmix_netdoc::{NetDir, RelayId};

use super::ControlContext;
use crate::client::circmgr::Purpose;
use crate::client::circuit::{self, HopTarget};
use crate::client::config::ClientConfig;
use crate::client::dir::DirMgr;
use crate::control::find_relay;

use crate::control::version;

/// One control connection's view of the client.
pub struct ClientBackend {
    /// Shared client state.
    pub ctx: Arc<ControlContext>,
    /// This connection's event subscription.
    pub sub_id: u64,
    /// Whether this connection sent TAKEOWNERSHIP.
    pub owning: Arc<AtomicBool>,
}

/// The hops a controller names (EXTENDCIRCUIT's path): 552 `No such
/// router` for a relay the consensus does not list, 552 `No descriptor`
/// for one whose microdescriptor we lack, as tor answers.
fn hops_named(dir: &DirMgr, nd: &NetDir, names: &[String]) -> Result<Vec<HopTarget>, CmdError> {
    let params = Arc::new(onionmix_proto::cc::CcParams::from_consensus(nd.params()));
    let mut hops = Vec::new();
    for n in names {
        let (rid, has_md) = find_relay(nd, n)
            .ok_or_else(|| CmdError::new(552, format!("No such router \"{n}\"")))?;
        let r = nd
            .relay(&RelayId(rid))
            .filter(|_| has_md)
            .ok_or_else(|| CmdError::new(552, format!("No descriptor for \"{n}\"")))?;
        hops.push(dir.hop(r, &params));
    }
    Ok(hops)
}

impl ClientBackend {
    /// EXTENDCIRCUIT on a circuit that exists: add the named hops to it
    /// (control-spec §3.10), reported by CIRC EXTENDED / BUILT, or FAILED
    /// when a hop fails (the circuit is closed, as tor does). The circuit
    /// must be built: tor also appends hops to a circuit still building,
    /// which we answer with 551.
    fn extend_existing(&self, id: &str, path: Option<Vec<String>>) -> Result<u64, CmdError> {
        let n = self.circ_id(id)?;
        let names = path.ok_or_else(|| CmdError::new(512, "syntax error: path required."))?;
        let nd = self
            .dir()
            .netdir()
            .ok_or_else(|| CmdError::new(551, "Couldn't send onion skin"))?;
        let hops = hops_named(self.dir(), &nd, &names)?;
        if hops.is_empty() {
            return Err(CmdError::new(512, "No router names provided"));
        }
        let hub = self.ctx.hub.clone();
        let (built, c) = hub
            .with_circ(n, |e| {
                let c = e
                    .strong
                    .clone()
                    .or_else(|| e.weak.as_ref().and_then(|w| w.upgrade()));
                (e.status.status == "BUILT", c)
            })
            .ok_or_else(|| CmdError::new(552, format!("Unknown circuit \"{id}\"")))?;
        if !built {
            return Err(CmdError::new(
                551,
                "Extending a circuit that is still being built is not supported",
            ));
        }
        // A built circuit we cannot reach (an onion-service circuit, or
        // one closing) is not extended.
        let c = c
            .filter(|c| !c.is_closed())
            .filter(|_| hub.circ_extending(n))
            .ok_or_else(|| CmdError::new(551, "Couldn't send onion skin"))?;
        let timeout = self.ctx.build_timeout;
        tokio::spawn(async move {
            if let Err(e) = circuit::extend_shared(&c, hops, timeout).await {
                info!("a controller's extension of circuit {n} failed: {e}");
            }
        });
        Ok(n)
    }

    fn cfg(&self) -> &ClientConfig {
        &self.ctx.cfg
    }
    fn dir(&self) -> &DirMgr {
        &self.ctx.dir
    }

    fn netdir(&self) -> Result<Arc<NetDir>, Info> {
        self.dir()
            .netdir()
            .ok_or(Info::Fail("Not enough directory information".into()))
    }

    fn newnym(&self) {
        let hub = self.ctx.hub.clone();
        let cm = self.ctx.circmgr.clone();
        let hs = self.ctx.hs.clone();
        let apply = move || {
            hub.newnym_apply();
            let old_exits = hub
                .newnym_avoid
                .lock()
                .map(|g| g.clone())
                .unwrap_or_default();
            cm.newnym(&old_exits);
            if let Some(hs) = &hs {
                hs.purge_state();
            }
        };
        match self.ctx.hub.newnym_due() {
            Some(d) if d.is_zero() => apply(),
            Some(d) => {
                let secs = d.as_secs_f64().ceil() as u64;
                self.ctx.hub.log(
                    "NOTICE",
                    &format!("Rate limiting NEWNYM request: delaying by {secs} second(s)"),
                );
                tokio::spawn(async move {
                    tokio::time::sleep(d).await;
                    apply();
                });
            }
            None => {}
        }
    }

    fn set_disable_network(&self, off: bool) {
        let was = self.ctx.hub.disable_network.swap(off, Ordering::Relaxed);
        if off && !was {
            // As tor: no new connections or circuits; what we hold is let
            // go, so streams after re-enabling get fresh circuits.
            self.ctx.hub.epoch.fetch_add(1, Ordering::Relaxed);
            self.ctx.circmgr.clear();
            info!("DisableNetwork is set: not building circuits");
        }
    }

    fn circ_id(&self, id: &str) -> Result<u64, CmdError> {
        id.parse::<u64>()
            .ok()
            .filter(|n| self.ctx.hub.with_circ(*n, |_| ()).is_some())
            .ok_or_else(|| CmdError::new(552, format!("Unknown circuit \"{id}\"")))
    }
}

impl Backend for ClientBackend {
    fn version(&self) -> String {
        version()
    }

    fn getinfo(&mut self, key: &str) -> Info {
        self.info_value(key)
    }

    fn getconf(&mut self, key: &str) -> Option<Vec<(String, Option<String>)>> {
        self.conf_values(key)
    }

    fn setconf(
        &mut self,
        changes: &[(String, Option<String>)],
        reset: bool,
    ) -> Result<(), ConfError> {
        self.apply_setconf(changes, reset)
    }

    fn signal(&mut self, sig: Signal) {
        let hub = &self.ctx.hub;
        let name = match sig {
            Signal::Newnym => {
                self.newnym();
                return;
            }
            Signal::Reload => {
                // Tor's notice, word for word (controllers watch for it).
                info!(
                    "Received reload signal (hup). Reloading config and resetting internal state."
                );
                match &self.cfg().config_path {
                    Some(p) => match ClientConfig::load(p) {
                        Ok(_) => {
                            debug!("configuration checked; options that need a restart are kept")
                        }
                        Err(e) => {
                            hub.log("WARN", &format!("Reloading config failed: {e}"));
                        }
                    },
                    None => debug!("RELOAD: no configuration file"),
                }
                "RELOAD"
            }
            Signal::Shutdown | Signal::Halt => {
                info!("shutting down at the controller's request");
                self.ctx.owner.request_shutdown();
                return;
            }
            Signal::Dump => "DUMP",
            Signal::Debug => "DEBUG",
            Signal::Heartbeat => {
                let (built, pending) = hub.circuit_counts();
                info!(
                    "Heartbeat: {built} circuits open, {pending} building, {} streams",
                    hub.open_streams()
                );
                "HEARTBEAT"
            }
            Signal::ClearDnsCache => "CLEARDNSCACHE",
            Signal::Active => {
                if self.ctx.circmgr.is_dormant() {
                    info!("Exiting dormant mode because of controller request.");
                }
                self.ctx.circmgr.set_dormant(false);
                "ACTIVE"
            }
            Signal::Dormant => {
                info!("Going dormant because of controller request.");
                self.ctx.circmgr.set_dormant(true);
                "DORMANT"
            }
        };
        hub.emit("SIGNAL", || {
            onionmix_frontend::control::reply::event(&format!("SIGNAL {name}"))
        });
    }

    fn set_events(&mut self, mask: EventMask) {
        self.ctx.hub.set_mask(self.sub_id, mask);
    }

    fn extend_circuit(
        &mut self,
        id: &str,
        path: Option<Vec<String>>,
        purpose: Option<&str>,
    ) -> Result<u64, CmdError> {
        let controller = match purpose.map(str::to_ascii_lowercase).as_deref() {
            None | Some("general") => false,
            Some("controller") => true,
            Some(p) => return Err(CmdError::new(552, format!("Unknown purpose \"{p}\""))),
        };
        if id != "0" {
            return self.extend_existing(id, path);
        }
        if self.ctx.hub.disable_network.load(Ordering::Relaxed) {
            return Err(CmdError::new(551, "Couldn't start circuit"));
        }
        let nd = self
            .dir()
            .netdir()
            .ok_or_else(|| CmdError::new(551, "Couldn't start circuit"))?;
        let hops: Vec<HopTarget> = match path {
            Some(names) => hops_named(self.dir(), &nd, &names)?,
            None => self
                .dir()
                .pick_path(Purpose::Exit(None), &HashSet::new())
                .map_err(|_| CmdError::new(551, "Couldn't start circuit"))?,
        };
        let first = hops
            .first()
            .cloned()
            .ok_or_else(|| CmdError::new(512, "No router names provided"))?;
        let hub = self.ctx.hub.clone();
        let cid = hub.circ_launched(&hops, controller);
        let chanmgr = self.ctx.chanmgr.clone();
        let timeout = self.ctx.build_timeout;
        tokio::spawn(async move {
            let chan = match tokio::time::timeout(timeout, chanmgr.get(&first)).await {
                Ok(Ok(c)) => c,
                _ => {
                    hub.circ_failed(cid, "CONNECTFAILED");
                    return;
                }
            };
            if let Ok(c) = circuit::build_launched(chan, hops, timeout, cid).await {
                hub.circ_handle(&Arc::new(c), true);
            }
        });
        Ok(cid)
    }

    fn circuit_exists(&mut self, id: &str) -> bool {
        self.circ_id(id).is_ok()
    }

    fn set_circuit_purpose(&mut self, id: &str, purpose: &str) -> Result<(), CmdError> {
        let n = self.circ_id(id)?;
        let p = match purpose.to_ascii_lowercase().as_str() {
            "general" => "GENERAL",
            "controller" => "CONTROLLER",
            _ => return Err(CmdError::new(552, format!("Unknown purpose \"{purpose}\""))),
        };
        // As tor: CIRC_MINOR PURPOSE_CHANGED when it changed.
        self.ctx.hub.circ_purpose(n, p, None, None);
        Ok(())
    }

    fn attach_stream(
        &mut self,
        stream: &str,
        circ: &str,
        hop: Option<u32>,
    ) -> Result<(), CmdError> {
        let hub = &self.ctx.hub;
        let unknown = || CmdError::new(552, format!("Unknown stream \"{stream}\""));
        let sid = stream.parse::<u64>().map_err(|_| unknown())?;
        hub.with_stream(sid, |_| ()).ok_or_else(unknown)?;
        if circ == "0" {
            return Err(CmdError::new(
                551,
                "Attaching to circuit 0 (giving the stream back) is not supported",
            ));
        }
        let cid = self.circ_id(circ)?;
        let (c, built, len) = hub
            .with_circ(cid, |e| {
                let c = e
                    .strong
                    .clone()
                    .or_else(|| e.weak.as_ref().and_then(|w| w.upgrade()));
                (c, e.status.status == "BUILT", e.relays.len())
            })
            .ok_or_else(|| CmdError::new(552, format!("Unknown circuit \"{circ}\"")))?;
        let Some(c) = c.filter(|_| built) else {
            return Err(CmdError::new(
                551,
                "Can't attach stream to non-open origin circuit",
            ));
        };
        if len < 2 || hop == Some(1) {
            return Err(CmdError::new(
                551,
                "Can't attach stream to this one-hop circuit.",
            ));
        }
        if hop.is_some_and(|h| usize::try_from(h).ok() != Some(len)) {
            return Err(CmdError::new(
                551,
                "Attaching to a hop other than the last is not supported",
            ));
        }
        let tx = hub
            .with_stream(sid, |e| e.attach.take())
            .flatten()
            .ok_or_else(|| CmdError::new(555, "Connection is not managed by controller."))?;
        tx.send(c).map_err(|_| unknown())
    }

    fn close_stream(&mut self, stream: &str, _reason: u8) -> Result<(), CmdError> {
        let unknown = || CmdError::new(552, format!("Unknown stream \"{stream}\""));
        let sid = stream.parse::<u64>().map_err(|_| unknown())?;
        let tx = self
            .ctx
            .hub
            .with_stream(sid, |e| e.close.take())
            .ok_or_else(unknown)?;
        if let Some(tx) = tx {
            let _ = tx.send(_reason);
        }
        Ok(())
    }

    fn close_circuit(&mut self, circ: &str, if_unused: bool) -> Result<(), CmdError> {
        let n = self.circ_id(circ)?;
        let hub = &self.ctx.hub;
        if if_unused && hub.with_circ(n, |e| e.streams > 0).unwrap_or(false) {
            return Ok(());
        }
        if let Some(mut e) = hub.take_circ(n) {
            if let Some((chan, id, credits)) = e.chan.take() {
                credits.close();
                chan.try_send(crate::reactor::ChanCommand::Destroy { circ_id: id });
            }
            e.status.status = "CLOSED";
            e.status.reason = Some("REQUESTED");
            let line = e.status.line();
            hub.emit("CIRC", || {
                onionmix_frontend::control::reply::event(&format!("CIRC {line}"))
            });
        }
        Ok(())
    }

    fn add_onion(&mut self, req: &AddOnion) -> Result<AddedOnion, CmdError> {
        self.add_onion_impl(req)
    }

    fn del_onion(&mut self, service_id: &str) -> Result<(), CmdError> {
        self.del_onion_impl(service_id)
    }

    fn client_auth_add(&mut self, cred: ClientAuthCred) -> Result<AuthAdded, CmdError> {
        self.client_auth_add_impl(cred)
    }

    fn client_auth_remove(&mut self, address: &str) -> Result<bool, CmdError> {
        self.client_auth_remove_impl(address)
    }

    fn client_auth_view(&mut self) -> Vec<ClientAuthCred> {
        self.client_auth_view_impl()
    }

    fn set_owner(&mut self, owning: bool) {
        self.owning.store(owning, Ordering::Relaxed);
    }

    fn hs_server_known(&mut self, server: &str) -> bool {
        self.hs_server_known_impl(server)
    }

    fn hs_fetch(&mut self, req: &HsFetch) -> Result<(), CmdError> {
        self.hs_fetch_impl(req)
    }

    fn hs_post(&mut self, req: HsPost) -> Result<(), CmdError> {
        self.hs_post_impl(req)
    }
}
