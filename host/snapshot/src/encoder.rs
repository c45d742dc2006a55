//! Taking a snapshot: a [`Checkpoint`]'s changed pages, laid out per frame
//! (as changed words, in lanes, with block strides) and compressed, behind
//! the header.

use crate::format::{
    SnapshotError, FORMAT_VERSION, HEADER_BYTES, HEAD_BYTES_PER_PAGE, HEAD_FIXED_BYTES,
    IMAGE_PAGE_IN_LANES, MAGIC, MAX_HOST_STATE_BYTES, MAX_MEMORY_BYTES, PAGES_PER_FRAME,
    PAGE_BYTES, VALUES_DIFFERENCED, WASM_PAGE_BYTES,
};
use crate::frames::{compress_into, with_compressor, Compressor};
use crate::lanes::{page_words, split_page, stride_words, PAGE_WORDS};
use crate::pages::{changed_pages, image_page, inside_image};
use crate::pool::run_parallel;
use std::ops::Range;

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
    /// The key the memory belongs to, which [`decode`] checks: in
    /// quickcell a hash of the guest module, its pre-initialized memory
    /// image and its stack, since the pages are deltas against that image.
    ///
    /// [`decode`]: crate::decode
    pub guest_hash: [u8; 32],
    /// The guest build: SHA-256 of the guest module. Stored to name it
    /// ([`guest_build`], [`Snapshot::guest_build`]); [`decode`] compares
    /// it with nothing (the key covers the build), the checksum covers it.
    ///
    /// [`guest_build`]: crate::guest_build
    /// [`Snapshot::guest_build`]: crate::Snapshot::guest_build
    /// [`decode`]: crate::decode
    pub guest_build: [u8; 32],
    /// Largest uncompressed payload allowed.
    pub max_payload_bytes: usize,
    /// `memory` is a live linear memory that Wasmtime mapped from `image`
    /// (a private copy-on-write mapping of it, anonymous zero memory
    /// beyond it), so a page the kernel reports as never written in this
    /// mapping still holds its image bytes. On Linux such pages are then
    /// found with `/proc/self/pagemap` and not compared (`changed_pages`);
    /// elsewhere, or when the file cannot be read, every page is compared.
    /// `false` for memory that is not such a mapping (a copy, a `Vec`).
    pub memory_maps_image: bool,
    /// A hint per 64 KiB page of `memory`: the size, in
    /// [`BLOCK_UNIT_BYTES`], of the equal blocks the page is laid out in
    /// (the guest allocator's size classes), 0 when it is not. A stored
    /// page beyond the image then holds each 4-byte word minus the word one
    /// block earlier (see [Layout](crate#layout)). Any value restores
    /// correctly (the stride is stored); a good one makes the snapshot
    /// smaller and faster to take. Missing entries count as 0.
    ///
    /// [`BLOCK_UNIT_BYTES`]: crate::BLOCK_UNIT_BYTES
    pub block_units: &'a [u8],
}

