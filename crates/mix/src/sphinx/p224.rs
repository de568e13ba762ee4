//! NIST P-224 (secp224r1) for Sphinx: public-point handling tuned for
//! speed, secret-scalar multiplication in constant time.
//!
//! - **Secret scalars** (node keys, the sender's ephemeral and blinding
//!   scalars, the per-hop blinding factor, control-message Diffie-Hellman):
//!   [`Point::mul`], [`Point::mul_scalar`] and [`CtBase::mul`] use the
//!   RustCrypto `p224` crate's group operations (complete formulas) in a
//!   fixed-window loop with constant-time table selection, with conversions
//!   to and from our encodings that do not branch on secret data.
//! - **Public inputs only, variable time**: point decompression and
//!   validation of incoming alphas and directory keys ([`Point::from_sec1`]:
//!   square roots by Tonelli-Shanks with precomputed tables for the
//!   2^96-torsion part, a few microseconds instead of a long
//!   square-and-multiply loop; exponentiations by public exponents), and
//!   [`Point::mul_vartime`] (module `vartime`), kept for tests, benchmarks
//!   and as the timing test's positive control.
//!
//! Field elements use four signed 56-bit limbs (radix 2^56) with 128-bit
//! products and the special form `p = 2^224 - 2^96 + 1`. Scalars modulo the
//! group order are the `p224` crate's, which is also the oracle in the tests.

use std::collections::HashMap;
use std::sync::OnceLock;

use p224::elliptic_curve::Curve;
use p224::elliptic_curve::PrimeField;
use p224::elliptic_curve::group::Group;
use p224::elliptic_curve::ops::Reduce;
use p224::elliptic_curve::sec1::{FromEncodedPoint, ToEncodedPoint};
use subtle::{ConditionallySelectable, ConstantTimeEq};

mod vartime;
use vartime::Jac;

const MASK: i64 = (1 << 56) - 1;

/// Limbs of p = 2^224 - 2^96 + 1.
const P_LIMBS: [i64; 4] = [1, (1 << 56) - (1 << 40), MASK, MASK];

/// p - 2, big-endian (Fermat inversion exponent).
const P_MINUS_2: [u8; 28] = hex28("fffffffffffffffffffffffffffffffeffffffffffffffffffffffff");
/// Curve coefficient b, big-endian.
const B_BYTES: [u8; 28] = hex28("b4050a850c04b3abf54132565044b0b7d7bfd8ba270b39432355ffb4");
/// Generator, big-endian coordinates.
const GX_BYTES: [u8; 28] = hex28("b70e0cbd6bb4bf7f321390b94a03c1d356c21122343280d6115c1d21");
const GY_BYTES: [u8; 28] = hex28("bd376388b5f723fb4c22dfe6cd4375a05a07476444d5819985007e34");

const fn hex28(s: &str) -> [u8; 28] {
    let b = s.as_bytes();
    let mut out = [0u8; 28];
    let mut i = 0;
    while i < 28 {
        out[i] = (nib(b[2 * i]) << 4) | nib(b[2 * i + 1]);
        i += 1;
    }
    out
}

const fn nib(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        _ => panic!("bad hex constant"),
    }
}

/// A field element modulo p. Limbs may be loose (negative or above 2^56)
/// between operations; every limb must stay below 2^62 in absolute value
/// when it enters a multiplication.
#[derive(Clone, Copy, Debug)]
pub struct Fe([i64; 4]);

impl Fe {
    pub const ZERO: Fe = Fe([0; 4]);
    pub const ONE: Fe = Fe([1, 0, 0, 0]);

    #[inline(always)]
    fn add(self, o: Fe) -> Fe {
        Fe([
            self.0[0] + o.0[0],
            self.0[1] + o.0[1],
            self.0[2] + o.0[2],
            self.0[3] + o.0[3],
        ])
    }

    #[inline(always)]
    fn sub(self, o: Fe) -> Fe {
        Fe([
            self.0[0] - o.0[0],
            self.0[1] - o.0[1],
            self.0[2] - o.0[2],
            self.0[3] - o.0[3],
        ])
    }

    #[inline(always)]
    fn small(self, k: i64) -> Fe {
        Fe([self.0[0] * k, self.0[1] * k, self.0[2] * k, self.0[3] * k])
    }

