//! Thin tokio UDP drivers for mixes, providers and clients: they move
//! datagrams between one socket and the sans-IO node, own the timers, and
//! write the stats file. Sphinx work for mixes and providers runs on worker
//! threads.

use std::collections::HashMap;
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, mpsc as smpsc};
use std::time::{Duration, Instant};

use base64::Engine;
use thiserror::Error;
use tokio::net::UdpSocket;
use tokio::sync::mpsc;

use crate::directory::{Directory, DirectoryError};
use crate::loopix::codec::{self, DropReason, ProcessedPacket, Profile, SecretKey};
use crate::loopix::config::{NodeConfig, Role};
use crate::loopix::node::{ClientNode, MixNode, Outgoing, Stats};

#[derive(Debug, Error)]
pub enum NetError {
    #[error("config: {0}")]
    Config(String),
    #[error("directory: {0}")]
    Directory(#[from] DirectoryError),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}

/// Loads the directory named by a config.
pub fn load_directory(cfg: &NodeConfig) -> Result<Directory, NetError> {
    if let Some(p) = &cfg.directory.signed {
        let text = std::fs::read_to_string(p)?;
        let trusted = if cfg.directory.insecure_any_signer {
            None
        } else {
            cfg.directory.signing_key.as_deref()
        };
        return Ok(Directory::from_signed(&text, trusted)?);
    }
    if let Some(p) = &cfg.directory.sqlite {
        return Ok(Directory::from_sqlite(p, cfg.profile)?);
    }
    Err(NetError::Config("no directory source".into()))
}

pub fn load_key(cfg: &NodeConfig) -> Result<SecretKey, NetError> {
    let b = std::fs::read(&cfg.secret_key_file)?;
    SecretKey::from_file_bytes(cfg.profile, &b)
        .map_err(|e| NetError::Config(format!("secret key {}: {e}", cfg.secret_key_file.display())))
}

/// Writes `stats` atomically as JSON.
pub fn write_stats(path: &Path, stats: &Stats) {
    if let Ok(text) = serde_json::to_vec_pretty(stats) {
        let _ = onionmix_fsutil::write_atomic(path, text);
    }
}

/// The wall clock in Unix milliseconds (control-request timestamps).
fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Resolves `host:port` with a small cache (IP literals need no lookup).
struct Resolver {
    cache: HashMap<(String, u16), SocketAddr>,
}

impl Resolver {
    async fn resolve(&mut self, host: &str, port: u16) -> Option<SocketAddr> {
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Some(SocketAddr::new(ip, port));
        }
        if let Some(a) = self.cache.get(&(host.to_string(), port)) {
            return Some(*a);
        }
        let r = tokio::time::timeout(
            Duration::from_secs(2),
            tokio::net::lookup_host((host, port)),
        )
        .await;
        let a = r.ok()?.ok()?.next()?;
        if self.cache.len() > 10_000 {
            self.cache.clear();
        }
        self.cache.insert((host.to_string(), port), a);
        Some(a)
    }
}

async fn send_all(sock: &UdpSocket, res: &mut Resolver, outs: Vec<Outgoing>) {
    for o in outs {
        match res.resolve(&o.host, o.port).await {
            Some(a) => {
                if let Err(e) = sock.send_to(&o.data, a).await {
                    tracing::debug!("send to {a}: {e}");
                }
            }
            None => tracing::debug!("cannot resolve {}", o.host),
        }
    }
}

fn profile_of(cfg: &NodeConfig) -> Profile {
    Profile::loopix(cfg.profile)
}

async fn bind(cfg: &NodeConfig) -> Result<UdpSocket, NetError> {
    let std_sock = std::net::UdpSocket::bind(cfg.listen)?;
    std_sock.set_nonblocking(true)?;
    Ok(UdpSocket::from_std(std_sock)?)
}

/// Runs a mix or provider until `shutdown` resolves.
pub async fn run_mix_node(
    cfg: NodeConfig,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), NetError> {
    let dir = Arc::new(load_directory(&cfg)?);
    if dir.profile != cfg.profile {
        return Err(NetError::Config(format!(
            "directory profile {} differs from node profile {}",
            dir.profile, cfg.profile
        )));
    }
    let key = Arc::new(load_key(&cfg)?);
    let profile = profile_of(&cfg);
    let provider = cfg.role == Role::Provider;
    let start = Instant::now();
    let mut node = MixNode::new(
        &cfg.name,
        provider,
        profile,
        key.clone(),
        dir,
        cfg.params.clone(),
        start,
    )
    .map_err(NetError::Config)?;
    node.set_wall_clock(start, unix_ms());
    if cfg.start_delay > 0.0 {
        tokio::time::sleep(Duration::from_secs_f64(cfg.start_delay)).await;
    }
    let sock = bind(&cfg).await?;
    tracing::info!(node = %cfg.name, role = ?cfg.role, addr = %cfg.listen, profile = %cfg.profile, "node ready");

    // Worker threads for Sphinx processing.
    let workers = if cfg.workers == 0 {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    } else {
        cfg.workers
    };
    let (job_tx, job_rx) = smpsc::sync_channel::<Vec<u8>>(8192);
    let job_rx = Arc::new(Mutex::new(job_rx));
    let (res_tx, mut res_rx) = mpsc::channel::<Result<ProcessedPacket, DropReason>>(8192);
    for _ in 0..workers {
        let rx = job_rx.clone();
        let tx = res_tx.clone();
        let key = key.clone();
        std::thread::spawn(move || {
            loop {
                let job = match rx.lock() {
                    Ok(g) => g.recv(),
                    Err(_) => return,
                };
                let Ok(data) = job else { return };
                let r = codec::process_datagram(&profile, &key, &data);
                if tx.blocking_send(r).is_err() {
                    return;
                }
            }
        });
    }
    drop(res_tx);

    let mut res = Resolver {
        cache: HashMap::new(),
    };
    let mut buf = vec![0u8; profile.max_datagram().max(65536)];
    let mut stats_tick =
        tokio::time::interval(Duration::from_secs_f64(cfg.stats_interval.max(0.05)));
    tokio::pin!(shutdown);
    if let Some(p) = &cfg.stats_file {
        write_stats(p, &node.stats);
    }
    loop {
        let wake = node
            .next_wakeup()
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(1));
        tokio::select! {
            _ = &mut shutdown => break,
            r = sock.recv_from(&mut buf) => {
                let (n, from) = match r { Ok(x) => x, Err(e) => { tracing::debug!("recv: {e}"); continue } };
                let now = Instant::now();
                let data = &buf[..n];
                if let Some(c) = node.pre_dispatch(now, data) {
                    node.handle_control(now, from.ip(), c);
                } else if job_tx.try_send(data.to_vec()).is_err() {
                    node.stats.count_drop(DropReason::Overload);
                }
            }
            Some(r) = res_rx.recv() => {
                node.handle_processed(Instant::now(), r);
                // Drain whatever else is ready without waiting.
                while let Ok(r) = res_rx.try_recv() {
                    node.handle_processed(Instant::now(), r);
                }
            }
            _ = tokio::time::sleep_until(tokio::time::Instant::from_std(wake)) => {}
            _ = stats_tick.tick() => {
                node.set_wall_clock(Instant::now(), unix_ms());
                if let Some(p) = &cfg.stats_file { write_stats(p, &node.stats); }
            }
        }
        let outs = node.poll(Instant::now());
        if !outs.is_empty() {
            send_all(&sock, &mut res, outs).await;
        }
    }
    if let Some(p) = &cfg.stats_file {
        write_stats(p, &node.stats);
    }
    Ok(())
}

