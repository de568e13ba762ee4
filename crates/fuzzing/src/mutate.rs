//! A small deterministic mutator for the stable corpus test: bit flips,
//! byte sets, inserts, deletes, duplicated ranges, splices from other
//! corpus entries and "interesting" values, from a seeded SplitMix64. It
//! is no replacement for libFuzzer's coverage-guided search; it keeps the
//! targets exercised on every CI run without nightly Rust.

/// SplitMix64: tiny, fast, and the same everywhere.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }
}

/// A seed for a target's mutation loop: FNV-1a of its name.
pub fn seed_for(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

const INTERESTING: [&[u8]; 12] = [
    &[0],
    &[0xff],
    &[0x7f],
    &[0x80],
    &[0, 0],
    &[0xff, 0xff],
    &[0x7f, 0xff],
    &[0x80, 0x00],
    &[0x01, 0xfd],
    &[0xff, 0xff, 0xff, 0xff],
    b"\r\n",
    b"\n",
];

/// One to four mutations of `input`; `others` supplies splice material.
/// The result is at most `max_len` bytes.
pub fn mutate(rng: &mut Rng, input: &[u8], others: &[Vec<u8>], max_len: usize) -> Vec<u8> {
    let mut v = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        let len = v.len();
        match rng.below(9) {
            0 if len > 0 => {
                let i = rng.below(len);
                v[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                v[i] = rng.next_u64() as u8;
            }
            2 => {
                let at = rng.below(len + 1);
                let n = 1 + rng.below(8);
                let bytes: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
                v.splice(at..at, bytes);
            }
            3 if len > 0 => {
                let at = rng.below(len);
                let n = 1 + rng.below((len - at).min(64));
                v.drain(at..at + n);
            }
            4 if len > 0 => {
                let at = rng.below(len);
                let n = 1 + rng.below((len - at).min(64));
                let copy = v[at..at + n].to_vec();
                let to = rng.below(len + 1);
                v.splice(to..to, copy);
            }
            5 if !others.is_empty() => {
                let o = &others[rng.below(others.len())];
                if !o.is_empty() {
                    let from = rng.below(o.len());
                    let n = 1 + rng.below((o.len() - from).min(128));
                    let at = rng.below(len + 1);
                    let cut = rng.below((len - at).min(n) + 1);
                    v.splice(at..at + cut, o[from..from + n].iter().copied());
                }
            }
            6 if len > 0 => {
                let val = INTERESTING[rng.below(INTERESTING.len())];
                let at = rng.below(len);
                let end = (at + val.len()).min(len);
                v[at..end].copy_from_slice(&val[..end - at]);
            }
            7 if len > 0 => v.truncate(rng.below(len)),
            _ if len > 0 => {
                // Arithmetic on one byte: lengths and counts off by a little.
                let i = rng.below(len);
                let d = 1 + rng.below(4) as u8;
                v[i] = if rng.below(2) == 0 {
                    v[i].wrapping_add(d)
                } else {
                    v[i].wrapping_sub(d)
                };
            }
            _ => v.push(rng.next_u64() as u8),
        }
    }
    v.truncate(max_len);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_bounded() {
        let others = vec![b"hello world".to_vec(), vec![1, 2, 3]];
        let mut a = Rng::new(seed_for("x"));
        let mut b = Rng::new(seed_for("x"));
        for i in 0..2000 {
            let input = vec![i as u8; i % 50];
            let x = mutate(&mut a, &input, &others, 64);
            assert_eq!(x, mutate(&mut b, &input, &others, 64));
            assert!(x.len() <= 64);
        }
    }
}
