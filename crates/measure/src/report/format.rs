//! Formatting helpers of the report: sizes, numbers, intervals, table cells, file-name slugs, dates.

use std::path::Path;

/// A byte count for people: `512 B`, `50 KiB`, `1 MiB`, `1.5 MiB`
/// (binary units, at most two decimals, trailing zeros dropped).
pub fn human_size(bytes: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ];
    for (unit, scale) in UNITS {
        if bytes >= scale {
            if bytes.is_multiple_of(scale) {
                return format!("{} {unit}", bytes / scale);
            }
            let v = format!("{:.2}", bytes as f64 / scale as f64);
            let v = v.trim_end_matches('0').trim_end_matches('.');
            return format!("{v} {unit}");
        }
    }
    format!("{bytes} B")
}

/// A size for tables (`—` when there is none).
pub(super) fn size_cell(size: Option<u64>) -> String {
    size.map_or_else(|| "—".to_string(), human_size)
}

/// A size for file names: `50KiB`, `1.5MiB`, `nosize`.
pub(super) fn size_slug(size: Option<u64>) -> String {
    size.map_or_else(|| "nosize".to_string(), |s| human_size(s).replace(' ', ""))
}

/// Replaces characters that do not belong in a file name.
pub(super) fn slug(s: &str) -> String {
    let out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() || out.chars().all(|c| c == '.') {
        "_".to_string()
    } else {
        out
    }
}

/// A number for tables: a few significant digits, `–` for NaN.
pub(super) fn num(v: f64) -> String {
    if v.is_nan() {
        return "–".to_string();
    }
    if v.is_infinite() {
        return if v > 0.0 { "∞" } else { "-∞" }.to_string();
    }
    let a = v.abs();
    if a == 0.0 {
        "0".to_string()
    } else if !(1e-3..1e6).contains(&a) {
        format!("{v:.3e}")
    } else if a >= 1000.0 {
        format!("{v:.0}")
    } else if a >= 100.0 {
        format!("{v:.1}")
    } else if a >= 10.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// An interval for tables.
pub(super) fn interval((lo, hi): (f64, f64)) -> String {
    if lo.is_nan() && hi.is_nan() {
        "–".to_string()
    } else {
        format!("[{}, {}]", num(lo), num(hi))
    }
}

/// Escapes text for a Markdown table cell.
pub(super) fn cell(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('|', "\\|")
        .replace(['\n', '\r'], " ")
}

/// Inline Markdown code, safe for text containing backticks.
pub(super) fn code(s: &str) -> String {
    let s = s.replace(['\n', '\r'], " ");
    if s.is_empty() {
        "(none)".to_string()
    } else if s.contains('`') {
        format!("`` {s} ``")
    } else {
        format!("`{s}`")
    }
}

/// `YYYY-MM-DD HH:MM:SS UTC` for Unix seconds (times past the year 9999
/// are written as its last second).
pub(super) fn utc(unix: u64) -> String {
    const FORMAT: &[time::format_description::BorrowedFormatItem<'static>] =
        time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second] UTC");
    let t = i64::try_from(unix).unwrap_or(i64::MAX);
    time::OffsetDateTime::from_unix_timestamp(t)
        .unwrap_or_else(|_| time::PrimitiveDateTime::MAX.assume_utc())
        .format(FORMAT)
        .unwrap_or_else(|_| "9999-12-31 23:59:59 UTC".to_string())
}
/// The last component of `path` as text.
pub(super) fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}
