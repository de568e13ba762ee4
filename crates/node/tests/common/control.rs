//! A raw control-port connection for tests: send command lines, read
//! whole replies and events as text.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// How long one reply may take (generous: a busy machine).
pub const T: Duration = Duration::from_secs(30);

/// One control connection.
pub struct Ctl {
    pub r: BufReader<tokio::net::tcp::OwnedReadHalf>,
    pub w: tokio::net::tcp::OwnedWriteHalf,
}

impl Ctl {
    pub async fn connect(a: SocketAddr) -> Ctl {
        let (r, w) = TcpStream::connect(a).await.unwrap().into_split();
        Ctl {
            r: BufReader::new(r),
            w,
        }
    }

    /// Connect and authenticate with the cookie in `data_dir`.
    pub async fn auth(a: SocketAddr, data_dir: &Path) -> Ctl {
        let cookie = std::fs::read(data_dir.join("control_auth_cookie")).unwrap();
        let mut c = Ctl::connect(a).await;
        assert_eq!(
            c.cmd(&format!("AUTHENTICATE {}", hex::encode(cookie)))
                .await,
            "250 OK\r\n"
        );
        c
    }

    pub async fn send(&mut self, b: &[u8]) {
        self.w.write_all(b).await.unwrap();
    }

    /// One whole reply (through its end line), as text.
    pub async fn reply(&mut self) -> String {
        let mut out = String::new();
        loop {
            let mut line = String::new();
            let n = tokio::time::timeout(T, self.r.read_line(&mut line))
                .await
                .expect("a reply in time")
                .unwrap();
            assert!(n > 0, "connection closed; so far: {out:?}");
            out.push_str(&line);
            if line.as_bytes().get(3) == Some(&b'+') {
                loop {
                    let mut d = String::new();
                    tokio::time::timeout(T, self.r.read_line(&mut d))
                        .await
                        .unwrap()
                        .unwrap();
                    out.push_str(&d);
                    if d == ".\r\n" {
                        break;
                    }
                }
            } else if line.as_bytes().get(3) == Some(&b' ') {
                return out;
            }
        }
    }

    pub async fn cmd(&mut self, c: &str) -> String {
        self.send(format!("{c}\r\n").as_bytes()).await;
        self.reply().await
    }

    /// The next reply that starts with `prefix` (others skipped).
    pub async fn event(&mut self, prefix: &str) -> String {
        loop {
            let e = self.reply().await;
            if e.starts_with(prefix) {
                return e;
            }
        }
    }

    /// Whether the server closed the connection.
    pub async fn closed(&mut self) -> bool {
        let mut b = [0u8; 64];
        matches!(
            tokio::time::timeout(T, self.r.read(&mut b)).await,
            Ok(Ok(0)) | Ok(Err(_))
        )
    }
}