    #[inline(always)]
    fn mul(self, o: Fe) -> Fe {
        let a = self.0;
        let b = o.0;
        let c = [
            m(a[0], b[0]),
            m(a[0], b[1]) + m(a[1], b[0]),
            m(a[0], b[2]) + m(a[1], b[1]) + m(a[2], b[0]),
            m(a[0], b[3]) + m(a[1], b[2]) + m(a[2], b[1]) + m(a[3], b[0]),
            m(a[1], b[3]) + m(a[2], b[2]) + m(a[3], b[1]),
            m(a[2], b[3]) + m(a[3], b[2]),
            m(a[3], b[3]),
        ];
        reduce(c)
    }

    #[inline(always)]
    fn sq(self) -> Fe {
        let a = self.0;
        let d0 = a[0] * 2;
        let d1 = a[1] * 2;
        let d2 = a[2] * 2;
        let c = [
            m(a[0], a[0]),
            m(d0, a[1]),
            m(d0, a[2]) + m(a[1], a[1]),
            m(d0, a[3]) + m(d1, a[2]),
            m(d1, a[3]) + m(a[2], a[2]),
            m(d2, a[3]),
            m(a[3], a[3]),
        ];
        reduce(c)
    }

    fn sqn(self, n: usize) -> Fe {
        let mut x = self;
        for _ in 0..n {
            x = x.sq();
        }
        x
    }

    /// Fully reduced limbs in [0, 2^56) with value in [0, p).
    fn canonical(self) -> [i64; 4] {
        let r = normalize(self.0);
        // Subtract p once if value >= p (constant time).
        let mut t = [0i64; 4];
        let mut borrow = 0i64;
        for i in 0..4 {
            let v = r.0[i] - P_LIMBS[i] + borrow;
            borrow = v >> 56; // 0 or -1
            t[i] = v & MASK;
        }
        // borrow == -1 means r < p: keep r.
        let keep_r = borrow; // all ones when r < p
        let mut out = [0i64; 4];
        for i in 0..4 {
            out[i] = (r.0[i] & keep_r) | (t[i] & !keep_r);
        }
        out
    }

    pub fn to_bytes(self) -> [u8; 28] {
        let l = self.canonical();
        let mut out = [0u8; 28];
        for (i, limb) in l.iter().enumerate() {
            let be = (*limb as u64).to_be_bytes();
            let start = 28 - 7 * (i + 1);
            out[start..start + 7].copy_from_slice(&be[1..8]);
        }
        out
    }

    /// Parses a big-endian value; `None` when it is not below p.
    pub fn from_bytes(b: &[u8; 28]) -> Option<Fe> {
        let mut l = [0i64; 4];
        for (i, limb) in l.iter_mut().enumerate() {
            let start = 28 - 7 * (i + 1);
            let mut be = [0u8; 8];
            be[1..8].copy_from_slice(&b[start..start + 7]);
            *limb = u64::from_be_bytes(be) as i64;
        }
        let fe = Fe(l);
        if fe.canonical() == l { Some(fe) } else { None }
    }

    fn is_zero(self) -> bool {
        self.canonical() == [0; 4]
    }

    fn ct_eq(self, o: Fe) -> bool {
        self.sub(o).is_zero()
    }

    fn is_odd(self) -> bool {
        self.canonical()[0] & 1 == 1
    }

    fn neg(self) -> Fe {
        Fe::ZERO.sub(self)
    }

    /// self^e for a public exponent given as big-endian bytes.
    fn pow_vartime(self, e: &[u8]) -> Fe {
        let mut table = [Fe::ONE; 16];
        for i in 1..16 {
            table[i] = table[i - 1].mul(self);
        }
        let mut acc = Fe::ONE;
        let mut started = false;
        for byte in e {
            for nibble in [byte >> 4, byte & 15] {
                if started {
                    acc = acc.sqn(4);
                }
                if nibble != 0 {
                    acc = if started {
                        acc.mul(table[nibble as usize])
                    } else {
                        table[nibble as usize]
                    };
                    started = true;
                }
            }
        }
        acc
    }

