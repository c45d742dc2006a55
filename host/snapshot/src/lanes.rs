//! Byte lanes and block strides: how the deltas of a frame's pages beyond
//! the image (and of dense image pages) are laid out before compression,
//! and put back together on restore. See [Layout](crate#layout).

use crate::format::{BLOCK_UNIT_BYTES, PAGE_BYTES};
use std::ops::Range;

/// Bytes per lane element. The pages of a frame that lie beyond the image
/// are stored split into [`LANE_WIDTH`] lanes, lane `k` holding byte `k`
/// of every 4-byte word. That memory is the heap the cell grew: mostly
/// 32-bit pointers and NaN-boxed values whose high bytes repeat; grouped
/// by position they compress ~2.5× smaller and zstd gets through them
/// ~1.8× faster. Deltas of pages inside the image are mostly zeros with a
/// few changed bytes, and stay in place: split, they compressed larger and
/// slower (see docs/decisions.md).
const LANE_WIDTH: usize = 4;

/// Words per page.
pub(crate) const PAGE_WORDS: usize = PAGE_BYTES / LANE_WIDTH;

/// Where page number `slot`'s bytes lie in each lane of `lanes_len` bytes
/// of lanes (four lanes of `lanes_len / 4` bytes).
fn slot_in_lanes(lanes_len: usize, slot: usize) -> [Range<usize>; LANE_WIDTH] {
    let n = lanes_len / LANE_WIDTH;
    std::array::from_fn(|k| k * n + slot * PAGE_WORDS..k * n + (slot + 1) * PAGE_WORDS)
}

/// Words in a block stride of `units` ([`BLOCK_UNIT_BYTES`] each); 0 for
/// none. Always a multiple of 4 and less than [`PAGE_WORDS`].
pub(crate) fn stride_words(units: u8) -> usize {
    usize::from(units) * BLOCK_UNIT_BYTES / LANE_WIDTH
}

/// The page as little-endian 4-byte words.
pub(crate) fn page_words(page: &[u8]) -> [u32; PAGE_WORDS] {
    let mut words = [0u32; PAGE_WORDS];
    for (word, bytes) in words.iter_mut().zip(page.chunks_exact(LANE_WIDTH)) {
        *word = u32::from_le_bytes(bytes.try_into().unwrap());
    }
    words
}

/// Writes `words` (a page, [`page_words`]) into `lanes` as page number
/// `slot`; with a `stride` (in words, see [`stride_words`]), each word
/// from the `stride`-th on minus the word `stride` before it (wrapping). In a page
/// of equal blocks the same field of neighbouring blocks often holds the
/// same value (a shape, a reference count) or one that grows by a constant
/// (an index, the address of the next block): the differences are mostly
/// zeros and repeats.
pub(crate) fn split_page(words: &[u32; PAGE_WORDS], lanes: &mut [u8], slot: usize, stride: usize) {
    let mut stored = *words;
    if stride != 0 {
        for (out, (&word, &earlier)) in stored[stride..]
            .iter_mut()
            .zip(words[stride..].iter().zip(&words[..PAGE_WORDS - stride]))
        {
            *out = word.wrapping_sub(earlier);
        }
    }
    let [l0, l1, l2, l3] = lanes
        .get_disjoint_mut(slot_in_lanes(lanes.len(), slot))
        .expect("a slot's four lane parts are disjoint and in bounds");
    // Byte by byte in one simple loop, which the compiler vectorizes.
    for (i, &v) in stored.iter().enumerate() {
        l0[i] = v as u8;
        l1[i] = (v >> 8) as u8;
        l2[i] = (v >> 16) as u8;
        l3[i] = (v >> 24) as u8;
    }
}

/// The inverse of [`split_page`]: reassembles page number `slot` from
/// `lanes` and XORs it into `page` (a fresh page: zeros; eight words that
/// are all zero, free heap, are not touched), then adds back each word's
/// `stride`-earlier word.
pub(crate) fn join_page(lanes: &[u8], slot: usize, page: &mut [u8], stride: usize) {
    join_lanes(lanes, slot, page);
    if stride != 0 {
        undo_stride(page, stride);
    }
}

