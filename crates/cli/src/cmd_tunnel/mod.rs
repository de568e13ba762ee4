//! `onionmix tunnel`: a fresh network namespace whose only route is the
//! transparent tunnel; its TCP flows go over a client's SOCKS port (ours or
//! stock tor's), its DNS to the tunnel's resolver, its UDP by policy.
//!
//! - `--exec cmd args...`: run one program in the namespace; the tunnel
//!   ends with it and passes its exit status on;
//! - without `--exec`: run until Ctrl-C or SIGTERM; programs join with
//!   `ip netns exec <namespace> cmd` (the name is printed, `--namespace`
//!   chooses it);
//! - `--status-file F`: the counters as JSON, rewritten every second;
//!   `onionmix tunnel status F` shows them.
//!
//! The namespace is removed when the tunnel ends (also on errors).

mod status;
mod upstream;

use anyhow::{Context, bail};
use clap::{Args, Subcommand, ValueEnum};
use onionmix_node::tunnel::dev::TunDevice;
use onionmix_node::tunnel::driver::{self, AppLookup, Options};
use onionmix_node::tunnel::netns::Namespace;
use onionmix_node::tunnel::{APP_V4, APP_V6, RESOLVER_V6};
use onionmix_testbed::netinfo::NetworkInfo;
use onionmix_testbed::spec::Implementation;
use onionmix_tunnel::dns::DnsMode;
use onionmix_tunnel::flows::Isolation;
use onionmix_tunnel::packet::{Mode, UdpPolicy};
use onionmix_tunnel::{Status, TunnelConfig};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

/// Arguments of `onionmix tunnel`.
#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct TunnelArgs {
    #[command(subcommand)]
    cmd: Option<TunnelCmd>,
    /// The SOCKS5 port flows go through (an onionmix client or stock tor).
    #[arg(long, conflicts_with = "net", required_unless_present = "net")]
    socks: Option<SocketAddr>,
    /// A testnet state directory: use its first onionmix client's SOCKS
    /// port (else its first client's).
    #[arg(long)]
    net: Option<PathBuf>,
    /// DNS: answer at once with synthetic addresses whose names travel to
    /// the exit (optimistic), or resolve through the network (fallback).
    #[arg(long, value_enum, default_value_t = DnsArg::Optimistic)]
    dns: DnsArg,
    /// Which flows share a circuit: one circuit per destination host, per
    /// application (the uid owning the socket), or per flow.
    #[arg(long, value_enum, default_value_t = IsolationArg::Destination)]
    isolation: IsolationArg,
    /// Packet normalization (the seed's table): anonymity drops fragments,
    /// IP options and IPv6 extension headers and fixes TTL/DSCP/ECN/flow
    /// label; compatibility passes them.
    #[arg(long, value_enum, default_value_t = ModeArg::Anonymity)]
    mode: ModeArg,
    /// UDP other than DNS: carry it (UDP ASSOCIATE; onionmix clients carry
    /// it over exits that advertise Datagram=1, and flows that cannot be
    /// carried get ICMP port unreachable), answer ICMP port unreachable,
    /// or drop it silently.
    #[arg(long, value_enum, default_value_t = UdpArg::Carry)]
    udp: UdpArg,
    /// IPv4 only in the namespace (no IPv6 address, route or AAAA
    /// answers).
    #[arg(long)]
    no_ipv6: bool,
    /// Write the counters here as JSON about once a second (and at the end).
    #[arg(long)]
    status_file: Option<PathBuf>,
    /// The namespace's name (default `omx<pid>-0`).
    #[arg(long)]
    namespace: Option<String>,
    /// The program to run inside the tunnel, and its arguments; without
    /// it the tunnel runs until interrupted.
    #[arg(long, num_args = 1.., allow_hyphen_values = true, trailing_var_arg = true)]
    exec: Vec<String>,
}

#[derive(Subcommand, Debug)]
enum TunnelCmd {
    /// Show a running (or finished) tunnel's status file.
    Status {
        /// The `--status-file` of the tunnel.
        file: PathBuf,
    },
}

