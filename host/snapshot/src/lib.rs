//! quickcell's snapshot format: a parked cell's WebAssembly linear memory,
//! stored as the difference from the module's initial memory image, plus an
//! opaque host-state document.
//!
//! ```
//! use quickcell_snapshot::{decode, encode, Checkpoint};
//!
//! let image = vec![7u8; 65536];
//! let mut memory = image.clone();
//! memory[100] = 1;
//! let guest = [0xAB; 32];
//! let encoded = encode(&Checkpoint {
//!     memory: &memory,
//!     image: &image,
//!     dead: 0..0,
//!     stack_pointer: 4096,
//!     host_state: b"{}",
//!     guest_hash: guest,
//!     guest_build: [0xCD; 32],
//!     max_payload_bytes: 1 << 20,
//!     memory_maps_image: false,
//!     block_units: &[],
//! })
//! .unwrap();
//! let snapshot = decode(&encoded.bytes, guest, 1 << 30).unwrap();
//! let mut restored = image.clone(); // a fresh instance starts from the image
//! snapshot.apply(&mut restored, image.len()).unwrap();
//! assert_eq!(restored, memory);
//! ```
//!
//! # What is stored
//!
//! Memory is compared with the image in 4 KiB pages ([`PAGE_BYTES`]); pages
//! beyond the image are compared with zeros (fresh memory). For each page
//! that differs, the snapshot stores the page XOR its image page: a cell
//! changes a few bytes here and there, so the deltas are almost all zeros
//! and compress to a fraction of the pages themselves. A restore starts from
//! a fresh instance — whose memory *is* the image — and XORs the deltas in.
//!
//! Pages wholly inside the `dead` range (the unused part of the shadow stack
//! below the stack pointer, where nothing live can be between calls) are
//! not stored; after a restore they hold the image's bytes, which no code
//! reads before writing.
//!
//! # Layout
//!
//! | bytes | field |
//! |---|---|
//! | 8 | magic `QCELLSNP` |
//! | 4 | format version, little endian ([`FORMAT_VERSION`]) |
//! | 32 | the key the memory belongs to ([`Checkpoint::guest_hash`]; quickcell: a hash of the guest module, its memory image and stack), compared with the reader's |
//! | 32 | the guest build: SHA-256 of the guest module ([`Checkpoint::guest_build`]), to name it |
//! | 4 | CRC-32 of the guest build and the rest |
//! | rest | zstd frames: the head, then the page deltas |
//!
//! The first frame is the head, compressed against the built-in raw-content
//! dictionary [`HEAD_DICTIONARY`] (the field names of the host state
//! quickcell stores; format 6, [`PLAIN_HEAD_FORMAT_VERSION`], still read,
//! compressed it without one). It holds (little endian): memory size in bytes
//! (u64), stack pointer (u32), host-state length (u32) and bytes, page
//! count (u32), the page indexes as gaps (u32 each: the first index, then
//! each index minus the one before it minus 1; all their low bytes, then
//! the next bytes, and so on, as the lanes below; format 6 stored the
//! indexes themselves), then one layout byte per page (below). The page deltas follow in order, split
//! into independent frames of at most [`PAGES_PER_FRAME`] pages, so that
//! large snapshots are compressed and restored on several cores at once
//! (at most [`MAX_CODEC_THREADS`]). Every frame states its decompressed
//! size; frame `k` holds pages `k·PAGES_PER_FRAME ..` of the head's list.
//!
//! A frame's content is first its image pages whose layout byte is 0,
//! as their changed words: the number of each such page's changed words
//! (u16 each; its top bit set when the page's values are differenced,
//! below), then each changed word's position as the words skipped
//! since the previous changed word of its page or the page's start (u16
//! each, all low bytes and then all high bytes), then the changed words'
//! new values (u32 each), or for a differenced page each value minus the
//! one before it in the page (the first minus 0, wrapping): the encoder
//! differences a page whose differences mostly repeat (the links of a
//! free list the cell filled step by the block size). Then the deltas of
//! all its other pages, in page order, split into four lanes: seen as
//! `n` little-endian 4-byte words, lane `k` (`k·n .. (k+1)·n` of that
//! part) holds byte `k` of every word, in order. Memory full of 32-bit
//! pointers and NaN-boxed values repeats its high bytes; grouped by
//! position they compress ~2.5× smaller, and zstd gets through them ~1.8×
//! faster, than in place.
//!
//! - An image page's layout byte says where its delta (its XOR with the
//!   image page) is: 0 as changed words, `1 + s` in the lanes, with a
//!   block stride of `s` units (below) when `s > 0`. The encoder decides
//!   page by page: a page whose delta is dense (one word in eight or more
//!   differs: a garbage collection relinked the runtime's objects, or the
//!   cell filled free heap of the image) goes in the lanes; sparse ones
//!   are smaller, and restore faster, as changed words. Format 7
//!   ([`UNSTRIDED_IMAGE_FORMAT_VERSION`], still read) had no strides on
//!   image pages (their layout byte was 1) and decided for a whole frame;
//!   format 5 ([`IN_PLACE_FORMAT_VERSION`], still read) stored sparse
//!   image pages as whole XOR deltas in place, 4 KiB each.
//! - A page beyond the image (the heap the cell grew) is its own delta,
//!   and its layout byte is its block stride `s`.
//! - A block stride `s` is in [`BLOCK_UNIT_BYTES`]: when `s > 0`, each
//!   word of the delta from word `w = 4s` on is stored minus the word `w`
//!   words earlier (wrapping), the first `w` as they are. The guest
//!   allocator lays pages out in equal blocks (its size classes, and
//!   QuickJS's arenas), and the same field of neighbouring blocks (a
//!   shape, a reference count, an index, the address of the next block)
//!   repeats or grows by a constant: the differences are mostly zeros and
//!   repeats. The encoder takes the hint [`Checkpoint::block_units`] and
//!   picks 1 to 4 times it (objects of two kinds often alternate in one
//!   class), or without a hint any stride up to 512 bytes, or none, by
//!   sampling the page.
//!
//! The size bounded by `max_payload_bytes` (quickcell's `maxSnapshotBytes`)
//! is the uncompressed payload — head plus changed pages — so the limit
//! does not depend on how well the data compresses, and untouched pages
//! (including untouched trailing pages of a grown memory) do not count.
//!
//! Reading checks, in order: length, magic, version, key, checksum,
//! that every frame is a standard zstd frame stating its size, the head
//! frame's stated size against the largest head the caller's memory
//! ceiling (at most [`MAX_MEMORY_BYTES`]) allows, and the payload's
//! internal consistency (memory size, host-state length against
//! [`MAX_HOST_STATE_BYTES`], page count against the memory and the head,
//! page indexes, frame sizes against the page count and
//! [`PAGES_PER_FRAME`]). Each failure is a distinct [`SnapshotError`].
//! Snapshots are read as hostile input: a damaged, truncated or forged one
//! fails with an error, never a panic; nothing is sized by a field before
//! that field is checked against a bound derived from the caller's
//! ceiling; and the work is linear in the snapshot and the memory it
//! restores.
//!
//! Restoring writes each frame into the target memory (a fresh
//! instance's: the image, zeros beyond it): the changed words through a
//! per-thread buffer of at most 3 MiB (a frame of pages with every word
//! changed), the lanes through one of at most one frame (2 MiB), XORed
//! in, then adds back each strided page's earlier words (for an image
//! page, in a 4 KiB scratch before the delta is XORed in).
//! Nothing of the size of the memory is allocated on the way.

/// The README's examples, run as doc tests so that they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExamples;

mod decoder;
mod encoder;
mod format;
mod frames;
mod lanes;
#[cfg(target_os = "linux")]
mod pagemap;
mod pages;
mod pool;
mod restore;
mod written;

pub use decoder::{decode, guest_build, Snapshot};
pub use encoder::{encode, Checkpoint, Encoded};
pub use format::{
    SnapshotError, BLOCK_UNIT_BYTES, FORMAT_VERSION, HEAD_DICTIONARY, IN_PLACE_FORMAT_VERSION,
    MAX_HOST_STATE_BYTES, MAX_MEMORY_BYTES, PAGES_PER_FRAME, PAGE_BYTES, PLAIN_HEAD_FORMAT_VERSION,
    UNSTRIDED_IMAGE_FORMAT_VERSION, WASM_PAGE_BYTES,
};
pub use pages::{changed_image_runs, prefault};
pub use pool::{MAX_CODEC_THREADS, PARALLEL_PAYLOAD_BYTES};
pub use written::WrittenPages;

#[cfg(test)]
mod fuzz;

#[cfg(test)]
mod tests;
