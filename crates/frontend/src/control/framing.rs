//! Splitting the controller's byte stream into commands (control-spec
//! §2.2): one line per command, or a `+Keyword` line followed by a data
//! block that ends with a line holding a single `.`. Lines end with CRLF or
//! a bare LF. Lines and data blocks are bounded.

/// Longest command line accepted (tor accepts up to 1 MiB for a whole
/// command; a line this long is never needed for what we implement).
pub const MAX_LINE: usize = 64 * 1024;
/// Largest data block of a `+` command (tor's whole-command limit).
pub const MAX_DATA: usize = 1024 * 1024;

/// One command as read from the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawCommand {
    /// The keyword as sent (a multi-line command keeps its `+`).
    pub keyword: String,
    /// The rest of the first line, leading blanks removed.
    pub args: String,
    /// The data block of a `+` command, dot-unstuffed, lines joined with LF.
    pub data: Option<Vec<u8>>,
}

/// Framing errors: the connection gets `500 Line too long.` and is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// A line is longer than the limit.
    #[error("line too long")]
    LineTooLong,
    /// A data block is longer than the limit.
    #[error("data block too long")]
    DataTooLong,
}

struct Pending {
    keyword: String,
    args: String,
    data: Vec<u8>,
}

/// Incremental command framer.
pub struct Framer {
    buf: Vec<u8>,
    pending: Option<Pending>,
    max_line: usize,
    max_data: usize,
}

impl Default for Framer {
    fn default() -> Self {
        Self::new(MAX_LINE, MAX_DATA)
    }
}

impl std::fmt::Debug for Framer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Framer")
            .field("buffered", &self.buf.len())
            .finish()
    }
}

/// Split a command line into keyword and arguments (tor splits at the first
/// white space; a multi-line command's arguments stop at the line's end).
pub fn split_keyword(line: &str) -> (String, String) {
    let end = line
        .find(|c: char| c.is_ascii_whitespace())
        .unwrap_or(line.len());
    let (kw, rest) = line.split_at(end);
    (kw.to_string(), rest.trim_matches([' ', '\t']).to_string())
}

impl Framer {
    /// A framer with the given bounds.
    pub fn new(max_line: usize, max_data: usize) -> Self {
        Framer {
            buf: Vec::new(),
            pending: None,
            max_line,
            max_data,
        }
    }

    /// Bytes received but not yet part of a whole line.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Append received bytes. Fails once an unterminated line exceeds the
    /// limit (nothing more needs to be read to know the command is bad).
    pub fn push(&mut self, bytes: &[u8]) -> Result<(), FrameError> {
        self.buf.extend_from_slice(bytes);
        let partial = match self.buf.iter().rposition(|&b| b == b'\n') {
            Some(i) => self.buf.len().saturating_sub(i.saturating_add(1)),
            None => self.buf.len(),
        };
        if partial > self.max_line.saturating_add(1) {
            return Err(FrameError::LineTooLong);
        }
        Ok(())
    }

    /// The next whole command, if one has arrived.
    pub fn next_command(&mut self) -> Result<Option<RawCommand>, FrameError> {
        loop {
            let Some(nl) = self.buf.iter().position(|&b| b == b'\n') else {
                return Ok(None);
            };
            let mut line: Vec<u8> = self.buf.drain(..=nl).collect();
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            if line.len() > self.max_line {
                return Err(FrameError::LineTooLong);
            }
            match self.pending.as_mut() {
                None => {
                    let text = String::from_utf8_lossy(&line).into_owned();
                    let (keyword, args) = split_keyword(&text);
                    if keyword.starts_with('+') {
                        self.pending = Some(Pending {
                            keyword,
                            args,
                            data: Vec::new(),
                        });
                        continue;
                    }
                    return Ok(Some(RawCommand {
                        keyword,
                        args,
                        data: None,
                    }));
                }
                Some(p) => {
                    if line == b"." {
                        let p = self.pending.take().ok_or(FrameError::DataTooLong)?;
                        return Ok(Some(RawCommand {
                            keyword: p.keyword,
                            args: p.args,
                            data: Some(p.data),
                        }));
                    }
                    let body = match line.first() {
                        Some(b'.') => line.get(1..).unwrap_or_default(),
                        _ => &line[..],
                    };
                    let new_len = p
                        .data
                        .len()
                        .checked_add(body.len())
                        .and_then(|n| n.checked_add(1))
                        .ok_or(FrameError::DataTooLong)?;
                    if new_len > self.max_data {
                        return Err(FrameError::DataTooLong);
                    }
                    p.data.extend_from_slice(body);
                    p.data.push(b'\n');
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn one_line_commands_crlf_and_lf() {
        let mut f = Framer::default();
        f.push(b"GETINFO version\r\nquit\nPROTO").unwrap();
        let c = f.next_command().unwrap().unwrap();
        assert_eq!(
            (c.keyword.as_str(), c.args.as_str()),
            ("GETINFO", "version")
        );
        let c = f.next_command().unwrap().unwrap();
        assert_eq!((c.keyword.as_str(), c.args.as_str()), ("quit", ""));
        assert!(f.next_command().unwrap().is_none());
        f.push(b"COLINFO 1\r\n").unwrap();
        let c = f.next_command().unwrap().unwrap();
        assert_eq!((c.keyword.as_str(), c.args.as_str()), ("PROTOCOLINFO", "1"));
    }

    #[test]
    fn data_block_unstuffed() {
        let mut f = Framer::default();
        f.push(b"+LOADCONF a b\r\nSocksPort 1\r\n..dot\r\n\r\n.\r\nQUIT\r\n")
            .unwrap();
        let c = f.next_command().unwrap().unwrap();
        assert_eq!(c.keyword, "+LOADCONF");
        assert_eq!(c.args, "a b");
        assert_eq!(c.data.unwrap(), b"SocksPort 1\n.dot\n\n");
        assert_eq!(f.next_command().unwrap().unwrap().keyword, "QUIT");
    }

    #[test]
    fn bounds() {
        let mut f = Framer::new(10, 20);
        assert_eq!(f.push(&[b'a'; 12]), Err(FrameError::LineTooLong));
        let mut f = Framer::new(10, 20);
        f.push(b"0123456789AB\n").unwrap();
        assert_eq!(f.next_command(), Err(FrameError::LineTooLong));
        let mut f = Framer::new(10, 20);
        f.push(b"+X\n123456789\n123456789\n123\n").unwrap();
        assert_eq!(f.next_command(), Err(FrameError::DataTooLong));
    }

    proptest::proptest! {
        #[test]
        fn never_panics_and_split_anywhere_is_the_same(
            data in proptest::collection::vec(proptest::num::u8::ANY, 0..400),
            cut in 0usize..400,
        ) {
            let run = |parts: &[&[u8]]| {
                let mut f = Framer::new(64, 128);
                let mut out = Vec::new();
                for p in parts {
                    if f.push(p).is_err() {
                        out.push(None);
                        return out;
                    }
                    loop {
                        match f.next_command() {
                            Ok(Some(c)) => out.push(Some(c)),
                            Ok(None) => break,
                            Err(_) => { out.push(None); return out; }
                        }
                    }
                }
                out
            };
            let cut = cut.min(data.len());
            let whole = run(&[&data]);
            let split = run(&[&data[..cut], &data[cut..]]);
            // A too-long line may be noticed earlier when split, never later.
            if !whole.contains(&None) && !split.contains(&None) {
                proptest::prop_assert_eq!(whole, split);
            }
        }
    }
}
