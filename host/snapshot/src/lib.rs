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
//!     max_payload_bytes: 1 << 20,
//! })
//! .unwrap();
//! let snapshot = decode(&encoded.bytes, guest, 1 << 30).unwrap();
//! let mut restored = image.clone(); // a fresh instance starts from the image
//! snapshot.apply(&mut restored).unwrap();
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
//! | 32 | SHA-256 of the guest module the memory belongs to |
//! | 4 | CRC-32 of the compressed payload |
//! | rest | one zstd frame (with its content size) of the payload |
//!
//! Payload (little endian): memory size in bytes (u64), stack pointer
//! (u32), host-state length (u32) and bytes, page count (u32), the page
//! indexes (u32 each, strictly increasing), then the page deltas.
//!
//! The size bounded by `max_payload_bytes` (quickcell's `maxSnapshotBytes`)
//! is the uncompressed payload — changed pages plus host state — so the
//! limit does not depend on how well the data compresses, and untouched
//! pages (including untouched trailing pages of a grown memory) do not
//! count.
//!
//! Reading checks, in order: length, magic, version, guest hash, checksum,
//! the frame's stated size against the largest payload the caller's
//! memory ceiling allows, and the payload's internal consistency. Each
//! failure is a distinct [`SnapshotError`].

use std::io::Write;
use std::ops::Range;

/// Version of the format written by [`encode`].
pub const FORMAT_VERSION: u32 = 1;

/// Granularity of the memory diff, in bytes.
pub const PAGE_BYTES: usize = 4096;

/// WebAssembly page size: memory sizes are multiples of it.
pub const WASM_PAGE_BYTES: usize = 65536;

/// Largest host-state document a snapshot may carry, in bytes.
pub const MAX_HOST_STATE_BYTES: usize = 64 << 20;

/// Payloads from this size up are compressed by several zstd workers.
const MULTITHREAD_PAYLOAD_BYTES: usize = 4 << 20;
/// Most zstd worker threads one checkpoint uses.
const MAX_COMPRESSION_WORKERS: usize = 4;

/// zstd level: the fastest standard level; XOR deltas are mostly zeros, so
/// higher levels buy little.
const ZSTD_LEVEL: i32 = 1;

const MAGIC: &[u8; 8] = b"QCELLSNP";
const HEADER_BYTES: usize = 8 + 4 + 32 + 4;

/// Why a snapshot could not be taken or read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnapshotError {
    /// The checkpoint's payload is larger than allowed.
    TooLarge {
        /// Payload bytes the checkpoint needs.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// Shorter than its header, or its payload ends early.
    Truncated,
    /// Not a quickcell snapshot.
    BadMagic,
    /// Written by a format this build does not read.
    UnknownVersion(u32),
    /// Taken from a different guest module.
    ForeignGuest,
    /// The payload does not match its checksum.
    ChecksumMismatch,
    /// The payload is inconsistent (bad page index, sizes, compression).
    Corrupt(String),
}

impl std::error::Error for SnapshotError {}

impl std::fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::TooLarge { bytes, limit } => write!(
                f,
                "the checkpoint holds {bytes} bytes; the limit is {limit}"
            ),
            Self::Truncated => f.write_str("the snapshot is truncated"),
            Self::BadMagic => f.write_str("the data is not a quickcell snapshot"),
            Self::UnknownVersion(v) => write!(
                f,
                "the snapshot has format version {v}; this build reads version {FORMAT_VERSION}"
            ),
            Self::ForeignGuest => {
                f.write_str("the snapshot was taken from a different guest module")
            }
            Self::ChecksumMismatch => f.write_str("the snapshot fails its checksum"),
            Self::Corrupt(what) => write!(f, "the snapshot is corrupt: {what}"),
        }
    }
}

/// What a checkpoint is taken of.
#[derive(Debug, Clone)]
pub struct Checkpoint<'a> {
    /// The linear memory (a whole number of Wasm pages).
    pub memory: &'a [u8],
    /// The module's initial memory image.
    pub image: &'a [u8],
    /// Byte range whose whole pages hold nothing live (dead stack).
    pub dead: Range<usize>,
    /// Value of `__stack_pointer`.
    pub stack_pointer: u32,
    /// The host's per-cell state, opaque here.
    pub host_state: &'a [u8],
    /// SHA-256 of the guest module.
    pub guest_hash: [u8; 32],
    /// Largest uncompressed payload allowed.
    pub max_payload_bytes: usize,
}

