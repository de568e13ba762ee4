//! GETINFO: the keys the client answers, network-status and microdescriptor entries.

use std::sync::atomic::Ordering;

use base64::Engine;

use onionmix_frontend::control::Info;
use onionmix_frontend::control::events::long_name;
use onionmix_frontend::control::syntax::quote;
use onionmix_netdoc::NetDir;

use super::ClientBackend;
use super::conf::OPTIONS;
use crate::control::{bool01, common_info, find_relay, ns_value};

/// GETINFO keys the client answers (for `info/names`).
const INFO_KEYS: &[&str] = &[
    "version",
    "config-file",
    "config/names",
    "info/names",
    "events/names",
    "signal/names",
    "features/names",
    "process/pid",
    "process/uid",
    "process/user",
    "process/descriptor-limit",
    "ip-to-country/*",
    "status/version/current",
    "address-mappings/all",
    "address-mappings/config",
    "address-mappings/cache",
    "address-mappings/control",
    "uptime",
    "status/bootstrap-phase",
    "status/circuit-established",
    "status/enough-dir-info",
    "circuit-status",
    "stream-status",
    "orconn-status",
    "entry-guards",
    "net/listeners/socks",
    "net/listeners/control",
    "net/listeners/or",
    "net/listeners/dir",
    "net/listeners/dns",
    "net/listeners/trans",
    "net/listeners/natd",
    "net/listeners/httptunnel",
    "net/listeners/extor",
    "net/listeners/metrics",
    "ns/id/*",
    "ns/name/*",
    "ns/all",
    "md/id/*",
    "md/name/*",
    "md/all",
    "dormant",
    "traffic/read",
    "traffic/written",
    "address",
    "fingerprint",
    "accounting/enabled",
    "onions/current",
    "onions/detached",
];

fn md_text(nd: &NetDir, id: &[u8; 20]) -> Option<String> {
    let b64 = base64::engine::general_purpose::STANDARD_NO_PAD;
    let r = nd.relay_by_rsa_id(id)?;
    let mut s = format!(
        "onion-key\nntor-onion-key {}\n",
        b64.encode(r.ntor_onion_key)
    );
    if let Some(ed) = r.ed_id {
        s.push_str(&format!("id ed25519 {}\n", b64.encode(ed)));
    }
    Some(s)
}

impl ClientBackend {
    /// The answer to `GETINFO key`.
    pub(super) fn info_value(&mut self, key: &str) -> Info {
        let hub = &self.ctx.hub;
        if let Some(i) = common_info(key, self.cfg().config_path.as_deref(), OPTIONS, INFO_KEYS) {
            return i;
        }
        let v = match key {
            "uptime" => hub.started.elapsed().as_secs().to_string(),
            "status/bootstrap-phase" => hub.bootstrap_phase(),
            "status/circuit-established" => bool01(hub.circuit_established.load(Ordering::Relaxed)),
            "status/enough-dir-info" => bool01(hub.enough_dir_info.load(Ordering::Relaxed)),
            "circuit-status" => hub.circuit_status(),
            "stream-status" => hub.stream_status_text(),
            "orconn-status" => hub.orconn_status().0,
            "entry-guards" => {
                let nd = self.dir().netdir();
                self.dir()
                    .primary_guards()
                    .iter()
                    .map(|id| {
                        let nick = nd
                            .as_ref()
                            .and_then(|n| n.listed_by_rsa_id(id))
                            .map(|r| r.nickname.clone())
                            .unwrap_or_default();
                        // Every entry ends its line, as in tor (so the
                        // answer is a data block even for one guard).
                        format!("{} up\n", long_name(id, &nick))
                    })
                    .collect::<String>()
            }
            "net/listeners/socks" => self
                .ctx
                .socks
                .addr()
                .map(|a| quote(a.to_string().as_bytes()))
                .unwrap_or_default(),
            "net/listeners/control" => self
                .ctx
                .listeners()
                .iter()
                .map(|l| quote(l.as_bytes()))
                .collect::<Vec<_>>()
                .join(" "),
            // Listeners a client does not have (tor: an empty list).
            "net/listeners/or"
            | "net/listeners/dir"
            | "net/listeners/dns"
            | "net/listeners/trans"
            | "net/listeners/natd"
            | "net/listeners/httptunnel"
            | "net/listeners/extor" => String::new(),
            // The configured address (a port of 0 is chosen at start and
            // not known here: then nothing).
            "net/listeners/metrics" => self
                .cfg()
                .metrics_port
                .filter(|a| a.port() != 0)
                .map(|a| quote(a.to_string().as_bytes()))
                .unwrap_or_default(),
            // No MapAddress, no DNS cache for applications: no mappings.
            "address-mappings/all"
            | "address-mappings/config"
            | "address-mappings/cache"
            | "address-mappings/control" => String::new(),
            // onionmix is not a tor version the consensus can recommend.
            "status/version/current" => "unknown".into(),
            "dormant" => bool01(self.ctx.circmgr.is_dormant()),
            "onions/current" => self.ctx.onions.list(Some(self.sub_id)),
            "onions/detached" => self.ctx.onions.list(None),
            "traffic/read" => hub.read.load(Ordering::Relaxed).to_string(),
            "traffic/written" => hub.written.load(Ordering::Relaxed).to_string(),
            "address" | "address/v4" | "address/v6" => return Info::Fail("Address unknown".into()),
            "fingerprint" => return Info::Fail("Not running in server mode".into()),
            "accounting/enabled" => "0".into(),
            k if k == "ns/all" || k.starts_with("ns/id/") || k.starts_with("ns/name/") => {
                return ns_value(self.dir().netdir().as_deref(), k);
            }
            "md/all" => {
                // As tor: every microdescriptor we hold, one after the
                // other (stem's `get_microdescriptors`); empty before a
                // consensus.
                match self.dir().netdir() {
                    Some(nd) => nd
                        .relays()
                        .filter_map(|r| md_text(&nd, &r.rsa_id))
                        .collect::<String>(),
                    None => String::new(),
                }
            }
            k if k.starts_with("md/id/") || k.starts_with("md/name/") => {
                let nd = match self.netdir() {
                    Ok(n) => n,
                    Err(e) => return e,
                };
                let spec = k
                    .trim_start_matches("md/id/")
                    .trim_start_matches("md/name/");
                match find_relay(&nd, spec).and_then(|(id, _)| md_text(&nd, &id)) {
                    Some(t) => t,
                    None => return Info::Unknown,
                }
            }
            _ => return Info::Unknown,
        };
        Info::Value(v)
    }
}