    /// Inverse by Fermat (p - 2); zero maps to zero.
    pub fn invert(self) -> Fe {
        self.pow_vartime(&P_MINUS_2)
    }

    /// Square root, if one exists.
    pub fn sqrt(self) -> Option<Fe> {
        let t = tables();
        // w = a^((Q-1)/2), Q = 2^128 - 1, (Q-1)/2 = 2^127 - 1.
        let w = pow_2k_minus_1(self, 127);
        let x = self.mul(w); // a^((Q+1)/2)
        let b = x.mul(w); // a^Q, in the 2^96-torsion subgroup
        // Find e with b = z^e, digits of W bits, low digit first.
        // bpow[j] = b^(2^(W*j))
        let mut bpow = [Fe::ZERO; K];
        bpow[0] = b;
        for j in 1..K {
            bpow[j] = bpow[j - 1].sqn(W);
        }
        let mut digits = [0usize; K];
        for j in 0..K {
            // v = b^(2^(W(K-1-j))) * prod_{i<j} z^(-d_i 2^(W(i+K-1-j)))
            let mut v = bpow[K - 1 - j];
            for (i, d) in digits.iter().enumerate().take(j) {
                if *d != 0 {
                    v = v.mul(t.zinv_pow[i + K - 1 - j][*d]);
                }
            }
            let key = v.to_bytes();
            let d = *t.dlog.get(&key)?;
            digits[j] = d;
        }
        // e = sum d_j 2^(W j); a is a square iff e is even (d_0 even).
        if digits[0] & 1 == 1 {
            return None;
        }
        // sqrt = x * z^(-e/2)... we found b = z^e, so a^Q z^(-e) = 1 and
        // (x z^(-e/2))^2 = a^(Q+1) z^(-e) = a. z^(-e/2) = prod zinv_pow[j][d_j] shifted by one bit:
        // compute z^(-e/2) via the half table.
        let mut r = x;
        for (j, d) in digits.iter().enumerate() {
            if *d != 0 {
                r = r.mul(t.zinv_half_pow[j][*d]);
            }
        }
        if r.sq().ct_eq(self) { Some(r) } else { None }
    }
}

/// Window width and number of windows for the 2^96-torsion discrete log.
const W: usize = 8;
const K: usize = 96 / W;

struct Tables {
    /// zinv_pow[l][m] = z^(-m 2^(W l))
    zinv_pow: Vec<[Fe; 1 << W]>,
    /// zinv_half_pow[l][m] = z^(-m 2^(W l) / 2) (m 2^(W l) even when used)
    zinv_half_pow: Vec<[Fe; 1 << W]>,
    /// canonical bytes of z^(m 2^(W(K-1))) -> m
    dlog: HashMap<[u8; 28], usize>,
}

fn tables() -> &'static Tables {
    static T: OnceLock<Tables> = OnceLock::new();
    T.get_or_init(build_tables)
}

fn pow_2k_minus_1(a: Fe, k: usize) -> Fe {
    // a^(2^k - 1) by a simple chain: r_{n} = a^(2^n - 1).
    let mut r = a; // n = 1
    let mut n = 1;
    // double n while possible
    while 2 * n <= k {
        r = r.sqn(n).mul(r);
        n *= 2;
    }
    while n < k {
        r = r.sq().mul(a);
        n += 1;
    }
    r
}