/// A decoded, verified snapshot.
#[derive(Debug)]
pub struct Snapshot {
    /// Linear-memory size at the checkpoint, in bytes.
    pub memory_bytes: usize,
    /// Value of `__stack_pointer`.
    pub stack_pointer: u32,
    /// The host's per-cell state.
    pub host_state: Vec<u8>,
    /// Indexes of the stored pages, strictly increasing.
    page_indexes: Vec<u32>,
    /// The decompressed payload; the deltas are its last
    /// `page_indexes.len() * PAGE_BYTES` bytes.
    payload: Vec<u8>,
}

const ZERO_PAGE: [u8; PAGE_BYTES] = [0; PAGE_BYTES];

fn image_page(image: &[u8], start: usize) -> &[u8] {
    image.get(start..start + PAGE_BYTES).unwrap_or(&ZERO_PAGE)
}

/// `out = a XOR b`, a word at a time.
fn xor_into(out: &mut [u8], a: &[u8], b: &[u8]) {
    for ((o, x), y) in out
        .chunks_exact_mut(8)
        .zip(a.chunks_exact(8))
        .zip(b.chunks_exact(8))
    {
        let v =
            u64::from_ne_bytes(x.try_into().unwrap()) ^ u64::from_ne_bytes(y.try_into().unwrap());
        o.copy_from_slice(&v.to_ne_bytes());
    }
}

/// Indexes of the pages of `memory` that differ from `image`, skipping
/// pages wholly inside `dead`.
fn changed_pages(memory: &[u8], image: &[u8], dead: &Range<usize>) -> Vec<u32> {
    let mut changed = Vec::new();
    for (i, page) in memory.chunks_exact(PAGE_BYTES).enumerate() {
        let start = i * PAGE_BYTES;
        if start >= dead.start && start + PAGE_BYTES <= dead.end {
            continue;
        }
        if page != image_page(image, start) {
            changed.push(i as u32);
        }
    }
    changed
}

/// Encodes a checkpoint.
///
/// # Errors
///
/// [`SnapshotError::TooLarge`] when the payload exceeds
/// `max_payload_bytes` (or the host state exceeds
/// [`MAX_HOST_STATE_BYTES`]); [`SnapshotError::Corrupt`] if the memory is
/// not a whole number of Wasm pages.
pub fn encode(c: &Checkpoint<'_>) -> Result<Encoded, SnapshotError> {
    if !c.memory.len().is_multiple_of(WASM_PAGE_BYTES) {
        return Err(SnapshotError::Corrupt(
            "memory is not a whole number of pages".into(),
        ));
    }
    let pages = changed_pages(c.memory, c.image, &c.dead);
    let payload_len = 8 + 4 + 4 + c.host_state.len() + 4 + pages.len() * (4 + PAGE_BYTES);
    if payload_len > c.max_payload_bytes || c.host_state.len() > MAX_HOST_STATE_BYTES {
        return Err(SnapshotError::TooLarge {
            bytes: payload_len,
            limit: c.max_payload_bytes,
        });
    }
    let mut head = Vec::with_capacity(payload_len - pages.len() * PAGE_BYTES);
    head.extend_from_slice(&(c.memory.len() as u64).to_le_bytes());
    head.extend_from_slice(&c.stack_pointer.to_le_bytes());
    head.extend_from_slice(&(c.host_state.len() as u32).to_le_bytes());
    head.extend_from_slice(c.host_state);
    head.extend_from_slice(&(pages.len() as u32).to_le_bytes());
    for index in &pages {
        head.extend_from_slice(&index.to_le_bytes());
    }
    let mut out = Vec::with_capacity(HEADER_BYTES + payload_len / 8);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&c.guest_hash);
    out.extend_from_slice(&[0; 4]); // the checksum, filled in below
    let compress = |out: Vec<u8>| -> std::io::Result<Vec<u8>> {
        let mut encoder = zstd::stream::Encoder::new(out, ZSTD_LEVEL)?;
        if payload_len >= MULTITHREAD_PAYLOAD_BYTES {
            // Large heaps: compress on the machine's cores (the frame stays
            // an ordinary zstd frame; decoding is unchanged).
            let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
            if workers > 1 {
                encoder.multithread(workers.min(MAX_COMPRESSION_WORKERS) as u32)?;
            }
        }
        encoder.set_pledged_src_size(Some(payload_len as u64))?;
        encoder.include_contentsize(true)?;
        encoder.write_all(&head)?;
        let mut delta = [0u8; PAGE_BYTES];
        for &index in &pages {
            let start = index as usize * PAGE_BYTES;
            xor_into(
                &mut delta,
                &c.memory[start..start + PAGE_BYTES],
                image_page(c.image, start),
            );
            encoder.write_all(&delta)?;
        }
        encoder.finish()
    };
    let mut out =
        compress(out).map_err(|e| SnapshotError::Corrupt(format!("compression failed: {e}")))?;
    let checksum = crc32fast::hash(&out[HEADER_BYTES..]);
    out[HEADER_BYTES - 4..HEADER_BYTES].copy_from_slice(&checksum.to_le_bytes());
    Ok(Encoded {
        bytes: out,
        payload_bytes: payload_len,
    })
}