/// See [`Checkpoint::memory_maps_image`].
fn written_pages(c: &Checkpoint<'_>) -> Option<Vec<bool>> {
    #[cfg(target_os = "linux")]
    if c.memory_maps_image {
        return crate::pagemap::written_pages(c.memory);
    }
    let _ = c;
    None
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
    if c.memory.len() as u64 > MAX_MEMORY_BYTES {
        return Err(SnapshotError::Corrupt(format!(
            "memory of {} bytes is larger than {MAX_MEMORY_BYTES}",
            c.memory.len()
        )));
    }
    let written = written_pages(c);
    let pages = changed_pages(c.memory, c.image, &c.dead, written.as_deref());
    let page_bytes = pages.len() * PAGE_BYTES;
    let head_len = HEAD_FIXED_BYTES + c.host_state.len() + 4 + pages.len() * HEAD_BYTES_PER_PAGE;
    let payload_len = head_len + page_bytes;
    if payload_len > c.max_payload_bytes || c.host_state.len() > MAX_HOST_STATE_BYTES {
        return Err(SnapshotError::TooLarge {
            bytes: payload_len,
            limit: c.max_payload_bytes,
        });
    }
    let mut head = Vec::with_capacity(head_len);
    head.extend_from_slice(&(c.memory.len() as u64).to_le_bytes());
    head.extend_from_slice(&c.stack_pointer.to_le_bytes());
    head.extend_from_slice(&(c.host_state.len() as u32).to_le_bytes());
    head.extend_from_slice(c.host_state);
    head.extend_from_slice(&(pages.len() as u32).to_le_bytes());
    // The indexes as gaps (each minus the one before it, minus 1; the
    // first as it is), split into byte lanes: mostly small numbers, whose
    // high bytes are zeros.
    let gaps: Vec<[u8; 4]> = pages
        .iter()
        .scan(None, |before: &mut Option<u32>, &index| {
            let gap = before.map_or(index, |b| index - b - 1);
            *before = Some(index);
            Some(gap.to_le_bytes())
        })
        .collect();
    for lane in 0..4 {
        head.extend(gaps.iter().map(|gap| gap[lane]));
    }
    let failed = |e: std::io::Error| SnapshotError::Corrupt(format!("compression failed: {e}"));
    let compress_pages = |indexes: &[u32]| -> std::io::Result<(Vec<u8>, Vec<u8>)> {
        with_compressor(|z| compress_frame(z, c, indexes))
    };
    let chunks: Vec<&[u32]> = pages.chunks(PAGES_PER_FRAME).collect();
    let frames = run_parallel(chunks, page_bytes, compress_pages)
        .into_iter()
        .map(|frame| {
            let (bytes, units) = frame.map_err(failed)?;
            head.extend_from_slice(&units);
            Ok(bytes)
        })
        .collect::<Result<Vec<_>, SnapshotError>>()?;
    let head_frame =
        with_compressor(|z| compress_into(&mut z.head_cctx, &mut z.out, &head)).map_err(failed)?;
    let compressed: usize = frames.iter().map(Vec::len).sum();
    let mut out = Vec::with_capacity(HEADER_BYTES + head_frame.len() + compressed);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&c.guest_hash);
    out.extend_from_slice(&c.guest_build);
    out.extend_from_slice(&[0; 4]); // the checksum, filled in below
    out.extend_from_slice(&head_frame);
    for frame in frames {
        out.extend_from_slice(&frame);
    }
    let checksum = crate::format::checksum(&c.guest_build, &out[HEADER_BYTES..]);
    out[HEADER_BYTES - 4..HEADER_BYTES].copy_from_slice(&checksum.to_le_bytes());
    Ok(Encoded {
        bytes: out,
        payload_bytes: payload_len,
    })
}

/// Compresses the pages `indexes` of `c` as one frame: each image page as
/// its changed words ([`sparse_section`]) or, when its delta is dense
/// ([`DENSE_DELTA_FRACTION`]), as its XOR delta in the lanes with the
/// pages beyond the image ([`LANE_WIDTH`]), with a block stride where one
/// helps ([`choose_stride`]). One-shot over one buffer: zstd's streaming mode
/// copies its input into a window and, fed page by page, takes its slower
/// external-dictionary path.
///
/// [`LANE_WIDTH`]: crate::lanes::LANE_WIDTH
fn compress_frame(
    z: &mut Compressor,
    c: &Checkpoint<'_>,
    indexes: &[u32],
) -> std::io::Result<(Vec<u8>, Vec<u8>)> {
    let inside = inside_image(indexes, c.image.len());
    let mut units = vec![0u8; indexes.len()];
    // An image page goes in the lanes when its delta is dense (one word in
    // DENSE_DELTA_FRACTION or more differs), as changed words otherwise.
    let mut sparse = Vec::with_capacity(inside);
    let mut in_lanes = Vec::with_capacity(indexes.len());
    for (at, &index) in indexes[..inside].iter().enumerate() {
        if changed_words(c, index) * DENSE_DELTA_FRACTION >= PAGE_WORDS {
            units[at] = IMAGE_PAGE_IN_LANES;
            in_lanes.push(at);
        } else {
            sparse.push(index);
        }
    }
    in_lanes.extend(inside..indexes.len());
    sparse_section(&mut z.content, c, &sparse);
    let lanes_at = z.content.len();
    let bytes = lanes_at + in_lanes.len() * PAGE_BYTES;
    // Every byte of the lanes is written below.
    z.content.resize(bytes, 0);
    let lanes = &mut z.content[lanes_at..];
    for (slot, &at) in in_lanes.iter().enumerate() {
        let index = indexes[at];
        let words = if at < inside {
            delta_words(c, index)
        } else {
            // Beyond the image the base is zeros: the delta is the page.
            let start = index as usize * PAGE_BYTES;
            page_words(&c.memory[start..start + PAGE_BYTES])
        };
        let stride = choose_stride(&words, block_hint(c, index));
        // An image page's layout byte is 1 plus its stride (at most 128
        // units: half a page).
        units[at] += stride;
        split_page(&words, lanes, slot, stride_words(stride));
    }
    Ok((compress_into(&mut z.cctx, &mut z.out, &z.content)?, units))
}

