//! Replies (control-spec §2.3, §4): `250-` mid-reply lines, `250+` data
//! lines with a dot-encoded block, the final `250 ` line, and `650`
//! asynchronous events. Text that goes on one line never carries CR or LF
//! (they become spaces), so nothing a peer or relay names can inject lines.

/// One line of a reply.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Line {
    Text {
        code: u16,
        text: String,
    },
    Data {
        code: u16,
        head: String,
        body: String,
    },
}

/// A reply being built.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reply {
    lines: Vec<Line>,
}

fn one_line(s: &str) -> String {
    s.replace(['\r', '\n'], " ")
}

/// Append `body` as a CmdData block: LF becomes CRLF, a line starting with
/// `.` gets another `.`, and the block ends with `CRLF . CRLF`.
pub fn dot_encode(body: &str, out: &mut Vec<u8>) {
    let mut start_of_line = true;
    let mut last = 0u8;
    for &b in body.as_bytes() {
        match b {
            b'\n' => {
                if last != b'\r' {
                    out.push(b'\r');
                }
                start_of_line = true;
            }
            b'.' if start_of_line => {
                out.push(b'.');
                start_of_line = false;
            }
            _ => start_of_line = false,
        }
        out.push(b);
        last = b;
    }
    if !out.ends_with(b"\r\n") || body.is_empty() {
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b".\r\n");
}

impl Reply {
    /// An empty reply.
    pub fn new() -> Self {
        Reply::default()
    }

    /// `250 OK`.
    pub fn ok() -> Self {
        Reply::single(250, "OK")
    }

    /// A one-line reply.
    pub fn single(code: u16, text: &str) -> Self {
        let mut r = Reply::new();
        r.line(code, text);
        r
    }

    /// Add a line.
    pub fn line(&mut self, code: u16, text: &str) -> &mut Self {
        self.lines.push(Line::Text {
            code,
            text: one_line(text),
        });
        self
    }

    /// Add `key=value`, as a data line when the value spans lines (tor's
    /// rule: any CR or LF in it).
    pub fn kv(&mut self, code: u16, key: &str, value: &str) -> &mut Self {
        if value.contains(['\r', '\n']) {
            self.lines.push(Line::Data {
                code,
                head: format!("{}=", one_line(key)),
                body: value.to_string(),
            });
        } else {
            self.line(code, &format!("{key}={value}"));
        }
        self
    }

    /// Whether nothing was added.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// The reply's bytes. Every line but the last is a mid-reply line; a
    /// data line is always `+` (callers end a reply with a text line).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let n = self.lines.len();
        for (i, l) in self.lines.iter().enumerate() {
            let last = i + 1 == n;
            match l {
                Line::Text { code, text } => {
                    let sep = if last { ' ' } else { '-' };
                    out.extend_from_slice(format!("{code}{sep}{text}\r\n").as_bytes());
                }
                Line::Data { code, head, body } => {
                    out.extend_from_slice(format!("{code}+{head}\r\n").as_bytes());
                    dot_encode(body, &mut out);
                    if last {
                        out.extend_from_slice(format!("{code} OK\r\n").as_bytes());
                    }
                }
            }
        }
        out
    }
}

/// A one-line asynchronous event: `650 <text>`.
pub fn event(text: &str) -> Vec<u8> {
    format!("650 {}\r\n", one_line(text)).into_bytes()
}

/// A log-message event (§4.1.5), always on one line as tor sends it: line
/// breaks become spaces and trailing spaces go (controllers that read
/// only the one-line form still get every message).
pub fn log_event(severity: &str, msg: &str) -> Vec<u8> {
    let flat = one_line(msg);
    event(&format!("{severity} {}", flat.trim_end_matches(' ')))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn getinfo_shapes() {
        let mut r = Reply::new();
        r.kv(250, "version", "0.4.9.11")
            .kv(250, "circuit-status", "1 BUILT a\r\n2 LAUNCHED\n.hidden")
            .kv(250, "stream-status", "")
            .line(250, "OK");
        assert_eq!(
            String::from_utf8(r.encode()).unwrap(),
            "250-version=0.4.9.11\r\n250+circuit-status=\r\n1 BUILT a\r\n2 LAUNCHED\r\n..hidden\r\n.\r\n250-stream-status=\r\n250 OK\r\n"
        );
    }

    #[test]
    fn no_line_injection() {
        let r = Reply::single(552, "Unknown circuit \"a\r\n250 OK\"");
        assert_eq!(r.encode(), b"552 Unknown circuit \"a  250 OK\"\r\n");
        assert_eq!(event("CIRC 1\nX"), b"650 CIRC 1 X\r\n");
    }

    #[test]
    fn dot_encoding() {
        let mut out = Vec::new();
        dot_encode("", &mut out);
        assert_eq!(out, b"\r\n.\r\n");
        let mut out = Vec::new();
        dot_encode("a\n", &mut out);
        assert_eq!(out, b"a\r\n.\r\n");
        let mut out = Vec::new();
        dot_encode(".\n..x", &mut out);
        assert_eq!(out, b"..\r\n...x\r\n.\r\n");
        assert_eq!(log_event("NOTICE", "a\nb\r\n"), b"650 NOTICE a b\r\n");
        assert_eq!(log_event("WARN", "one"), b"650 WARN one\r\n");
    }

    proptest::proptest! {
        /// A data block always decodes back (LF-normalised) through the
        /// framer's unstuffing, and never ends early.
        #[test]
        fn dot_encode_round_trips(body in "[a-z.\n]{0,60}") {
            let mut out = b"+X\r\n".to_vec();
            dot_encode(&body, &mut out);
            let mut f = crate::control::framing::Framer::default();
            f.push(&out).expect("fits");
            let c = f.next_command().expect("frames").expect("complete");
            let mut want = body.clone();
            if !want.is_empty() && !want.ends_with('\n') { want.push('\n'); }
            if body.is_empty() { want = "\n".into(); }
            proptest::prop_assert_eq!(String::from_utf8(c.data.expect("data")).expect("utf8"), want);
        }
    }
}