/// `word[i] += word[i - stride]` for every word from the `stride`-th on,
/// in order. Four words at a time: a stride is at least four words, so
/// the four earlier words are final.
fn undo_stride(page: &mut [u8], stride: usize) {
    let mut words = page_words(page);
    for at in (stride..PAGE_WORDS).step_by(4) {
        let earlier: [u32; 4] = words[at - stride..at - stride + 4].try_into().unwrap();
        for (word, add) in words[at..at + 4].iter_mut().zip(earlier) {
            *word = word.wrapping_add(add);
        }
    }
    for (bytes, word) in page.chunks_exact_mut(LANE_WIDTH).zip(words) {
        bytes.copy_from_slice(&word.to_le_bytes());
    }
}

/// Reassembles page number `slot` from `lanes`, XORed into `page`.
fn join_lanes(lanes: &[u8], slot: usize, page: &mut [u8]) {
    let [l0, l1, l2, l3] = slot_in_lanes(lanes.len(), slot).map(|span| &lanes[span]);
    for ((((words, a), b), c), d) in page
        .chunks_exact_mut(8 * LANE_WIDTH)
        .zip(l0.chunks_exact(8))
        .zip(l1.chunks_exact(8))
        .zip(l2.chunks_exact(8))
        .zip(l3.chunks_exact(8))
    {
        let x = [a, b, c, d].map(|lane| u64::from_le_bytes(lane.try_into().unwrap()));
        if x == [0; LANE_WIDTH] {
            continue;
        }
        for (i, word) in words.chunks_exact_mut(LANE_WIDTH).enumerate() {
            let mut v = 0u32;
            for (k, lane) in x.iter().enumerate() {
                v |= u32::from((lane >> (8 * i)) as u8) << (8 * k);
            }
            let old = u32::from_le_bytes((&*word).try_into().unwrap());
            word.copy_from_slice(&(old ^ v).to_le_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_holds_byte_k_of_every_word_in_lane_k() {
        // Three pages; the middle one goes to slot 1 of the lanes.
        let page: Vec<u8> = (0..PAGE_BYTES).map(|i| (i * 7 + i / 256) as u8).collect();
        let mut lanes = vec![0u8; 3 * PAGE_BYTES];
        split_page(&page_words(&page), &mut lanes, 1, 0);
        let n = lanes.len() / LANE_WIDTH;
        for (word, bytes) in page.chunks_exact(LANE_WIDTH).enumerate() {
            for (k, &byte) in bytes.iter().enumerate() {
                assert_eq!(
                    lanes[k * n + PAGE_WORDS + word],
                    byte,
                    "word {word} byte {k}"
                );
            }
        }
        // The other slots are untouched.
        for k in 0..LANE_WIDTH {
            assert!(lanes[k * n..k * n + PAGE_WORDS].iter().all(|&b| b == 0));
            assert!(lanes[k * n + 2 * PAGE_WORDS..(k + 1) * n]
                .iter()
                .all(|&b| b == 0));
        }
        // Joined into a fresh (zero) page, the lanes give the page back;
        // an all-zero slot leaves a page as it is.
        let mut back = vec![0u8; PAGE_BYTES];
        join_page(&lanes, 1, &mut back, 0);
        assert_eq!(back, page);
        join_page(&lanes, 0, &mut back, 0);
        assert_eq!(back, page);
    }

    #[test]
    fn with_a_stride_a_page_is_stored_as_differences_of_neighbouring_blocks() {
        let stride = stride_words(3); // 48-byte blocks: 12 words
        assert_eq!(stride, 12);
        // Blocks of three fields: a constant, an index, an address that
        // grows by the block size; then four spare words.
        let mut page = vec![0u8; PAGE_BYTES];
        for (i, block) in page.chunks_mut(48).enumerate() {
            let fields = [0xFFF8_0001u32, i as u32, 0x10_0000 + 48 * i as u32];
            for (word, value) in block.chunks_exact_mut(4).zip(fields) {
                word.copy_from_slice(&value.to_le_bytes());
            }
        }
        let mut lanes = vec![0u8; PAGE_BYTES];
        split_page(&page_words(&page), &mut lanes, 0, stride);
        let n = PAGE_WORDS;
        let stored = |word: usize| u32::from_le_bytes(std::array::from_fn(|k| lanes[k * n + word]));
        // The first block as it is, then each field minus the one before.
        assert_eq!(stored(1), 0);
        assert_eq!(stored(2), 0x10_0000);
        for block in 1..PAGE_WORDS / stride {
            let at = block * stride;
            assert_eq!(
                [stored(at), stored(at + 1), stored(at + 2)],
                [0, 1, 48],
                "block {block}"
            );
        }
        let mut back = vec![0u8; PAGE_BYTES];
        join_page(&lanes, 0, &mut back, stride);
        assert_eq!(back, page);
    }
}