/// How many words of image page `index` differ from the image.
fn changed_words(c: &Checkpoint<'_>, index: u32) -> usize {
    let start = index as usize * PAGE_BYTES;
    let now = page_words(&c.memory[start..start + PAGE_BYTES]);
    let base = page_words(image_page(c.image, start));
    // Words, not 4-byte slices: a slice comparison is a `memcmp` call.
    now.iter().zip(&base).filter(|(a, b)| a != b).count()
}

/// Writes into `out` (replacing what it held) the changed words of the
/// image pages `indexes`: the number of each page's changed words (`u16`
/// each), then each changed word's position as the words skipped since the
/// previous changed word of its page (or the page's start) — all low
/// bytes, then all high bytes — then the changed words' new values (`u32`
/// each), all little endian and in page order. A cell that parks without
/// collecting changes a few words of each page it touched: stored thus,
/// a restore writes just those words instead of XORing whole pages, and
/// the new values (pointers, small integers) compress better than their
/// XOR with the old (measured on the one-tool cell: 4,205 → 2,850 bytes
/// of compressed page data).
fn sparse_section(out: &mut Vec<u8>, c: &Checkpoint<'_>, indexes: &[u32]) {
    out.clear();
    let mut skips = Vec::new();
    let mut values = Vec::new();
    for &index in indexes {
        let start = index as usize * PAGE_BYTES;
        let now = page_words(&c.memory[start..start + PAGE_BYTES]);
        let base = page_words(image_page(c.image, start));
        let first = values.len();
        let mut next = 0;
        for (i, (&word, &old)) in now.iter().zip(&base).enumerate() {
            if word != old {
                skips.push((i - next) as u16);
                values.push(word);
                next = i + 1;
            }
        }
        let count = (values.len() - first) as u16;
        let differenced = difference_if_regular(&mut values[first..]);
        let flag = if differenced { VALUES_DIFFERENCED } else { 0 };
        out.extend_from_slice(&(count | flag).to_le_bytes());
    }
    out.extend(skips.iter().map(|&skip| skip as u8));
    out.extend(skips.iter().map(|&skip| (skip >> 8) as u8));
    out.extend(values.iter().flat_map(|value| value.to_le_bytes()));
}

/// Replaces a page's changed values by their differences from the value
/// before (the first from 0, wrapping) when more than half of those
/// differences repeat the one before them, and says whether it did. The
/// links of a free list a cell filled (blocks freed one after the other,
/// each pointing at the one freed before) step by the block size: as
/// differences they are a few repeated words (measured on a cell that
/// dropped 1,000 records before parking: 11.0 → 3.3 KB of page data),
/// while the values of live objects differenced are larger.
fn difference_if_regular(values: &mut [u32]) -> bool {
    let difference = |k: usize| values[k].wrapping_sub(if k == 0 { 0 } else { values[k - 1] });
    let repeats = (2..values.len())
        .filter(|&k| difference(k) == difference(k - 1))
        .count();
    if repeats * 2 <= values.len() {
        return false;
    }
    for k in (1..values.len()).rev() {
        values[k] = values[k].wrapping_sub(values[k - 1]);
    }
    true
}

