//! The commands after authentication: parse their arguments (tor's
//! per-command syntax), call the [`Backend`], and format the reply.

use super::events::EVENT_NAMES;
use super::reply::Reply;
use super::session::{
    Backend, CONF_FLAGS, ConfError, FLAG_FLAGS, Info, Outcome, SIGNAL_NAMES, Signal, bad_args, out,
};
use super::syntax::{self, KvFlags, SyntaxError, positional};

pub(crate) fn upper_hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02X}")).collect()
}

pub(crate) fn getinfo(args: &str, b: &mut dyn Backend) -> Outcome {
    let mut answers = Reply::new();
    let mut unknown = Reply::new();
    for key in args.split_ascii_whitespace() {
        let v = match key {
            "events/names" => Info::Value(EVENT_NAMES.join(" ")),
            "signal/names" => Info::Value(SIGNAL_NAMES.join(" ")),
            "features/names" => Info::Value("VERBOSE_NAMES EXTENDED_EVENTS".into()),
            _ => b.getinfo(key),
        };
        match v {
            Info::Value(v) => {
                answers.kv(250, key, &v);
            }
            Info::Unknown => {
                unknown.line(552, &format!("Unrecognized key \"{key}\""));
            }
            Info::Fail(msg) => return out(Reply::single(551, &msg), false),
        }
    }
    if !unknown.is_empty() {
        return out(unknown, false);
    }
    answers.line(250, "OK");
    out(answers, false)
}

pub(crate) fn getconf(args: &str, b: &mut dyn Backend) -> Outcome {
    let mut answers = Reply::new();
    let mut unknown = Reply::new();
    for key in args.split_ascii_whitespace() {
        match b.getconf(key) {
            None => {
                unknown.line(552, &format!("Unrecognized configuration key \"{key}\""));
            }
            Some(vals) => {
                for (k, v) in vals {
                    match v {
                        Some(v) => answers.line(250, &format!("{k}={v}")),
                        None => answers.line(250, &k),
                    };
                }
            }
        }
    }
    if !unknown.is_empty() {
        out(unknown, false)
    } else if !answers.is_empty() {
        out(answers, false)
    } else {
        out(Reply::ok(), false)
    }
}

pub(crate) fn setconf(kw: &str, args: &str, b: &mut dyn Backend) -> Outcome {
    let entries = match syntax::parse_kvline(args, CONF_FLAGS) {
        Ok(e) => e,
        Err(e) => return bad_args(kw, &e),
    };
    let changes: Vec<(String, Option<String>)> = entries
        .iter()
        .map(|e| {
            let v = (!e.value.is_empty() || e.quoted).then(|| e.value_str());
            (e.key.clone(), v)
        })
        .collect();
    match b.setconf(&changes, kw == "RESETCONF") {
        Ok(()) => out(Reply::ok(), false),
        Err(ConfError::Unknown(k)) => out(
            Reply::single(
                552,
                &format!("Unrecognized option: Unknown option '{k}'.  Failing."),
            ),
            false,
        ),
        Err(ConfError::Parse(m)) => out(
            Reply::single(513, &format!("Unacceptable option value: {m}")),
            false,
        ),
        Err(ConfError::Setting(m)) => out(
            Reply::single(553, &format!("Unable to set option: {m}")),
            false,
        ),
    }
}

pub(crate) fn signal(args: &str, b: &mut dyn Backend) -> Outcome {
    let (pos, _) = match positional(args, 1, 1, false) {
        Ok(x) => x,
        Err(e) => return bad_args("SIGNAL", &e),
    };
    let name = pos.first().copied().unwrap_or("");
    match Signal::parse(name) {
        Some(sig) => {
            b.signal(sig);
            out(Reply::ok(), false)
        }
        None => out(
            Reply::single(552, &format!("Unrecognized signal code \"{name}\"")),
            false,
        ),
    }
}

pub(crate) fn usefeature(args: &str) -> Outcome {
    for f in args.split_ascii_whitespace() {
        if !(f.eq_ignore_ascii_case("VERBOSE_NAMES") || f.eq_ignore_ascii_case("EXTENDED_EVENTS")) {
            return out(
                Reply::single(552, &format!("Unrecognized feature \"{f}\"")),
                false,
            );
        }
    }
    out(Reply::ok(), false)
}

