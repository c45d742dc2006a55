//! The snapshot format: a parked cell's guest memory and host state.
//!
//! A snapshot holds the 4 KiB pages of linear memory that differ from the
//! pre-initialized image, the memory size, the `__stack_pointer` global and
//! the host's per-cell state (an opaque JSON document owned by the `cell`
//! module), zstd-compressed behind a fixed header:
//!
//! | bytes | field |
//! |---|---|
//! | 8 | magic `QCELLSNP` |
//! | 4 | format version, little endian ([`FORMAT_VERSION`]) |
//! | 32 | SHA-256 of the guest module the memory belongs to |
//! | 4 | CRC-32 of the compressed payload |
//! | rest | zstd frame of the payload |
//!
//! Payload (little endian): memory size in bytes (u64), stack pointer
//! (u32), host-state length (u32) and bytes, page count (u32), the page
//! indexes (u32 each, increasing) and the pages themselves.
//!
//! The size that `maxSnapshotBytes` bounds is the uncompressed payload —
//! changed pages plus host state — so the limit does not depend on how
//! well the data compresses, and untouched pages (including untouched
//! trailing pages of a grown memory) do not count.
//!
//! Reading checks, in order: length, magic, version, guest hash, checksum,
//! decompressed size (never more than the largest memory the engine allows
//! plus the host-state cap), and the payload's internal consistency. Each
//! failure is a distinct [`SnapshotError`].

use crate::engine::POOL_MAX_MEMORY_BYTES;

/// Version of the format written by [`encode`].
pub(crate) const FORMAT_VERSION: u32 = 1;

/// Granularity of the memory diff, in bytes.
pub(crate) const PAGE_BYTES: usize = 4096;

/// Largest host-state document a snapshot may carry, in bytes.
pub(crate) const MAX_HOST_STATE_BYTES: usize = 64 << 20;

/// zstd level: the fastest, which already removes most of QuickJS's
/// zero-heavy pages.
const ZSTD_LEVEL: i32 = 1;

const MAGIC: &[u8; 8] = b"QCELLSNP";
const HEADER_BYTES: usize = 8 + 4 + 32 + 4;

/// Why a snapshot could not be taken or read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SnapshotError {
    /// The checkpoint's payload is larger than `maxSnapshotBytes`.
    TooLarge { bytes: usize, limit: usize },
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

impl std::fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::TooLarge { bytes, limit } => write!(
                f,
                "the checkpoint holds {bytes} bytes; maxSnapshotBytes is {limit}"
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

/// A decoded snapshot.
#[derive(Debug)]
pub(crate) struct Snapshot {
    /// Linear-memory size at the checkpoint, in bytes.
    pub memory_bytes: usize,
    /// Value of `__stack_pointer`.
    pub stack_pointer: u32,
    /// The host's per-cell state.
    pub host_state: Vec<u8>,
    /// `(page index, page bytes)` of every page that differs from the image.
    pages: Vec<(u32, Vec<u8>)>,
}

/// Guest hash as raw bytes (from the build's hex string).
fn guest_hash() -> [u8; 32] {
    let hex = crate::engine::GUEST_SHA256.as_bytes();
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        let nibble = |c: u8| (c as char).to_digit(16).unwrap_or(0) as u8;
        *byte = nibble(hex[2 * i]) << 4 | nibble(hex[2 * i + 1]);
    }
    out
}

/// Indexes of the pages of `memory` that differ from `image` (pages beyond
/// the image are compared with zeros).
fn changed_pages(memory: &[u8], image: &[u8]) -> Vec<u32> {
    const ZERO: [u8; PAGE_BYTES] = [0; PAGE_BYTES];
    memory
        .chunks(PAGE_BYTES)
        .enumerate()
        .filter(|(i, page)| {
            let start = i * PAGE_BYTES;
            let base = image
                .get(start..start + page.len())
                .unwrap_or(&ZERO[..page.len()]);
            *page != base
        })
        .map(|(i, _)| i as u32)
        .collect()
}

/// Encodes a checkpoint of `memory` (diffed against `image`).
///
/// # Errors
///
/// [`SnapshotError::TooLarge`] when the payload exceeds `max_bytes`.
pub(crate) fn encode(
    memory: &[u8],
    image: &[u8],
    stack_pointer: u32,
    host_state: &[u8],
    max_bytes: usize,
) -> Result<Vec<u8>, SnapshotError> {
    let pages = changed_pages(memory, image);
    let payload_len = 8 + 4 + 4 + host_state.len() + 4 + pages.len() * (4 + PAGE_BYTES);
    if payload_len > max_bytes || host_state.len() > MAX_HOST_STATE_BYTES {
        return Err(SnapshotError::TooLarge {
            bytes: payload_len,
            limit: max_bytes,
        });
    }
    let mut payload = Vec::with_capacity(payload_len);
    payload.extend_from_slice(&(memory.len() as u64).to_le_bytes());
    payload.extend_from_slice(&stack_pointer.to_le_bytes());
    payload.extend_from_slice(&(host_state.len() as u32).to_le_bytes());
    payload.extend_from_slice(host_state);
    payload.extend_from_slice(&(pages.len() as u32).to_le_bytes());
    for index in &pages {
        payload.extend_from_slice(&index.to_le_bytes());
    }
    for &index in &pages {
        let start = index as usize * PAGE_BYTES;
        let page = &memory[start..(start + PAGE_BYTES).min(memory.len())];
        payload.extend_from_slice(page);
        // Linear memory is a whole number of 64 KiB pages, so this never
        // runs; it keeps every stored page full-sized regardless.
        payload.resize(payload.len() + (PAGE_BYTES - page.len()), 0);
    }
    let compressed = zstd::bulk::compress(&payload, ZSTD_LEVEL)
        .map_err(|e| SnapshotError::Corrupt(format!("compression failed: {e}")))?;
    let mut out = Vec::with_capacity(HEADER_BYTES + compressed.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&guest_hash());
    out.extend_from_slice(&crc32fast::hash(&compressed).to_le_bytes());
    out.extend_from_slice(&compressed);
    Ok(out)
}