/// A message waiting in a client's outbox spool.
pub fn write_outbox(outbox: &Path, recipient: &str, msg: &[u8]) -> Result<PathBuf, std::io::Error> {
    std::fs::create_dir_all(outbox)?;
    let mut rnd = [0u8; 8];
    rand::RngCore::fill_bytes(&mut rand::thread_rng(), &mut rnd);
    let ts = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let name = format!("{ts:032}-{}.msg", hex::encode(rnd));
    let mut content = Vec::with_capacity(recipient.len() + 1 + msg.len());
    content.extend_from_slice(recipient.as_bytes());
    content.push(b'\n');
    content.extend_from_slice(msg);
    let dst = outbox.join(name);
    onionmix_fsutil::write_atomic(&dst, content)?;
    Ok(dst)
}

fn read_outbox(outbox: &Path, node: &mut ClientNode) {
    let Ok(rd) = std::fs::read_dir(outbox) else {
        return;
    };
    let mut files: Vec<PathBuf> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "msg"))
        .collect();
    files.sort();
    for f in files.into_iter().take(1000) {
        if node.queued() >= 100_000 {
            break;
        }
        let Ok(content) = std::fs::read(&f) else {
            continue;
        };
        let Some(nl) = content.iter().position(|b| *b == b'\n') else {
            let _ = std::fs::remove_file(&f);
            continue;
        };
        let recipient = String::from_utf8_lossy(&content[..nl]).to_string();
        match node.queue_message(&recipient, content[nl + 1..].to_vec()) {
            Ok(()) => {
                let _ = std::fs::remove_file(&f);
            }
            Err(e) if e.contains("queue full") => break,
            Err(e) => {
                tracing::warn!("outbox {}: {e}", f.display());
                let _ = std::fs::rename(&f, f.with_extension("rejected"));
            }
        }
    }
}

