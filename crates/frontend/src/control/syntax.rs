//! Argument grammar (control-spec §2.1, §2.4, §3): positional arguments,
//! `Key=Value` lists whose values may be QuotedStrings (a backslash escapes
//! any character) or C-style strings (`\n`, `\t`, `\r`, octal and `\x`
//! escapes, as tor decodes SETCONF values), and the escaping of strings we
//! send. Behaves like tor's `kvline_parse` and `control_cmd_parse_args`.

/// A syntax error in a command's arguments (`512 Bad arguments to ...`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SyntaxError {
    /// Fewer positional arguments than the command needs.
    #[error("Need at least {0} argument(s)")]
    TooFew(usize),
    /// More arguments than the command takes.
    #[error("Cannot accept more than {0} argument(s)")]
    TooMany(usize),
    /// A `key=value` list did not parse (bad quoting, empty key...).
    #[error("Cannot parse keyword argument(s)")]
    BadKeywords,
    /// A keyword the command does not take.
    #[error("Unrecognized keyword argument \"{0}\"")]
    UnknownKeyword(String),
    /// A multi-line command without data.
    #[error("Empty body")]
    EmptyBody,
}

/// How values in a `key=value` list may be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KvFlags {
    /// Entries may be bare values (`"V"` or `V`) with an empty key.
    pub omit_keys: bool,
    /// Entries may be bare keys (flags) with an empty value.
    pub omit_vals: bool,
    /// Quoted values are QuotedStrings (backslash escapes anything).
    pub qstring: bool,
    /// Quoted values are C strings (tor's SETCONF).
    pub cstring: bool,
}

/// One parsed `key=value` entry. Values are bytes: a quoted value may hold
/// any octet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvEntry {
    /// The key ("" when omitted).
    pub key: String,
    /// The value (empty when omitted).
    pub value: Vec<u8>,
    /// Whether the value was quoted.
    pub quoted: bool,
}

impl KvEntry {
    /// The value as text (lossy).
    pub fn value_str(&self) -> String {
        String::from_utf8_lossy(&self.value).into_owned()
    }
}

fn is_blank(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n' | 0x0b)
}

/// Split `line` into up to `max` positional arguments and the remainder
/// (what follows them, for keyword arguments), like tor's
/// `smartlist_split_string(..., max+1)`.
pub fn split_args(line: &str, max: usize) -> (Vec<&str>, Option<&str>) {
    let mut args = Vec::new();
    let mut rest = line.trim_start_matches([' ', '\t']);
    while !rest.is_empty() {
        if args.len() == max {
            let r = rest.trim_end_matches([' ', '\t']);
            return (args, (!r.is_empty()).then_some(r));
        }
        let end = rest.find([' ', '\t']).unwrap_or(rest.len());
        let (word, tail) = rest.split_at(end);
        args.push(word);
        rest = tail.trim_start_matches([' ', '\t']);
    }
    (args, None)
}

/// Positional arguments with bounds; the remainder, if the command takes
/// keyword arguments.
pub fn positional(
    line: &str,
    min: usize,
    max: usize,
    keywords: bool,
) -> Result<(Vec<&str>, Option<&str>), SyntaxError> {
    let (args, rest) = split_args(line, max);
    if args.len() < min {
        return Err(SyntaxError::TooFew(min));
    }
    if rest.is_some() && !keywords {
        return Err(SyntaxError::TooMany(max));
    }
    Ok((args, rest))
}

/// Decode a QuotedString at the start of `s` (which must begin with `"`):
/// a backslash followed by any character is that character. Returns the
/// value and the bytes after the closing quote.
pub fn decode_qstring(s: &[u8]) -> Option<(Vec<u8>, &[u8])> {
    let mut out = Vec::new();
    let mut i = 1usize;
    if s.first() != Some(&b'"') {
        return None;
    }
    loop {
        match s.get(i)? {
            b'\\' => {
                out.push(*s.get(i.checked_add(1)?)?);
                i = i.checked_add(2)?;
            }
            b'"' => return Some((out, s.get(i.checked_add(1)?..)?)),
            b => {
                out.push(*b);
                i = i.checked_add(1)?;
            }
        }
    }
}