fn build_tables() -> Tables {
    // Find a quadratic non-residue g and z = g^Q of order 2^96.
    let mut z = Fe::ONE;
    for g in 2i64..100 {
        let gf = Fe([g, 0, 0, 0]);
        let zz = pow_2k_minus_1(gf, 128);
        // g is a non-residue iff z^(2^95) == -1
        if zz.sqn(95).ct_eq(Fe::ONE.neg()) {
            z = zz;
            break;
        }
    }
    let zinv = z.invert();
    let mut zinv_pow = Vec::with_capacity(K);
    let mut zinv_half_pow = Vec::with_capacity(K);
    // base_l = z^(-2^(W l)), half_l = z^(-2^(W l - 1)) (for l = 0 use z^(-1/2) undefined; digit 0 is even so only even m used there)
    let mut base = zinv; // l = 0
    for l in 0..K {
        let mut row = [Fe::ONE; 1 << W];
        for m in 1..(1 << W) {
            row[m] = row[m - 1].mul(base);
        }
        zinv_pow.push(row);
        // half row: z^(-m 2^(W l) / 2)
        let mut hrow = [Fe::ONE; 1 << W];
        if l == 0 {
            // only even m valid: z^(-m/2) = (z^-1)^(m/2)
            let mut acc = Fe::ONE;
            for (m, h) in hrow.iter_mut().enumerate() {
                if m.is_multiple_of(2) {
                    *h = acc;
                } else {
                    acc = acc.mul(zinv);
                }
            }
        } else {
            let hbase = zinv.sqn(W * l - 1);
            for m in 1..(1 << W) {
                hrow[m] = hrow[m - 1].mul(hbase);
            }
        }
        zinv_half_pow.push(hrow);
        base = base.sqn(W);
    }
    // dlog table: z^(m 2^(W(K-1)))
    let top = z.sqn(W * (K - 1));
    let mut dlog = HashMap::with_capacity(1 << W);
    let mut acc = Fe::ONE;
    for m in 0..(1 << W) {
        dlog.insert(acc.to_bytes(), m);
        acc = acc.mul(top);
    }
    Tables {
        zinv_pow,
        zinv_half_pow,
        dlog,
    }
}

#[cfg(test)]
impl Fe {
    /// Bytes of limbs without canonicalisation (used for the constant p).
    fn to_bytes_raw(self) -> [u8; 28] {
        let mut out = [0u8; 28];
        for (i, limb) in self.0.iter().enumerate() {
            let be = (*limb as u64).to_be_bytes();
            let start = 28 - 7 * (i + 1);
            out[start..start + 7].copy_from_slice(&be[1..8]);
        }
        out
    }
}

#[inline(always)]
fn m(a: i64, b: i64) -> i128 {
    i128::from(a) * i128::from(b)
}

/// Reduces a 7-limb product. Output limbs are in [0, 2^56) except the top
/// one, which may exceed 2^56 by a few units or be -1: loose but far inside
/// the 2^62 bound that multiplication needs.
#[inline(always)]
fn reduce(mut c: [i128; 7]) -> Fe {
    const M: i128 = (1 << 56) - 1;
    // 2^224 = 2^96 - 1 (mod p); fold limbs 6, 5, 4.
    for k in [6usize, 5, 4] {
        let t = c[k];
        c[k - 4] -= t;
        c[k - 3] += (t & 0xffff) << 40;
        c[k - 2] += t >> 16;
    }
    c[1] += c[0] >> 56;
    c[0] &= M;
    c[2] += c[1] >> 56;
    c[1] &= M;
    c[3] += c[2] >> 56;
    c[2] &= M;
    let top = c[3] >> 56;
    c[3] &= M;
    c[0] -= top;
    c[1] += (top & 0xffff) << 40;
    c[2] += top >> 16;
    c[1] += c[0] >> 56;
    c[0] &= M;
    c[2] += c[1] >> 56;
    c[1] &= M;
    c[3] += c[2] >> 56;
    c[2] &= M;
    Fe([c[0] as i64, c[1] as i64, c[2] as i64, c[3] as i64])
}

/// Full normalisation: limbs in [0, 2^56), value in [0, 2^224).
fn normalize(x: [i64; 4]) -> Fe {
    let mut c = x.map(i128::from);
    for _ in 0..3 {
        for i in 0..3 {
            c[i + 1] += c[i] >> 56;
            c[i] &= (1 << 56) - 1;
        }
        let top = c[3] >> 56;
        c[3] &= (1 << 56) - 1;
        c[0] -= top;
        c[1] += (top & 0xffff) << 40;
        c[2] += top >> 16;
    }
    for i in 0..3 {
        c[i + 1] += c[i] >> 56;
        c[i] &= (1 << 56) - 1;
    }
    Fe([c[0] as i64, c[1] as i64, c[2] as i64, c[3] as i64])
}

fn b_fe() -> Fe {
    static B: OnceLock<Fe> = OnceLock::new();
    *B.get_or_init(|| Fe::from_bytes(&B_BYTES).expect("curve constant b is below p"))
}

