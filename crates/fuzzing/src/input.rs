//! A cursor for structure-aware targets: reads never fail, they return
//! zeros or short slices once the input runs out, so every byte string is
//! a valid (if dull) program for a target.

#[derive(Debug, Clone)]
pub(crate) struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    pub(crate) fn new(data: &'a [u8]) -> Self {
        Input { data }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    pub(crate) fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((b, rest)) => {
                self.data = rest;
                *b
            }
            None => 0,
        }
    }

    pub(crate) fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.u8(), self.u8()])
    }

    pub(crate) fn u32(&mut self) -> u32 {
        u32::from_be_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    /// Up to `n` bytes.
    pub(crate) fn bytes(&mut self, n: usize) -> &'a [u8] {
        let n = n.min(self.data.len());
        let (h, t) = self.data.split_at(n);
        self.data = t;
        h
    }

    /// Exactly `N` bytes, zero-padded.
    pub(crate) fn array<const N: usize>(&mut self) -> [u8; N] {
        let mut a = [0u8; N];
        let b = self.bytes(N);
        a[..b.len()].copy_from_slice(b);
        a
    }

    /// A slice whose length is given by the next u16.
    pub(crate) fn chunk(&mut self) -> &'a [u8] {
        let n = usize::from(self.u16());
        self.bytes(n)
    }

    pub(crate) fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.data)
    }
}

/// Split points for feeding `len` bytes to an incremental parser: chunk
/// sizes come from `pattern` (1..=256 bytes each, cycling), so the same
/// message is also fed in odd pieces.
pub(crate) fn chunks(len: usize, pattern: &[u8]) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut at = 0;
    let mut i = 0;
    while at < len {
        let step = match pattern.get(i % pattern.len().max(1)) {
            Some(b) => usize::from(*b) + 1,
            None => len,
        };
        let end = at.saturating_add(step).min(len);
        out.push(at..end);
        at = end;
        i += 1;
    }
    out
}