/// Decode a C-style quoted string at the start of `s` (tor's
/// `unescape_string`): `\n \t \r \\ \" \'`, `\xHH` and octal `\NNN`.
pub fn decode_cstring(s: &[u8]) -> Option<(Vec<u8>, &[u8])> {
    let mut out = Vec::new();
    let mut i = 1usize;
    if s.first() != Some(&b'"') {
        return None;
    }
    loop {
        match *s.get(i)? {
            b'"' => return Some((out, s.get(i.checked_add(1)?..)?)),
            b'\\' => {
                let e = *s.get(i.checked_add(1)?)?;
                match e {
                    b'n' => out.push(b'\n'),
                    b't' => out.push(b'\t'),
                    b'r' => out.push(b'\r'),
                    b'\\' | b'"' | b'\'' => out.push(e),
                    b'x' => {
                        let h = s.get(i.checked_add(2)?..i.checked_add(4)?)?;
                        let v = u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok()?;
                        out.push(v);
                        i = i.checked_add(2)?;
                    }
                    b'0'..=b'7' => {
                        let o = s.get(i.checked_add(1)?..i.checked_add(4)?)?;
                        if !o.iter().all(|c| (b'0'..=b'7').contains(c)) {
                            return None;
                        }
                        let v = u16::from_str_radix(std::str::from_utf8(o).ok()?, 8).ok()?;
                        out.push(u8::try_from(v).ok()?);
                        i = i.checked_add(2)?;
                    }
                    _ => return None,
                }
                i = i.checked_add(2)?;
            }
            b => {
                out.push(b);
                i = i.checked_add(1)?;
            }
        }
    }
}

/// Parse a `key=value` list (tor's `kvline_parse`). Forms: `K=V`, `K="V"`,
/// `K` (with `omit_vals`), `V` and `"V"` (with `omit_keys`).
pub fn parse_kvline(line: &str, flags: KvFlags) -> Result<Vec<KvEntry>, SyntaxError> {
    let b = line.as_bytes();
    let mut out = Vec::new();
    let mut i = 0usize;
    while i < b.len() {
        while b.get(i).is_some_and(|&c| is_blank(c)) {
            i += 1;
        }
        if i >= b.len() {
            break;
        }
        let mut key = None;
        if b.get(i) != Some(&b'"') {
            let start = i;
            while b.get(i).is_some_and(|&c| !is_blank(c) && c != b'=') {
                i += 1;
            }
            let k = line.get(start..i).ok_or(SyntaxError::BadKeywords)?;
            if b.get(i) == Some(&b'=') {
                key = Some(k.to_string());
                i += 1;
            } else if flags.omit_vals {
                if k.is_empty() {
                    return Err(SyntaxError::BadKeywords);
                }
                out.push(KvEntry {
                    key: k.to_string(),
                    value: Vec::new(),
                    quoted: false,
                });
                continue;
            } else if flags.omit_keys {
                i = start;
            } else {
                return Err(SyntaxError::BadKeywords);
            }
        }
        let (value, quoted) = if b.get(i) == Some(&b'"') {
            let rest = b.get(i..).ok_or(SyntaxError::BadKeywords)?;
            let decoded = if flags.cstring {
                decode_cstring(rest)
            } else if flags.qstring {
                decode_qstring(rest)
            } else {
                return Err(SyntaxError::BadKeywords);
            };
            let (v, tail) = decoded.ok_or(SyntaxError::BadKeywords)?;
            if v.contains(&0) {
                return Err(SyntaxError::BadKeywords);
            }
            i = b.len() - tail.len();
            (v, true)
        } else {
            let start = i;
            while b.get(i).is_some_and(|&c| !is_blank(c)) {
                i += 1;
            }
            (b.get(start..i).unwrap_or_default().to_vec(), false)
        };
        if key.as_deref() == Some("") {
            return Err(SyntaxError::BadKeywords);
        }
        out.push(KvEntry {
            key: key.unwrap_or_default(),
            value,
            quoted,
        });
    }
    Ok(out)
}

/// Check that every entry's key is one of `allowed` (case-insensitive).
pub fn check_keywords(entries: &[KvEntry], allowed: &[&str]) -> Result<(), SyntaxError> {
    for e in entries {
        if !allowed.iter().any(|a| a.eq_ignore_ascii_case(&e.key)) {
            return Err(SyntaxError::UnknownKeyword(e.key.clone()));
        }
    }
    Ok(())
}