/// An affine point on P-224 (never the identity).
#[derive(Clone, Copy, Debug)]
pub struct Point {
    x: Fe,
    y: Fe,
}

impl PartialEq for Point {
    fn eq(&self, o: &Point) -> bool {
        self.x.ct_eq(o.x) && self.y.ct_eq(o.y)
    }
}
impl Eq for Point {}

impl Point {
    pub fn generator() -> Point {
        Point {
            x: Fe::from_bytes(&GX_BYTES).expect("generator x is below p"),
            y: Fe::from_bytes(&GY_BYTES).expect("generator y is below p"),
        }
    }

    fn on_curve(x: Fe, y: Fe) -> bool {
        let rhs = x.sq().mul(x).sub(x.small(3)).add(b_fe());
        y.sq().ct_eq(rhs)
    }

    /// SEC1 compressed form (29 bytes: 02/03 || X).
    pub fn to_compressed(&self) -> [u8; 29] {
        let mut out = [0u8; 29];
        out[0] = if self.y.is_odd() { 3 } else { 2 };
        out[1..].copy_from_slice(&self.x.to_bytes());
        out
    }

    /// SEC1 uncompressed form (57 bytes: 04 || X || Y).
    pub fn to_uncompressed(&self) -> [u8; 57] {
        let mut out = [0u8; 57];
        out[0] = 4;
        out[1..29].copy_from_slice(&self.x.to_bytes());
        out[29..].copy_from_slice(&self.y.to_bytes());
        out
    }

    /// Parses SEC1 compressed or uncompressed encodings and checks that the
    /// point is on the curve.
    pub fn from_sec1(b: &[u8]) -> Option<Point> {
        match (b.len(), b.first()) {
            (29, Some(&tag @ (2 | 3))) => {
                let xb: &[u8; 28] = b[1..].try_into().ok()?;
                let x = Fe::from_bytes(xb)?;
                let rhs = x.sq().mul(x).sub(x.small(3)).add(b_fe());
                let mut y = rhs.sqrt()?;
                if y.is_odd() != (tag == 3) {
                    y = y.neg();
                }
                Some(Point { x, y })
            }
            (57, Some(4)) => {
                let xb: &[u8; 28] = b[1..29].try_into().ok()?;
                let yb: &[u8; 28] = b[29..].try_into().ok()?;
                let x = Fe::from_bytes(xb)?;
                let y = Fe::from_bytes(yb)?;
                Point::on_curve(x, y).then_some(Point { x, y })
            }
            _ => None,
        }
    }

    /// k * self for a **secret** scalar given as big-endian bytes (any
    /// length; k is used as an integer, which gives (k mod n) * self), in
    /// constant time: see [`ct_mul_with_table`]. Returns `None` for the
    /// identity (k = 0 mod n).
    pub fn mul(&self, k: &[u8]) -> Option<Point> {
        self.ct_base()?.mul(k)
    }

    /// k * self for a **secret** scalar modulo n, in constant time.
    pub fn mul_scalar(&self, k: &Scalar) -> Option<Point> {
        self.mul(&k.be28())
    }

    /// Precomputes the constant-time multiplication table of this
    /// (public) point, for several secret multiplications of it.
    pub fn ct_base(&self) -> Option<CtBase> {
        Some(CtBase(ct_table(&self.to_rustcrypto()?)))
    }

    /// k * self in **variable time** (our Jacobian code, `vartime` module):
    /// only for public scalars. Its running time depends on the scalar's
    /// nibbles; see `tests/p224_timing.rs`.
    pub fn mul_vartime(&self, k: &[u8]) -> Option<Point> {
        Jac::from(*self).mul_bytes(k).to_affine()
    }

    /// The same point as a RustCrypto `AffinePoint` (the point is public;
    /// `None` cannot happen for a valid `Point`).
    fn to_rustcrypto(self) -> Option<p224::AffinePoint> {
        let enc = p224::EncodedPoint::from_bytes(self.to_uncompressed()).ok()?;
        Option::from(p224::AffinePoint::from_encoded_point(&enc))
    }

