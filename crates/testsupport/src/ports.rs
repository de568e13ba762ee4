//! Ports for the processes a launcher or a test starts.
//!
//! A port found free by a bind test is free only until someone else binds
//! it, and a launcher plans every port of a network before the first node
//! starts (key generation in between takes seconds). Two launchers planning
//! at once (two tests of one binary, two `testnet start`s) used to draw the
//! same port now and then. So ports come from blocks: a process locks a
//! block of [`BLOCK`] ports host-wide (an advisory lock on a file in
//! [`lock_dir`], held until the process exits, also once the block is used
//! up) and hands its ports out once each. Ports are below Linux's ephemeral range (32768+), so outgoing
//! connections never take them between allocation and use.

use std::collections::HashSet;
use std::fs::File;
use std::io;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Mutex;

/// Where node ports come from.
pub const PORT_RANGE: Range<u16> = 20000..32000;
/// Ports per locked block.
pub const BLOCK: u16 = 50;

struct Block {
    lock: File,
    next: u16,
    end: u16,
}

#[derive(Default)]
struct Alloc {
    block: Option<Block>,
    /// Locks of blocks whose ports are all handed out, kept until the
    /// process exits: a port handed out but not bound yet (or free while
    /// its node restarts) must not go to another process.
    used: Vec<File>,
    tried: HashSet<u16>,
    handed: HashSet<u16>,
}

static ALLOC: Mutex<Option<Alloc>> = Mutex::new(None);

/// The directory of the block lock files (`ONIONMIX_PORT_LOCK_DIR`, or
/// `/tmp/onionmix-ports`).
pub fn lock_dir() -> PathBuf {
    std::env::var_os("ONIONMIX_PORT_LOCK_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp/onionmix-ports"))
}

fn bindable(ip: &str, p: u16) -> bool {
    std::net::TcpListener::bind((ip, p)).is_ok() && std::net::UdpSocket::bind((ip, p)).is_ok()
}

fn lock_block(index: u16) -> Option<File> {
    let dir = lock_dir();
    std::fs::create_dir_all(&dir).ok()?;
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(format!("block-{index}.lock")))
        .ok()?;
    f.try_lock().ok()?;
    Some(f)
}

fn new_block(a: &mut Alloc) -> Option<Block> {
    use rand::seq::SliceRandom;
    let n = (PORT_RANGE.end - PORT_RANGE.start) / BLOCK;
    let mut order: Vec<u16> = (0..n).filter(|i| !a.tried.contains(i)).collect();
    order.shuffle(&mut rand::thread_rng());
    for i in order {
        a.tried.insert(i);
        if let Some(lock) = lock_block(i) {
            let start = PORT_RANGE.start + i * BLOCK;
            return Some(Block {
                lock,
                next: start,
                end: start + BLOCK,
            });
        }
    }
    None
}

/// A port on `ip`, free for both TCP and UDP now, that no other caller in
/// this process got and that no other process allocating through this
/// module can get while this process runs.
pub fn free_port(ip: &str) -> io::Result<u16> {
    let mut guard = ALLOC.lock().unwrap_or_else(|e| e.into_inner());
    let a = guard.get_or_insert_with(Alloc::default);
    loop {
        if a.block.is_none() {
            a.block = new_block(a);
        }
        let Some(b) = a.block.as_mut() else {
            break;
        };
        while b.next < b.end {
            let p = b.next;
            b.next += 1;
            if !a.handed.contains(&p) && bindable(ip, p) {
                a.handed.insert(p);
                return Ok(p);
            }
        }
        if let Some(done) = a.block.take() {
            a.used.push(done.lock);
        }
    }
    // Every block is taken (or the lock directory is unusable): fall back to
    // random ports, still never handing one out twice in this process.
    use rand::Rng;
    let mut rng = rand::thread_rng();
    for _ in 0..500 {
        let p = rng.gen_range(PORT_RANGE);
        if !a.handed.contains(&p) && bindable(ip, p) {
            a.handed.insert(p);
            return Ok(p);
        }
    }
    Err(io::Error::other("no free port in the node port range"))
}

/// A TCP address on `ip` that refuses connections for as long as the
/// returned socket lives: bound (so nothing else can take the port) but
/// never listening (so a connect gets a reset). Tests use it for "a closed
/// port"; a port bound and dropped again may be taken meanwhile.
pub fn closed_port(ip: std::net::IpAddr) -> io::Result<(socket2::Socket, std::net::SocketAddr)> {
    use socket2::{Domain, Socket, Type};
    let addr = std::net::SocketAddr::new(ip, 0);
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    s.bind(&addr.into())?;
    let bound = s
        .local_addr()?
        .as_socket()
        .ok_or_else(|| io::Error::other("not an IP socket"))?;
    Ok((s, bound))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_bindable_and_in_range() {
        let mut seen = HashSet::new();
        for _ in 0..120 {
            let p = free_port("127.0.0.1").expect("a port");
            assert!(PORT_RANGE.contains(&p));
            assert!(seen.insert(p), "port {p} handed out twice");
        }
    }

    #[test]
    fn a_closed_port_refuses_connections_while_held() {
        let (held, addr) = closed_port("127.0.0.1".parse().unwrap()).expect("bound");
        let e = std::net::TcpStream::connect(addr).expect_err("nobody listens");
        assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused);
        // The port stays taken.
        assert!(std::net::TcpListener::bind(addr).is_err());
        drop(held);
    }

    #[test]
    fn a_block_stays_locked_after_its_ports_are_handed_out() {
        let first = free_port("127.0.0.1").expect("a port");
        // Enough ports to use up the first port's block whatever else
        // this process allocates meanwhile.
        for _ in 0..2 * BLOCK {
            free_port("127.0.0.1").expect("a port");
        }
        let index = (first - PORT_RANGE.start) / BLOCK;
        // flock conflicts between two opens of one file, even in one
        // process: a lock we still hold makes this one fail.
        assert!(
            lock_block(index).is_none(),
            "block {index} was unlocked once its ports were handed out"
        );
    }

    #[test]
    fn a_locked_block_is_not_taken_twice() {
        // Lock files are per block; a second lock on a held block fails.
        let dir = tempfile_dir();
        let path = dir.join("block-x.lock");
        let a = File::create(&path).expect("create");
        a.try_lock().expect("first lock");
        let b = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .expect("open");
        assert!(b.try_lock().is_err(), "a held block is refused");
        drop(a);
        assert!(b.try_lock().is_ok(), "released with its holder");
        let _ = std::fs::remove_dir_all(dir);
    }

    fn tempfile_dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!("onionmix-ports-test-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("dir");
        d
    }
}
