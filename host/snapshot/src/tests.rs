//! Tests of the codec as a whole: round trips, and snapshots damaged or
//! forged to break each of the checks [`decode`] makes.

use crate::format::{
    corrupt, HEADER_BYTES, HEAD_FIXED_BYTES, IMAGE_PAGE_IN_LANES, MAX_PAGE_DATA_BYTES,
};
use crate::frames::{next_frame, ZSTD_FRAME_MAGIC};
#[cfg(target_os = "linux")]
use crate::pagemap;
use crate::pages::{changed_pages, inside_image};
use crate::{
    decode, encode, fuzz, Checkpoint, SnapshotError, WrittenPages, FORMAT_VERSION,
    MAX_HOST_STATE_BYTES, MAX_MEMORY_BYTES, PAGES_PER_FRAME, PAGE_BYTES, PARALLEL_PAYLOAD_BYTES,
    WASM_PAGE_BYTES,
};
use std::ops::Range;

const GUEST: [u8; 32] = [3; 32];
const BUILD: [u8; 32] = fuzz::BUILD;

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
        guest_build: BUILD,
        max_payload_bytes: 1 << 20,
        memory_maps_image: false,
        block_units: &[],
    }
}

/// A private copy-on-write mapping of a file holding `image`, followed
/// by anonymous memory: how Wasmtime maps a linear memory.
#[cfg(target_os = "linux")]
struct MappedMemory {
    base: *mut std::ffi::c_void,
    len: usize,
}

#[cfg(target_os = "linux")]
impl MappedMemory {
    fn new(image: &[u8], len: usize) -> MappedMemory {
        use rustix::fs::{ftruncate, memfd_create, MemfdFlags};
        use rustix::mm::{mmap, mmap_anonymous, MapFlags, ProtFlags};
        let fd = memfd_create("image", MemfdFlags::CLOEXEC).unwrap();
        ftruncate(&fd, image.len() as u64).unwrap();
        rustix::io::write(&fd, image).unwrap();
        let rw = ProtFlags::READ | ProtFlags::WRITE;
        // SAFETY: fresh mappings the test owns until `drop`.
        unsafe {
            let base = mmap_anonymous(std::ptr::null_mut(), len, rw, MapFlags::PRIVATE).unwrap();
            mmap(
                base,
                image.len(),
                rw,
                MapFlags::PRIVATE | MapFlags::FIXED,
                &fd,
                0,
            )
            .unwrap();
            MappedMemory { base, len }
        }
    }
    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: the mapping is `len` bytes, readable and writable.
        unsafe { std::slice::from_raw_parts_mut(self.base.cast(), self.len) }
    }
}

#[cfg(target_os = "linux")]
impl Drop for MappedMemory {
    fn drop(&mut self) {
        // SAFETY: unmaps what `new` mapped.
        unsafe { rustix::mm::munmap(self.base, self.len).unwrap() };
    }
}

#[cfg(target_os = "linux")]
#[test]
fn pages_never_written_in_a_mapped_image_are_not_compared() {
    let image: Vec<u8> = (0..WASM_PAGE_BYTES * 2).map(|i| (i / 7) as u8).collect();
    let mut mapped = MappedMemory::new(&image, WASM_PAGE_BYTES * 3);
    let memory = mapped.bytes();
    // Read everything (maps file pages and the zero page), write a few.
    assert!(memory[..image.len()] == image[..]);
    assert!(memory[image.len()..].iter().all(|&b| b == 0));
    memory[3 * PAGE_BYTES + 5] ^= 0xFF; // changed
    let same = memory[9 * PAGE_BYTES];
    // SAFETY: an in-bounds write the compiler must not drop.
    unsafe { std::ptr::write_volatile(&mut memory[9 * PAGE_BYTES], same) }; // written, unchanged
    memory[20 * PAGE_BYTES + 1] ^= 1; // changed
    memory[40 * PAGE_BYTES + 1] = 1; // beyond the image
    let memory = &*memory;
    let Some(written) = pagemap::written_pages(memory) else {
        // Without a readable pagemap every page is compared; where the
        // file opens, it must also pass the self-check.
        assert!(std::fs::File::open("/proc/self/pagemap").is_err());
        return;
    };
    let marked: Vec<usize> = (0..written.len()).filter(|&i| written[i]).collect();
    // Inside the image only the written pages; beyond it, pages that
    // were read map the shared zero page, which is compared too.
    let image_pages = image.len() / PAGE_BYTES;
    assert_eq!(
        marked
            .iter()
            .filter(|&&i| i < image_pages)
            .collect::<Vec<_>>(),
        [&3, &9, &20]
    );
    assert!(marked.contains(&40), "{marked:?}");
    let mut c = checkpoint(memory, &image, 0..0);
    c.memory_maps_image = true;
    let encoded = encode(&c).unwrap();
    let snapshot = decode(&encoded.bytes, GUEST, 1 << 30).unwrap();
    assert_eq!(snapshot.page_indexes, [3, 20, 40]);
    assert_eq!(
        snapshot.page_indexes,
        changed_pages(memory, &image, &(0..0), None)
    );
    let mut restored = image.clone();
    restored.resize(memory.len(), 0);
    snapshot.apply(&mut restored, image.len()).unwrap();
    assert!(restored == memory);
}

/// 2 MiB beyond a 1 MiB image in blocks of `block` bytes: a counter, a
/// constant, an address one block apart and a count that is mostly 1 (as
/// QuickJS's objects are: a shape, an index, the next property array,
/// a reference count).
fn blocks_sample(block: usize) -> (Vec<u8>, Vec<u8>) {
    let image: Vec<u8> = (0..1usize << 20).map(|i| (i % 251) as u8).collect();
    let mut memory = image.clone();
    memory.resize(3 << 20, 0);
    for (i, b) in memory[1 << 20..].chunks_mut(block).enumerate() {
        let count = 1 + u32::from(i % 16 == 5);
        let fields = [i as u32, 0xFFF8_0001, (block * i) as u32, count];
        for (word, value) in b.chunks_exact_mut(4).zip(fields) {
            word.copy_from_slice(&value.to_le_bytes());
        }
    }
    (image, memory)
}