    /// Converts a multiplication result; the coordinates may be secret (a
    /// shared secret), so this only copies bytes and parses them with the
    /// branch-free field code. `None` for the identity.
    fn from_rustcrypto(p: &p224::AffinePoint) -> Option<Point> {
        let enc = p.to_encoded_point(false);
        let b = enc.as_bytes();
        if b.len() != 57 {
            return None; // the identity encodes as one zero byte
        }
        let xb: &[u8; 28] = b[1..29].try_into().ok()?;
        let yb: &[u8; 28] = b[29..57].try_into().ok()?;
        Some(Point {
            x: Fe::from_bytes(xb)?,
            y: Fe::from_bytes(yb)?,
        })
    }
}

/// A public point prepared for constant-time multiplications by secret
/// scalars ([`Point::ct_base`]).
#[derive(Clone)]
pub struct CtBase([p224::ProjectivePoint; 16]);

impl CtBase {
    /// k * P in constant time (see [`Point::mul`]).
    pub fn mul(&self, k: &[u8]) -> Option<Point> {
        Point::from_rustcrypto(&ct_mul_with_table(&self.0, k).to_affine())
    }
}

/// `[0, 1, ..., 15] * p` for [`ct_mul_with_table`] (p is public).
fn ct_table(p: &p224::AffinePoint) -> [p224::ProjectivePoint; 16] {
    let p = p224::ProjectivePoint::from(*p);
    let mut t = [p224::ProjectivePoint::IDENTITY; 16];
    t[1] = p;
    for i in 2..16 {
        t[i] = if i % 2 == 0 {
            t[i / 2].double()
        } else {
            t[i - 1] + p
        };
    }
    t
}

/// Constant-time `k * P` for a secret big-endian integer `k`, with the
/// RustCrypto `p224` group operations (complete addition formulas, so the
/// identity and equal operands need no special case): a fixed 4-bit window
/// over all `2 * k.len()` nibbles, each table entry chosen by a full scan
/// with `subtle` selection. Control flow and memory accesses depend only on
/// `k.len()`, which is public (28 bytes for keys, 16 for blinding factors).
/// Windowing over the input's own length (rather than the crate's fixed 64
/// nibbles) makes the 16-byte blinding multiplication half the cost.
fn ct_mul_with_table(table: &[p224::ProjectivePoint; 16], k: &[u8]) -> p224::ProjectivePoint {
    let mut q = p224::ProjectivePoint::IDENTITY;
    let mut first = true;
    for byte in k {
        for nibble in [byte >> 4, byte & 15] {
            if !first {
                q = q.double().double().double().double();
            }
            first = false;
            let mut t = p224::ProjectivePoint::IDENTITY;
            for (i, e) in table.iter().enumerate().skip(1) {
                t.conditional_assign(e, nibble.ct_eq(&(i as u8)));
            }
            q += t;
        }
    }
    q
}

/// A scalar modulo the group order n.
pub type Scalar = p224::Scalar;

/// Big-endian 28-byte encoding of a scalar.
pub trait ScalarBytes {
    fn be28(&self) -> [u8; 28];
}

impl ScalarBytes for Scalar {
    fn be28(&self) -> [u8; 28] {
        let r = self.to_repr();
        let mut out = [0u8; 28];
        out.copy_from_slice(r.as_slice());
        out
    }
}

/// Interprets big-endian bytes (any length up to 64) as an unsigned integer
/// and reduces it modulo n (petlib's `Bn.from_binary(d) % order`).
pub fn scalar_from_be_mod_n(data: &[u8]) -> Scalar {
    // Reduce by Horner's rule in the scalar field: exact for any length.
    let mut acc = Scalar::ZERO;
    let base = Scalar::from(256u64);
    for b in data {
        acc = acc * base + Scalar::from(u64::from(*b));
    }
    acc
}

