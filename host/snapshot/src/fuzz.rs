//! Hostile-input tests: helpers that build snapshots by hand, an
//! allocation meter, and the fuzz targets.
//!
//! # The fuzz targets
//!
//! [`fuzz_decode_arbitrary_bytes`], [`fuzz_decode_mutated_snapshots`] and
//! [`fuzz_decode_shaped_heads`] decode (and, when that succeeds, restore)
//! hostile snapshots and check that nothing panics and that the output,
//! the Rust heap the calling thread allocates and the zstd context's size
//! stay within bounds derived from the caller's limits. Under `cargo test`
//! each runs a few thousand inputs from bolero's random engine (about a
//! second). To run them long, on the pinned stable toolchain:
//!
//! ```text
//! BOLERO_RANDOM_ITERATIONS=1000000000 BOLERO_RANDOM_TEST_TIME_MS=600000 \
//!   CARGO_TARGET_DIR=/work/tgt-snapshot cargo test -p quickcell-snapshot \
//!   --locked --lib fuzz_ -- --test-threads 3
//! ```
//!
//! (the environment overrides the built-in iteration count; the run stops
//! at whichever limit comes first; a failure prints the
//! `BOLERO_RANDOM_SEED=n` that replays it). bolero's random engine has no
//! coverage feedback, which is why two of the targets build their inputs
//! from a valid snapshot or head rather than from raw bytes.
//!
//! Coverage-guided fuzzing of the same decoder and restore is in the
//! repository's `fuzz/` crate (cargo-fuzz and libFuzzer, on a nightly
//! toolchain, outside the workspace): its `snapshot_decode` target, run by
//! `scripts/fuzz-libfuzzer` (docs/hardening.md, "Fuzzing"). Note that this
//! workspace resolves bolero 0.13.4: 0.13.6 and later pin
//! `indexmap = "=2.11.2"` through their derive crate, which conflicts with
//! `wit-component`'s `indexmap ^2.14`.

use crate::format::{HEADER_BYTES, HEAD_FIXED_BYTES, MAGIC};
use crate::frames::{with_dctx, ZSTD_LEVEL};
use crate::{
    decode, encode, Checkpoint, MAX_HOST_STATE_BYTES, PAGES_PER_FRAME, PAGE_BYTES,
    PLAIN_HEAD_FORMAT_VERSION, WASM_PAGE_BYTES,
};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// Counts the Rust heap each thread has live and its peak, so tests can
/// bound what decoding allocates. zstd's own buffers are C allocations and
/// are measured separately ([`dctx_bytes`]).
struct Meter;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn note(delta: isize) {
    let _ = LIVE.try_with(|live| {
        let now = live.get().wrapping_add(delta);
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Meter {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            note(layout.size() as isize);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            note(layout.size() as isize);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note(-(layout.size() as isize));
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            note(new_size as isize - layout.size() as isize);
        }
        p
    }
}

#[global_allocator]
static METER: Meter = Meter;

/// Runs `f` and returns its result with the most Rust heap it had live at
/// once on this thread, beyond what was live before.
pub(crate) fn peak_allocation<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let start = LIVE.with(Cell::get);
    PEAK.with(|peak| peak.set(start));
    let out = f();
    let peak = PEAK.with(Cell::get);
    (out, usize::try_from(peak - start).unwrap_or(0))
}

/// Size of this thread's decompression context, buffers included.
pub(crate) fn dctx_bytes() -> usize {
    with_dctx(|dctx| Ok(dctx.sizeof())).unwrap()
}

pub(crate) const GUEST: [u8; 32] = [3; 32];

/// The guest build the test snapshots name.
pub(crate) const BUILD: [u8; 32] = [5; 32];

/// A snapshot for [`GUEST`] with `payload` after the header, checksummed:
/// format 6 ([`PLAIN_HEAD_FORMAT_VERSION`]), whose head is a plain frame
/// ([`frame`]), as format 7 is in all else.
pub(crate) fn seal(payload: &[u8]) -> Vec<u8> {
    seal_as(PLAIN_HEAD_FORMAT_VERSION, payload)
}

