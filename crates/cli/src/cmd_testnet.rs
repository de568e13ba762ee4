//! `onionmix testnet ...` and `onionmix sink`.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Args, Subcommand};

use onionmix_testbed::launcher::{self, LaunchOptions, Network};
use onionmix_testbed::netinfo::NetworkInfo;
use onionmix_testbed::proc;
use onionmix_testbed::spec::Spec;

#[derive(Subcommand, Debug)]
pub enum TestnetCmd {
    /// Start a network from a built-in spec (tor-basic,
    /// tor-basic-onionmix-client, mixed, ...) or a TOML file; returns once it
    /// is usable and network.json is written. Nodes keep running.
    Start {
        /// Built-in spec name or path to a spec file.
        #[arg(long)]
        spec: String,
        /// State directory (created; holds configs, keys, logs, network.json).
        #[arg(long)]
        dir: PathBuf,
        /// Give up after this many seconds (default: the spec's).
        #[arg(long)]
        timeout: Option<u64>,
        /// Ignore the spec's link emulation and run on plain loopback
        /// (no root needed).
        #[arg(long)]
        no_emulation: bool,
        /// Run every node under libfaketime (Debian package `faketime`)
        /// with this file as its clock offset (e.g. `+0`, later `+3d`):
        /// writing the file moves every node's wall clock at once, to test
        /// certificate and key lifetimes. Monotonic time is not changed.
        #[arg(long)]
        clock_file: Option<PathBuf>,
    },
    /// Show the nodes of a network, whether they are running, and the
    /// open links of onionmix relays with their transport (TLS or QUIC;
    /// network.json is updated with them).
    Status {
        /// State directory.
        #[arg(long)]
        dir: PathBuf,
    },
    /// Stop exactly the processes `start` launched.
    Stop {
        /// State directory.
        #[arg(long)]
        dir: PathBuf,
    },
    /// List the built-in specs.
    Specs,
}

#[derive(Args, Debug)]
pub struct SinkArgs {
    /// HTTP listen address (GET /bytes/<n>).
    #[arg(long, default_value = "127.0.0.1:0")]
    http: std::net::SocketAddr,
    /// TCP echo listen address.
    #[arg(long, default_value = "127.0.0.1:0")]
    echo: std::net::SocketAddr,
    /// DNS (UDP) listen address; answers *.onionmix.test.
    #[arg(long, default_value = "127.0.0.1:0")]
    dns: std::net::SocketAddr,
    /// HTTPS (TLS 1.3) listen address; needs --tls-ca.
    #[arg(long, requires = "tls_ca")]
    https: Option<std::net::SocketAddr>,
    /// Where to write the PEM of the private CA that issued the HTTPS
    /// certificate (for clients to trust).
    #[arg(long, requires = "https")]
    tls_ca: Option<PathBuf>,
}

pub fn run(cmd: TestnetCmd) -> anyhow::Result<()> {
    match cmd {
        TestnetCmd::Start {
            spec,
            dir,
            timeout,
            no_emulation,
            clock_file,
        } => {
            let mut opts = LaunchOptions::new(std::env::current_exe()?);
            if let Some(t) = timeout {
                opts.timeout = Some(std::time::Duration::from_secs(t));
            }
            opts.no_emulation = no_emulation;
            opts.clock_file = clock_file;
            let net = match onionmix_testbed::spec::load_loopix(&spec) {
                Some(l) => onionmix_testbed::loopix::start(&spec, &l?, &dir, &opts)?,
                None => launcher::start(&Spec::load(&spec)?, &dir, &opts)?,
            };
            print_status(&net.info);
            eprintln!(
                "network {} is up in {:.1}s; stop it with: onionmix testnet stop --dir {}",
                net.info.spec,
                net.info.bootstrap_secs,
                dir.display()
            );
            net.detach();
            Ok(())
        }
        TestnetCmd::Status { dir } => {
            let mut info = NetworkInfo::load(&dir).map_err(anyhow::Error::msg)?;
            info.refresh_links();
            // Best effort: a read-only state directory still gets a status.
            let _ = info.save();
            print_status(&info);
            Ok(())
        }
        TestnetCmd::Stop { dir } => {
            let net = Network::load(&dir).map_err(anyhow::Error::msg)?;
            let n = net.info.nodes.len() + usize::from(net.info.sink.is_some());
            let survivors = net.stop();
            if survivors.is_empty() {
                eprintln!("stopped {n} processes");
                Ok(())
            } else {
                anyhow::bail!("could not stop: {}", survivors.join(", "))
            }
        }
        TestnetCmd::Specs => {
            for (name, text) in onionmix_testbed::spec::BUILTIN {
                let d = Spec::parse(name, text)
                    .map(|s| s.description)
                    .unwrap_or_default();
                println!("{name:<28} {d}");
            }
            Ok(())
        }
    }
}

