//! Configuration for stock tor nodes (torrc) and identities (tor-gencert,
//! `tor --list-fingerprint`), following the recipe in
//! `shared/notes/interop-peers.md` (which chutney also uses).

use std::path::Path;
use std::process::{Command, Stdio};

use crate::spec::Role;

/// Options every node in a testing network gets.
pub const COMMON: &[&str] = &[
    "TestingTorNetwork 1",
    "PathsNeededToBuildCircuits 0.67",
    "TestingDirAuthVoteExit *",
    "TestingDirAuthVoteHSDir *",
    "TestingDirAuthVoteGuard *",
    "TestingMinExitFlagThreshold 0",
    "V3AuthNIntervalsValid 2",
    "Sandbox 0",
    "Log notice stdout",
];

/// Authority options (the voting schedule comes from
/// [`TorNode::voting`]).
pub const AUTHORITY: &[&str] = &[
    "AuthoritativeDirectory 1",
    "V3AuthoritativeDirectory 1",
    "ExitPolicy reject *:*",
    // Every running relay is Stable, as onionmix authorities vote in
    // testing networks. Left to tor's own cutoff (uptime at least the
    // median), about half of a young network is Stable, and onion-service
    // circuits need Stable nodes for every hop after the guard (and for
    // the layer-2 vanguards): with 8 relays a stock service could find no
    // path for minutes ("Failed to find node for hop #2").
    "AuthDirVoteStableGuaranteeMinUptime 0",
    "AuthDirVoteStableGuaranteeMTBF 0",
];

/// Voting interval, vote delay, distribution delay: the lines of an
/// authority's torrc (tor's testing schedule is 20, 4, 4).
pub fn voting_lines((interval, vote, dist): (u64, u64, u64)) -> Vec<String> {
    vec![
        format!("V3AuthVotingInterval {interval}"),
        format!("V3AuthVoteDelay {vote}"),
        format!("V3AuthDistDelay {dist}"),
        format!("TestingV3AuthInitialVotingInterval {interval}"),
        format!("TestingV3AuthInitialVoteDelay {vote}"),
        format!("TestingV3AuthInitialDistDelay {dist}"),
    ]
}

