//! The interned terms of a [`SearchIndex`](super::SearchIndex).

use crate::hashing::HashSlots;

/// The interned terms: term `t` is `arena[ends[t - 1]..ends[t]]` (from 0
/// for the first), looked up through [`HashSlots`] (slot = term id).
#[derive(Debug, Clone, Default)]
pub(super) struct Terms {
    slots: HashSlots,
    arena: String,
    ends: Vec<u32>,
}

impl Terms {
    pub(super) fn reserve(&mut self, n: usize) {
        self.slots.reserve(n);
        self.ends.reserve(n);
        self.arena.reserve(n * 8);
    }

    pub(super) fn len(&self) -> usize {
        self.ends.len()
    }

    #[inline]
    pub(super) fn term(&self, t: u32) -> &str {
        let t = t as usize;
        let start = if t == 0 { 0 } else { self.ends[t - 1] as usize };
        &self.arena[start..self.ends[t] as usize]
    }

    #[inline]
    fn find(&self, h: u64, term: &str) -> Option<u32> {
        self.slots.find_first(h, |t| self.term(t) == term)
    }

    /// The id of `term`, if interned.
    #[inline]
    pub(super) fn get(&self, term: &str) -> Option<u32> {
        self.find(self.slots.hash(term), term)
    }

    /// The id of `term`, interning it if new (ids are dense, in order).
    #[inline]
    pub(super) fn intern(&mut self, term: &str) -> u32 {
        let h = self.slots.hash(term);
        if let Some(t) = self.find(h, term) {
            return t;
        }
        self.arena.push_str(term);
        self.ends.push(self.arena.len() as u32);
        self.slots.push(h);
        (self.ends.len() - 1) as u32
    }
}
