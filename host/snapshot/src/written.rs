//! [`WrittenPages`]: what a caller knows of which pages of a reused
//! mapping are already private, so that a restore into it need not ask the
//! kernel.

use crate::format::PAGE_BYTES;

/// Pages of one linear memory known to have been written already (mapped
/// to a page of their own, not to the image's), up to a bound: a hint
/// [`Snapshot::apply_known`] reads and adds the pages it writes to.
///
/// A memory made in a reused slot (a pooling allocator that keeps written
/// pages resident when an instance is released, as Wasmtime's does up to
/// its `linear_memory_keep_resident`) keeps the pages earlier instances in
/// the slot wrote; a restore then needs to pre-fault none of them, and
/// finding that out from `/proc/self/pagemap` cost more than the rest of a
/// small snapshot's page writes. A page wrongly held written (its slot
/// gave it back since) costs only the copy-on-write fault the pre-fault
/// would have saved: the restored memory is the same either way.
///
/// [`Snapshot::apply_known`]: crate::Snapshot::apply_known
#[derive(Debug, Clone, Default)]
pub struct WrittenPages {
    /// One bit per 4 KiB page from the memory's start.
    bits: Vec<u64>,
    /// Pages at or past this index are never held written.
    limit: usize,
}

impl WrittenPages {
    /// An empty set over the first `limit_bytes` of a memory (rounded down
    /// to whole pages): the part of a slot its allocator keeps resident.
    pub fn new(limit_bytes: usize) -> Self {
        Self {
            bits: Vec::new(),
            limit: limit_bytes / PAGE_BYTES,
        }
    }

    /// Whether page `index` is held written.
    pub fn contains(&self, index: u32) -> bool {
        let i = index as usize;
        i < self.limit
            && self
                .bits
                .get(i / 64)
                .is_some_and(|w| w >> (i % 64) & 1 == 1)
    }

    /// Holds page `index` written (ignored at or past the limit).
    pub fn insert(&mut self, index: u32) {
        let i = index as usize;
        if i >= self.limit {
            return;
        }
        if self.bits.len() <= i / 64 {
            self.bits.resize(i / 64 + 1, 0);
        }
        self.bits[i / 64] |= 1 << (i % 64);
    }
}