/// Reads a little-endian integer field from the payload.
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

/// Decodes and verifies a snapshot.
pub(crate) fn decode(bytes: &[u8]) -> Result<Snapshot, SnapshotError> {
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
    if bytes[12..44] != guest_hash() {
        return Err(SnapshotError::ForeignGuest);
    }
    let checksum = u32::from_le_bytes(bytes[44..48].try_into().unwrap());
    let compressed = &bytes[HEADER_BYTES..];
    if crc32fast::hash(compressed) != checksum {
        return Err(SnapshotError::ChecksumMismatch);
    }
    let max_payload = 8
        + 4
        + 4
        + MAX_HOST_STATE_BYTES
        + 4
        + POOL_MAX_MEMORY_BYTES / PAGE_BYTES * (4 + PAGE_BYTES);
    let payload = zstd::bulk::decompress(compressed, max_payload)
        .map_err(|e| SnapshotError::Corrupt(format!("cannot decompress: {e}")))?;
    let mut r = Reader {
        data: &payload,
        at: 0,
    };
    let memory_bytes = usize::try_from(r.u64()?)
        .map_err(|_| SnapshotError::Corrupt("memory size out of range".into()))?;
    if memory_bytes > POOL_MAX_MEMORY_BYTES || memory_bytes % 65536 != 0 {
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
    let mut indexes = Vec::with_capacity(count);
    for _ in 0..count {
        let index = r.u32()?;
        if index as usize >= page_limit || indexes.last().is_some_and(|&last| index <= last) {
            return Err(SnapshotError::Corrupt(format!("bad page index {index}")));
        }
        indexes.push(index);
    }
    let mut pages = Vec::with_capacity(count);
    for index in indexes {
        pages.push((index, r.take(PAGE_BYTES)?.to_vec()));
    }
    if r.at != payload.len() {
        return Err(SnapshotError::Corrupt("trailing bytes".into()));
    }
    Ok(Snapshot {
        memory_bytes,
        stack_pointer,
        host_state,
        pages,
    })
}

impl Snapshot {
    /// Writes the changed pages into `memory`, which must already hold the
    /// pre-initialized image and be exactly `memory_bytes` long.
    pub(crate) fn apply(&self, memory: &mut [u8]) {
        for (index, page) in &self.pages {
            let start = *index as usize * PAGE_BYTES;
            memory[start..start + PAGE_BYTES].copy_from_slice(page);
        }
    }

    /// Number of pages carried.
    #[cfg(test)]
    pub(crate) fn page_count(&self) -> usize {
        self.pages.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> (Vec<u8>, Vec<u8>) {
        let image = vec![7u8; 65536];
        let mut memory = vec![7u8; 131072];
        memory[5] = 1; // page 0 changed
        memory[70000] = 9; // page 17 (beyond the image) non-zero
        memory[65536 + PAGE_BYTES * 2..65536 + PAGE_BYTES * 3].fill(0); // zero beyond image
        (image, memory)
    }

    #[test]
    fn round_trip_restores_changed_pages_only() {
        let (image, memory) = sample();
        let bytes = encode(&memory, &image, 1234, b"{\"a\":1}", 1 << 20).unwrap();
        let snap = decode(&bytes).unwrap();
        assert_eq!(snap.memory_bytes, memory.len());
        assert_eq!(snap.stack_pointer, 1234);
        assert_eq!(snap.host_state, b"{\"a\":1}");
        let mut restored = image.clone();
        restored.resize(memory.len(), 0);
        snap.apply(&mut restored);
        assert_eq!(restored, memory);
        // Page 0 differs; pages 16.. beyond the image differ from zero except
        // the one we zeroed.
        assert_eq!(snap.page_count(), 1 + 16 - 1);
    }

    #[test]
    fn payload_over_the_limit_is_refused() {
        let (image, memory) = sample();
        let err = encode(&memory, &image, 0, b"{}", 4096).unwrap_err();
        assert!(matches!(err, SnapshotError::TooLarge { limit: 4096, .. }));
    }

    #[test]
    fn damaged_snapshots_are_told_apart() {
        let (image, memory) = sample();
        let good = encode(&memory, &image, 0, b"{}", 1 << 20).unwrap();
        assert_eq!(decode(&good[..20]).unwrap_err(), SnapshotError::Truncated);
        assert_eq!(
            decode(b"not a snapshot at all, clearly not").unwrap_err(),
            SnapshotError::BadMagic
        );
        let mut v = good.clone();
        v[8] = 99;
        assert_eq!(decode(&v).unwrap_err(), SnapshotError::UnknownVersion(99));
        let mut v = good.clone();
        v[20] ^= 1;
        assert_eq!(decode(&v).unwrap_err(), SnapshotError::ForeignGuest);
        let mut v = good.clone();
        let last = v.len() - 1;
        v[last] ^= 0x55;
        assert_eq!(decode(&v).unwrap_err(), SnapshotError::ChecksumMismatch);
        let cut = &good[..good.len() - 3];
        assert_eq!(decode(cut).unwrap_err(), SnapshotError::ChecksumMismatch);
    }
}
