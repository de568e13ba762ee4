//! `onionmix tunnel --exec`: run one program in a fresh network namespace
//! whose only route is the transparent tunnel; its TCP flows go over a
//! client's SOCKS port (ours or stock tor's), its DNS to the tunnel's
//! resolver. The namespace is removed when the program ends (also on
//! errors).

use anyhow::{Context, bail};
use clap::Args;
use onionmix_node::tunnel::dev::TunDevice;
use onionmix_node::tunnel::driver::{self, ConnectError, Connector};
use onionmix_node::tunnel::netns::Namespace;
use onionmix_testbed::netinfo::NetworkInfo;
use onionmix_testbed::socks::{self, SocksError};
use onionmix_testbed::spec::Implementation;
use onionmix_tunnel::TunnelConfig;
use onionmix_tunnel::flows::Target;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// How long one flow's SOCKS CONNECT may take (circuit build included).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(120);

/// Arguments of `onionmix tunnel`.
#[derive(Args, Debug)]
pub struct TunnelArgs {
    /// The SOCKS5 port flows go through (an onionmix client or stock tor).
    #[arg(long, conflicts_with = "net", required_unless_present = "net")]
    socks: Option<SocketAddr>,
    /// A testnet state directory: use its first onionmix client's SOCKS
    /// port (else its first client's).
    #[arg(long)]
    net: Option<PathBuf>,
    /// The program to run inside the tunnel, and its arguments.
    #[arg(long, num_args = 1.., required = true, allow_hyphen_values = true, trailing_var_arg = true)]
    exec: Vec<String>,
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

/// Run the command; the process exits with the program's status.
pub fn run(a: TunnelArgs) -> anyhow::Result<()> {
    let proxy = socks_addr(&a)?;
    let Some((program, args)) = a.exec.split_first() else {
        bail!("--exec needs a program")
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let code = rt.block_on(run_inner(proxy, program, args))?;
    std::process::exit(code);
}

async fn run_inner(proxy: SocketAddr, program: &str, args: &[String]) -> anyhow::Result<i32> {
    let ns = Namespace::create()?;
    let tun = TunDevice::create(&format!("omxtun{}", std::process::id() % 1_000_000))?;
    tun.move_into(&ns, Ipv4Addr::new(10, 255, 0, 1), 32)?;
    let mut cfg = TunnelConfig::default();
    // IPv4 only for now: the namespace has no IPv6 route.
    cfg.mapping.v6 = None;
    ns.write_resolv_conf(IpAddr::V4(cfg.policy.resolver_v4))?;

    let connector: Connector = Arc::new(move |target: Target, password: String| {
        Box::pin(async move {
            let t = match target {
                Target::Host(h, p) => socks::Target::Host(h, p),
                Target::Addr(a) => socks::Target::Addr(a),
            };
            socks::connect(
                proxy,
                &t,
                Some((onionmix_tunnel::socks::SOCKS_USER, &password)),
                CONNECT_TIMEOUT,
            )
            .await
            .map_err(|e| match e {
                SocksError::Reply { code } => ConnectError::Reply(code),
                SocksError::Timeout => ConnectError::Timeout,
                e => ConnectError::Other(e.to_string()),
            })
        })
    });
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let packet_loop = tokio::spawn(driver::run(tun, cfg, connector, async {
        let _ = stop_rx.await;
    }));
    let mut child = ns
        .command(program, args)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("running {program} in the tunnel"))?;
    // Ctrl-C or SIGTERM: stop the program and still remove the namespace.
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
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
    let _ = stop_tx.send(());
    match packet_loop.await {
        Ok(Ok(c)) => tracing::info!(
            flows = c.flows_opened,
            connected = c.flows_connected,
            refused = c.flows_refused,
            bytes_to_app = c.bytes_to_app,
            bytes_to_exit = c.bytes_to_exit,
            "tunnel closed"
        ),
        Ok(Err(e)) => tracing::warn!(error = %e, "tunnel packet loop failed"),
        Err(e) => tracing::warn!(error = %e, "tunnel packet loop panicked"),
    }
    drop(ns);
    let status = status?;
    Ok(status.code().unwrap_or(1))
}
