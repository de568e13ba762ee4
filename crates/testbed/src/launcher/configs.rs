//! Node identities and config files: torrc for stock tor, TOML for onionmix nodes.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

use super::{LaunchError, LaunchOptions, Planned, Progress};
use crate::netinfo::NodeInfo;
use crate::spec::{Implementation, Role, Spec};
use crate::torrc;

/// Generate every planned node's identity keys (stock tor: `tor-gencert`,
/// `--list-fingerprint`; onionmix: its own `--list-fingerprint`).
pub(super) fn generate_identities(
    planned: &mut [Planned],
    spec: &Spec,
    opts: &LaunchOptions,
    p: &Progress,
    sink_addr: &str,
    sink_ports: Option<(u16, u16, u16)>,
) -> Result<(), LaunchError> {
    p.step(
        "keys",
        &format!("generating identities for {} nodes", planned.len()),
    );
    for n in planned.iter_mut() {
        let i = &mut n.info;
        match (i.implementation, n.role) {
            (Implementation::Tor, Role::Authority) => {
                let dp = i.dir_port.unwrap_or(0);
                let v3 = torrc::gencert(&i.data_dir, &format!("{}:{dp}", i.address))
                    .map_err(|e| LaunchError::node(e, i))?;
                i.v3ident = Some(v3.clone());
                n.ed_or_v3 = Some(v3);
                let fp =
                    torrc::list_fingerprint(&opts.tor_bin, &i.data_dir, i.or_port.unwrap_or(0))
                        .map_err(|e| LaunchError::node(e, i))?;
                i.fingerprint = Some(fp);
            }
            (Implementation::Tor, Role::Relay | Role::Exit) => {
                let fp =
                    torrc::list_fingerprint(&opts.tor_bin, &i.data_dir, i.or_port.unwrap_or(0))
                        .map_err(|e| LaunchError::node(e, i))?;
                i.fingerprint = Some(fp);
            }
            (Implementation::Onionmix, Role::Relay | Role::Exit) => {
                write_onionmix_relay_config(
                    i,
                    n.role,
                    &[],
                    sink_dns(sink_addr, sink_ports),
                    &n.extra,
                )
                .map_err(|e| LaunchError::node(e, i))?;
                let out = Command::new(&opts.onionmix_bin)
                    .args(["relay", "--config"])
                    .arg(i.data_dir.join("relay.toml"))
                    .arg("--list-fingerprint")
                    .output()
                    .map_err(|e| LaunchError::node(format!("cannot run onionmix: {e}"), i))?;
                let text = String::from_utf8_lossy(&out.stdout);
                let fp: String = text
                    .split_whitespace()
                    .nth(1)
                    .unwrap_or_default()
                    .to_string();
                if !out.status.success() || fp.len() != 40 {
                    return Err(LaunchError::node(
                        format!(
                            "onionmix relay --list-fingerprint failed: {}{}",
                            text,
                            String::from_utf8_lossy(&out.stderr)
                        ),
                        i,
                    ));
                }
                i.fingerprint = Some(fp);
            }
            (Implementation::Onionmix, Role::Authority) => {
                write_onionmix_authority_config(i, &[], &n.extra, spec.voting_schedule())
                    .map_err(|e| LaunchError::node(e, i))?;
                let out = Command::new(&opts.onionmix_bin)
                    .args(["authority", "--config"])
                    .arg(i.data_dir.join("authority.toml"))
                    .arg("--list-fingerprint")
                    .output()
                    .map_err(|e| LaunchError::node(format!("cannot run onionmix: {e}"), i))?;
                let text = String::from_utf8_lossy(&out.stdout);
                let f: Vec<&str> = text.split_whitespace().collect();
                match f[..] {
                    [_, fp, v3] if out.status.success() && fp.len() == 40 && v3.len() == 40 => {
                        i.fingerprint = Some(fp.to_string());
                        i.v3ident = Some(v3.to_string());
                        n.ed_or_v3 = Some(v3.to_string());
                    }
                    _ => {
                        return Err(LaunchError::node(
                            format!(
                                "onionmix authority --list-fingerprint failed: {}{}",
                                text,
                                String::from_utf8_lossy(&out.stderr)
                            ),
                            i,
                        ));
                    }
                }
            }
            (
                _,
                Role::Client | Role::Mix | Role::Provider | Role::MixClient | Role::OnionService,
            ) => {}
        }
    }
    Ok(())
}

