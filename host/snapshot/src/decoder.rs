//! Reading a snapshot: the header's checks, then the head, checked against
//! bounds derived from the caller's ceiling, and the frames' sizes. The
//! page deltas stay compressed until [`Snapshot::apply`].

use crate::format::{
    corrupt, SnapshotError, FORMAT_VERSION, GUEST_BUILD_AT, HEADER_BYTES, HEAD_BYTES_PER_PAGE,
    HEAD_FIXED_BYTES, IN_PLACE_FORMAT_VERSION, MAGIC, MAX_HOST_STATE_BYTES, MAX_MEMORY_BYTES,
    MAX_PAGE_DATA_BYTES, PAGES_PER_FRAME, PAGE_BYTES, PLAIN_HEAD_FORMAT_VERSION,
    UNSTRIDED_IMAGE_FORMAT_VERSION, WASM_PAGE_BYTES,
};
use crate::frames::{decompress_frame, next_frame, with_dctx, with_head_dctx};

/// A decoded, verified snapshot.
#[derive(Debug)]
pub struct Snapshot<'a> {
    /// Linear-memory size at the checkpoint, in bytes.
    pub memory_bytes: usize,
    /// Value of `__stack_pointer`.
    pub stack_pointer: u32,
    /// The host's per-cell state.
    pub host_state: Vec<u8>,
    /// The guest build named in the header ([`Checkpoint::guest_build`]).
    ///
    /// [`Checkpoint::guest_build`]: crate::Checkpoint::guest_build
    pub guest_build: [u8; 32],
    /// Indexes of the stored pages, strictly increasing.
    pub(crate) page_indexes: Vec<u32>,
    /// Each stored page's block stride ([`Checkpoint::block_units`]).
    ///
    /// [`Checkpoint::block_units`]: crate::Checkpoint::block_units
    pub(crate) page_units: Vec<u8>,
    /// The compressed delta frames, each with its page count, in page
    /// order.
    pub(crate) frames: Vec<(&'a [u8], usize)>,
    /// Whether image pages of layout 0 hold their changed words (format
    /// 6) rather than whole deltas in place (format 5).
    pub(crate) sparse: bool,
    /// Image pages in the lanes may have a block stride (format 8; see
    /// [Layout](crate#layout)).
    pub(crate) image_strides: bool,
}

impl Snapshot<'_> {
    /// Number of stored pages.
    pub fn page_count(&self) -> usize {
        self.page_indexes.len()
    }
}

/// Reads little-endian fields from the header and the head.
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
    fn array<const N: usize>(&mut self) -> Result<[u8; N], SnapshotError> {
        let rest = self.data.get(self.at..).unwrap_or_default();
        let (bytes, _) = rest.split_first_chunk().ok_or(SnapshotError::Truncated)?;
        self.at += N;
        Ok(*bytes)
    }
    fn u32(&mut self) -> Result<u32, SnapshotError> {
        self.array().map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Result<u64, SnapshotError> {
        self.array().map(u64::from_le_bytes)
    }
    /// Bytes not read yet.
    fn remaining(&self) -> usize {
        self.data.len().saturating_sub(self.at)
    }
}

/// The guest build a snapshot names in its header
/// ([`Checkpoint::guest_build`]), read without decoding the rest: which
/// build to resume it on when [`decode`] refuses it as
/// [`SnapshotError::ForeignGuest`]. Checks the length, the magic and the
/// version only, so the build named is as trustworthy as the bytes given
/// (quickcell reads it from a sealed, authenticated snapshot).
///
/// [`Checkpoint::guest_build`]: crate::Checkpoint::guest_build
///
/// # Errors
///
/// [`SnapshotError::Truncated`], [`SnapshotError::BadMagic`] or
/// [`SnapshotError::UnknownVersion`].
pub fn guest_build(bytes: &[u8]) -> Result<[u8; 32], SnapshotError> {
    let mut header = read_magic_and_version(bytes)?;
    header.at = GUEST_BUILD_AT;
    header.array::<32>()
}

/// A reader past the header's magic and format version, both checked.
fn read_magic_and_version(bytes: &[u8]) -> Result<Reader<'_>, SnapshotError> {
    let mut header = Reader { data: bytes, at: 0 };
    if header.array::<8>()? != *MAGIC {
        return Err(SnapshotError::BadMagic);
    }
    let version = header.u32()?;
    if ![
        FORMAT_VERSION,
        UNSTRIDED_IMAGE_FORMAT_VERSION,
        PLAIN_HEAD_FORMAT_VERSION,
        IN_PLACE_FORMAT_VERSION,
    ]
    .contains(&version)
    {
        return Err(SnapshotError::UnknownVersion(version));
    }
    Ok(header)
}