/// Reduces a 28-byte big-endian value modulo n in constant time (one
/// conditional subtraction suffices: n > 2^223).
pub fn scalar_reduce28(data: &[u8; 28]) -> Scalar {
    <Scalar as Reduce<<p224::NistP224 as Curve>::Uint>>::reduce_bytes(&(*data).into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use p224::elliptic_curve::sec1::ToEncodedPoint;
    use p224::{AffinePoint, ProjectivePoint};
    use rand::RngCore;

    fn oracle_mul(k: &Scalar, base: &AffinePoint) -> AffinePoint {
        (ProjectivePoint::from(*base) * k).to_affine()
    }

    fn to_ours(p: &AffinePoint) -> Point {
        Point::from_sec1(p.to_encoded_point(false).as_bytes()).expect("oracle point on curve")
    }

    #[test]
    fn generator_matches_oracle() {
        let g = AffinePoint::GENERATOR.to_encoded_point(false);
        assert_eq!(
            Point::generator().to_uncompressed().as_slice(),
            g.as_bytes()
        );
    }

    #[test]
    fn field_roundtrip_and_inverse() {
        let mut rng = rand::thread_rng();
        for _ in 0..200 {
            let mut b = [0u8; 28];
            rng.fill_bytes(&mut b);
            b[0] &= 0x7f;
            let f = Fe::from_bytes(&b).expect("below p");
            assert_eq!(f.to_bytes(), b);
            assert!(f.mul(f.invert()).ct_eq(Fe::ONE));
            let s = f.sq();
            let r = s.sqrt().expect("square has a root");
            assert!(r.sq().ct_eq(s));
        }
        // p itself is rejected
        assert!(Fe::from_bytes(&Fe(P_LIMBS).to_bytes_raw()).is_none());
    }

    #[test]
    fn scalar_mul_matches_oracle() {
        let mut rng = rand::thread_rng();
        for i in 0..40 {
            let mut kb = [0u8; 28];
            rng.fill_bytes(&mut kb);
            if i == 0 {
                kb = [0xff; 28];
            }
            let k = scalar_reduce28(&kb);
            let ours = Point::generator().mul_scalar(&k).expect("nonzero");
            let theirs = oracle_mul(&k, &AffinePoint::GENERATOR);
            assert_eq!(ours, to_ours(&theirs));
            // the variable-time path agrees (it is the independent check)
            assert_eq!(Point::generator().mul_vartime(&kb), Some(ours));
            assert_eq!(Point::generator().mul(&kb), Some(ours));
            // compressed round trip
            let c = ours.to_compressed();
            assert_eq!(c.as_slice(), theirs.to_encoded_point(true).as_bytes());
            assert_eq!(Point::from_sec1(&c), Some(ours));
            // short scalar (16 bytes) on a non-generator point
            let mut short = [0u8; 16];
            rng.fill_bytes(&mut short);
            let ks = scalar_from_be_mod_n(&short);
            assert_eq!(ours.mul(&short), Some(to_ours(&oracle_mul(&ks, &theirs))));
            assert_eq!(ours.mul_vartime(&short), ours.mul(&short));
            // long inputs (petlib reduces any Bn) take the Horner path
            let mut long = [0u8; 40];
            rng.fill_bytes(&mut long);
            assert_eq!(ours.mul(&long), ours.mul_vartime(&long));
        }
    }

    #[test]
    fn constant_time_reduction_matches_horner() {
        let mut rng = rand::thread_rng();
        for i in 0..200 {
            let mut kb = [0u8; 28];
            rng.fill_bytes(&mut kb);
            if i < 3 {
                kb = [0xff; 28]; // above n: one subtraction
            }
            assert_eq!(scalar_reduce28(&kb), scalar_from_be_mod_n(&kb));
        }
        // n itself reduces to zero, and zero times a point is the identity
        let n = hex28("ffffffffffffffffffffffffffff16a2e0b8f03e13dd29455c5c2a3d");
        assert_eq!(scalar_reduce28(&n), Scalar::ZERO);
        assert_eq!(Point::generator().mul(&n), None);
        assert_eq!(Point::generator().mul_vartime(&n), None);
        assert_eq!(Point::generator().mul(&[]), None);
    }

    #[test]
    fn rejects_off_curve_and_garbage() {
        let mut c = Point::generator().to_compressed();
        let mut bad = 0;
        for i in 0..50u8 {
            c[28] = i;
            if Point::from_sec1(&c).is_none() {
                bad += 1;
            }
        }
        assert!(bad > 10, "about half of all x have no point");
        assert!(Point::from_sec1(&[2u8; 10]).is_none());
        let mut u = Point::generator().to_uncompressed();
        u[56] ^= 1;
        assert!(Point::from_sec1(&u).is_none());
    }
}