fn run(cmd: &mut Command, what: &str) -> Result<String, String> {
    let out = cmd.output().map_err(|e| {
        format!("{what}: cannot run: {e} (is tor installed? apt-get install -y tor)")
    })?;
    if !out.status.success() {
        return Err(format!(
            "{what} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).to_string())
}

/// Create an authority's v3 identity with tor-gencert in `<datadir>/keys`;
/// returns the v3ident (authority certificate fingerprint).
pub fn gencert(data_dir: &Path, dir_addr: &str) -> Result<String, String> {
    use std::io::Write;
    let keys = data_dir.join("keys");
    std::fs::create_dir_all(&keys).map_err(|e| e.to_string())?;
    let mut child = Command::new("tor-gencert")
        .current_dir(&keys)
        .args([
            "--create-identity-key",
            "-m",
            "12",
            "-a",
            dir_addr,
            "--passphrase-fd",
            "0",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("tor-gencert: {e} (apt-get install -y tor)"))?;
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(b"\n");
    }
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "tor-gencert failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let cert = std::fs::read_to_string(keys.join("authority_certificate"))
        .map_err(|e| format!("tor-gencert wrote no certificate: {e}"))?;
    cert.lines()
        .find_map(|l| l.strip_prefix("fingerprint "))
        .map(|s| s.trim().to_string())
        .ok_or_else(|| "authority_certificate has no fingerprint line".into())
}

/// Generate a relay identity (if needed) and return its fingerprint.
pub fn list_fingerprint(tor: &str, data_dir: &Path, or_port: u16) -> Result<String, String> {
    let out = run(
        Command::new(tor).args([
            "--list-fingerprint",
            "--DataDirectory",
            &data_dir.display().to_string(),
            "--ORPort",
            &or_port.to_string(),
            "--quiet",
        ]),
        "tor --list-fingerprint",
    )?;
    let line = out
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .ok_or("tor --list-fingerprint printed nothing")?;
    let fp: String = line.split_whitespace().skip(1).collect();
    if fp.len() != 40 {
        return Err(format!("unexpected fingerprint output: {line}"));
    }
    Ok(fp)
}

/// A `DirAuthority` line.
pub fn dirauthority_line(
    nick: &str,
    or_port: u16,
    v3ident: &str,
    addr: &str,
    dir_port: u16,
    fp: &str,
) -> String {
    format!("DirAuthority {nick} orport={or_port} no-v2 v3ident={v3ident} {addr}:{dir_port} {fp}")
}

/// The `DirAuthority` line of an authority of a network (missing ports and
/// identities as 0 and empty).
pub fn dirauthority_line_of(a: &crate::netinfo::NodeInfo) -> String {
    dirauthority_line(
        &a.name,
        a.or_port.unwrap_or(0),
        a.v3ident.as_deref().unwrap_or(""),
        &a.address,
        a.dir_port.unwrap_or(0),
        a.fingerprint.as_deref().unwrap_or(""),
    )
}

/// Everything a torrc needs.
pub struct TorNode<'a> {
    /// Nickname.
    pub nick: &'a str,
    /// Role.
    pub role: Role,
    /// Data directory.
    pub data_dir: &'a Path,
    /// Listen address.
    pub addr: &'a str,
    /// ORPort (relays).
    pub or_port: Option<u16>,
    /// DirPort.
    pub dir_port: Option<u16>,
    /// SOCKS port (clients).
    pub socks_port: Option<u16>,
    /// Control port (cookie authentication): clients, relays, authorities.
    pub control_port: Option<u16>,
    /// resolv.conf for exits.
    pub resolv_conf: Option<&'a Path>,
    /// DirAuthority lines.
    pub dirauths: &'a [String],
    /// Extra lines from the spec.
    pub extra: &'a [String],
    /// Voting schedule (authorities): interval, vote and dist delays.
    pub voting: (u64, u64, u64),
}

/// Render a torrc.
pub fn render(n: &TorNode<'_>) -> String {
    let mut l: Vec<String> = COMMON.iter().map(|s| s.to_string()).collect();
    l.push(format!("DataDirectory {}", n.data_dir.display()));
    l.push(format!("Nickname {}", n.nick));
    match n.socks_port {
        Some(p) => {
            l.push(format!("SocksPort {}:{p}", n.addr));
            l.push("ClientRejectInternalAddresses 0".into());
            if !n.addr.starts_with("127.") {
                l.push("SocksPolicy accept *".into());
            }
        }
        None => l.push("SocksPort 0".into()),
    }
    if let Some(p) = n.control_port {
        l.push(format!("ControlPort {}:{p}", n.addr));
        l.push("CookieAuthentication 1".into());
    }
    if let Some(p) = n.or_port {
        l.push(format!("Address {}", n.addr));
        l.push(format!("ORPort {}:{p}", n.addr));
        l.push("AssumeReachable 1".into());
        l.push("ContactInfo onionmix-testnet@example.invalid".into());
    }
    if let Some(p) = n.dir_port {
        l.push(format!("DirPort {}:{p}", n.addr));
    }
    match n.role {
        Role::Authority => {
            l.extend(AUTHORITY.iter().map(|s| s.to_string()));
            l.extend(voting_lines(n.voting));
        }
        Role::Relay => l.push("ExitPolicy reject *:*".into()),
        Role::Exit => {
            l.push("ExitRelay 1".into());
            l.push(format!("ExitPolicy accept {}/8:*", first_octet_net(n.addr)));
            l.push("ExitPolicyRejectPrivate 0".into());
            if let Some(r) = n.resolv_conf {
                l.push(format!("ServerDNSResolvConfFile {}", r.display()));
                l.push("ServerDNSDetectHijacking 0".into());
                l.push("ServerDNSAllowBrokenConfig 1".into());
            }
        }
        Role::Client | Role::Mix | Role::Provider | Role::MixClient | Role::OnionService => {}
    }
    l.extend(n.dirauths.iter().cloned());
    l.extend(n.extra.iter().cloned());
    let mut s = l.join("\n");
    s.push('\n');
    s
}

/// `127.0.0.1` -> `127.0.0.0`.
fn first_octet_net(addr: &str) -> String {
    let first = addr.split('.').next().unwrap_or("127");
    format!("{first}.0.0.0")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_torrc_has_recipe_options() {
        let auths = vec![dirauthority_line(
            "auth0",
            5000,
            &"A".repeat(40),
            "127.0.0.1",
            7000,
            &"B".repeat(40),
        )];
        let t = render(&TorNode {
            nick: "exit0",
            role: Role::Exit,
            data_dir: Path::new("/tmp/x"),
            addr: "127.0.0.1",
            or_port: Some(5001),
            dir_port: None,
            socks_port: None,
            control_port: None,
            resolv_conf: Some(Path::new("/tmp/x/resolv.conf")),
            dirauths: &auths,
            extra: &[],
            voting: (20, 4, 4),
        });
        assert_eq!(
            voting_lines((10, 3, 3))[..3],
            [
                "V3AuthVotingInterval 10",
                "V3AuthVoteDelay 3",
                "V3AuthDistDelay 3"
            ]
        );
        for want in [
            "TestingTorNetwork 1",
            "ExitRelay 1",
            "ExitPolicy accept 127.0.0.0/8:*",
            "ExitPolicyRejectPrivate 0",
            "ORPort 127.0.0.1:5001",
            "ServerDNSResolvConfFile /tmp/x/resolv.conf",
            "DirAuthority auth0 orport=5000 no-v2 v3ident=",
        ] {
            assert!(t.contains(want), "missing {want}:\n{t}");
        }
        assert!(t.contains("SocksPort 0"));
    }

    /// Stock authorities vote every running relay Stable, as ours do in
    /// testing networks (onion-service paths in small networks need it).
    #[test]
    fn authority_torrc_votes_every_relay_stable() {
        let t = render(&TorNode {
            nick: "auth0",
            role: Role::Authority,
            data_dir: Path::new("/tmp/x"),
            addr: "127.0.0.1",
            or_port: Some(5000),
            dir_port: Some(7000),
            socks_port: None,
            control_port: None,
            resolv_conf: None,
            dirauths: &[],
            extra: &[],
            voting: (20, 4, 4),
        });
        for want in [
            "V3AuthoritativeDirectory 1",
            "AuthDirVoteStableGuaranteeMinUptime 0",
            "AuthDirVoteStableGuaranteeMTBF 0",
            "TestingDirAuthVoteGuard *",
        ] {
            assert!(t.lines().any(|l| l == want), "missing {want}:\n{t}");
        }
    }
}