/// Write every planned node's torrc or onionmix config, with the
/// directory authorities' lines and the sink's resolver.
pub(super) fn write_configs(
    planned: &[Planned],
    spec: &Spec,
    dir: &Path,
    p: &Progress,
    sink_addr: &str,
    sink_ports: Option<(u16, u16, u16)>,
) -> Result<(), LaunchError> {
    // Directory authority lines / entries.
    let auths: Vec<&NodeInfo> = planned
        .iter()
        .filter(|n| n.role == Role::Authority)
        .map(|n| &n.info)
        .collect();
    let dirauth_lines: Vec<String> = auths
        .iter()
        .map(|a| torrc::dirauthority_line_of(a))
        .collect();
    let auth_entries: Vec<AuthEntry> = auths
        .iter()
        .map(|a| AuthEntry {
            nickname: a.name.clone(),
            v3ident: a.v3ident.clone().unwrap_or_default(),
            fingerprint: a.fingerprint.clone().unwrap_or_default(),
            dir_addr: format!("{}:{}", a.address, a.dir_port.unwrap_or(0)),
            or_addr: format!("{}:{}", a.address, a.or_port.unwrap_or(0)),
        })
        .collect();

    // Configs.
    p.step("configs", "writing torrc and onionmix configs");
    let resolv = sink_ports.map(|(_, _, dns)| {
        let path = dir.join("resolv.conf");
        let _ = std::fs::write(&path, format!("nameserver {sink_addr}:{dns}\n"));
        path
    });
    let sink_targets = sink_ports.map(|(http, echo, _)| {
        let ip: std::net::IpAddr = sink_addr.parse().unwrap_or([127, 0, 0, 1].into());
        (SocketAddr::new(ip, http), SocketAddr::new(ip, echo))
    });
    for n in planned {
        let i = &n.info;
        match i.implementation {
            Implementation::Tor => {
                // An onion service's own lines first: the spec's lines may
                // add options for it.
                let extra: Vec<String> = match (n.role, sink_targets) {
                    (Role::OnionService, Some((http, echo))) => {
                        let mut l = crate::onion::torrc_lines(&i.data_dir, http, echo);
                        l.extend(n.extra.iter().cloned());
                        l
                    }
                    (Role::Authority, _) => {
                        let mut l = n.extra.clone();
                        if let Some(p) = loopback_params(spec, &n.extra, "ConsensusParams") {
                            l.push(format!("ConsensusParams {p}"));
                        }
                        l
                    }
                    _ => n.extra.clone(),
                };
                let t = torrc::render(&torrc::TorNode {
                    nick: &i.name,
                    role: n.role,
                    data_dir: &i.data_dir,
                    addr: &i.address,
                    or_port: i.or_port,
                    dir_port: i.dir_port,
                    socks_port: i.socks_port,
                    control_port: i.control_port,
                    resolv_conf: resolv.as_deref(),
                    dirauths: &dirauth_lines,
                    extra: &extra,
                    voting: spec.voting_schedule(),
                });
                std::fs::write(i.data_dir.join("torrc"), t)
                    .map_err(|e| LaunchError::node(e.to_string(), i))?;
            }
            Implementation::Onionmix => match n.role {
                Role::Client => write_onionmix_client_config(i, &auth_entries, &n.extra)
                    .map_err(|e| LaunchError::node(e, i))?,
                Role::Relay | Role::Exit => write_onionmix_relay_config(
                    i,
                    n.role,
                    &auth_entries,
                    sink_dns(sink_addr, sink_ports),
                    &n.extra,
                )
                .map_err(|e| LaunchError::node(e, i))?,
                Role::Authority => {
                    let mut extra = n.extra.clone();
                    if let Some(p) = loopback_params(spec, &n.extra, "params") {
                        let (k, v) = p.split_once('=').unwrap_or((&p, ""));
                        // First: a spec line may open a TOML table.
                        extra.insert(0, format!("params = {{ {k} = {v} }}"));
                    }
                    write_onionmix_authority_config(
                        i,
                        &auth_entries,
                        &extra,
                        spec.voting_schedule(),
                    )
                    .map_err(|e| LaunchError::node(e, i))?
                }
                Role::OnionService => {
                    let (http, echo) = sink_targets
                        .ok_or_else(|| LaunchError::node("an onion service needs the sink", i))?;
                    let block = crate::onion::onionmix_block(&i.data_dir, http, echo, &n.extra);
                    write_onionmix_service_config(i, &auth_entries, &block)
                        .map_err(|e| LaunchError::node(e, i))?
                }
                Role::Mix | Role::Provider | Role::MixClient => {}
            },
        }
    }
    Ok(())
}

