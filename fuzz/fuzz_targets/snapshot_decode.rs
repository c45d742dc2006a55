//! The snapshot decoder (`quickcell_snapshot::decode`) and, when that
//! succeeds, the restore (`Snapshot::apply`), on hostile snapshots.
//!
//! The first byte picks how the rest becomes a snapshot, so that most
//! inputs get past the header's checksum:
//!
//! - 0: the bytes as they are;
//! - 1: the bytes behind a valid header and checksum;
//! - 2: the bytes split in two (at the second byte's fraction), each
//!   compressed as one zstd frame (the head, then page data), behind a
//!   valid header;
//! - 3: a snapshot encoded from a memory the bytes write into, decoded and
//!   restored (it must give that memory back), then with one byte of it
//!   changed and its checksum fixed (it must not panic).
//!
//! Whatever decodes claims no more than the limits allow; a restore never
//! changes the memory's length.
#![no_main]

use libfuzzer_sys::fuzz_target;
use quickcell_snapshot::{
    decode, encode, Checkpoint, FORMAT_VERSION, MAX_HOST_STATE_BYTES, PAGE_BYTES, WASM_PAGE_BYTES,
};

const MAGIC: &[u8; 8] = b"QCELLSNP";
const GUEST: [u8; 32] = [3; 32];
/// The guest build the snapshots here name.
const BUILD: [u8; 32] = [5; 32];
/// Bytes of the header: magic, version, key, guest build, checksum.
const HEADER_BYTES: usize = 8 + 4 + 32 + 32 + 4;
/// The memory ceiling the decoder is given.
const MAX_MEMORY_BYTES: usize = 4 << 20;

/// `payload` behind a valid header for [`GUEST`].
fn seal(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_BYTES + payload.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&GUEST);
    out.extend_from_slice(&BUILD);
    let mut crc = crc32fast::Hasher::new();
    crc.update(&BUILD);
    crc.update(payload);
    out.extend_from_slice(&crc.finalize().to_le_bytes());
    out.extend_from_slice(payload);
    out
}

fn frame(content: &[u8]) -> Vec<u8> {
    zstd::bulk::compress(content, 1).expect("zstd compresses")
}

/// The image every snapshot here is taken against.
fn image() -> Vec<u8> {
    (0..WASM_PAGE_BYTES).map(|i| (i % 253) as u8).collect()
}

/// Decodes `bytes` and restores what decodes onto a fresh memory; returns
/// the restored memory when both succeed.
fn decode_and_apply(bytes: &[u8]) -> Option<Vec<u8>> {
    let snapshot = decode(bytes, GUEST, MAX_MEMORY_BYTES).ok()?;
    assert!(snapshot.memory_bytes <= MAX_MEMORY_BYTES);
    assert!(snapshot.memory_bytes.is_multiple_of(WASM_PAGE_BYTES));
    assert!(snapshot.host_state.len() <= MAX_HOST_STATE_BYTES);
    assert!(snapshot.page_count() <= snapshot.memory_bytes / PAGE_BYTES);
    let image_bytes = snapshot.memory_bytes.min(WASM_PAGE_BYTES);
    let mut memory = image();
    memory.truncate(image_bytes);
    memory.resize(snapshot.memory_bytes, 0);
    let len = memory.len();
    let applied = snapshot.apply(&mut memory, image_bytes);
    assert_eq!(memory.len(), len);
    applied.ok().map(|()| memory)
}

/// Mode 3: `data` is `[pages, units..., (offset: u24, byte)...]`.
fn round_trip(data: &[u8]) {
    let Some((&pages, rest)) = data.split_first() else {
        return;
    };
    let pages = 1 + usize::from(pages % 3);
    let (units, writes) = rest.split_at(rest.len().min(pages));
    let image = image();
    let mut memory = image.clone();
    memory.resize(pages * WASM_PAGE_BYTES, 0);
    let mut flip = None;
    for write in writes.chunks_exact(4) {
        let at = usize::from(write[0]) | usize::from(write[1]) << 8 | usize::from(write[2]) << 16;
        if at >= memory.len() {
            // An offset past the memory picks the byte of the snapshot to
            // change.
            flip = Some((at, write[3]));
            continue;
        }
        memory[at] = write[3];
    }
    let host_state = &writes[..writes.len().min(64)];
    let encoded = encode(&Checkpoint {
        memory: &memory,
        image: &image,
        dead: 0..0,
        stack_pointer: 4096,
        host_state,
        guest_hash: GUEST,
        guest_build: BUILD,
        max_payload_bytes: 1 << 20,
        memory_maps_image: false,
        block_units: units,
    })
    .expect("a small checkpoint encodes")
    .bytes;
    let snapshot = decode(&encoded, GUEST, MAX_MEMORY_BYTES).expect("a snapshot decodes");
    assert_eq!(snapshot.host_state, host_state);
    assert_eq!(snapshot.stack_pointer, 4096);
    assert!(snapshot.page_count() <= pages * WASM_PAGE_BYTES / PAGE_BYTES);
    let restored = decode_and_apply(&encoded).expect("a snapshot restores");
    assert!(restored == memory, "the restore differs from the memory");
    if let Some((at, byte)) = flip {
        let mut changed = encoded[HEADER_BYTES..].to_vec();
        if changed.is_empty() {
            return;
        }
        let at = at % changed.len();
        changed[at] ^= byte.max(1);
        let _ = decode_and_apply(&seal(&changed));
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 4 {
        0 => {
            let _ = decode_and_apply(rest);
        }
        1 => {
            let _ = decode_and_apply(&seal(rest));
        }
        2 => {
            let Some((&cut, rest)) = rest.split_first() else {
                return;
            };
            let at = rest.len() * usize::from(cut) / 256;
            let (head, pages) = rest.split_at(at);
            let mut payload = frame(head);
            if !pages.is_empty() {
                payload.extend_from_slice(&frame(pages));
            }
            let _ = decode_and_apply(&seal(&payload));
        }
        _ => round_trip(rest),
    }
});