fn print_status(info: &NetworkInfo) {
    println!(
        "{:<12} {:<9} {:<10} {:>7} {:>6} {:>6} {:>6}  {:<8} fingerprint",
        "node", "impl", "roles", "pid", "or", "dir", "socks", "state"
    );
    for n in &info.nodes {
        let roles: Vec<String> = n
            .roles
            .iter()
            .map(|r| format!("{r:?}").to_lowercase())
            .collect();
        let port = |p: Option<u16>| p.map(|p| p.to_string()).unwrap_or_else(|| "-".into());
        println!(
            "{:<12} {:<9} {:<10} {:>7} {:>6} {:>6} {:>6}  {:<8} {}",
            n.name,
            format!("{:?}", n.implementation).to_lowercase(),
            roles.join(","),
            n.pid,
            port(n.or_port),
            port(n.dir_port),
            port(n.socks_port),
            if proc::alive(n.pid, n.start_time) {
                "running"
            } else {
                "stopped"
            },
            n.fingerprint.as_deref().unwrap_or("-")
        );
    }
    print_links(info);
    if let Some(s) = &info.sink {
        println!(
            "{:<12} {:<9} {:<10} {:>7} http {} echo {} dns {} ({})  {}",
            "sink",
            "onionmix",
            "sink",
            s.pid,
            s.http,
            s.echo,
            s.dns,
            s.hostname,
            if proc::alive(s.pid, s.start_time) {
                "running"
            } else {
                "stopped"
            },
        );
    }
    for o in &info.onion_services {
        println!(
            "{:<12} {:<9} {:<10} {}  http :{} echo :{}",
            o.name,
            format!("{:?}", o.implementation).to_lowercase(),
            "onion",
            o.address,
            o.http_port,
            o.echo_port
        );
    }
    if let Some(e) = &info.emulator {
        println!(
            "\nlink emulator pid {} ({}), subnet {}",
            e.pid,
            if proc::alive(e.pid, e.start_time) {
                "running"
            } else {
                "stopped"
            },
            e.subnet
        );
        match onionmix_emu::run::read_status(&e.state_dir) {
            Ok(st) => println!("{}", st.render_table(false)),
            Err(err) => println!("(no link counters: {err})"),
        }
    }
}

/// The open links onionmix relays reported, one line each: who, to
/// whom, the transport, who opened it, circuits.
fn print_links(info: &NetworkInfo) {
    let rows: Vec<String> = info
        .nodes
        .iter()
        .flat_map(|n| {
            n.links.iter().map(move |l| {
                format!(
                    "  {:<12} {} {:<42} {:<5} {:>4} circuits",
                    n.name,
                    if l.initiated { "->" } else { "<-" },
                    l.peer,
                    l.transport,
                    l.circuits
                )
            })
        })
        .collect();
    if !rows.is_empty() {
        println!("\nlinks of onionmix relays (-> opened by the relay, <- by the peer):");
        for r in rows {
            println!("{r}");
        }
    }
}

pub fn run_sink(a: SinkArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let addrs = onionmix_testbed::sink::start(a.http, a.echo, a.dns).await?;
        eprintln!(
            "sink: http {} echo {} dns {} (names under {})",
            addrs.http,
            addrs.echo,
            addrs.dns,
            onionmix_testbed::sink::TEST_DOMAIN
        );
        if let (Some(h), Some(ca)) = (a.https, &a.tls_ca) {
            let bound = onionmix_testbed::sink::start_https(h, ca)
                .await
                .with_context(|| format!("sink HTTPS on {h} (CA to {})", ca.display()))?;
            eprintln!("sink: https {bound} (CA certificate in {})", ca.display());
        }
        onionmix_node::client::wait_for_shutdown().await;
        Ok::<_, anyhow::Error>(())
    })?;
    let _ = PathBuf::new();
    Ok(())
}