#[derive(ValueEnum, Clone, Copy, Debug)]
enum DnsArg {
    Optimistic,
    Fallback,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
enum IsolationArg {
    Destination,
    App,
    Flow,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
enum ModeArg {
    Anonymity,
    Compatibility,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
enum UdpArg {
    Carry,
    Icmp,
    Drop,
}

fn socks_addr(a: &TunnelArgs) -> anyhow::Result<SocketAddr> {
    if let Some(s) = a.socks {
        return Ok(s);
    }
    let Some(dir) = &a.net else {
        bail!("give --socks or --net")
    };
    let info = NetworkInfo::load(dir).map_err(anyhow::Error::msg)?;
    let ours = info.clients(Some(Implementation::Onionmix));
    let any = info.clients(None);
    ours.first()
        .or(any.first())
        .and_then(|n| n.socks_addr())
        .with_context(|| format!("no client with a SOCKS port in {}", dir.display()))
}

fn config(a: &TunnelArgs) -> TunnelConfig {
    let mut cfg = TunnelConfig {
        dns: match a.dns {
            DnsArg::Optimistic => DnsMode::Optimistic,
            DnsArg::Fallback => DnsMode::Fallback,
        },
        ..TunnelConfig::default()
    };
    cfg.flows.isolation = match a.isolation {
        IsolationArg::Destination => Isolation::PerDestination,
        IsolationArg::App => Isolation::PerApp,
        IsolationArg::Flow => Isolation::PerFlow,
    };
    cfg.policy.mode = match a.mode {
        ModeArg::Anonymity => Mode::Anonymity,
        ModeArg::Compatibility => Mode::Compatibility,
    };
    (cfg.policy.udp, cfg.policy.carry_udp) = match a.udp {
        UdpArg::Carry => (UdpPolicy::IcmpUnreachable, true),
        UdpArg::Icmp => (UdpPolicy::IcmpUnreachable, false),
        UdpArg::Drop => (UdpPolicy::Drop, false),
    };
    if a.no_ipv6 {
        cfg.mapping.v6 = None;
    } else {
        cfg.policy.resolver_v6 = Some(RESOLVER_V6);
    }
    cfg
}

/// Run the command; with `--exec` the process exits with the program's
/// status.
pub fn run(a: TunnelArgs) -> anyhow::Result<()> {
    if let Some(TunnelCmd::Status { file }) = &a.cmd {
        let text =
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        let v: serde_json::Value = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a tunnel status file", file.display()))?;
        print!("{}", status::render(&v));
        return Ok(());
    }
    let proxy = socks_addr(&a)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let code = rt.block_on(run_inner(proxy, &a))?;
    if a.exec.is_empty() {
        return Ok(());
    }
    std::process::exit(code);
}

fn config_json(a: &TunnelArgs) -> serde_json::Value {
    serde_json::json!({
        "dns": format!("{:?}", a.dns).to_lowercase(),
        "isolation": format!("{:?}", a.isolation).to_lowercase(),
        "mode": format!("{:?}", a.mode).to_lowercase(),
        "udp": format!("{:?}", a.udp).to_lowercase(),
        "ipv6": !a.no_ipv6,
    })
}

/// Write the status file whenever the driver publishes a snapshot.
fn status_writer(
    path: PathBuf,
    mut rx: tokio::sync::watch::Receiver<Status>,
    namespace: String,
    upstream: String,
    cfg: serde_json::Value,
) -> tokio::task::JoinHandle<()> {
    let started_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    tokio::spawn(async move {
        loop {
            let done = rx.changed().await.is_err();
            let snapshot = rx.borrow_and_update().clone();
            let m = status::Meta {
                namespace: &namespace,
                upstream: upstream.clone(),
                config: cfg.clone(),
                started_unix,
                running: !done,
            };
            if let Err(e) = status::write(&path, &snapshot, &m) {
                tracing::warn!(error = %e, path = %path.display(), "cannot write the tunnel status");
            }
            if done {
                return;
            }
        }
    })
}

async fn run_inner(proxy: SocketAddr, a: &TunnelArgs) -> anyhow::Result<i32> {
    let cfg = config(a);
    let ns = Namespace::create_named(a.namespace.as_deref())?;
    let tun = TunDevice::create(&format!("omxtun{}", std::process::id() % 1_000_000))?;
    let v6 = cfg.policy.resolver_v6.map(|_| APP_V6);
    tun.move_into(&ns, APP_V4, 32, v6)?;
    ns.write_resolv_conf(IpAddr::V4(cfg.policy.resolver_v4))?;

    let (status_tx, status_rx) = tokio::sync::watch::channel(Status::default());
    let writer = a.status_file.clone().map(|p| {
        status_writer(
            p,
            status_rx,
            ns.name().to_string(),
            proxy.to_string(),
            config_json(a),
        )
    });
    let apps = match cfg.flows.isolation {
        Isolation::PerApp => Some(AppLookup::start(&ns)?),
        _ => None,
    };
    let opts = Options {
        status: Some(status_tx),
        apps,
    };
    let upstream = Arc::new(upstream::SocksUpstream::new(proxy));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let packet_loop = tokio::spawn(driver::run(tun, cfg, upstream, opts, async {
        let _ = stop_rx.await;
    }));
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let outcome = if let Some((program, args)) = a.exec.split_first() {
        run_program(&ns, program, args, &mut term).await
    } else {
        println!(
            "tunnel up in namespace {} (upstream {proxy}); run programs with `ip netns exec {} <program>`; Ctrl-C stops it",
            ns.name(),
            ns.name()
        );
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        Ok(0)
    };
    let _ = stop_tx.send(());
    match packet_loop.await {
        Ok(Ok(c)) => tracing::info!(
            flows = c.flows_opened,
            connected = c.flows_connected,
            refused = c.flows_refused,
            bytes_to_app = c.bytes_to_app,
            bytes_to_exit = c.bytes_to_exit,
            udp_flows = c.udp_flows_opened,
            drops = c.drops_total(),
            "tunnel closed"
        ),
        Ok(Err(e)) => tracing::warn!(error = %e, "tunnel packet loop failed"),
        Err(e) => tracing::warn!(error = %e, "tunnel packet loop panicked"),
    }
    if let Some(w) = writer {
        let _ = w.await;
    }
    drop(ns);
    outcome
}

/// Run `program` in the namespace until it ends (its status) or we are
/// told to stop (it is killed first).
async fn run_program(
    ns: &Namespace,
    program: &str,
    args: &[String],
    term: &mut tokio::signal::unix::Signal,
) -> anyhow::Result<i32> {
    let mut child = ns
        .command(program, args)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("running {program} in the tunnel"))?;
    let status = tokio::select! {
        s = child.wait() => s.with_context(|| format!("waiting for {program}")),
        _ = tokio::signal::ctrl_c() => {
            let _ = child.kill().await;
            Err(anyhow::anyhow!("interrupted"))
        }
        _ = term.recv() => {
            let _ = child.kill().await;
            Err(anyhow::anyhow!("terminated"))
        }
    };
    Ok(status?.code().unwrap_or(1))
}
