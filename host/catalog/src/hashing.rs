//! Seeded fast string hashing ([`FastState`]) and [`HashSlots`], a lookup
//! table whose keys live elsewhere: the search index's terms and exact-match
//! keys, the catalog's ids.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;

/// A string-keyed lookup table whose keys live elsewhere (so building it
/// allocates no key strings): slots `0, 1, 2, …` are pushed in order with
/// the hash of their key; lookups hash the probe and confirm candidates
/// with a caller-supplied equality on slots (full hash collisions chain).
#[derive(Debug, Clone, Default)]
pub(crate) struct HashSlots {
    state: FastState,
    heads: HashMap<u64, u32, FastState>,
    /// Per slot: the next slot with the same hash, or `u32::MAX`.
    next: Vec<u32>,
}

impl HashSlots {
    pub(crate) fn reserve(&mut self, n: usize) {
        self.heads.reserve(n);
        self.next.reserve(n);
    }

    /// The hash of a key.
    #[inline]
    pub(crate) fn hash(&self, key: &str) -> u64 {
        self.state.hash_one(key)
    }

    /// Append the next slot, whose key hashes to `h`.
    pub(crate) fn push(&mut self, h: u64) {
        let slot = self.next.len() as u32;
        self.next.push(u32::MAX);
        match self.heads.entry(h) {
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(slot);
            }
            std::collections::hash_map::Entry::Occupied(o) => {
                let mut s = *o.get();
                while self.next[s as usize] != u32::MAX {
                    s = self.next[s as usize];
                }
                self.next[s as usize] = slot;
            }
        }
    }

    /// The candidate slots for hash `h`, in push order.
    #[inline]
    pub(crate) fn candidates(&self, h: u64) -> impl Iterator<Item = u32> + '_ {
        let mut cur = self.heads.get(&h).copied();
        std::iter::from_fn(move || {
            let s = cur?;
            let n = self.next[s as usize];
            cur = (n != u32::MAX).then_some(n);
            Some(s)
        })
    }

    /// The first slot for hash `h` whose key satisfies `eq`.
    #[inline]
    pub(crate) fn find_first(&self, h: u64, mut eq: impl FnMut(u32) -> bool) -> Option<u32> {
        self.candidates(h).find(|&s| eq(s))
    }
}

/// A fast multiplicative string hasher with a per-process random seed (so
/// crafted untrusted descriptions cannot precompute collisions).
#[derive(Debug, Clone, Copy)]
pub(crate) struct FastState(u64);

impl Default for FastState {
    fn default() -> Self {
        static SEED: OnceLock<u64> = OnceLock::new();
        FastState(*SEED.get_or_init(|| RandomState::new().build_hasher().finish() | 1))
    }
}

impl BuildHasher for FastState {
    type Hasher = FastHasher;
    fn build_hasher(&self) -> FastHasher {
        FastHasher(self.0)
    }
}

pub(crate) struct FastHasher(u64);

impl FastHasher {
    #[inline]
    fn mix(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

impl Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.mix(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut buf = [0u8; 8];
            buf[..rest.len()].copy_from_slice(rest);
            self.mix(u64::from_le_bytes(buf) ^ ((rest.len() as u64) << 59));
        }
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.mix(u64::from(i));
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.mix(i);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.mix(i as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        let mut x = self.0;
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_slots_resolve_full_collisions() {
        let keys = ["alpha", "beta", "gamma", "beta"];
        let mut slots = HashSlots::default();
        for _ in keys {
            slots.push(42); // every key in one chain
        }
        let find = |k: &str| slots.find_first(42, |s| keys[s as usize] == k);
        assert_eq!(find("alpha"), Some(0));
        assert_eq!(find("beta"), Some(1));
        assert_eq!(find("gamma"), Some(2));
        assert_eq!(find("delta"), None);
        assert_eq!(slots.candidates(42).collect::<Vec<_>>(), [0, 1, 2, 3]);
        assert_eq!(slots.candidates(7).count(), 0);
    }
}