/// Runs a client until `shutdown` resolves. Delivered messages are printed
/// to stdout (`message <len> <text>`) and appended to `inbox_file`.
pub async fn run_client(
    cfg: NodeConfig,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), NetError> {
    let dir = Arc::new(load_directory(&cfg)?);
    let key = load_key(&cfg)?;
    let profile = profile_of(&cfg);
    let start = Instant::now();
    let mut node = ClientNode::new(&cfg.name, profile, key, dir, cfg.params.clone(), start)
        .map_err(NetError::Config)?;
    node.set_wall_clock(start, unix_ms());
    let sock = bind(&cfg).await?;
    tracing::info!(node = %cfg.name, role = "client", addr = %cfg.listen, profile = %cfg.profile, "node ready");
    let mut res = Resolver {
        cache: HashMap::new(),
    };
    let mut buf = vec![0u8; profile.max_datagram().max(65536)];
    let mut stats_tick =
        tokio::time::interval(Duration::from_secs_f64(cfg.stats_interval.max(0.05)));
    let mut outbox_tick = tokio::time::interval(Duration::from_millis(50));
    let mut inbox = match &cfg.inbox_file {
        Some(p) => Some(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)?,
        ),
        None => None,
    };
    tokio::pin!(shutdown);
    if let Some(p) = &cfg.stats_file {
        write_stats(p, &node.stats);
    }
    loop {
        let wake = node.next_wakeup();
        tokio::select! {
            _ = &mut shutdown => break,
            r = sock.recv_from(&mut buf) => {
                let (n, _) = match r { Ok(x) => x, Err(e) => { tracing::debug!("recv: {e}"); continue } };
                node.handle_datagram(Instant::now(), &buf[..n]);
            }
            _ = tokio::time::sleep_until(tokio::time::Instant::from_std(wake)) => {}
            _ = outbox_tick.tick() => {
                if let Some(ob) = &cfg.outbox_dir { read_outbox(ob, &mut node); }
            }
            _ = stats_tick.tick() => {
                node.set_wall_clock(Instant::now(), unix_ms());
                if let Some(p) = &cfg.stats_file { write_stats(p, &node.stats); }
            }
        }
        let outs = node.poll(Instant::now());
        if !outs.is_empty() {
            send_all(&sock, &mut res, outs).await;
        }
        for d in node.take_delivered() {
            let text = String::from_utf8_lossy(&d.msg);
            println!("message {} {}", d.msg.len(), text.escape_debug());
            if let Some(f) = inbox.as_mut() {
                let ts = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs_f64())
                    .unwrap_or(0.0);
                let line = serde_json::json!({
                    "t": ts,
                    "len": d.msg.len(),
                    "msg_b64": base64::engine::general_purpose::STANDARD.encode(&d.msg),
                });
                let _ = writeln!(f, "{line}");
            }
        }
    }
    if let Some(p) = &cfg.stats_file {
        write_stats(p, &node.stats);
    }
    Ok(())
}