/// An encoded snapshot.
#[derive(Debug, Clone)]
pub struct Encoded {
    /// The snapshot.
    pub bytes: Vec<u8>,
    /// Its uncompressed payload size (what the limit bounds).
    pub payload_bytes: usize,
}

/// Reads little-endian fields from the payload.
struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], SnapshotError> {
        let end = self.at.checked_add(n).ok_or(SnapshotError::Truncated)?;
        let bytes = self
            .data
            .get(self.at..end)
            .ok_or(SnapshotError::Truncated)?;
        self.at = end;
        Ok(bytes)
    }
    fn u32(&mut self) -> Result<u32, SnapshotError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn u64(&mut self) -> Result<u64, SnapshotError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
}

thread_local! {
    /// A decompression context per thread: creating one costs more than
    /// decompressing a small snapshot.
    static DECOMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { std::cell::RefCell::new(None) };
}

fn decompress(compressed: &[u8], size: usize) -> Result<Vec<u8>, SnapshotError> {
    let corrupt = |e: std::io::Error| SnapshotError::Corrupt(format!("cannot decompress: {e}"));
    DECOMPRESSOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(zstd::bulk::Decompressor::new().map_err(corrupt)?);
        }
        let decompressor = slot.as_mut().expect("just created");
        let mut out = Vec::with_capacity(size);
        decompressor
            .decompress_to_buffer(compressed, &mut out)
            .map_err(corrupt)?;
        Ok(out)
    })
}

