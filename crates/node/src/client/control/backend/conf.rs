//! GETCONF/SETCONF: the options the client knows, their values and how they change.

use std::sync::atomic::Ordering;

use onionmix_frontend::control::ConfError;

use super::ClientBackend;
use crate::control::{bool01, conf_lines, line_list, option_name};

/// Options GETCONF/SETCONF know: (canonical name, type for config/names).
pub(super) const OPTIONS: &[(&str, &str)] = &[
    ("SocksPort", "LineList"),
    ("ControlPort", "LineList"),
    ("ControlSocket", "LineList"),
    ("MetricsPort", "LineList"),
    ("DataDirectory", "Filename"),
    ("DisableNetwork", "Boolean"),
    ("__LeaveStreamsUnattached", "Boolean"),
    ("__OwningControllerProcess", "String"),
    ("CookieAuthentication", "Boolean"),
    ("CookieAuthFile", "Filename"),
    ("HashedControlPassword", "LineList"),
    ("MaxCircuitDirtiness", "TimeInterval"),
    ("CircuitBuildTimeout", "TimeInterval"),
    ("EntryNodes", "RouterList"),
    ("MiddleNodes", "RouterList"),
    ("ExitNodes", "RouterList"),
    ("StrictNodes", "Boolean"),
    ("TestingTorNetwork", "Boolean"),
    ("PathsNeededToBuildCircuits", "Float"),
    ("UseMicrodescriptors", "Boolean"),
    ("ClientOnly", "Boolean"),
    ("ORPort", "LineList"),
    ("SafeSocks", "Boolean"),
    ("DormantClientTimeout", "TimeInterval"),
    ("DormantTimeoutEnabled", "Boolean"),
    ("DormantTimeoutDisabledByIdleStreams", "Boolean"),
];

/// A SocksPort value: `PORT` (on 127.0.0.1) or `ADDRESS:PORT`; no flags.
fn parse_socks_port(v: &str) -> Result<std::net::SocketAddr, ConfError> {
    if let Ok(p) = v.parse::<u16>() {
        return Ok(std::net::SocketAddr::from(([127, 0, 0, 1], p)));
    }
    v.parse()
        .map_err(|_| ConfError::Parse("Invalid SocksPort configuration".into()))
}

fn parse_bool(key: &str, v: Option<&str>) -> Result<bool, ConfError> {
    match v {
        None | Some("0") => Ok(false),
        Some("1") => Ok(true),
        Some(x) => Err(ConfError::Parse(format!(
            "Could not parse {key}: Unrecognized value {x}. Allowed values are 0 and 1."
        ))),
    }
}

impl ClientBackend {
    fn conf_value(&self, name: &str) -> Vec<Option<String>> {
        let c = self.cfg();
        let hub = &self.ctx.hub;
        let join = |l: &[String]| (!l.is_empty()).then(|| l.join(","));
        match name {
            "SocksPort" => vec![Some(
                self.ctx
                    .socks
                    .addr()
                    .map(|a| a.to_string())
                    .unwrap_or_else(|| "0".into()),
            )],
            "ControlPort" => vec![c.control_port.map(|a| a.to_string())],
            "ControlSocket" => vec![c.control_socket.as_ref().map(|p| p.display().to_string())],
            "MetricsPort" => vec![c.metrics_port.map(|a| a.to_string())],
            "DataDirectory" => vec![Some(c.data_dir.display().to_string())],
            "DisableNetwork" => vec![Some(bool01(hub.disable_network.load(Ordering::Relaxed)))],
            "__LeaveStreamsUnattached" => {
                vec![Some(bool01(hub.leave_unattached.load(Ordering::Relaxed)))]
            }
            "__OwningControllerProcess" => vec![self.ctx.owner.owning_pid().map(|p| p.to_string())],
            "CookieAuthentication" => vec![Some(bool01(self.ctx.auth.cookie.is_some()))],
            "CookieAuthFile" => vec![self.ctx.auth.cookie_path.clone()],
            "HashedControlPassword" => line_list(&c.hashed_control_password),
            "MaxCircuitDirtiness" => vec![Some(c.max_circuit_dirtiness_secs.to_string())],
            "CircuitBuildTimeout" => vec![Some(c.circuit_build_timeout_secs.to_string())],
            "EntryNodes" => vec![join(&c.entry_nodes)],
            "MiddleNodes" => vec![join(&c.middle_nodes)],
            "ExitNodes" => vec![join(&c.exit_nodes)],
            "StrictNodes" => vec![Some("1".into())],
            "TestingTorNetwork" => vec![Some(bool01(c.testing_network))],
            "PathsNeededToBuildCircuits" => {
                vec![Some(c.paths_needed_to_build_circuits.to_string())]
            }
            "UseMicrodescriptors" | "ClientOnly" => vec![Some("1".into())],
            "SafeSocks" => vec![Some("0".into())],
            "DormantClientTimeout" => vec![Some(c.dormant_client_timeout_secs.to_string())],
            "DormantTimeoutEnabled" => vec![Some(bool01(c.dormant_timeout_enabled))],
            "DormantTimeoutDisabledByIdleStreams" => {
                vec![Some(bool01(c.dormant_timeout_disabled_by_idle_streams))]
            }
            _ => vec![None],
        }
    }

