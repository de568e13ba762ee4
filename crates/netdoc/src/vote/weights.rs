//! Bandwidth weights (dir-spec §3.8.3).

/// Bandwidth weights (dir-spec §3.8.3, consensus method 26 and later:
/// G, M, E, D start at 1). `relays` gives (bandwidth, Guard, Exit) per
/// listed relay. Returned in the order the consensus writes them, each
/// within the 32-bit range clients parse.
pub fn bandwidth_weights(relays: &[(u64, bool, bool)], scale: i64) -> Vec<(&'static str, i64)> {
    // i128: a scale up to i32::MAX times summed bandwidths fits.
    let (mut g, mut m, mut e, mut d) = (1i128, 1i128, 1i128, 1i128);
    for &(bw, guard, exit) in relays {
        let bw = i128::from(bw);
        match (guard, exit) {
            (true, true) => d += bw,
            (true, false) => g += bw,
            (false, true) => e += bw,
            (false, false) => m += bw,
        }
    }
    let t = g + m + e + d;
    let w = i128::from(scale);
    let (wgg, wgd, wmg, wme, wmd, wee, wed);
    if 3 * e >= t && 3 * g >= t {
        // Case 1.
        wgd = w / 3;
        wed = w / 3;
        wmd = w / 3;
        wee = (w * (e + g + m)) / (3 * e);
        wme = w - wee;
        wmg = (w * (2 * g - e - m)) / (3 * g);
        wgg = w - wmg;
    } else if 3 * e < t && 3 * g < t {
        // Case 2.
        let (r, s) = if e < g { (e, g) } else { (g, e) };
        if r + d < s {
            wgg = w;
            wee = w;
            wmg = 0;
            wme = 0;
            wmd = 0;
            if e < g {
                wed = w;
                wgd = 0;
            } else {
                wed = 0;
                wgd = w;
            }
        } else {
            let a_wee = (w * (e - g + m)) / e;
            let a_wed = (w * (d - 2 * e + 4 * g - 2 * m)) / (3 * d);
            let a_wme = (w * (g - m)) / e;
            let a_wmd = (w - a_wed) / 2;
            let a_wgd = (w - a_wed) / 2;
            let in_range = |x: i128| (0..=w).contains(&x);
            if [a_wee, a_wed, a_wme, a_wmd, a_wgd]
                .iter()
                .all(|x| in_range(*x))
            {
                wee = a_wee;
                wed = a_wed;
                wme = a_wme;
                wmg = 0;
                wgg = w;
                wmd = a_wmd;
                wgd = a_wgd;
            } else {
                wgg = w;
                wee = w;
                let b_wed = (w * (d - 2 * e + g + m)) / (3 * d);
                let mut b_wmd = (w * (d - 2 * m + g + e)) / (3 * d);
                wme = 0;
                wmg = 0;
                if 3 * m > t || b_wmd < 0 {
                    b_wmd = 0;
                }
                wed = b_wed;
                wmd = b_wmd;
                wgd = w - b_wed - b_wmd;
            }
        }
    } else {
        // Case 3: exactly one of E, G is scarce.
        let g_scarce = 3 * g < t;
        let s = if g_scarce { g } else { e };
        if 3 * (s + d) < t {
            if g_scarce {
                wgg = w;
                wgd = w;
                wmd = 0;
                wed = 0;
                wmg = 0;
                wme = if e < m { 0 } else { (w * (e - m)) / (2 * e) };
                wee = w - wme;
            } else {
                wee = w;
                wed = w;
                wmd = 0;
                wgd = 0;
                wme = 0;
                wmg = if g < m { 0 } else { (w * (g - m)) / (2 * g) };
                wgg = w - wmg;
            }
        } else if g_scarce {
            wgg = w;
            wgd = (w * (d - 2 * g + e + m)) / (3 * d);
            wmg = 0;
            wee = (w * (e + m)) / (2 * e);
            wme = w - wee;
            wmd = (w - wgd) / 2;
            wed = (w - wgd) / 2;
        } else {
            wee = w;
            wed = (w * (d - 2 * e + g + m)) / (3 * d);
            wme = 0;
            wgg = (w * (g + m)) / (2 * g);
            wmg = w - wgg;
            wmd = (w - wed) / 2;
            wgd = (w - wed) / 2;
        }
    }
    // Clients (tor and Arti alike) parse each weight as a 32-bit integer;
    // an absurd `bwweightscale` must not make the consensus unparseable.
    let fit = |v: i128| v.clamp(i128::from(i32::MIN), i128::from(i32::MAX)) as i64;
    [
        ("Wbd", wmd),
        ("Wbe", wme),
        ("Wbg", wmg),
        ("Wbm", w),
        ("Wdb", w),
        ("Web", w),
        ("Wed", wed),
        ("Wee", wee),
        ("Weg", wed),
        ("Wem", wee),
        ("Wgb", w),
        ("Wgd", wgd),
        ("Wgg", wgg),
        ("Wgm", wgg),
        ("Wmb", w),
        ("Wmd", wmd),
        ("Wme", wme),
        ("Wmg", wmg),
        ("Wmm", w),
    ]
    .into_iter()
    .map(|(k, v)| (k, fit(v)))
    .collect()
}