/// The floor under every client's learned circuit build timeout on a
/// network without link emulation, in ms (consensus parameter
/// `cbtmintimeout`, tor's default 10).
///
/// On loopback a circuit builds in a few milliseconds, so stock tor and
/// the onionmix client learn timeouts of about 25 ms: whatever the
/// machine's scheduler adds, not the network. On a busy machine (CI, a
/// build beside a test) circuits then time out by the dozen, and a stock
/// tor onion service that loses its introduction circuits that way uses
/// up its budget of them (10 per 5 minutes) and publishes nothing for
/// five minutes. Emulated networks keep tor's default: their builds take
/// hundreds of milliseconds of modelled delay, and their comparisons
/// measure what the clients learn.
pub const LOOPBACK_CBT_MIN_MS: u32 = 2000;

/// `cbtmintimeout=<LOOPBACK_CBT_MIN_MS>` for an authority of a network
/// without link emulation, unless the spec gives the authority its own
/// consensus parameters (a line starting with `key`).
fn loopback_params(spec: &Spec, extra: &[String], key: &str) -> Option<String> {
    let own = extra.iter().any(|l| l.trim_start().starts_with(key));
    (spec.emulation.is_none() && !own).then(|| format!("cbtmintimeout={LOOPBACK_CBT_MIN_MS}"))
}

struct AuthEntry {
    nickname: String,
    v3ident: String,
    fingerprint: String,
    dir_addr: String,
    or_addr: String,
}

fn auth_toml(auths: &[AuthEntry]) -> String {
    let mut s = String::new();
    for a in auths {
        s.push_str(&format!(
            "\n[[authority]]\nnickname = {:?}\nv3ident = {:?}\nfingerprint = {:?}\ndir_addr = {:?}\nor_addr = {:?}\n",
            a.nickname, a.v3ident, a.fingerprint, a.dir_addr, a.or_addr
        ));
    }
    s
}

fn write_onionmix_authority_config(
    i: &NodeInfo,
    auths: &[AuthEntry],
    extra: &[String],
    (interval, vote, dist): (u64, u64, u64),
) -> Result<(), String> {
    // The spec's voting schedule (default tor's testing one: 20 s
    // interval, 4 s delays).
    let mut s = format!(
        "data_dir = {:?}\nnickname = {:?}\nor_listen = \"{}:{}\"\ndir_listen = \"{}:{}\"\n\
         contact = \"onionmix-testnet@example.invalid\"\ntesting_network = true\n\
         voting_interval_secs = {interval}\nvote_delay_secs = {vote}\ndist_delay_secs = {dist}\n\
         reachability_interval_secs = 10\n",
        i.data_dir.display().to_string(),
        i.name,
        i.address,
        i.or_port.unwrap_or(0),
        i.address,
        i.dir_port.unwrap_or(0)
    );
    s.push_str(&control_toml(i));
    for l in extra {
        s.push_str(l);
        s.push('\n');
    }
    s.push_str(&auth_toml(auths));
    std::fs::write(i.data_dir.join("authority.toml"), s).map_err(|e| e.to_string())
}