/// A snapshot of format `version` for [`GUEST`] with `payload` after the
/// header, checksummed.
pub(crate) fn seal_as(version: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_BYTES + payload.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&GUEST);
    out.extend_from_slice(&BUILD);
    out.extend_from_slice(&crate::format::checksum(&BUILD, payload).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// `content` as one zstd frame that states its size.
pub(crate) fn frame(content: &[u8]) -> Vec<u8> {
    zstd::bulk::compress(content, ZSTD_LEVEL).unwrap()
}

/// A head with the given fields; `count` is written as given, then
/// `indexes` and `units` (which need not agree with it).
pub(crate) fn head(
    memory_bytes: u64,
    state_len: u32,
    state: &[u8],
    count: u32,
    indexes: &[u32],
    units: &[u8],
) -> Vec<u8> {
    let mut h = Vec::new();
    h.extend_from_slice(&memory_bytes.to_le_bytes());
    h.extend_from_slice(&77u32.to_le_bytes());
    h.extend_from_slice(&state_len.to_le_bytes());
    h.extend_from_slice(state);
    h.extend_from_slice(&count.to_le_bytes());
    for index in indexes {
        h.extend_from_slice(&index.to_le_bytes());
    }
    h.extend_from_slice(units);
    h
}

/// The limits the fuzz targets decode under.
const FUZZ_MAX_MEMORY_BYTES: usize = 4 << 20;

/// The most Rust heap one decode may allocate under `max_memory_bytes`:
/// the head, the host state copied out of it and the page tables (each
/// at most the head), and slack for small bookkeeping.
fn decode_allocation_bound(max_memory_bytes: usize) -> usize {
    let max_head = HEAD_FIXED_BYTES + MAX_HOST_STATE_BYTES + 4 + max_memory_bytes / PAGE_BYTES * 5;
    3 * max_head + (64 << 10)
}

/// The most a restore may allocate: one frame's lanes and one frame's
/// sparse section (this thread's buffers; they are kept, so each counts
/// once) and the job list.
const APPLY_ALLOCATION_BOUND: usize =
    PAGES_PER_FRAME * (PAGE_BYTES + crate::format::MAX_PAGE_DATA_BYTES) + (64 << 10);

/// The most this thread's zstd context may hold: its window and buffers
/// for one frame of pages, or, for the head, the head (decompressed in one
/// pass straight into its buffer).
const DCTX_BOUND: usize = 2 * PAGES_PER_FRAME * PAGE_BYTES + (1 << 20);

/// Decodes `bytes` under `max_memory_bytes` and, when that succeeds,
/// restores it onto an image of `image` bytes (a fixed pattern); checks
/// that the results and the memory used stay within bounds. Returns
/// whether it decoded and whether the restore succeeded.
pub(crate) fn decode_and_apply(bytes: &[u8], max_memory_bytes: usize) -> (bool, bool) {
    let (decoded, peak) = peak_allocation(|| decode(bytes, GUEST, max_memory_bytes));
    assert!(
        peak <= decode_allocation_bound(max_memory_bytes),
        "decoding allocated {peak} bytes"
    );
    let Ok(snapshot) = decoded else {
        assert!(dctx_bytes() <= DCTX_BOUND, "zstd holds {}", dctx_bytes());
        return (false, false);
    };
    // What a decoded snapshot claims is within the limits.
    assert!(snapshot.memory_bytes <= max_memory_bytes);
    assert!(snapshot.memory_bytes.is_multiple_of(WASM_PAGE_BYTES));
    assert!(snapshot.host_state.len() <= MAX_HOST_STATE_BYTES);
    assert!(snapshot.page_count() <= snapshot.memory_bytes / PAGE_BYTES);
    assert!(
        peak <= 3 * (HEAD_FIXED_BYTES + snapshot.host_state.len() + 4 + snapshot.page_count() * 5)
            + (64 << 10)
    );
    assert!(snapshot
        .frames
        .iter()
        .all(|&(_, pages)| (1..=PAGES_PER_FRAME).contains(&pages)));
    let image_bytes = snapshot.memory_bytes.min(WASM_PAGE_BYTES);
    let mut memory: Vec<u8> = (0..image_bytes).map(|i| (i % 253) as u8).collect();
    memory.resize(snapshot.memory_bytes, 0);
    let len = memory.len();
    let (applied, peak) = peak_allocation(|| snapshot.apply(&mut memory, image_bytes));
    assert!(
        peak <= APPLY_ALLOCATION_BOUND,
        "restoring allocated {peak} bytes"
    );
    assert_eq!(memory.len(), len);
    assert!(dctx_bytes() <= DCTX_BOUND, "zstd holds {}", dctx_bytes());
    (true, applied.is_ok())
}

/// A small valid snapshot: a 64 KiB image and 128 KiB of memory with
/// pages changed inside and beyond the image, one with a block stride.
pub(crate) fn small_snapshot() -> Vec<u8> {
    let image: Vec<u8> = (0..WASM_PAGE_BYTES).map(|i| (i % 253) as u8).collect();
    let mut memory = image.clone();
    memory.resize(2 * WASM_PAGE_BYTES, 0);
    memory[5] ^= 1;
    memory[3 * PAGE_BYTES + 100] ^= 0x40;
    for (i, word) in memory[WASM_PAGE_BYTES..WASM_PAGE_BYTES + 3 * PAGE_BYTES]
        .chunks_exact_mut(4)
        .enumerate()
    {
        word.copy_from_slice(&((i % 8) as u32 * 0x0101).to_le_bytes());
    }
    encode(&Checkpoint {
        memory: &memory,
        image: &image,
        dead: 0..0,
        stack_pointer: 4096,
        host_state: b"{\"run\":1}",
        guest_hash: GUEST,
        guest_build: BUILD,
        max_payload_bytes: 1 << 20,
        memory_maps_image: false,
        block_units: &[2, 2],
    })
    .unwrap()
    .bytes
}

/// Iterations each target runs under plain `cargo test` (overridden by
/// `BOLERO_RANDOM_ITERATIONS`).
const DEFAULT_ITERATIONS: usize = 3000;

/// Counts a target's inputs: run, decoded, restored without error.
#[derive(Default)]
struct Tally([std::sync::atomic::AtomicUsize; 3]);

impl Tally {
    fn add(&self, (decoded, applied): (bool, bool)) {
        use std::sync::atomic::Ordering::Relaxed;
        self.0[0].fetch_add(1, Relaxed);
        self.0[1].fetch_add(usize::from(decoded), Relaxed);
        self.0[2].fetch_add(usize::from(applied), Relaxed);
    }
    /// Prints the counts (shown with `--nocapture`).
    fn report(&self, target: &str) {
        let [runs, decoded, applied] = self
            .0
            .each_ref()
            .map(|n| n.load(std::sync::atomic::Ordering::Relaxed));
        eprintln!("{target}: {runs} inputs, {decoded} decoded, {applied} restored");
    }
}

/// Arbitrary bytes: as they are, behind a valid header and checksum (so
/// that they reach the zstd frames), or compressed as the head frame
/// (followed by a second arbitrary frame of page data).
#[test]
fn fuzz_decode_arbitrary_bytes() {
    let tally = Tally::default();
    bolero::check!()
        .with_iterations(DEFAULT_ITERATIONS)
        .with_type::<(u8, Vec<u8>, Vec<u8>)>()
        .for_each(|(mode, bytes, pages)| {
            let input = match mode % 3 {
                0 => bytes.clone(),
                1 => seal(bytes),
                _ => {
                    let mut payload = frame(bytes);
                    if !pages.is_empty() {
                        payload.extend_from_slice(&frame(pages));
                    }
                    seal(&payload)
                }
            };
            tally.add(decode_and_apply(&input, FUZZ_MAX_MEMORY_BYTES));
        });
    tally.report("fuzz_decode_arbitrary_bytes");
}

/// A valid snapshot with bytes replaced at (offset, value) pairs (the
/// first `1 + edits % 8` pairs), and truncated when `cut` is shorter than
/// it; resealed (its checksum recomputed) unless the flag says not to, in
/// which case any change must fail the checksum.
#[test]
fn fuzz_decode_mutated_snapshots() {
    let good = small_snapshot();
    let tally = Tally::default();
    bolero::check!()
        .with_iterations(DEFAULT_ITERATIONS)
        .with_type::<(bool, u16, u8, Vec<(u16, u8)>)>()
        .for_each(|(reseal, cut, edits, pairs)| {
            let mut v = good.clone();
            for &(at, byte) in pairs.iter().take(1 + usize::from(*edits % 8)) {
                // Edits land after the header, in the frames.
                let at = HEADER_BYTES + usize::from(at) % (v.len() - HEADER_BYTES);
                v[at] = byte;
            }
            v.truncate(usize::from(*cut));
            let changed_payload =
                v.len() < HEADER_BYTES || v[HEADER_BYTES..] != good[HEADER_BYTES..];
            if *reseal && v.len() >= HEADER_BYTES {
                let payload = v[HEADER_BYTES..].to_vec();
                v = seal(&payload);
            }
            let outcome = decode_and_apply(&v, FUZZ_MAX_MEMORY_BYTES);
            if !*reseal && changed_payload {
                assert!(!outcome.0, "a changed payload passed its checksum");
            }
            tally.add(outcome);
        });
    tally.report("fuzz_decode_mutated_snapshots");
}

/// Heads built field by field (memory size, host-state length, page
/// count, page indexes as small increments, layout bytes) and frames of
/// chosen page counts (or, with `fit`, counts that add up to the head's),
/// all validly compressed and checksummed: reaches the head's and the
/// frames' consistency checks and the restore.
#[test]
fn fuzz_decode_shaped_heads() {
    type Shape = (
        (u8, u8, (u8, u32), (u8, u32)),
        (Vec<u8>, Vec<u8>),
        (bool, Vec<(u16, u8)>),
    );
    let tally = Tally::default();
    bolero::check!()
        .with_iterations(DEFAULT_ITERATIONS / 10)
        .with_type::<Shape>()
        .for_each(
            |(
                (wasm_pages, state_len, state_len_field, count_field),
                (steps, units),
                (fit, frames),
            )| {
                let memory_bytes = u64::from(*wasm_pages % 80) * WASM_PAGE_BYTES as u64;
                let state = vec![b'x'; usize::from(*state_len)];
                // Increments of 1 to 4 (0, a repeated index, rarely).
                let mut indexes = Vec::with_capacity(steps.len());
                for &step in steps {
                    let index = match (indexes.last(), step) {
                        (None, s) => u32::from(s % 4),
                        (Some(&last), 0) => last,
                        (Some(&last), s) => last + 1 + u32::from(s % 4),
                    };
                    indexes.push(index);
                }
                // The fields as given, rarely overridden.
                let given =
                    |(choose, value): (u8, u32), or: u32| if choose % 8 == 0 { value } else { or };
                let count = given(*count_field, indexes.len() as u32);
                let units: Vec<u8> = (0..indexes.len())
                    .map(|i| units.get(i).copied().unwrap_or(0))
                    .collect();
                let mut payload = frame(&head(
                    memory_bytes,
                    given(*state_len_field, u32::from(*state_len)),
                    &state,
                    count,
                    &indexes,
                    &units,
                ));
                let mut left = indexes.len();
                for (i, &(pages, fill)) in frames.iter().take(3).enumerate() {
                    let mut n = usize::from(pages % 600);
                    if *fit {
                        if left == 0 {
                            break;
                        }
                        // The last frame takes what is left.
                        n = if i + 1 == frames.len().min(3) {
                            left
                        } else {
                            n.clamp(1, left)
                        };
                        left -= n;
                    }
                    // A size off the page grid when `fill` is 0.
                    let mut content = vec![0u8; n * PAGE_BYTES + usize::from(fill == 0)];
                    let mut x = u32::from(fill) | 1;
                    for b in content.iter_mut().step_by(509) {
                        x ^= x << 13;
                        x ^= x >> 17;
                        x ^= x << 5;
                        *b = x as u8;
                    }
                    payload.extend_from_slice(&frame(&content));
                }
                tally.add(decode_and_apply(&seal(&payload), FUZZ_MAX_MEMORY_BYTES));
            },
        );
    tally.report("fuzz_decode_shaped_heads");
}

/// Sparse sections built field by field: up to 16 image pages (the fuzz
/// restore's image is 64 KiB) of layout 0, each with a count, skips and
/// values drawn from the input (counts that agree with the words given,
/// or not), then optional lanes for pages beyond the image and trailing
/// bytes: reaches the changed-word checks (counts over a page, words past
/// a page, sections that end early or run long) and the restore.
#[test]
fn fuzz_decode_sparse_sections() {
    type Shape = (u8, Vec<(u16, Vec<(u16, u32)>)>, (u8, u8), bool);
    let tally = Tally::default();
    bolero::check!()
        .with_iterations(DEFAULT_ITERATIONS)
        .with_type::<Shape>()
        .for_each(|(first, pages, (beyond, tail), honest)| {
            let pages = &pages[..pages.len().min(16)];
            let first = u32::from(*first % 16);
            let image_pages: Vec<u32> = (0..pages.len() as u32)
                .map(|i| first + i)
                .filter(|&p| p < 16)
                .collect();
            let beyond = usize::from(*beyond % 4);
            let mut indexes = image_pages.clone();
            indexes.extend((0..beyond as u32).map(|i| 16 + i * 3));
            let mut units = vec![0u8; image_pages.len()];
            units.extend(std::iter::repeat_n(1u8, beyond));
            let (mut counts, mut low, mut high, mut values) = (vec![], vec![], vec![], vec![]);
            for (count, words) in pages.iter().take(image_pages.len()) {
                let n = if *honest { words.len() as u16 } else { *count };
                counts.extend_from_slice(&n.to_le_bytes());
                for &(skip, value) in words.iter().take(1100) {
                    let skip = if *honest { skip % 40 } else { skip };
                    low.push(skip as u8);
                    high.push((skip >> 8) as u8);
                    values.extend_from_slice(&value.to_le_bytes());
                }
            }
            let mut content = counts;
            content.extend(low);
            content.extend(high);
            content.extend(values);
            content.resize(content.len() + beyond * PAGE_BYTES, 0x11);
            content.resize(content.len() + usize::from(*tail % 3), 0);
            let mut payload = frame(&head(
                2 * WASM_PAGE_BYTES as u64,
                0,
                b"",
                indexes.len() as u32,
                &indexes,
                &units,
            ));
            payload.extend_from_slice(&frame(&content));
            tally.add(decode_and_apply(&seal(&payload), FUZZ_MAX_MEMORY_BYTES));
        });
    tally.report("fuzz_decode_sparse_sections");
}