/// Decodes and verifies a snapshot taken from the guest `guest_hash`, whose
/// memory may be at most `max_memory_bytes`. The page deltas stay
/// compressed until [`Snapshot::apply`].
pub fn decode(
    bytes: &[u8],
    guest_hash: [u8; 32],
    max_memory_bytes: usize,
) -> Result<Snapshot<'_>, SnapshotError> {
    if bytes.len() < HEADER_BYTES {
        return Err(if bytes.starts_with(&MAGIC[..bytes.len().min(8)]) {
            SnapshotError::Truncated
        } else {
            SnapshotError::BadMagic
        });
    }
    let mut header = read_magic_and_version(bytes)?;
    let version = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
    let sparse = version != IN_PLACE_FORMAT_VERSION;
    if header.array::<32>()? != guest_hash {
        return Err(SnapshotError::ForeignGuest);
    }
    let guest_build = header.array::<32>()?;
    let checksum = header.u32()?;
    let compressed = &bytes[header.at..];
    if crate::format::checksum(&guest_build, compressed) != checksum {
        return Err(SnapshotError::ChecksumMismatch);
    }
    let max_memory_bytes =
        max_memory_bytes.min(usize::try_from(MAX_MEMORY_BYTES).unwrap_or(usize::MAX));
    let max_pages = max_memory_bytes / PAGE_BYTES;
    let max_head = (HEAD_FIXED_BYTES + MAX_HOST_STATE_BYTES + 4)
        .saturating_add(max_pages.saturating_mul(HEAD_BYTES_PER_PAGE));
    // Frames state their decompressed sizes: allocate exactly that for the
    // head, after checking it, rather than the ceiling.
    let (head_frame, head_len, mut rest) = next_frame(compressed)?;
    if head_len > max_head as u64 {
        return Err(corrupt(format!("its head would be {head_len} bytes")));
    }
    let mut head = vec![0u8; usize::try_from(head_len).unwrap_or(usize::MAX)];
    if version >= UNSTRIDED_IMAGE_FORMAT_VERSION {
        with_head_dctx(|dctx| decompress_frame(dctx, head_frame, &mut head))?;
    } else {
        with_dctx(|dctx| decompress_frame(dctx, head_frame, &mut head))?;
    }
    let mut r = Reader { data: &head, at: 0 };
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
    // The rest of the head is exactly the pages' indexes and layout bytes:
    // a count the head cannot hold is refused before anything is sized by
    // it.
    if count.checked_mul(HEAD_BYTES_PER_PAGE) != Some(r.remaining()) {
        return Err(corrupt(format!(
            "the head holds {} bytes for {count} pages",
            r.remaining()
        )));
    }
    let mut page_indexes = Vec::with_capacity(count);
    if version >= UNSTRIDED_IMAGE_FORMAT_VERSION {
        // Gaps in byte lanes (see `encode`).
        let lanes = r.take(4 * count)?;
        let mut next = 0u64;
        for k in 0..count {
            let gap = u32::from_le_bytes([
                lanes[k],
                lanes[count + k],
                lanes[2 * count + k],
                lanes[3 * count + k],
            ]);
            let index = next + u64::from(gap);
            if index >= page_limit as u64 {
                return Err(SnapshotError::Corrupt(format!("bad page index {index}")));
            }
            page_indexes.push(index as u32);
            next = index + 1;
        }
    } else {
        for _ in 0..count {
            let index = r.u32()?;
            if index as usize >= page_limit
                || page_indexes.last().is_some_and(|&last| index <= last)
            {
                return Err(SnapshotError::Corrupt(format!("bad page index {index}")));
            }
            page_indexes.push(index);
        }
    }
    let page_units = r.take(count)?.to_vec();
    if r.at != head.len() {
        return Err(corrupt("the head has trailing bytes"));
    }
    // The encoder cuts the pages into frames of PAGES_PER_FRAME, the last
    // one shorter. A format-5 frame is exactly its pages' deltas; a
    // format-6 frame's sparse pages take less (checked exactly on apply),
    // never more than MAX_PAGE_DATA_BYTES each.
    let mut frames = Vec::with_capacity(count.div_ceil(PAGES_PER_FRAME));
    let mut covered = 0usize;
    while !rest.is_empty() {
        let (frame, size, after) = next_frame(rest)?;
        let pages = (count - covered).min(PAGES_PER_FRAME);
        let fits = if sparse {
            size <= (pages * MAX_PAGE_DATA_BYTES) as u64
        } else {
            size == (pages * PAGE_BYTES) as u64
        };
        if pages == 0 || !fits {
            return Err(corrupt(
                if size > (PAGES_PER_FRAME * MAX_PAGE_DATA_BYTES) as u64 {
                    format!(
                    "a frame states {size} bytes; at most {} ({PAGES_PER_FRAME} pages) are allowed",
                    PAGES_PER_FRAME * MAX_PAGE_DATA_BYTES
                )
                } else {
                    "page data does not match the page count".to_string()
                },
            ));
        }
        covered += pages;
        frames.push((frame, pages));
        rest = after;
    }
    if covered != count {
        return Err(corrupt("page data does not match the page count"));
    }
    Ok(Snapshot {
        memory_bytes,
        stack_pointer,
        host_state,
        guest_build,
        page_indexes,
        page_units,
        frames,
        sparse,
        image_strides: version == FORMAT_VERSION,
    })
}