/// Decodes and verifies a snapshot taken from the guest `guest_hash`, whose
/// memory may be at most `max_memory_bytes`.
pub fn decode(
    bytes: &[u8],
    guest_hash: [u8; 32],
    max_memory_bytes: usize,
) -> Result<Snapshot, SnapshotError> {
    if bytes.len() < HEADER_BYTES {
        return Err(if bytes.starts_with(&MAGIC[..bytes.len().min(8)]) {
            SnapshotError::Truncated
        } else {
            SnapshotError::BadMagic
        });
    }
    if &bytes[..8] != MAGIC {
        return Err(SnapshotError::BadMagic);
    }
    let version = u32::from_le_bytes(bytes[8..12].try_into().unwrap());
    if version != FORMAT_VERSION {
        return Err(SnapshotError::UnknownVersion(version));
    }
    if bytes[12..44] != guest_hash {
        return Err(SnapshotError::ForeignGuest);
    }
    let checksum = u32::from_le_bytes(bytes[44..48].try_into().unwrap());
    let compressed = &bytes[HEADER_BYTES..];
    if crc32fast::hash(compressed) != checksum {
        return Err(SnapshotError::ChecksumMismatch);
    }
    let max_payload =
        8 + 4 + 4 + MAX_HOST_STATE_BYTES + 4 + max_memory_bytes / PAGE_BYTES * (4 + PAGE_BYTES);
    // The frame states its decompressed size: allocate exactly that, after
    // checking it, rather than the ceiling.
    let size = match zstd::zstd_safe::get_frame_content_size(compressed) {
        Ok(Some(size)) if size <= max_payload as u64 => size as usize,
        Ok(Some(size)) => {
            return Err(SnapshotError::Corrupt(format!(
                "it would decompress to {size} bytes"
            )))
        }
        _ => return Err(SnapshotError::Corrupt("no content size".into())),
    };
    let payload = decompress(compressed, size)?;
    if payload.len() != size {
        return Err(SnapshotError::Truncated);
    }
    let mut r = Reader {
        data: &payload,
        at: 0,
    };
    let memory_bytes = usize::try_from(r.u64()?)
        .map_err(|_| SnapshotError::Corrupt("memory size out of range".into()))?;
    if memory_bytes > max_memory_bytes || !memory_bytes.is_multiple_of(WASM_PAGE_BYTES) {
        return Err(SnapshotError::Corrupt(format!(
            "implausible memory size {memory_bytes}"
        )));
    }
    let stack_pointer = r.u32()?;
    let state_len = r.u32()? as usize;
    if state_len > MAX_HOST_STATE_BYTES {
        return Err(SnapshotError::Corrupt("host state too large".into()));
    }
    let host_state = r.take(state_len)?.to_vec();
    let count = r.u32()? as usize;
    let page_limit = memory_bytes / PAGE_BYTES;
    if count > page_limit {
        return Err(SnapshotError::Corrupt("more pages than memory".into()));
    }
    let mut page_indexes = Vec::with_capacity(count);
    for _ in 0..count {
        let index = r.u32()?;
        if index as usize >= page_limit || page_indexes.last().is_some_and(|&last| index <= last) {
            return Err(SnapshotError::Corrupt(format!("bad page index {index}")));
        }
        page_indexes.push(index);
    }
    if payload.len() - r.at != count * PAGE_BYTES {
        return Err(SnapshotError::Corrupt(
            "page data does not match the page count".into(),
        ));
    }
    Ok(Snapshot {
        memory_bytes,
        stack_pointer,
        host_state,
        page_indexes,
        payload,
    })
}

impl Snapshot {
    /// XORs the stored deltas into `memory`, which must hold the module's
    /// initial image (zeros beyond it) and be `memory_bytes` long. On an
    /// error `memory` is partly written and must be discarded.
    ///
    /// # Errors
    ///
    /// [`SnapshotError::Corrupt`] when `memory` is shorter than
    /// `memory_bytes` (nothing is written then).
    pub fn apply(self, memory: &mut [u8]) -> Result<(), SnapshotError> {
        if memory.len() < self.memory_bytes {
            return Err(SnapshotError::Corrupt("memory is too short".into()));
        }
        let deltas = &self.payload[self.payload.len() - self.page_indexes.len() * PAGE_BYTES..];
        for (index, delta) in self
            .page_indexes
            .iter()
            .zip(deltas.chunks_exact(PAGE_BYTES))
        {
            let start = *index as usize * PAGE_BYTES;
            let page = &mut memory[start..start + PAGE_BYTES];
            for (m, d) in page.chunks_exact_mut(8).zip(delta.chunks_exact(8)) {
                let v = u64::from_ne_bytes((&*m).try_into().unwrap())
                    ^ u64::from_ne_bytes(d.try_into().unwrap());
                m.copy_from_slice(&v.to_ne_bytes());
            }
        }
        Ok(())
    }

