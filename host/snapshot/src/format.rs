//! The format's constants (sizes, limits, the header's and the head's
//! layout) and its errors. See [Layout](crate#layout).

/// Version of the format written by [`encode`] (2: page deltas in
/// independent frames; 3: each frame's deltas split into byte lanes; 4:
/// block strides; 5: the header names the guest build; 6: sparse image
/// pages stored as their changed words; 7: the head compressed with
/// [`HEAD_DICTIONARY`]; 8: dense image pages in the lanes with block
/// strides, chosen page by page). [`decode`] also reads
/// [`UNSTRIDED_IMAGE_FORMAT_VERSION`], [`PLAIN_HEAD_FORMAT_VERSION`] and
/// [`IN_PLACE_FORMAT_VERSION`].
///
/// [`encode`]: crate::encode
/// [`decode`]: crate::decode
pub const FORMAT_VERSION: u32 = 8;

/// An older version [`decode`] still reads: format 7, whose image pages in
/// the lanes have no block stride (their layout byte is 1) and come after
/// the frame's image pages stored as changed words; the rest is as in
/// format 8.
///
/// [`decode`]: crate::decode
pub const UNSTRIDED_IMAGE_FORMAT_VERSION: u32 = 7;

/// An older version [`decode`] still reads: format 6, whose head frame is
/// compressed without a dictionary and whose head lists the page indexes
/// themselves; the rest is as in format 7.
///
/// [`decode`]: crate::decode
pub const PLAIN_HEAD_FORMAT_VERSION: u32 = 6;

/// The head frame's zstd dictionary (raw content, format 7): the field
/// names and common values of the host state quickcell stores, in the
/// order it writes them. Any host state can be stored; quickcell's is
/// compressed against these bytes (a one-tool cell's head: 507 -> ~280
/// bytes). Part of the format: other bytes here would be another version.
pub const HEAD_DICTIONARY: &[u8] = br#"{"method":"sleep","args_json":"{\"ms\":","due_unix_ms":17,"drained_by":"","error":{"message":"","code":"tool_error"}},"clientTools":[{"name":"","description":"","inputSchema":{"type":"object","properties":{}}}],{"runId":"cm_","agentRun":"","session":"","generation":1,"lastRequestId":,"deliveredOutputBytes":,"maxOutputBytes":65536,"restartSafe":true,"guestClockNs":,"parkedUnixMs":17,"bridge":{"outstanding":{"":{"method":"callValue","args_json":"{\"callable\":\"\",\"input\":{\"","started":true,"replay_safe":true},"":{"method":"yield","args_json":"{\"reason\":null}"}},"ready":[{"id":,"ok":true,"value":{"ok":true,"],"yields":[],"dispatch_started":true,"store_writes":{}},"catalogDigest":"","guestFinished":false}"#;

/// The older version [`decode`] still reads: format 5, whose sparse image
/// pages are whole XOR deltas in place. Snapshots parked by a quickcell of
/// that format with the same guest resume after an upgrade.
///
/// [`decode`]: crate::decode
pub const IN_PLACE_FORMAT_VERSION: u32 = 5;

/// Granularity of the memory diff, in bytes.
pub const PAGE_BYTES: usize = 4096;

/// WebAssembly page size: memory sizes are multiples of it.
pub const WASM_PAGE_BYTES: usize = 65536;

/// Largest host-state document a snapshot may carry, in bytes.
pub const MAX_HOST_STATE_BYTES: usize = 64 << 20;

/// Largest linear memory a snapshot may describe, in bytes (4 GiB: a
/// 32-bit Wasm memory's 65,536 pages of 64 KiB). [`decode`] reads no
/// larger memory whatever ceiling its caller gives, so the head and page
/// count a snapshot may claim stay bounded (the head then at most
/// [`MAX_HOST_STATE_BYTES`] plus 5 MiB); [`encode`] refuses larger ones.
///
/// [`decode`]: crate::decode
/// [`encode`]: crate::encode
pub const MAX_MEMORY_BYTES: u64 = 1 << 32;

/// Most pages one delta frame holds (2 MiB of memory): the unit of
/// parallel compression and decompression. [`decode`] refuses larger
/// frames, which bounds a restore's per-thread buffer.
///
/// [`decode`]: crate::decode
pub const PAGES_PER_FRAME: usize = 512;

/// Unit of [`Checkpoint::block_units`], in bytes.
///
/// [`Checkpoint::block_units`]: crate::Checkpoint::block_units
pub const BLOCK_UNIT_BYTES: usize = 16;

pub(crate) const MAGIC: &[u8; 8] = b"QCELLSNP";
pub(crate) const HEADER_BYTES: usize = 8 + 4 + 32 + 32 + 4;

/// Where the header's guest build starts (after magic, version and key).
pub(crate) const GUEST_BUILD_AT: usize = 8 + 4 + 32;

/// The header's checksum: CRC-32 of the guest build and of everything
/// after the header.
pub(crate) fn checksum(guest_build: &[u8], rest: &[u8]) -> u32 {
    let mut crc = crc32fast::Hasher::new();
    crc.update(guest_build);
    crc.update(rest);
    crc.finalize()
}

/// Fixed bytes of the head before the host state: memory size, stack
/// pointer, host-state length.
pub(crate) const HEAD_FIXED_BYTES: usize = 8 + 4 + 4;

/// Bytes of the head per stored page: its index (u32) and layout byte.
pub(crate) const HEAD_BYTES_PER_PAGE: usize = 4 + 1;

/// The per-page layout byte of an image page whose delta is stored in
/// lanes without a stride (0: as its changed words; in format 5, in
/// place); from format 8, this plus `s` for a stride of `s` block units.
/// For a page beyond the image the byte is its block stride
/// ([`Checkpoint::block_units`]).
///
/// [`Checkpoint::block_units`]: crate::Checkpoint::block_units
pub(crate) const IMAGE_PAGE_IN_LANES: u8 = 1;

/// Set in a sparse page's count (which is at most 1,024, so bits 11–15 are
/// free) when its values are stored as differences from the value before
/// them (the first from 0, wrapping).
pub(crate) const VALUES_DIFFERENCED: u16 = 1 << 15;

/// Most bytes one page's data takes in a frame: a sparse image page with
/// every word changed (a 2-byte count, then 2 bytes of position and 4 of
/// value per word). Bounds what [`decode`] accepts as a frame's stated
/// size, and so the restore's per-thread buffers: at most
/// [`PAGES_PER_FRAME`] × this (3 MiB).
///
/// [`decode`]: crate::decode
pub(crate) const MAX_PAGE_DATA_BYTES: usize = 2 + 6 * (PAGE_BYTES / 4);

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
    /// Taken under another key ([`Checkpoint::guest_hash`]): from a
    /// different guest module, or the same one pre-initialized otherwise.
    /// [`guest_build`] reads which build took it.
    ///
    /// [`Checkpoint::guest_hash`]: crate::Checkpoint::guest_hash
    /// [`guest_build`]: crate::guest_build
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

pub(crate) fn corrupt(what: impl std::fmt::Display) -> SnapshotError {
    SnapshotError::Corrupt(what.to_string())
}