    /// The values of `GETCONF key` (None: not an option we know).
    pub(super) fn conf_values(&mut self, key: &str) -> Option<Vec<(String, Option<String>)>> {
        let name = option_name(OPTIONS, key)?;
        Some(conf_lines(name, self.conf_value(name)))
    }

    /// `SETCONF`/`RESETCONF`: checked as a whole, then applied.
    pub(super) fn apply_setconf(
        &mut self,
        changes: &[(String, Option<String>)],
        reset: bool,
    ) -> Result<(), ConfError> {
        // Check everything first: SETCONF is all or nothing.
        let mut plan = Vec::new();
        for (k, v) in changes {
            let Some(name) = option_name(OPTIONS, k) else {
                return Err(ConfError::Unknown(k.clone()));
            };
            let v = if reset {
                v.clone().filter(|s| !s.is_empty())
            } else {
                v.clone()
            };
            match name {
                "DisableNetwork" | "__LeaveStreamsUnattached" => {
                    let b = match (&v, reset) {
                        (None, true) if name == "__LeaveStreamsUnattached" => {
                            self.cfg().leave_streams_unattached
                        }
                        _ => parse_bool(name, v.as_deref())?,
                    };
                    plan.push((name, Some(bool01(b))));
                }
                "SocksPort" => {
                    let addr = match (v.as_deref(), reset) {
                        (None, true) => Some(self.cfg().socks_listen),
                        (None, false) | (Some("0"), _) => None,
                        (Some(x), _) => Some(parse_socks_port(x)?),
                    };
                    if addr != self.ctx.socks.addr() {
                        plan.push((
                            name,
                            Some(addr.map(|a| a.to_string()).unwrap_or_else(|| "0".into())),
                        ));
                    }
                }
                "__OwningControllerProcess" => {
                    if let Some(p) = &v
                        && p.parse::<u32>().is_err()
                    {
                        return Err(ConfError::Parse(format!(
                            "Could not parse __OwningControllerProcess: {p}"
                        )));
                    }
                    plan.push((name, v));
                }
                _ => {
                    let current = self.conf_value(name);
                    if current.len() == 1 && current.first().cloned().flatten() == v {
                        continue;
                    }
                    return Err(ConfError::Setting(format!(
                        "{name} cannot be changed on a running onionmix client"
                    )));
                }
            }
        }
        // The one change that can still fail goes first.
        plan.sort_by_key(|(n, _)| *n != "SocksPort");
        for (name, v) in plan {
            match name {
                "DisableNetwork" => self.set_disable_network(v.as_deref() == Some("1")),
                "__LeaveStreamsUnattached" => {
                    self.ctx
                        .hub
                        .leave_unattached
                        .store(v.as_deref() == Some("1"), Ordering::Relaxed);
                }
                "__OwningControllerProcess" => self
                    .ctx
                    .owner
                    .set_owning_pid(v.and_then(|p| p.parse().ok())),
                "SocksPort" => {
                    let addr = v.and_then(|a| a.parse().ok());
                    if let Err(e) = self.ctx.socks.rebind(addr) {
                        return Err(ConfError::Setting(e));
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }
}