    /// Number of stored pages.
    pub fn page_count(&self) -> usize {
        self.page_indexes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GUEST: [u8; 32] = [3; 32];

    fn sample() -> (Vec<u8>, Vec<u8>) {
        let image = vec![7u8; 65536];
        let mut memory = vec![7u8; 131072];
        memory[5] = 1; // page 0 changed
        memory[70000] = 9; // beyond the image: non-zero pages differ
        memory[65536 + PAGE_BYTES * 2..65536 + PAGE_BYTES * 3].fill(0); // a zero page beyond it
        (image, memory)
    }

    fn checkpoint<'a>(memory: &'a [u8], image: &'a [u8], dead: Range<usize>) -> Checkpoint<'a> {
        Checkpoint {
            memory,
            image,
            dead,
            stack_pointer: 1234,
            host_state: b"{\"a\":1}",
            guest_hash: GUEST,
            max_payload_bytes: 1 << 20,
        }
    }

    #[test]
    fn round_trip_restores_changed_pages_only() {
        let (image, memory) = sample();
        let bytes = encode(&checkpoint(&memory, &image, 0..0)).unwrap().bytes;
        let snap = decode(&bytes, GUEST, 1 << 30).unwrap();
        assert_eq!(snap.memory_bytes, memory.len());
        assert_eq!(snap.stack_pointer, 1234);
        assert_eq!(snap.host_state, b"{\"a\":1}");
        let pages = snap.page_count();
        let mut restored = image.clone();
        restored.resize(memory.len(), 0);
        snap.apply(&mut restored).unwrap();
        assert_eq!(restored, memory);
        // Page 0, and the 16 pages beyond the image except the zero one.
        assert_eq!(pages, 1 + 16 - 1);
    }

    #[test]
    fn sparse_changes_compress_far_below_their_pages() {
        let image: Vec<u8> = (0..1 << 20).map(|i| (i * 7 % 251) as u8).collect();
        let mut memory = image.clone();
        for page in 0..64 {
            memory[page * PAGE_BYTES * 4 + 17] ^= 0x5A;
        }
        let bytes = encode(&checkpoint(&memory, &image, 0..0)).unwrap().bytes;
        assert!(bytes.len() < 64 * PAGE_BYTES / 20, "{} bytes", bytes.len());
        let snap = decode(&bytes, GUEST, 1 << 30).unwrap();
        let mut restored = image.clone();
        snap.apply(&mut restored).unwrap();
        assert_eq!(restored, memory);
    }

    #[test]
    fn dead_pages_are_left_out() {
        let (image, mut memory) = sample();
        memory[PAGE_BYTES * 3 + 7] = 42; // page 3, inside the dead range
        let pages = |dead| {
            decode(
                &encode(&checkpoint(&memory, &image, dead)).unwrap().bytes,
                GUEST,
                1 << 30,
            )
            .unwrap()
            .page_count()
        };
        let all = pages(0..0);
        assert_eq!(pages(PAGE_BYTES..PAGE_BYTES * 5), all - 1);
        // A range that covers only part of a page keeps the page.
        assert_eq!(pages(PAGE_BYTES..PAGE_BYTES * 3 + 100), all);
    }

    #[test]
    fn payload_over_the_limit_is_refused() {
        let (image, memory) = sample();
        let mut c = checkpoint(&memory, &image, 0..0);
        c.max_payload_bytes = 4096;
        assert!(matches!(
            encode(&c).unwrap_err(),
            SnapshotError::TooLarge { limit: 4096, .. }
        ));
    }

    #[test]
    fn damaged_snapshots_are_told_apart() {
        let (image, memory) = sample();
        let good = encode(&checkpoint(&memory, &image, 0..0)).unwrap().bytes;
        let check = |b: &[u8]| decode(b, GUEST, 1 << 30).unwrap_err();
        assert_eq!(check(&good[..20]), SnapshotError::Truncated);
        assert_eq!(
            check(b"not a snapshot at all, clearly not, no"),
            SnapshotError::BadMagic
        );
        let mut v = good.clone();
        v[8] = 99;
        assert_eq!(check(&v), SnapshotError::UnknownVersion(99));
        assert_eq!(
            decode(&good, [4; 32], 1 << 30).unwrap_err(),
            SnapshotError::ForeignGuest
        );
        let mut v = good.clone();
        let last = v.len() - 1;
        v[last] ^= 0x55;
        assert_eq!(check(&v), SnapshotError::ChecksumMismatch);
        assert_eq!(
            check(&good[..good.len() - 3]),
            SnapshotError::ChecksumMismatch
        );
        // Memory larger than the caller allows.
        assert!(matches!(
            decode(&good, GUEST, 65536).unwrap_err(),
            SnapshotError::Corrupt(_)
        ));
    }
}