#[test]
fn block_hints_make_equal_blocks_smaller_and_any_hint_restores() {
    let (image, memory) = blocks_sample(32);
    let pages = memory.len() / WASM_PAGE_BYTES;
    let mut c = checkpoint(&memory, &image, 0..0);
    c.max_payload_bytes = 64 << 20;
    let plain = encode(&c).unwrap().bytes;
    let right = vec![2u8; pages]; // 32-byte blocks
    c.block_units = &right;
    let hinted = encode(&c).unwrap().bytes;
    assert!(
        hinted.len() * 3 < plain.len(),
        "{} bytes hinted, {} plain",
        hinted.len(),
        plain.len()
    );
    // Wrong, odd, maximal, partial and missing hints restore exactly.
    let wrong: Vec<u8> = (0..pages).map(|p| [0, 1, 3, 7, 32, 255][p % 6]).collect();
    let short = vec![2u8; pages / 2];
    for units in [&right[..], &wrong[..], &short[..], &[][..]] {
        c.block_units = units;
        let encoded = encode(&c).unwrap();
        let snap = decode(&encoded.bytes, GUEST, 1 << 30).unwrap();
        let mut restored = image.clone();
        restored.resize(memory.len(), 0);
        snap.apply(&mut restored, image.len()).unwrap();
        assert!(
            restored == memory,
            "hints {:?}",
            &units[..units.len().min(20)]
        );
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
    snap.apply(&mut restored, image.len()).unwrap();
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
    // Sparse pages are stored as their changed words.
    assert!(snap.page_units.iter().all(|&layout| layout == 0));
    let mut restored = image.clone();
    snap.apply(&mut restored, image.len()).unwrap();
    assert_eq!(restored, memory);
}

/// Recomputes the checksum of a snapshot edited after its header.
fn reseal(bytes: &mut [u8]) {
    let checksum = crate::format::checksum(&BUILD, &bytes[HEADER_BYTES..]);
    bytes[HEADER_BYTES - 4..HEADER_BYTES].copy_from_slice(&checksum.to_le_bytes());
}

#[test]
fn large_snapshots_round_trip_through_parallel_frames() {
    let (image, memory) = large_sample();
    let mut c = checkpoint(&memory, &image, 0..0);
    c.max_payload_bytes = 64 << 20;
    let units: Vec<u8> = (0..memory.len() / WASM_PAGE_BYTES)
        .map(|p| [0, 4, 1, 9][p % 4])
        .collect();
    c.block_units = &units;
    let encoded = encode(&c).unwrap();
    assert!(encoded.payload_bytes >= PARALLEL_PAYLOAD_BYTES);
    let snap = decode(&encoded.bytes, GUEST, 1 << 30).unwrap();
    assert!(snap.frames.len() > 4, "{} frames", snap.frames.len());
    // The image pages' deltas are dense: they are stored in lanes (with or
    // without a stride).
    let inside = inside_image(&snap.page_indexes, image.len());
    assert!(inside > 0);
    assert!(snap.page_units[..inside]
        .iter()
        .all(|&layout| layout >= IMAGE_PAGE_IN_LANES));
    let mut restored = image.clone();
    restored.resize(memory.len(), 0);
    snap.apply(&mut restored, image.len()).unwrap();
    assert!(restored == memory);
}

/// A 1 MiB image and 9 MiB of memory: changed pages inside the image
/// and runs beyond it, broken by unchanged (zero) pages up to 4 MiB and
/// unbroken after, enough for several frames and threads.
fn large_sample() -> (Vec<u8>, Vec<u8>) {
    let image: Vec<u8> = (0..1usize << 20).map(|i| (i % 251) as u8).collect();
    let mut memory = image.clone();
    memory.resize(9 << 20, 0);
    let mut x = 12345u64;
    for (i, page) in memory.chunks_exact_mut(PAGE_BYTES).enumerate() {
        if i % 97 == 5 && i < 1024 {
            continue; // unchanged
        }
        for b in page.iter_mut().step_by(3) {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            *b ^= (x >> 59) as u8;
        }
    }
    (image, memory)
}

/// A process forked after the codec pool was made has none of its
/// threads; handing them work would wait forever.
#[cfg(target_os = "linux")]
#[test]
fn a_forked_process_encodes_and_restores_large_snapshots() {
    let (image, memory) = large_sample();
    let mut c = checkpoint(&memory, &image, 0..0);
    c.max_payload_bytes = 64 << 20;
    let encoded = encode(&c).unwrap(); // makes the pool here
    let round_trip = || {
        let again = encode(&c).ok()?;
        let snap = decode(&again.bytes, GUEST, 1 << 30).ok()?;
        let mut restored = image.clone();
        restored.resize(memory.len(), 0);
        snap.apply(&mut restored, image.len()).ok()?;
        (again.bytes == encoded.bytes && restored == memory).then_some(())
    };
    // SAFETY: the child runs only the round trip, then `_exit`s.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork failed");
    if child == 0 {
        let code = if round_trip().is_some() { 0 } else { 1 };
        // SAFETY: ends the child without running the parent's exit code.
        unsafe { libc::_exit(code) };
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut status = 0;
    loop {
        // SAFETY: waits for our own child.
        let done = unsafe { libc::waitpid(child, &mut status, libc::WNOHANG) };
        if done == child {
            break;
        }
        if std::time::Instant::now() > deadline {
            // SAFETY: our own child.
            unsafe { libc::kill(child, libc::SIGKILL) };
            panic!("the forked process hung encoding a large snapshot");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the forked process failed the round trip (status {status})"
    );
}

#[test]
fn frames_that_disagree_with_the_page_count_are_corrupt() {
    let (image, memory) = sample();
    let good = encode(&checkpoint(&memory, &image, 0..0)).unwrap().bytes;
    let (head, _, pages) = next_frame(&good[HEADER_BYTES..]).unwrap();
    let head_end = HEADER_BYTES + head.len();
    // The page frame left out.
    let mut v = good[..head_end].to_vec();
    reseal(&mut v);
    let e = decode(&v, GUEST, 1 << 30).unwrap_err();
    assert_eq!(e, corrupt("page data does not match the page count"));
    // A page frame repeated.
    let mut v = good.clone();
    v.extend_from_slice(pages);
    reseal(&mut v);
    let e = decode(&v, GUEST, 1 << 30).unwrap_err();
    assert_eq!(e, corrupt("page data does not match the page count"));
    // Garbage after the frames.
    let mut v = good.clone();
    v.extend_from_slice(b"garbage!");
    reseal(&mut v);
    assert!(matches!(
        decode(&v, GUEST, 1 << 30).unwrap_err(),
        SnapshotError::Corrupt(_)
    ));
    // A damaged block inside a frame whose header is intact: found when
    // the pages are written, as a corrupt snapshot, not a crash.
    let mut v = good.clone();
    let mid = head_end + pages.len() / 2;
    for b in &mut v[mid..mid + 8] {
        *b ^= 0xA5;
    }
    reseal(&mut v);
    let outcome = decode(&v, GUEST, 1 << 30).and_then(|snap| {
        let mut restored = image.clone();
        restored.resize(memory.len(), 0);
        snap.apply(&mut restored, image.len()).map(|()| restored)
    });
    match outcome {
        Err(SnapshotError::Corrupt(_)) => {}
        Ok(restored) => assert!(restored != memory, "damage went unnoticed"),
        Err(other) => panic!("unexpected {other:?}"),
    }
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
    // Refused under another key, it still names the build that took it.
    assert_eq!(crate::guest_build(&good), Ok(BUILD));
    assert_eq!(decode(&good, GUEST, 1 << 30).unwrap().guest_build, BUILD);
    assert_eq!(
        crate::guest_build(&good[..50]),
        Err(SnapshotError::Truncated)
    );
    assert_eq!(
        crate::guest_build(&v),
        Err(SnapshotError::UnknownVersion(99))
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

/// A decode of `bytes` for [`GUEST`], with the most Rust heap it
/// allocated.
fn decode_metered(bytes: &[u8], max_memory_bytes: usize) -> (Result<usize, SnapshotError>, usize) {
    fuzz::peak_allocation(|| decode(bytes, GUEST, max_memory_bytes).map(|s| s.page_count()))
}

#[test]
fn a_memory_over_the_wasm32_limit_is_refused_whatever_the_ceiling() {
    // Within the limit, with the largest ceiling: decodes.
    let (image, memory) = sample();
    let good = encode(&checkpoint(&memory, &image, 0..0)).unwrap().bytes;
    assert!(decode(&good, GUEST, usize::MAX).is_ok());
    let exactly = fuzz::seal(&fuzz::frame(&fuzz::head(
        MAX_MEMORY_BYTES,
        0,
        b"",
        0,
        &[],
        &[],
    )));
    assert_eq!(
        decode(&exactly, GUEST, usize::MAX).unwrap().memory_bytes as u64,
        MAX_MEMORY_BYTES
    );
    // Over it: refused even when the caller allows anything.
    let over = MAX_MEMORY_BYTES + WASM_PAGE_BYTES as u64;
    let v = fuzz::seal(&fuzz::frame(&fuzz::head(over, 0, b"", 0, &[], &[])));
    assert_eq!(
        decode(&v, GUEST, usize::MAX).unwrap_err(),
        corrupt(format!("implausible memory size {over}"))
    );
}

#[cfg(target_os = "linux")]
#[test]
fn encoding_a_memory_over_the_wasm32_limit_is_refused() {
    use rustix::mm::{mmap_anonymous, munmap, MapFlags, ProtFlags};
    let len = (MAX_MEMORY_BYTES as usize) + WASM_PAGE_BYTES;
    // SAFETY: a fresh read-only mapping of zeros, never touched and
    // unmapped below; refused before any page is read.
    unsafe {
        let Ok(base) = mmap_anonymous(
            std::ptr::null_mut(),
            len,
            ProtFlags::READ,
            MapFlags::PRIVATE | MapFlags::NORESERVE,
        ) else {
            return; // no address space for it here
        };
        let memory = std::slice::from_raw_parts(base.cast::<u8>(), len);
        let e = encode(&checkpoint(memory, &[], 0..0)).unwrap_err();
        munmap(base, len).unwrap();
        assert!(
            matches!(e, SnapshotError::Corrupt(ref m) if m.contains("larger than")),
            "{e:?}"
        );
    }
}

/// A zstd frame that states `size` bytes of content and holds none: a
/// frame header (single segment, 8-byte size) and an empty last block.
fn frame_claiming(size: u64) -> Vec<u8> {
    let mut f = ZSTD_FRAME_MAGIC.to_vec();
    f.push(0xE0);
    f.extend_from_slice(&size.to_le_bytes());
    f.extend_from_slice(&[1, 0, 0]);
    f
}

#[test]
fn a_head_frame_claiming_gigabytes_is_refused_before_allocating() {
    // Largest head a 1 MiB ceiling allows: a full host state and a page
    // table for every page.
    let max_head = HEAD_FIXED_BYTES + MAX_HOST_STATE_BYTES + 4 + 256 * 5;
    for (claim, refused) in [
        (1u64 << 40, true),
        (u64::MAX >> 1, true),
        (max_head as u64 + 1, true),
        (max_head as u64, false),
    ] {
        let v = fuzz::seal(&frame_claiming(claim));
        let (result, peak) = decode_metered(&v, 1 << 20);
        let e = result.unwrap_err();
        if refused {
            assert_eq!(e, corrupt(format!("its head would be {claim} bytes")));
            assert!(peak < 4096, "{peak} bytes allocated for a refused head");
        } else {
            // Allowed: allocated (once), then found not to hold it.
            assert!(matches!(e, SnapshotError::Corrupt(_)), "{e:?}");
            assert!(peak <= max_head + 4096, "{peak}");
        }
    }
}

#[test]
fn a_page_count_the_head_cannot_hold_is_refused_before_allocating() {
    let memory = 64 << 20;
    // Obeyed: three pages, three indexes and layout bytes.
    let ok = fuzz::head(memory, 0, b"", 3, &[1, 2, 9], &[0, 0, 0]);
    let mut v = fuzz::frame(&ok);
    v.extend_from_slice(&fuzz::frame(&vec![0; 3 * PAGE_BYTES]));
    assert_eq!(decode_metered(&fuzz::seal(&v), 1 << 30).0, Ok(3));
    // Violated: the largest count the memory allows, and no table.
    let count = (memory / PAGE_BYTES as u64) as u32;
    let v = fuzz::seal(&fuzz::frame(&fuzz::head(memory, 0, b"", count, &[], &[])));
    let (result, peak) = decode_metered(&v, 1 << 30);
    assert_eq!(
        result.unwrap_err(),
        corrupt(format!("the head holds 0 bytes for {count} pages"))
    );
    assert!(peak < 4096, "{peak} bytes allocated");
    // A table one byte short.
    let short = fuzz::head(memory, 0, b"", 3, &[1, 2, 9], &[0, 0]);
    assert_eq!(
        decode(&fuzz::seal(&fuzz::frame(&short)), GUEST, 1 << 30).unwrap_err(),
        corrupt("the head holds 14 bytes for 3 pages")
    );
    // More pages than the memory has.
    let v = fuzz::seal(&fuzz::frame(&fuzz::head(65536, 0, b"", 17, &[], &[])));
    assert_eq!(
        decode(&v, GUEST, 1 << 30).unwrap_err(),
        corrupt("more pages than memory")
    );
}

#[test]
fn a_host_state_over_its_cap_is_refused() {
    // Obeyed: a host state of 100 KiB.
    let state = vec![b'x'; 100 << 10];
    let ok = fuzz::head(65536, state.len() as u32, &state, 0, &[], &[]);
    let bytes = fuzz::seal(&fuzz::frame(&ok));
    let snap = decode(&bytes, GUEST, 1 << 30).unwrap();
    assert_eq!(snap.host_state, state);
    // Violated: a length one over the cap (the bytes need not follow).
    let over = (MAX_HOST_STATE_BYTES + 1) as u32;
    let v = fuzz::seal(&fuzz::frame(&fuzz::head(65536, over, b"", 0, &[], &[])));
    assert_eq!(
        decode(&v, GUEST, 1 << 30).unwrap_err(),
        corrupt("host state too large")
    );
    // A length the head does not hold.
    let v = fuzz::seal(&fuzz::frame(&fuzz::head(65536, 1000, b"ab", 0, &[], &[])));
    assert_eq!(
        decode(&v, GUEST, 1 << 30).unwrap_err(),
        SnapshotError::Truncated
    );
}

#[test]
fn a_frame_of_more_than_pages_per_frame_pages_is_refused() {
    let pages = PAGES_PER_FRAME + 1;
    let indexes: Vec<u32> = (0..pages as u32).collect();
    let memory = (4 << 20) as u64;
    let head = fuzz::frame(&fuzz::head(
        memory,
        0,
        b"",
        pages as u32,
        &indexes,
        &vec![0; pages],
    ));
    let with_frames = |frames: &[Vec<u8>]| {
        let mut v = head.clone();
        for frame in frames {
            v.extend_from_slice(frame);
        }
        fuzz::seal(&v)
    };
    let zeros = |n: usize| fuzz::frame(&vec![0; n * PAGE_BYTES]);
    // Obeyed: a full frame and one more page, as the encoder writes.
    let bytes = with_frames(&[zeros(PAGES_PER_FRAME), zeros(1)]);
    let ok = decode(&bytes, GUEST, 1 << 30).unwrap();
    let mut restored = vec![0u8; memory as usize];
    ok.apply(&mut restored, 0).unwrap();
    // Violated: all of them in one frame (the first frame holds the first
    // PAGES_PER_FRAME pages, and the second is missing).
    assert_eq!(
        decode(&with_frames(&[zeros(pages)]), GUEST, 1 << 30).unwrap_err(),
        corrupt("page data does not match the page count")
    );
    // Violated: a frame stating more than any PAGES_PER_FRAME pages take.
    let most = PAGES_PER_FRAME * MAX_PAGE_DATA_BYTES;
    assert_eq!(
        decode(
            &with_frames(&[frame_claiming(most as u64 + 1)]),
            GUEST,
            1 << 30
        )
        .unwrap_err(),
        corrupt(format!(
            "a frame states {} bytes; at most {most} ({PAGES_PER_FRAME} pages) are allowed",
            most + 1
        ))
    );
    // The encoder's frames are never larger.
    let (image, memory) = large_sample();
    let mut c = checkpoint(&memory, &image, 0..0);
    c.max_payload_bytes = 64 << 20;
    let bytes = encode(&c).unwrap().bytes;
    let snap = decode(&bytes, GUEST, 1 << 30).unwrap();
    assert!(snap.frames.iter().any(|&(_, n)| n == PAGES_PER_FRAME));
    assert!(snap.frames.iter().all(|&(_, n)| n <= PAGES_PER_FRAME));
}

#[test]
fn frames_other_than_standard_zstd_frames_are_refused() {
    let (image, memory) = sample();
    let good = encode(&checkpoint(&memory, &image, 0..0)).unwrap().bytes;
    let payload = &good[HEADER_BYTES..];
    assert!(payload.starts_with(&ZSTD_FRAME_MAGIC));
    // A skippable frame before the head; a legacy (v0.7) frame magic.
    let mut skippable = vec![0x50, 0x2A, 0x4D, 0x18, 4, 0, 0, 0, 1, 2, 3, 4];
    skippable.extend_from_slice(payload);
    let mut legacy = payload.to_vec();
    legacy[..4].copy_from_slice(&0xFD2F_B527u32.to_le_bytes());
    for v in [skippable, legacy] {
        assert_eq!(
            decode(&fuzz::seal(&v), GUEST, 1 << 30).unwrap_err(),
            corrupt("a frame is not a standard zstd frame")
        );
    }
}

#[test]
fn every_truncation_of_a_snapshot_is_an_error() {
    let good = fuzz::small_snapshot();
    assert_eq!(fuzz::decode_and_apply(&good, 1 << 20), (true, true));
    for len in 0..good.len() {
        let cut = &good[..len];
        assert!(decode(cut, GUEST, 1 << 20).is_err(), "{len} bytes");
        // With the checksum made to match, the frames must still fail.
        if len >= HEADER_BYTES {
            let resealed = fuzz::seal(&cut[HEADER_BYTES..]);
            assert!(!fuzz::decode_and_apply(&resealed, 1 << 20).0, "{len} bytes");
        }
    }
}

#[test]
fn every_flipped_byte_is_an_error_or_a_checksum_mismatch() {
    let good = fuzz::small_snapshot();
    for at in 0..good.len() {
        for mask in [0x01, 0x80, 0xFF] {
            let mut v = good.clone();
            v[at] ^= mask;
            let e = decode(&v, GUEST, 1 << 20).unwrap_err();
            if at >= HEADER_BYTES {
                assert_eq!(e, SnapshotError::ChecksumMismatch, "byte {at}");
            }
            // Resealed, the damage reaches the frames: an error, or a
            // restore of other bytes, never a panic.
            if at >= HEADER_BYTES {
                let resealed = fuzz::seal(&v[HEADER_BYTES..]);
                fuzz::decode_and_apply(&resealed, 1 << 20);
            }
        }
    }
}

/// The memory and image `fixtures/format-5.qcsnap` was taken of (by the
/// format-5 encoder, with [`checkpoint`] and 32-byte block hints): sparse
/// changes in two image pages, and a grown page of 32-byte records.
fn format_5_sample() -> (Vec<u8>, Vec<u8>) {
    let mut x = 0x9E37_79B9u32;
    let image: Vec<u8> = (0..2 * WASM_PAGE_BYTES)
        .map(|_| {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (x >> 24) as u8
        })
        .collect();
    let mut memory = image.clone();
    memory.resize(3 * WASM_PAGE_BYTES, 0);
    for (at, value) in [
        (8usize, 0xDEAD_BEEFu32),
        (4096 * 5 + 400, 7),
        (4096 * 5 + 404, 8),
        (4096 * 31 + 4092, 1),
    ] {
        memory[at..at + 4].copy_from_slice(&value.to_le_bytes());
    }
    for (i, record) in memory[2 * WASM_PAGE_BYTES..2 * WASM_PAGE_BYTES + 8192]
        .chunks_exact_mut(32)
        .enumerate()
    {
        record[..4].copy_from_slice(&(i as u32).to_le_bytes());
        record[4..8].copy_from_slice(&0xFFF8_0001u32.to_le_bytes());
    }
    (image, memory)
}

/// Obeyed: a snapshot of the format before (5, sparse pages in place) of
/// the same guest still restores exactly. Violated: any other version is
/// refused by name.
#[test]
fn a_format_5_snapshot_still_restores_and_other_versions_are_refused() {
    let (image, memory) = format_5_sample();
    let bytes = include_bytes!("../fixtures/format-5.qcsnap");
    assert_eq!(bytes[8..12], 5u32.to_le_bytes());
    let snap = decode(bytes, GUEST, 1 << 30).unwrap();
    assert!(!snap.sparse);
    assert_eq!(crate::guest_build(bytes), Ok(BUILD));
    let mut restored = image.clone();
    restored.resize(memory.len(), 0);
    snap.apply(&mut restored, image.len()).unwrap();
    assert!(restored == memory);
    // This build writes format 8, and restores it to the same memory.
    let mut c = checkpoint(&memory, &image, 0..0);
    let units = [2u8; 3];
    c.block_units = &units;
    let now = encode(&c).unwrap().bytes;
    assert_eq!(now[8..12], FORMAT_VERSION.to_le_bytes());
    assert_eq!(FORMAT_VERSION, 8);
    let mut again = image.clone();
    again.resize(memory.len(), 0);
    decode(&now, GUEST, 1 << 30)
        .unwrap()
        .apply(&mut again, image.len())
        .unwrap();
    assert!(again == memory);
    for version in [4u32, 9] {
        let mut v = bytes.to_vec();
        v[8..12].copy_from_slice(&version.to_le_bytes());
        assert_eq!(
            decode(&v, GUEST, 1 << 30).unwrap_err(),
            SnapshotError::UnknownVersion(version)
        );
        assert_eq!(
            crate::guest_build(&v),
            Err(SnapshotError::UnknownVersion(version))
        );
    }
}

/// `bytes` decoded, and its head's fields up to the page indexes (memory
/// size, stack pointer, host state, page count), for the rewriters below.
fn head_up_to_indexes(bytes: &[u8]) -> (crate::Snapshot<'_>, Vec<u8>) {
    let snap = decode(bytes, GUEST, 1 << 30).unwrap();
    let mut head = Vec::new();
    head.extend_from_slice(&(snap.memory_bytes as u64).to_le_bytes());
    head.extend_from_slice(&snap.stack_pointer.to_le_bytes());
    head.extend_from_slice(&(snap.host_state.len() as u32).to_le_bytes());
    head.extend_from_slice(&snap.host_state);
    head.extend_from_slice(&(snap.page_count() as u32).to_le_bytes());
    (snap, head)
}

/// `head` as a plain frame, followed by the page frames of `bytes`.
fn with_head(bytes: &[u8], head: &[u8]) -> Vec<u8> {
    let (_, _, pages) = crate::frames::next_frame(&bytes[crate::format::HEADER_BYTES..]).unwrap();
    let mut payload = fuzz::frame(head);
    payload.extend_from_slice(pages);
    payload
}

/// `bytes` (format 7) rewritten as format 6: the head with absolute page
/// indexes, compressed without the dictionary; the page frames as they are.
fn as_format_6(bytes: &[u8]) -> Vec<u8> {
    let (snap, mut head) = head_up_to_indexes(bytes);
    for index in &snap.page_indexes {
        head.extend_from_slice(&index.to_le_bytes());
    }
    head.extend_from_slice(&snap.page_units);
    let payload = with_head(bytes, &head);
    fuzz::seal_as(crate::PLAIN_HEAD_FORMAT_VERSION, &payload)
}

/// A host state of the kind quickcell stores (a cell parked on one tool
/// call with one settlement ready).
const QUICKCELL_HOST_STATE: &[u8] = br#"{"runId":"cm_e8b33889-3f11-47d9-b110-e954ef99e397","generation":1,"lastRequestId":2,"maxOutputBytes":65536,"guestClockNs":2649750,"parkedUnixMs":1796623974961,"bridge":{"outstanding":{"2":{"method":"callValue","args_json":"{"callable":"lookup","input":{"q":"hi"}}","started":true}},"ready":[{"id":1,"ok":true,"value":{"ok":true,"n":42}}],"dispatch_started":true},"catalogDigest":"23121ec308e4a770d35aeacd0c8194ae","guestFinished":false}"#;

/// Format 7 compresses the head against [`crate::HEAD_DICTIONARY`] and
/// stores the page indexes as gaps in byte lanes: the same snapshot as
/// format 6 (a plain head, absolute indexes) restores to the same memory
/// and host state, and takes fewer bytes in format 7.
/// Damaging the dictionary-compressed head is refused, not misread.
#[test]
fn format_7_heads_use_the_dictionary_and_format_6_still_restores() {
    let image = vec![7u8; 2 * WASM_PAGE_BYTES];
    let mut memory = image.clone();
    memory.resize(3 * WASM_PAGE_BYTES, 0);
    for page in [0usize, 1, 5, 16, 31, 32, 47] {
        memory[page * 4096 + 12..page * 4096 + 16].copy_from_slice(&9u32.to_le_bytes());
    }
    let mut c = checkpoint(&memory, &image, 0..0);
    c.host_state = QUICKCELL_HOST_STATE;
    let units = [0u8; 3];
    c.block_units = &units;
    let seven = encode(&c).unwrap().bytes;
    let six = as_format_6(&seven);
    assert_eq!(six[8..12], 6u32.to_le_bytes());
    for bytes in [&seven, &six] {
        let snap = decode(bytes, GUEST, 1 << 30).unwrap();
        assert_eq!(snap.host_state, QUICKCELL_HOST_STATE);
        assert_eq!(snap.page_indexes, [0, 1, 5, 16, 31, 32, 47]);
        let mut restored = image.clone();
        restored.resize(memory.len(), 0);
        snap.apply(&mut restored, image.len()).unwrap();
        assert!(restored == memory);
    }
    // Measured: 504 bytes as format 6, 310 as format 7.
    assert!(
        seven.len() + 150 < six.len(),
        "format 7: {} bytes, format 6: {}",
        seven.len(),
        six.len()
    );
    // A format-7 head read without the dictionary (as format 6) is refused
    // as corrupt, not misread. (A plain head reads the same with the
    // dictionary or without: a frame that refers to none ignores it.)
    let mut v = seven.clone();
    v[8..12].copy_from_slice(&6u32.to_le_bytes());
    assert!(matches!(
        decode(&v, GUEST, 1 << 30),
        Err(SnapshotError::Corrupt(_))
    ));
}

/// A page of 48-byte records laid over `base`: the delta a cell that
/// filled free image heap with objects leaves (a header, a pointer that
/// steps by the record size, an index, a shape).
fn records_over(base: &[u8]) -> Vec<u8> {
    let mut page = base.to_vec();
    for (k, record) in page.chunks_exact_mut(48).enumerate() {
        let fields = [1u32, 0x0048_0000 + 48 * k as u32, k as u32, 0x0042_6440];
        for (at, field) in fields.iter().enumerate() {
            let word = u32::from_le_bytes(record[4 * at..4 * at + 4].try_into().unwrap());
            record[4 * at..4 * at + 4].copy_from_slice(&(word ^ field).to_le_bytes());
        }
    }
    page
}

/// Format 8 decides page by page: dense image pages go in the lanes with
/// a block stride (of their delta, so also over an image page that is not
/// zero), sparse ones among them as changed words, and all restore
/// exactly. The stride found without a hint is the records' (3 units).
/// Read as format 7 (which has no image strides) the same bytes restore
/// to other memory: why the version changed.
#[test]
fn format_8_stores_dense_image_pages_with_strides_page_by_page() {
    let mut image = vec![0u8; WASM_PAGE_BYTES];
    for (i, byte) in image[2 * PAGE_BYTES..3 * PAGE_BYTES].iter_mut().enumerate() {
        *byte = (i * 7 % 251) as u8;
    }
    let mut memory = image.clone();
    memory.resize(2 * WASM_PAGE_BYTES, 0);
    // Page 0: records over zeros; 1: one changed word; 2: records over a
    // pattern; 3: one changed word; 17: records beyond the image.
    let page = |k: usize| k * PAGE_BYTES..(k + 1) * PAGE_BYTES;
    for k in [0, 2, 17] {
        let filled = records_over(&memory[page(k)]);
        memory[page(k)].copy_from_slice(&filled);
    }
    memory[PAGE_BYTES + 40] = 9;
    memory[3 * PAGE_BYTES + 400] = 9;
    for hint in [0u8, 3] {
        let mut c = checkpoint(&memory, &image, 0..0);
        let units = [hint; 2];
        c.block_units = &units;
        let eight = encode(&c).unwrap().bytes;
        assert_eq!(eight[8..12], 8u32.to_le_bytes());
        let snap = decode(&eight, GUEST, 1 << 30).unwrap();
        assert_eq!(snap.page_indexes, [0, 1, 2, 3, 17]);
        // 1 + 3 units for the dense image pages, 0 for the sparse ones.
        assert_eq!(snap.page_units, [4, 0, 4, 0, 3], "hint {hint}");
        let mut restored = image.clone();
        restored.resize(memory.len(), 0);
        snap.apply(&mut restored, image.len()).unwrap();
        assert!(restored == memory, "hint {hint}");
        let mut seven = eight.clone();
        seven[8..12].copy_from_slice(&7u32.to_le_bytes());
        let mut misread = image.clone();
        misread.resize(memory.len(), 0);
        decode(&seven, GUEST, 1 << 30)
            .unwrap()
            .apply(&mut misread, image.len())
            .unwrap();
        assert!(misread != memory);
    }
}

/// `bytes` (format 8, one frame of pages) with the layout bytes `units`.
fn with_layouts(bytes: &[u8], units: &[u8]) -> Vec<u8> {
    let (snap, mut head) = head_up_to_indexes(bytes);
    let mut before = None;
    let gaps: Vec<[u8; 4]> = snap
        .page_indexes
        .iter()
        .map(|&index| {
            let gap = before.map_or(index, |b: u32| index - b - 1);
            before = Some(index);
            gap.to_le_bytes()
        })
        .collect();
    for lane in 0..4 {
        head.extend(gaps.iter().map(|gap| gap[lane]));
    }
    head.extend_from_slice(units);
    let payload = with_head(bytes, &head);
    fuzz::seal_as(FORMAT_VERSION, &payload)
}

/// Any layout byte on any page of a format-8 snapshot is read without a
/// panic: an error (the page data no longer matches) or a restore of
/// other bytes; the layout bytes as encoded restore exactly.
#[test]
fn every_format_8_layout_byte_is_read_without_a_panic() {
    let image = vec![0u8; WASM_PAGE_BYTES];
    let mut memory = image.clone();
    memory.resize(2 * WASM_PAGE_BYTES, 0);
    let page = |k: usize| k * PAGE_BYTES..(k + 1) * PAGE_BYTES;
    for k in [0, 17] {
        let filled = records_over(&memory[page(k)]);
        memory[page(k)].copy_from_slice(&filled);
    }
    memory[PAGE_BYTES + 40] = 9;
    let bytes = encode(&checkpoint(&memory, &image, 0..0)).unwrap().bytes;
    let encoded = decode(&bytes, GUEST, 1 << 30).unwrap().page_units;
    assert_eq!(encoded, [4, 0, 3]);
    assert_eq!(
        fuzz::decode_and_apply(&with_layouts(&bytes, &encoded), 1 << 20),
        (true, true)
    );
    for at in 0..encoded.len() {
        for layout in [0u8, 1, 2, 5, 128, 129, 130, 200, 254, 255] {
            let mut units = encoded.clone();
            units[at] = layout;
            fuzz::decode_and_apply(&with_layouts(&bytes, &units), 1 << 20);
        }
    }
}

/// Format 7 (image pages in the lanes without strides, after the frame's
/// sparse ones) still restores: a snapshot whose layout bytes are all 0
/// or 1 reads the same as format 7 and format 8.
#[test]
fn a_format_7_snapshot_still_restores() {
    let image = vec![0u8; WASM_PAGE_BYTES];
    let mut memory = image.clone();
    // A sparse page, then a dense one with no stride (noise).
    memory[40] = 9;
    let mut x = 0x9e37_79b9u32;
    for word in memory[PAGE_BYTES..2 * PAGE_BYTES].chunks_exact_mut(4) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        word.copy_from_slice(&x.to_le_bytes());
    }
    let mut c = checkpoint(&memory, &image, 0..0);
    let units = [0u8; 1];
    c.block_units = &units;
    let mut bytes = encode(&c).unwrap().bytes;
    bytes[8..12].copy_from_slice(&crate::UNSTRIDED_IMAGE_FORMAT_VERSION.to_le_bytes());
    let snap = decode(&bytes, GUEST, 1 << 30).unwrap();
    assert_eq!(snap.page_units, [0, 1]);
    let mut restored = image.clone();
    snap.apply(&mut restored, image.len()).unwrap();
    assert!(restored == memory);
}

/// Obeyed: format-7 page indexes are read back from their gaps. Violated:
/// gaps that run past the memory (also past `u32`) are refused by index.
#[test]
fn format_7_page_index_gaps_past_the_memory_are_refused() {
    // A head of two pages in a 64 KiB memory (16 pages) with index gaps
    // `gaps`, in lanes.
    let with_gaps = |gaps: [u32; 2]| {
        let mut h = Vec::new();
        h.extend_from_slice(&(WASM_PAGE_BYTES as u64).to_le_bytes());
        h.extend_from_slice(&0u32.to_le_bytes());
        h.extend_from_slice(&0u32.to_le_bytes());
        h.extend_from_slice(&2u32.to_le_bytes());
        for lane in 0..4 {
            h.extend(gaps.iter().map(|g| g.to_le_bytes()[lane]));
        }
        h.extend_from_slice(&[1, 1]);
        let mut payload = fuzz::frame(&h);
        payload.extend_from_slice(&fuzz::frame(&[0u8; 2 * PAGE_BYTES]));
        fuzz::seal_as(FORMAT_VERSION, &payload)
    };
    let ok = with_gaps([3, 11]);
    assert_eq!(decode(&ok, GUEST, 1 << 30).unwrap().page_indexes, [3, 15]);
    for (gaps, index) in [([3, 12], 16u64), ([16, 0], 16), ([0, u32::MAX], 1 << 32)] {
        assert_eq!(
            decode(&with_gaps(gaps), GUEST, 1 << 30).unwrap_err(),
            SnapshotError::Corrupt(format!("bad page index {index}"))
        );
    }
}

/// A one-page snapshot of a 64 KiB image whose page 0 is stored as the
/// sparse section `section`.
fn sparse_page_snapshot(section: &[u8]) -> Vec<u8> {
    let mut v = fuzz::frame(&fuzz::head(WASM_PAGE_BYTES as u64, 0, b"", 1, &[0], &[0]));
    v.extend_from_slice(&fuzz::frame(section));
    fuzz::seal(&v)
}

/// Writes `section` as page 0's changed words onto an image of 7s.
fn apply_sparse(section: &[u8]) -> Result<Vec<u8>, SnapshotError> {
    let bytes = sparse_page_snapshot(section);
    let snap = decode(&bytes, GUEST, 1 << 30)?;
    let mut memory = vec![7u8; WASM_PAGE_BYTES];
    snap.apply(&mut memory, WASM_PAGE_BYTES).map(|()| memory)
}

/// A sparse section: a page's count, its words' skips (low bytes, then
/// high bytes) and their values.
fn section(count: u16, skips: &[u16], values: &[u32]) -> Vec<u8> {
    let mut s = count.to_le_bytes().to_vec();
    s.extend(skips.iter().map(|&k| k as u8));
    s.extend(skips.iter().map(|&k| (k >> 8) as u8));
    s.extend(values.iter().flat_map(|v| v.to_le_bytes()));
    s
}

#[test]
fn changed_words_are_written_where_they_lie_and_none_past_its_page() {
    // (The count's top bit says the values are differenced.)
    // Obeyed: words 3 and 1023 (skips 3 and 1019), the last word of the
    // page.
    let memory = apply_sparse(&section(2, &[3, 1019], &[0xAABB_CCDD, 9])).unwrap();
    let mut expected = vec![7u8; WASM_PAGE_BYTES];
    expected[12..16].copy_from_slice(&0xAABB_CCDDu32.to_le_bytes());
    expected[4092..4096].copy_from_slice(&9u32.to_le_bytes());
    assert!(memory == expected);
    // Obeyed: the same words with their values differenced (flag 0x8000):
    // 0xAABBCCDD, then 9 stored as 9 - 0xAABBCCDD (wrapping).
    let differenced = [0xAABB_CCDD, 9u32.wrapping_sub(0xAABB_CCDD)];
    let memory = apply_sparse(&section(0x8002, &[3, 1019], &differenced)).unwrap();
    assert!(memory == expected);
    // Violated: a skip one word past the page's end.
    assert_eq!(
        apply_sparse(&section(2, &[3, 1020], &[1, 2])).unwrap_err(),
        corrupt("a changed word lies past its page (word 1024)")
    );
    // Violated: more changed words than a page holds, and a section that
    // ends before its words.
    assert_eq!(
        apply_sparse(&section(1025, &[], &[])).unwrap_err(),
        corrupt("a page states 1025 changed words; a page has 1024")
    );
    assert_eq!(
        apply_sparse(&section(2, &[3], &[1])).unwrap_err(),
        corrupt("a frame ends early")
    );
    // Violated: bytes after the section.
    let mut long = section(1, &[0], &[1]);
    long.push(0);
    assert!(matches!(
        apply_sparse(&long).unwrap_err(),
        SnapshotError::Corrupt(_)
    ));
}

#[test]
fn free_list_links_are_stored_as_differences_and_restore_exactly() {
    // A page of 48-byte blocks each linking to the one before, as a free
    // list a cell filled: as differences the values are one repeated word.
    let image: Vec<u8> = (0..WASM_PAGE_BYTES).map(|i| (i % 251) as u8).collect();
    let mut memory = image.clone();
    let mut links = memory.clone();
    let mut x = 1u32;
    for (k, block) in (PAGE_BYTES * 2..PAGE_BYTES * 3).step_by(48).enumerate() {
        let link = if k == 0 { 0 } else { (block - 48) as u32 };
        links[block..block + 4].copy_from_slice(&link.to_le_bytes());
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        memory[block..block + 4].copy_from_slice(&x.to_le_bytes());
    }
    let sizes: Vec<usize> = [&links, &memory]
        .iter()
        .map(|m| {
            let bytes = encode(&checkpoint(m, &image, 0..0)).unwrap().bytes;
            let mut restored = image.clone();
            decode(&bytes, GUEST, 1 << 30)
                .unwrap()
                .apply(&mut restored, image.len())
                .unwrap();
            assert!(restored == **m);
            bytes.len()
        })
        .collect();
    // 86 links take fewer bytes than 86 scattered values.
    assert!(sizes[0] * 2 < sizes[1], "{sizes:?}");
}

/// A one-Wasm-page image of bytes `i / step` and a two-Wasm-page memory
/// made from it, with one byte of each of `pages` (at `spread` bytes per
/// page index into the page) XORed with `flip`.
#[cfg(target_os = "linux")]
fn image_with_changed_pages(
    step: usize,
    pages: impl IntoIterator<Item = usize>,
    spread: usize,
    flip: u8,
) -> (Vec<u8>, Vec<u8>) {
    let image: Vec<u8> = (0..WASM_PAGE_BYTES).map(|i| (i / step) as u8).collect();
    let mut memory = image.clone();
    memory.resize(WASM_PAGE_BYTES * 2, 0);
    for page in pages {
        memory[page * PAGE_BYTES + spread * page] ^= flip;
    }
    (image, memory)
}

/// A pooled instance's slot keeps pages earlier instances wrote private
/// (reset to the image), so restore pre-faults only the others: pages
/// already written, pages not, and runs mixing both all restore exactly.
#[cfg(target_os = "linux")]
#[test]
fn a_memory_with_pages_already_written_restores_exactly() {
    // Changed pages: a run of 6 (2..8), a lone page, pages past the image.
    let (image, memory) = image_with_changed_pages(5, (2..8).chain([11, 17, 20]), 8, 0x5A);
    let snapshot_bytes = encode(&checkpoint(&memory, &image, 0..0)).unwrap().bytes;
    let mut mapped = MappedMemory::new(&image, memory.len());
    let target = mapped.bytes();
    // Earlier writes that left image content: every other page of the
    // run, the lone page, one page beyond the image, one page unchanged.
    for page in [2, 4, 6, 11, 17, 30] {
        let same = target[page * PAGE_BYTES];
        // SAFETY: an in-bounds write the compiler must not drop.
        unsafe { std::ptr::write_volatile(&mut target[page * PAGE_BYTES], same) };
    }
    if let Some(written) = pagemap::written_pages(target) {
        assert!(written[2] && !written[3] && written[30], "{written:?}");
    }
    let snapshot = decode(&snapshot_bytes, GUEST, 1 << 30).unwrap();
    assert_eq!(snapshot.page_indexes, [2, 3, 4, 5, 6, 7, 11, 17, 20]);
    snapshot.apply(target, image.len()).unwrap();
    assert!(target[..] == memory[..]);
}

/// A restore told which pages of a reused slot are private already
/// ([`WrittenPages`]) restores exactly whether the hint is right or stale
/// (held written, but the mapping's pages are still the image's), records
/// what it wrote, and holds nothing past its limit.
#[cfg(target_os = "linux")]
#[test]
fn a_restore_with_known_written_pages_restores_exactly_and_records_them() {
    let (image, memory) = image_with_changed_pages(3, (3..7).chain([12, 19]), 4, 0xA5);
    let snapshot_bytes = encode(&checkpoint(&memory, &image, 0..0)).unwrap().bytes;
    let restore = |target: &mut [u8], known: &mut WrittenPages| {
        decode(&snapshot_bytes, GUEST, 1 << 30)
            .unwrap()
            .apply_known(target, image.len(), known)
            .unwrap();
    };
    // Right: the first restore into the mapping records its pages; a
    // second restore into the same (reset) mapping pre-faults nothing.
    let mut known = WrittenPages::new(memory.len());
    let mut mapped = MappedMemory::new(&image, memory.len());
    let target = mapped.bytes();
    restore(target, &mut known);
    assert!(target[..] == memory[..]);
    for page in 0..32u32 {
        let stored = (3..7).contains(&page) || page == 12 || page == 19;
        assert_eq!(known.contains(page), stored, "page {page}");
    }
    target[..image.len()].copy_from_slice(&image);
    target[image.len()..].fill(0);
    restore(target, &mut known);
    assert!(target[..] == memory[..]);
    // Stale: held written in a fresh mapping whose pages were never
    // written; they fault on write and restore all the same.
    let mut fresh = MappedMemory::new(&image, memory.len());
    let target = fresh.bytes();
    restore(target, &mut known);
    assert!(target[..] == memory[..]);
    // Past its limit a set holds nothing.
    let mut small = WrittenPages::new(5 * PAGE_BYTES + 100);
    small.insert(4);
    small.insert(5);
    small.insert(1 << 20);
    assert!(small.contains(4) && !small.contains(5) && !small.contains(1 << 20));
}