pub(crate) fn extendcircuit(args: &str, b: &mut dyn Backend) -> Outcome {
    let (pos, rest) = match positional(args, 1, 1, true) {
        Ok(x) => x,
        Err(e) => return bad_args("EXTENDCIRCUIT", &e),
    };
    let id = pos.first().copied().unwrap_or("0");
    let mut kws = match syntax::parse_kvline(rest.unwrap_or(""), FLAG_FLAGS) {
        Ok(k) => k,
        Err(e) => return bad_args("EXTENDCIRCUIT", &e),
    };
    // The optional path is the first bare word (or `$FP=nick`, historic).
    let mut path = None;
    if let Some(first) = kws.first() {
        if first.value.is_empty() && !first.quoted {
            path = Some(first.key.clone());
            kws.remove(0);
        } else if first.key.starts_with('$') {
            path = Some(format!("{}={}", first.key, first.value_str()));
            kws.remove(0);
        }
    }
    let purpose = kws
        .iter()
        .find(|k| k.key.eq_ignore_ascii_case("purpose"))
        .map(|k| k.value_str());
    if id != "0" && path.is_none() {
        // Unknown circuits are reported before the missing path, as tor does.
        if !b.circuit_exists(id) {
            return out(
                Reply::single(552, &format!("Unknown circuit \"{id}\"")),
                false,
            );
        }
        return out(Reply::single(512, "syntax error: path required."), false);
    }
    let hops = path.map(|p| p.split(',').map(str::to_string).collect::<Vec<_>>());
    if hops
        .as_ref()
        .is_some_and(|h| h.iter().all(String::is_empty))
    {
        return out(Reply::single(512, "No router names provided"), false);
    }
    match b.extend_circuit(id, hops, purpose.as_deref()) {
        Ok(n) => out(Reply::single(250, &format!("EXTENDED {n}")), false),
        Err(e) => out(Reply::single(e.code, &e.msg), false),
    }
}

pub(crate) fn setcircuitpurpose(args: &str, b: &mut dyn Backend) -> Outcome {
    let (pos, rest) = match positional(args, 1, 1, true) {
        Ok(x) => x,
        Err(e) => return bad_args("SETCIRCUITPURPOSE", &e),
    };
    let kws = match syntax::parse_kvline(rest.unwrap_or(""), FLAG_FLAGS) {
        Ok(k) => k,
        Err(e) => return bad_args("SETCIRCUITPURPOSE", &e),
    };
    let Some(p) = kws.iter().find(|k| k.key.eq_ignore_ascii_case("purpose")) else {
        return out(Reply::single(552, "No purpose given"), false);
    };
    match b.set_circuit_purpose(pos.first().copied().unwrap_or(""), &p.value_str()) {
        Ok(()) => out(Reply::ok(), false),
        Err(e) => out(Reply::single(e.code, &e.msg), false),
    }
}

pub(crate) fn attachstream(args: &str, b: &mut dyn Backend) -> Outcome {
    let (pos, rest) = match positional(args, 2, 2, true) {
        Ok(x) => x,
        Err(e) => return bad_args("ATTACHSTREAM", &e),
    };
    let kws = match syntax::parse_kvline(rest.unwrap_or(""), KvFlags::default())
        .and_then(|k| syntax::check_keywords(&k, &["HOP"]).map(|()| k))
    {
        Ok(k) => k,
        Err(e) => return bad_args("ATTACHSTREAM", &e),
    };
    let hop = match kws.first() {
        None => None,
        Some(h) => match h.value_str().parse::<u32>() {
            Ok(n) => Some(n),
            Err(_) => {
                return out(
                    Reply::single(552, &format!("Bad value hop={}", h.value_str())),
                    false,
                );
            }
        },
    };
    let (s, c) = match pos.as_slice() {
        [s, c] => (*s, *c),
        _ => return bad_args("ATTACHSTREAM", &SyntaxError::TooFew(2)),
    };
    match b.attach_stream(s, c, hop) {
        Ok(()) => out(Reply::ok(), false),
        Err(e) => out(Reply::single(e.code, &e.msg), false),
    }
}

pub(crate) fn closestream(args: &str, b: &mut dyn Backend) -> Outcome {
    let (pos, _) = match positional(args, 2, usize::MAX, false) {
        Ok(x) => x,
        Err(e) => return bad_args("CLOSESTREAM", &e),
    };
    let (s, r) = match pos.as_slice() {
        [s, r, ..] => (*s, *r),
        _ => return bad_args("CLOSESTREAM", &SyntaxError::TooFew(2)),
    };
    let Ok(reason) = r.parse::<u8>() else {
        return out(
            Reply::single(552, &format!("Unrecognized reason \"{r}\"")),
            false,
        );
    };
    match b.close_stream(s, reason) {
        Ok(()) => out(Reply::ok(), false),
        Err(e) => out(Reply::single(e.code, &e.msg), false),
    }
}

pub(crate) fn closecircuit(args: &str, b: &mut dyn Backend) -> Outcome {
    let (pos, rest) = match positional(args, 1, 1, true) {
        Ok(x) => x,
        Err(e) => return bad_args("CLOSECIRCUIT", &e),
    };
    let kws = match syntax::parse_kvline(rest.unwrap_or(""), FLAG_FLAGS) {
        Ok(k) => k,
        Err(e) => return bad_args("CLOSECIRCUIT", &e),
    };
    let if_unused = kws
        .iter()
        .any(|k| k.key.eq_ignore_ascii_case("IfUnused") && k.value.is_empty());
    match b.close_circuit(pos.first().copied().unwrap_or(""), if_unused) {
        Ok(()) => out(Reply::ok(), false),
        Err(e) => out(Reply::single(e.code, &e.msg), false),
    }
}