/// Quote `s` as tor quotes strings it sends (C escapes for `\`, `"`,
/// CR, LF, TAB; octal for other non-printable bytes).
pub fn quote(s: &[u8]) -> String {
    let mut out = String::with_capacity(s.len().saturating_add(2));
    out.push('"');
    for &c in s {
        match c {
            b'\\' => out.push_str("\\\\"),
            b'"' => out.push_str("\\\""),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            0x20..=0x7e => out.push(char::from(c)),
            _ => out.push_str(&format!("\\{c:03o}")),
        }
    }
    out.push('"');
    out
}

/// Decode hex (either case); None on odd length or a non-hex digit.
pub fn decode_hex(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    if !b.len().is_multiple_of(2) {
        return None;
    }
    b.chunks(2)
        .map(|p| {
            let d = |c: u8| char::from(c).to_digit(16);
            u8::try_from(d(*p.first()?)? * 16 + d(*p.get(1)?)?).ok()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const SETCONF: KvFlags = KvFlags {
        omit_keys: false,
        omit_vals: true,
        qstring: false,
        cstring: true,
    };

    #[test]
    fn positional_and_remainder() {
        assert_eq!(split_args("  a  b c ", 1), (vec!["a"], Some("b c")));
        assert_eq!(split_args("a b", 5), (vec!["a", "b"], None));
        assert_eq!(positional("", 1, 1, false), Err(SyntaxError::TooFew(1)));
        assert_eq!(positional("a b", 0, 1, false), Err(SyntaxError::TooMany(1)));
        assert_eq!(
            positional("5 IfUnused", 1, 1, true).unwrap().1,
            Some("IfUnused")
        );
    }

    #[test]
    fn kvline_forms() {
        let v = parse_kvline(
            r#"SocksPort=9050 DisableNetwork __X="a b\"c" Flag"#,
            SETCONF,
        )
        .unwrap();
        assert_eq!(v.len(), 4);
        assert_eq!(v[0].key, "SocksPort");
        assert_eq!(v[0].value, b"9050");
        assert_eq!(v[1].key, "DisableNetwork");
        assert!(v[1].value.is_empty());
        assert_eq!(v[2].value, b"a b\"c");
        assert!(v[2].quoted);
        assert!(parse_kvline(r#"X="unterminated"#, SETCONF).is_err());
        assert!(parse_kvline("=v", SETCONF).is_err());
        let auth = KvFlags {
            omit_keys: true,
            qstring: true,
            ..KvFlags::default()
        };
        let v = parse_kvline(r#""pa\ss\"word""#, auth).unwrap();
        assert_eq!(v[0].value, b"pass\"word");
        assert_eq!(v[0].key, "");
        let v = parse_kvline("00ff", auth).unwrap();
        assert_eq!(v[0].value, b"00ff");
        assert!(!v[0].quoted);
    }

    #[test]
    fn cstring_escapes() {
        let (v, rest) = decode_cstring(br#""a\n\t\x41\101\\" tail"#).unwrap();
        assert_eq!(v, b"a\n\tAA\\");
        assert_eq!(rest, b" tail");
        assert!(decode_cstring(br#""\q""#).is_none());
        assert!(decode_cstring(br#""\777""#).is_none());
        assert!(decode_cstring(br#""abc"#).is_none());
    }

    #[test]
    fn quoting_round_trips_through_cstring() {
        let s = b"a\"b\\c\n\x01\xff";
        let q = quote(s);
        assert_eq!(q, r#""a\"b\\c\n\001\377""#);
        assert_eq!(decode_cstring(q.as_bytes()).unwrap().0, s);
    }

    #[test]
    fn hex() {
        assert_eq!(decode_hex("00Ff").unwrap(), vec![0, 255]);
        assert!(decode_hex("0").is_none());
        assert!(decode_hex("zz").is_none());
    }

    proptest::proptest! {
        #[test]
        fn kvline_never_panics(s in "\\PC{0,80}", k in 0u8..16) {
            let flags = KvFlags {
                omit_keys: k & 1 != 0,
                omit_vals: k & 2 != 0 && k & 1 == 0,
                qstring: k & 4 != 0,
                cstring: k & 8 != 0,
            };
            let _ = parse_kvline(&s, flags);
            let _ = split_args(&s, usize::from(k));
            let _ = decode_hex(&s);
        }

        #[test]
        fn quote_round_trip(v in proptest::collection::vec(proptest::num::u8::ANY, 0..64)) {
            let q = quote(&v);
            let (d, rest) = decode_cstring(q.as_bytes()).expect("decodes");
            proptest::prop_assert_eq!(d, v);
            proptest::prop_assert!(rest.is_empty());
        }
    }
}
