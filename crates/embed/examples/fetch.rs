//! Fetch a URL through an embedded onionmix client.
//!
//! ```text
//! cargo run --release -p onionmix-embed --example fetch -- client.toml http://example.com/ [body-out-file]
//! ```
//!
//! Loads the client configuration (the `onionmix client` TOML; its
//! `data_dir` is the state directory, no SOCKS port is opened), bootstraps,
//! sends `GET <path>` to `<host>:<port>` over a stream, prints the status
//! line and the number of bytes received, writes the body to
//! `body-out-file` if given, and shuts down.

use std::path::PathBuf;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use onionmix_embed::{ClientConfig, OnionmixClient};

/// Time allowed for the bootstrap.
const BOOTSTRAP_TIMEOUT: Duration = Duration::from_secs(300);
/// Time allowed for the whole response.
const FETCH_TIMEOUT: Duration = Duration::from_secs(300);
/// Most response bytes read.
const MAX_RESPONSE: u64 = 1 << 30;

/// `http://host[:port][/path]` split up (no userinfo, no IPv6 brackets
/// beyond what `connect` accepts).
fn parse_url(url: &str) -> Result<(String, u16, String), String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or("only http:// URLs are supported")?;
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, "/"),
    };
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !authority.ends_with(']') => {
            let port = p.parse::<u16>().map_err(|_| format!("bad port {p:?}"))?;
            (h, port)
        }
        _ => (authority, 80),
    };
    if host.is_empty() {
        return Err("no host in the URL".into());
    }
    Ok((host.to_string(), port, path.to_string()))
}

#[tokio::main]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("fetch: {e}");
        std::process::exit(1);
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(config), Some(url)) = (args.next(), args.next()) else {
        eprintln!("usage: fetch <client.toml> http://<host>[:<port>]/<path> [body-out-file]");
        std::process::exit(2);
    };
    let out = args.next().map(PathBuf::from);
    let (host, port, path) = parse_url(&url)?;
    let cfg = ClientConfig::load(&PathBuf::from(config))?;

    let client = OnionmixClient::launch(cfg).await?;
    let mut events = client.bootstrap_events();
    let progress = tokio::spawn(async move {
        loop {
            let st = *events.borrow_and_update();
            eprintln!("bootstrapped {}% ({}): {}", st.progress, st.tag, st.summary);
            if st.progress >= 100 || events.changed().await.is_err() {
                break;
            }
        }
    });
    client.wait_bootstrapped(BOOTSTRAP_TIMEOUT).await?;
    let _ = progress.await;

    let result = async {
        let mut s = client.connect(&host, port).await?;
        let req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await?;
        s.flush().await?;
        let mut response = Vec::new();
        tokio::time::timeout(
            FETCH_TIMEOUT,
            (&mut s).take(MAX_RESPONSE).read_to_end(&mut response),
        )
        .await
        .map_err(|_| "the response did not finish in time")??;
        Ok::<_, Box<dyn std::error::Error>>(response)
    }
    .await;
    client.shutdown().await;

    let response = result?;
    let head_end = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no HTTP response head")?;
    let status = response
        .split(|b| *b == b'\n')
        .next()
        .map(|l| String::from_utf8_lossy(l).trim_end().to_string())
        .unwrap_or_default();
    println!("{status}");
    let body = response.get(head_end + 4..).unwrap_or_default();
    println!("{} bytes ({} of body)", response.len(), body.len());
    if let Some(out) = out {
        std::fs::write(&out, body).map_err(|e| format!("cannot write {}: {e}", out.display()))?;
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::parse_url;

    #[test]
    fn urls() {
        assert_eq!(
            parse_url("http://example.com").unwrap(),
            ("example.com".into(), 80, "/".into())
        );
        assert_eq!(
            parse_url("http://127.0.0.1:8080/bytes/10").unwrap(),
            ("127.0.0.1".into(), 8080, "/bytes/10".into())
        );
        assert_eq!(
            parse_url("http://[::1]:81/x").unwrap(),
            ("[::1]".into(), 81, "/x".into())
        );
        assert_eq!(
            parse_url("http://[::1]").unwrap(),
            ("[::1]".into(), 80, "/".into())
        );
        assert!(parse_url("https://example.com").is_err());
        assert!(parse_url("http://:80/").is_err());
        assert!(parse_url("http://h:x/").is_err());
    }
}
