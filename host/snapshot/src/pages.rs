//! Pages: which pages of a memory differ from its image, their XOR deltas,
//! and runs of consecutive pages.

use crate::format::PAGE_BYTES;
use std::ops::Range;

const ZERO_PAGE: [u8; PAGE_BYTES] = [0; PAGE_BYTES];

pub(crate) fn image_page(image: &[u8], start: usize) -> &[u8] {
    image.get(start..start + PAGE_BYTES).unwrap_or(&ZERO_PAGE)
}

/// `out ^= delta`, a word at a time (format 5's in-place deltas).
pub(crate) fn xor_in_place(out: &mut [u8], delta: &[u8]) {
    for (m, d) in out.chunks_exact_mut(8).zip(delta.chunks_exact(8)) {
        let v = u64::from_ne_bytes((&*m).try_into().unwrap())
            ^ u64::from_ne_bytes(d.try_into().unwrap());
        m.copy_from_slice(&v.to_ne_bytes());
    }
}

/// Indexes of the pages of `memory` that differ from `image`, skipping
/// pages wholly inside `dead`, and, when `written` is given, the pages it
/// marks as never written (they hold their image bytes).
pub(crate) fn changed_pages(
    memory: &[u8],
    image: &[u8],
    dead: &Range<usize>,
    written: Option<&[bool]>,
) -> Vec<u32> {
    let mut changed = Vec::new();
    for (i, page) in memory.chunks_exact(PAGE_BYTES).enumerate() {
        let start = i * PAGE_BYTES;
        if start >= dead.start && start + PAGE_BYTES <= dead.end {
            continue;
        }
        if written.is_some_and(|w| !w[i]) {
            continue;
        }
        if page != image_page(image, start) {
            changed.push(i as u32);
        }
    }
    changed
}

/// How many of the (increasing) page `indexes` lie inside an image of
/// `image_bytes`: they come first.
pub(crate) fn inside_image(indexes: &[u32], image_bytes: usize) -> usize {
    indexes.partition_point(|&index| (index as usize) * PAGE_BYTES < image_bytes)
}

/// End (exclusive) of the run of consecutive page indexes that starts at
/// `pages[i]`.
pub(crate) fn run_end(pages: &[u32], i: usize) -> usize {
    run_end_where(pages, i, |_| true)
}

/// End (exclusive) of the run of consecutive page indexes that starts at
/// `pages[i]` and goes on while `joins(k)` holds for each next `pages[k]`.
pub(crate) fn run_end_where(pages: &[u32], i: usize, joins: impl Fn(usize) -> bool) -> usize {
    let mut end = i + 1;
    while end < pages.len() && pages[end - 1].checked_add(1) == Some(pages[end]) && joins(end) {
        end += 1;
    }
    end
}

/// Byte ranges of the pages in the first `image.len()` bytes of `memory`
/// that differ from `image`, consecutive pages merged, in order.
pub fn changed_image_runs(memory: &[u8], image: &[u8]) -> Vec<Range<usize>> {
    let inside = &memory[..memory.len().min(image.len())];
    let pages = changed_pages(inside, image, &(0..0), None);
    let mut runs = Vec::new();
    let mut i = 0;
    while i < pages.len() {
        let end = run_end(&pages, i);
        runs.push(
            pages[i] as usize * PAGE_BYTES..pages[end - 1] as usize * PAGE_BYTES + PAGE_BYTES,
        );
        i = end;
    }
    runs
}

/// Makes the pages of `region` present and writable now, in one system
/// call (Linux's `MADV_POPULATE_WRITE`), instead of one page fault each
/// when they are first written: a fresh instance's memory is a
/// copy-on-write mapping of its image. Contents do not change. Best effort:
/// elsewhere, and on kernels before 5.14, it does nothing and the writes
/// fault as usual.
pub fn prefault(region: &mut [u8]) {
    #[cfg(target_os = "linux")]
    if !region.is_empty() {
        // SAFETY: the range is memory we hold mutably; populating pages
        // does not change their contents.
        let _ = unsafe {
            rustix::mm::madvise(
                region.as_mut_ptr().cast(),
                region.len(),
                rustix::mm::Advice::LinuxPopulateWrite,
            )
        };
    }
    #[cfg(not(target_os = "linux"))]
    let _ = region;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changed_image_runs_merge_consecutive_pages_inside_the_image() {
        let image = vec![1u8; 8 * PAGE_BYTES];
        let mut memory = image.clone();
        memory.resize(12 * PAGE_BYTES, 0);
        memory[PAGE_BYTES + 5] = 0; // page 1
        memory[2 * PAGE_BYTES] = 0; // page 2
        memory[6 * PAGE_BYTES + 9] = 7; // page 6
        memory[10 * PAGE_BYTES] = 3; // beyond the image: not reported
        assert_eq!(
            changed_image_runs(&memory, &image),
            vec![PAGE_BYTES..3 * PAGE_BYTES, 6 * PAGE_BYTES..7 * PAGE_BYTES]
        );
        assert!(changed_image_runs(&image, &image).is_empty());
    }
}