/// The XOR delta of image page `index` as words ([`page_words`]).
fn delta_words(c: &Checkpoint<'_>, index: u32) -> [u32; PAGE_WORDS] {
    let start = index as usize * PAGE_BYTES;
    let mut words = page_words(&c.memory[start..start + PAGE_BYTES]);
    for (word, base) in words.iter_mut().zip(page_words(image_page(c.image, start))) {
        *word ^= base;
    }
    words
}

/// An image page whose delta has a nonzero word in one word in this many
/// or more is dense and goes in the lanes (with a block stride when one
/// helps): a collection relinked the runtime's objects there, or the cell
/// filled free heap of the image with new objects. Dense deltas compress
/// smaller and faster in the lanes (measured on 255 relinked pages: 179 →
/// 110 KB, 2.7 → 1.8 ms); a few changed words among unchanged ones are
/// smaller, and restore faster, as changed words. Decided page by page
/// (format 8; format 7 decided for a whole frame): the comparison cell's
/// snapshot, whose 1,000 records fill a few image pages among many barely
/// touched, went 8.6 → 5.5 KB and 324 → 272 µs.
const DENSE_DELTA_FRACTION: usize = 8;

/// The hint ([`Checkpoint::block_units`]) for the 64 KiB page that holds
/// page `index`.
fn block_hint(c: &Checkpoint<'_>, index: u32) -> u8 {
    let start = index as usize * PAGE_BYTES;
    c.block_units
        .get(start / WASM_PAGE_BYTES)
        .copied()
        .unwrap_or(0)
}

/// Most block sizes, as multiples of the hint, that [`choose_stride`] tries.
const STRIDE_MULTIPLES: u8 = 4;

/// Largest stride, in block units, that [`choose_stride`] tries on a page
/// without a hint (every one from 1): 512 bytes, the largest block a
/// QuickJS arena holds.
const UNHINTED_STRIDE_UNITS: u8 = 32;

/// Words of a page [`choose_stride`] looks at: `PAGE_WORDS / 2 ..` this many
/// more.
const STRIDE_SAMPLE_WORDS: usize = 128;

/// The stride, in block units, to store `page` with: the hint times 1 to
/// [`STRIDE_MULTIPLES`] (neighbouring blocks of one size class are often
/// objects of different kinds that alternate: a record and its array, and
/// then the same field recurs every second or third block), whichever makes
/// the most words of a sample equal to the word one stride before; or 0,
/// no stride, when the sample holds more zero words than that. Without a
/// hint (a page the guest allocator does not lay out in equal blocks:
/// QuickJS-ng's own 4 KiB arenas of blocks of 16 to 512 bytes, its large
/// blocks) every stride from 1 to [`UNHINTED_STRIDE_UNITS`] units is
/// tried: 32 samples of 128 words, on dense pages only.
fn choose_stride(words: &[u32; PAGE_WORDS], hint: u8) -> u8 {
    let sample = PAGE_WORDS / 2..PAGE_WORDS / 2 + STRIDE_SAMPLE_WORDS;
    let score = |stride: usize| {
        let here = &words[sample.clone()];
        if stride == 0 {
            return here.iter().filter(|&&word| word == 0).count();
        }
        let earlier = &words[sample.start - stride..sample.end - stride];
        here.iter().zip(earlier).filter(|(a, b)| a == b).count()
    };
    let mut best = (score(0), 0u8);
    let candidates: Vec<u8> = if hint == 0 {
        (1..=UNHINTED_STRIDE_UNITS).collect()
    } else {
        (1..=STRIDE_MULTIPLES)
            .map_while(|multiple| hint.checked_mul(multiple))
            .collect()
    };
    for units in candidates {
        if stride_words(units) > PAGE_WORDS / 2 {
            break;
        }
        let found = score(stride_words(units));
        if found > best.0 {
            best = (found, units);
        }
    }
    best.1
}

/// An encoded snapshot.
#[derive(Debug, Clone)]
pub struct Encoded {
    /// The snapshot.
    pub bytes: Vec<u8>,
    /// Its uncompressed payload size (what the limit bounds).
    pub payload_bytes: usize,
}
