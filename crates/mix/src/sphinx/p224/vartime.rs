//! Variable-time P-224 scalar multiplication (our field arithmetic, Jacobian
//! coordinates, 4-bit window).
//!
//! **Not constant time**: [`Jac::add`] returns early when either input is
//! the identity, so every zero nibble of the scalar (and every leading zero
//! nibble, while the accumulator is still the identity) skips a point
//! addition, and the exceptional-case branches depend on the operands. The
//! running time therefore reveals the scalar's nibble pattern. Use it only
//! where the scalar is public: tests (as an independent oracle), benchmarks,
//! and the timing test's positive control (`tests/p224_timing.rs`, which
//! shows the leak is measurable). Every multiplication by a secret scalar
//! (node keys, Sphinx ephemeral and blinding scalars, control-message DH)
//! goes through [`super::Point::mul`], which uses the constant-time RustCrypto
//! `p224` crate.

use super::{Fe, Point};

/// Jacobian point (X/Z^2, Y/Z^3); Z = 0 is the identity.
#[derive(Clone, Copy, Debug)]
pub(super) struct Jac {
    x: Fe,
    y: Fe,
    z: Fe,
}

impl From<Point> for Jac {
    fn from(p: Point) -> Jac {
        Jac {
            x: p.x,
            y: p.y,
            z: Fe::ONE,
        }
    }
}

impl Jac {
    const INF: Jac = Jac {
        x: Fe::ONE,
        y: Fe::ONE,
        z: Fe::ZERO,
    };

    fn is_inf(&self) -> bool {
        self.z.is_zero()
    }

    /// dbl-2001-b (a = -3).
    #[inline(always)]
    fn double(&self) -> Jac {
        let delta = self.z.sq();
        let gamma = self.y.sq();
        let beta = self.x.mul(gamma);
        let alpha = self.x.sub(delta).mul(self.x.add(delta)).small(3);
        let x3 = alpha.sq().sub(beta.small(8));
        let z3 = self.y.add(self.z).sq().sub(gamma).sub(delta);
        let y3 = alpha.mul(beta.small(4).sub(x3)).sub(gamma.sq().small(8));
        Jac {
            x: x3,
            y: y3,
            z: z3,
        }
    }

    /// add-2007-bl with the exceptional cases handled.
    #[inline(always)]
    fn add(&self, o: &Jac) -> Jac {
        if self.is_inf() {
            return *o;
        }
        if o.is_inf() {
            return *self;
        }
        let z1z1 = self.z.sq();
        let z2z2 = o.z.sq();
        let u1 = self.x.mul(z2z2);
        let u2 = o.x.mul(z1z1);
        let s1 = self.y.mul(o.z).mul(z2z2);
        let s2 = o.y.mul(self.z).mul(z1z1);
        let h = u2.sub(u1);
        let r = s2.sub(s1).small(2);
        if h.is_zero() {
            if r.is_zero() {
                return self.double();
            }
            return Jac::INF;
        }
        let i = h.small(2).sq();
        let j = h.mul(i);
        let v = u1.mul(i);
        let x3 = r.sq().sub(j).sub(v.small(2));
        let y3 = r.mul(v.sub(x3)).sub(s1.mul(j).small(2));
        let z3 = self.z.add(o.z).sq().sub(z1z1).sub(z2z2).mul(h);
        Jac {
            x: x3,
            y: y3,
            z: z3,
        }
    }

    pub(super) fn table(&self) -> [Jac; 16] {
        let mut t = [Jac::INF; 16];
        t[1] = *self;
        t[2] = self.double();
        for i in 3..16 {
            t[i] = t[i - 1].add(self);
        }
        t
    }

    fn select(table: &[Jac; 16], idx: u8) -> Jac {
        let mut out = Jac::INF;
        for (i, e) in table.iter().enumerate() {
            let m = -(i64::from(i as u8 == idx)); // all ones when equal
            for l in 0..4 {
                out.x.0[l] = (out.x.0[l] & !m) | (e.x.0[l] & m);
                out.y.0[l] = (out.y.0[l] & !m) | (e.y.0[l] & m);
                out.z.0[l] = (out.z.0[l] & !m) | (e.z.0[l] & m);
            }
        }
        out
    }

    pub(super) fn mul_bytes(&self, k: &[u8]) -> Jac {
        Jac::mul_with_table(&self.table(), k)
    }

    pub(super) fn mul_with_table(table: &[Jac; 16], k: &[u8]) -> Jac {
        let mut acc = Jac::INF;
        let mut first = true;
        for byte in k {
            for nibble in [byte >> 4, byte & 15] {
                if !first {
                    acc = acc.double().double().double().double();
                }
                first = false;
                let e = Jac::select(table, nibble);
                acc = acc.add(&e); // adding INF (nibble 0) returns acc
            }
        }
        acc
    }

    pub(super) fn to_affine(self) -> Option<Point> {
        if self.is_inf() {
            return None;
        }
        let zi = self.z.invert();
        let zi2 = zi.sq();
        let x = self.x.mul(zi2);
        let y = self.y.mul(zi2.mul(zi));
        // normalise limbs
        Some(Point {
            x: Fe(x.canonical()),
            y: Fe(y.canonical()),
        })
    }
}
