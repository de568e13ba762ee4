//! Shared helpers for tests that run Loopix networks of real `onionmix`
//! processes on 127.0.0.1 (free UDP ports, temp dirs; every process the
//! network started is killed by its handle on drop, also on panic).
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use onionmix_mix::directory::Directory;
use onionmix_mix::loopix::codec::SecretKey;
use onionmix_mix::loopix::config::Role;
use onionmix_mix::testnet::{self, LoopixSpec, ProcessSpec};

pub use onionmix_testsupport::repo_root;

pub struct Network {
    pub procs: Vec<ProcessSpec>,
    running: HashMap<String, Child>,
    pub dir: Directory,
    /// Every node's secret key (tests play clients that hold them).
    pub keys: BTreeMap<String, SecretKey>,
    _tmp: tempfile::TempDir,
}

/// The binary to run: `onionmix` from this build, or `ONIONMIX_LOOPIX_BIN`
/// (to measure another build, e.g. the one before a fix).
pub fn onionmix_bin() -> PathBuf {
    std::env::var_os("ONIONMIX_LOOPIX_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_onionmix")))
}

impl Drop for Network {
    fn drop(&mut self) {
        for (_, c) in self.running.iter_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Network {
    pub fn generate(spec: &LoopixSpec) -> Network {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (g, procs) = testnet::generate(spec, tmp.path()).expect("generate network");
        Network {
            procs,
            running: HashMap::new(),
            dir: g.directory,
            keys: g.keys,
            _tmp: tmp,
        }
    }

    pub fn spec(&self, name: &str) -> &ProcessSpec {
        self.procs
            .iter()
            .find(|p| p.name == name)
            .expect("known process")
    }

    pub fn start(&mut self, name: &str) {
        let p = self.spec(name).clone();
        let _ = std::fs::remove_file(&p.stats);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&p.log)
            .expect("log file");
        let child = Command::new(onionmix_bin())
            .args(&p.argv)
            .env("ONIONMIX_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("dup log"))
            .stderr(log)
            .spawn()
            .expect("start onionmix");
        self.running.insert(name.to_string(), child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while !p.stats.exists() {
            assert!(
                Instant::now() < deadline,
                "{name} not ready; log:\n{}",
                std::fs::read_to_string(&p.log).unwrap_or_default()
            );
            if let Some(c) = self.running.get_mut(name)
                && let Ok(Some(st)) = c.try_wait()
            {
                panic!(
                    "{name} exited with {st}; log:\n{}",
                    std::fs::read_to_string(&p.log).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn kill(&mut self, name: &str) {
        if let Some(mut c) = self.running.remove(name) {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn start_infrastructure(&mut self) {
        let names: Vec<String> = self
            .procs
            .iter()
            .filter(|p| p.role != Role::Client)
            .map(|p| p.name.clone())
            .collect();
        for n in names {
            self.start(&n);
        }
    }

    pub fn stats(&self, name: &str) -> serde_json::Value {
        let p = &self.spec(name).stats;
        for _ in 0..50 {
            if let Ok(t) = std::fs::read_to_string(p)
                && let Ok(v) = serde_json::from_str(&t)
            {
                return v;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("cannot read stats of {name}");
    }

    pub fn inbox(&self, name: &str) -> Vec<Vec<u8>> {
        let Some(p) = &self.spec(name).inbox else {
            return vec![];
        };
        let text = std::fs::read_to_string(p).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter_map(|v| {
                use base64::Engine;
                base64::engine::general_purpose::STANDARD
                    .decode(v["msg_b64"].as_str()?)
                    .ok()
            })
            .collect()
    }

    pub fn send(&self, from: &str, to: &str, msg: &[u8]) {
        let outbox = self.spec(from).outbox.clone().expect("client outbox");
        onionmix_mix::net::write_outbox(&outbox, to, msg).expect("write outbox");
    }

    pub fn clients(&self) -> Vec<String> {
        self.procs
            .iter()
            .filter(|p| p.role == Role::Client)
            .map(|p| p.name.clone())
            .collect()
    }

    /// Waits until every (recipient, message) pair has arrived.
    pub fn wait_delivered(&self, expect: &[(String, Vec<u8>)], timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let missing: Vec<&(String, Vec<u8>)> = expect
                .iter()
                .filter(|(to, m)| !self.inbox(to).iter().any(|x| x == m))
                .collect();
            if missing.is_empty() {
                return;
            }
            if Instant::now() > deadline {
                let show: Vec<String> = missing
                    .iter()
                    .take(5)
                    .map(|(to, m)| format!("{to}: {}", String::from_utf8_lossy(m)))
                    .collect();
                panic!(
                    "{} of {} messages not delivered, e.g. {show:?}",
                    missing.len(),
                    expect.len()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

pub fn load_spec(file: &str) -> LoopixSpec {
    let text = std::fs::read_to_string(repo_root().join("testnets").join(file)).expect("read spec");
    LoopixSpec::from_toml(&text).expect("parse spec")
}

pub fn u(v: &serde_json::Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or(0)
}

pub fn send_udp(to: (&str, u16), data: &[u8]) {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    s.send_to(data, to).expect("send");
}

pub fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    onionmix_testsupport::wait_for(what, timeout, Duration::from_millis(50), || {
        f().then_some(())
    })
}