fn write_onionmix_client_config(
    i: &NodeInfo,
    auths: &[AuthEntry],
    extra: &[String],
) -> Result<(), String> {
    let mut s = format!(
        "data_dir = {:?}\nsocks_listen = \"{}:{}\"\ntesting_network = true\npaths_needed_to_build_circuits = 0.67\n",
        i.data_dir.display().to_string(),
        i.address,
        i.socks_port.unwrap_or(0)
    );
    s.push_str(&control_toml(i));
    if !i.address.starts_with("127.") {
        // Emulated networks: the SOCKS port is on the node's own address
        // in its namespace, reached from the host endpoint.
        s.push_str("allow_public_socks = true\n");
    }
    for l in extra {
        s.push_str(l);
        s.push('\n');
    }
    s.push_str(&auth_toml(auths));
    std::fs::write(i.data_dir.join("client.toml"), s).map_err(|e| e.to_string())
}

/// An onionmix onion-service process: the client schema (no SOCKS port is
/// opened by `onionmix onion-service`) with the service block.
fn write_onionmix_service_config(
    i: &NodeInfo,
    auths: &[AuthEntry],
    block: &str,
) -> Result<(), String> {
    let mut s = format!(
        "data_dir = {:?}\ntesting_network = true\npaths_needed_to_build_circuits = 0.67\n",
        i.data_dir.display().to_string(),
    );
    s.push_str(&auth_toml(auths));
    s.push_str(block);
    std::fs::write(i.data_dir.join("service.toml"), s).map_err(|e| e.to_string())
}

fn sink_dns(sink_addr: &str, ports: Option<(u16, u16, u16)>) -> Option<String> {
    ports.map(|(_, _, dns)| format!("{sink_addr}:{dns}"))
}

fn write_onionmix_relay_config(
    i: &NodeInfo,
    role: Role,
    auths: &[AuthEntry],
    nameserver: Option<String>,
    extra: &[String],
) -> Result<(), String> {
    let mut s = format!(
        "data_dir = {:?}\nnickname = {:?}\nor_listen = \"{}:{}\"\ntesting_network = true\n",
        i.data_dir.display().to_string(),
        i.name,
        i.address,
        i.or_port.unwrap_or(0)
    );
    if role == Role::Exit {
        s.push_str(&format!(
            "exit = true\nexit_udp = true\nexit_policy = [\"accept {}/8:*\"]\nexit_policy_reject_private = false\n",
            torrc_net(&i.address)
        ));
        if let Some(ns) = nameserver {
            s.push_str(&format!("nameserver = \"{ns}\"\n"));
        }
    }
    s.push_str(&control_toml(i));
    for l in extra {
        s.push_str(l);
        s.push('\n');
    }
    s.push_str(&auth_toml(auths));
    std::fs::write(i.data_dir.join("relay.toml"), s).map_err(|e| e.to_string())
}

/// A node's control port with cookie authentication, reachable from the
/// host when the node is in an emulated network's namespace.
fn control_toml(i: &NodeInfo) -> String {
    let mut s = String::new();
    if let Some(p) = i.control_port {
        s.push_str(&format!(
            "control_port = \"{}:{p}\"\ncookie_authentication = true\n",
            i.address
        ));
        if !i.address.starts_with("127.") {
            s.push_str("allow_public_control = true\n");
        }
    }
    s
}

fn torrc_net(addr: &str) -> String {
    let first = addr.split('.').next().unwrap_or("127");
    format!("{first}.0.0.0")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_networks_floor_the_build_timeout() {
        let plain = Spec::load("onionmix-basic").unwrap();
        let want = format!("cbtmintimeout={LOOPBACK_CBT_MIN_MS}");
        assert_eq!(loopback_params(&plain, &[], "params"), Some(want.clone()));
        assert_eq!(
            loopback_params(&plain, &["Log notice stdout".into()], "ConsensusParams"),
            Some(want)
        );
        // The spec's own parameters win; emulated networks keep tor's.
        let own = ["params = { cbttestfreq = 10 }".to_string()];
        assert_eq!(loopback_params(&plain, &own, "params"), None);
        let emulated = Spec::load("onionmix-basic-20ms").unwrap();
        assert!(emulated.emulation.is_some());
        assert_eq!(loopback_params(&emulated, &[], "params"), None);
    }
}
