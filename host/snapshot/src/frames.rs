//! zstd frames: each thread's compression and decompression contexts,
//! splitting a snapshot's payload into standard frames that state their
//! size, and decompressing them exactly.

use crate::format::{corrupt, SnapshotError, HEAD_DICTIONARY};

/// zstd level: the fastest standard level; XOR deltas are mostly zeros, so
/// higher levels buy little.
pub(crate) const ZSTD_LEVEL: i32 = 1;

/// The first four bytes of a standard zstd frame: the only kind [`encode`]
/// writes. Skippable frames and the legacy (v0.x) formats, which zstd
/// would otherwise accept (the latter with buffers sized by the frame's
/// own window, up to 128 MiB, whatever its stated size), are refused.
///
/// [`encode`]: crate::encode
pub(crate) const ZSTD_FRAME_MAGIC: [u8; 4] = 0xFD2F_B528u32.to_le_bytes();

/// A thread's compression state, kept from one snapshot to the next:
/// creating a context, with its first-use workspace, costs more than
/// compressing a one-tool snapshot, and a fresh frame-sized buffer costs a
/// page fault per page it touches. Holds at most two frames' worth of
/// buffers (~4 MiB) per thread that has compressed a large frame.
pub(crate) struct Compressor {
    /// Set to [`ZSTD_LEVEL`].
    pub(crate) cctx: zstd::zstd_safe::CCtx<'static>,
    /// The head's: [`ZSTD_LEVEL`], literals uncompressed and
    /// [`HEAD_DICTIONARY`], loaded once.
    pub(crate) head_cctx: zstd::zstd_safe::CCtx<'static>,
    /// A frame's content: page deltas, then lanes.
    pub(crate) content: Vec<u8>,
    /// zstd's output, before it is copied out at its exact size.
    pub(crate) out: Vec<u8>,
}

/// Runs `f` with this thread's [`Compressor`], made on first use.
pub(crate) fn with_compressor<R>(
    f: impl FnOnce(&mut Compressor) -> std::io::Result<R>,
) -> std::io::Result<R> {
    COMPRESSOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        let z = match &mut *slot {
            Some(z) => z,
            empty => {
                let failed = |code| std::io::Error::other(zstd::zstd_safe::get_error_name(code));
                let mut cctx = zstd::zstd_safe::CCtx::create();
                cctx.set_parameter(zstd::zstd_safe::CParameter::CompressionLevel(ZSTD_LEVEL))
                    .map_err(failed)?;
                let mut head_cctx = zstd::zstd_safe::CCtx::create();
                head_cctx
                    .set_parameter(zstd::zstd_safe::CParameter::CompressionLevel(ZSTD_LEVEL))
                    .map_err(failed)?;
                // The head's literals are stored as they are: most of a
                // head matches the dictionary, so compressing its few
                // literals saves ~30 bytes of a one-tool snapshot's 190,
                // and decoding them with a Huffman table of their own cost
                // more than the rest of the head (hot, `zstd -b1`: 647
                // bytes at 281 MB/s with compressed literals, 1,623 MB/s
                // without).
                head_cctx
                    .set_parameter(zstd::zstd_safe::CParameter::LiteralCompressionMode(
                        zstd::zstd_safe::ParamSwitch::Disable,
                    ))
                    .map_err(failed)?;
                head_cctx.load_dictionary(HEAD_DICTIONARY).map_err(failed)?;
                empty.insert(Compressor {
                    cctx,
                    head_cctx,
                    content: Vec::new(),
                    out: Vec::new(),
                })
            }
        };
        f(z)
    })
}

/// Compresses `src` as one frame (stating its size) into the scratch `out`,
/// and returns a copy of just the frame.
pub(crate) fn compress_into(
    cctx: &mut zstd::zstd_safe::CCtx<'static>,
    out: &mut Vec<u8>,
    src: &[u8],
) -> std::io::Result<Vec<u8>> {
    out.clear();
    out.reserve(zstd::zstd_safe::compress_bound(src.len()));
    cctx.compress2(out, src)
        .map_err(|code| std::io::Error::other(zstd::zstd_safe::get_error_name(code)))?;
    Ok(out.clone())
}

thread_local! {
    /// A compressor per thread (see [`with_compressor`]).
    static COMPRESSOR: std::cell::RefCell<Option<Compressor>> =
        const { std::cell::RefCell::new(None) };
    /// A decompression context per thread: creating one costs more than
    /// decompressing a small snapshot.
    static DCTX: std::cell::RefCell<Option<zstd::zstd_safe::DCtx<'static>>> =
        const { std::cell::RefCell::new(None) };
    /// A decompression context per thread for format-7 heads, with
    /// [`HEAD_DICTIONARY`] loaded once (apart from [`DCTX`], so no frame is
    /// ever read against the wrong dictionary).
    static HEAD_DCTX: std::cell::RefCell<Option<zstd::zstd_safe::DCtx<'static>>> =
        const { std::cell::RefCell::new(None) };
}

/// Splits off the next zstd frame of `data`, with its stated content size.
/// Only standard frames ([`ZSTD_FRAME_MAGIC`]) are read.
pub(crate) fn next_frame(data: &[u8]) -> Result<(&[u8], u64, &[u8]), SnapshotError> {
    if !data.starts_with(&ZSTD_FRAME_MAGIC) {
        return Err(corrupt("a frame is not a standard zstd frame"));
    }
    let len = zstd::zstd_safe::find_frame_compressed_size(data)
        .map_err(|_| corrupt("a frame is damaged"))?;
    let (frame, rest) = data
        .split_at_checked(len)
        .ok_or_else(|| corrupt("a frame is damaged"))?;
    match zstd::zstd_safe::get_frame_content_size(frame) {
        Ok(Some(size)) => Ok((frame, size, rest)),
        _ => Err(corrupt("a frame does not state its size")),
    }
}

/// Decompresses one whole frame into `out`, which must be exactly its
/// content size.
pub(crate) fn decompress_frame(
    dctx: &mut zstd::zstd_safe::DCtx<'static>,
    frame: &[u8],
    out: &mut [u8],
) -> Result<(), SnapshotError> {
    reset(dctx)?;
    let mut input = zstd::zstd_safe::InBuffer::around(frame);
    let ended = fill(dctx, &mut input, out)?;
    finish_frame(dctx, &mut input, ended, frame.len())
}

pub(crate) fn reset(dctx: &mut zstd::zstd_safe::DCtx<'static>) -> Result<(), SnapshotError> {
    dctx.reset(zstd::zstd_safe::ResetDirective::SessionOnly)
        .map(drop)
        .map_err(|_| corrupt("cannot reset the decompressor"))
}

/// Reads the rest of a frame whose content has all been decompressed
/// (`ended`: the decompressor already saw its end): nothing more may come
/// out of it, and it must use all `frame_len` bytes.
pub(crate) fn finish_frame(
    dctx: &mut zstd::zstd_safe::DCtx<'static>,
    input: &mut zstd::zstd_safe::InBuffer<'_>,
    mut ended: bool,
    frame_len: usize,
) -> Result<(), SnapshotError> {
    let mut spare = [0u8; 1];
    while !ended {
        let before = input.pos();
        let mut output = zstd::zstd_safe::OutBuffer::around(&mut spare[..]);
        let hint = dctx
            .decompress_stream(&mut output, input)
            .map_err(|_| corrupt("a frame is damaged"))?;
        if output.pos() != 0 {
            return Err(corrupt("a frame does not match its size"));
        }
        ended = hint == 0;
        if !ended && input.pos() == before {
            return Err(corrupt("a frame ends early"));
        }
    }
    if input.pos() != frame_len {
        return Err(corrupt("a frame does not match its size"));
    }
    Ok(())
}

/// Decompresses exactly `out.len()` bytes from the frame's stream; returns
/// whether the frame ended with them.
pub(crate) fn fill(
    dctx: &mut zstd::zstd_safe::DCtx<'static>,
    input: &mut zstd::zstd_safe::InBuffer<'_>,
    out: &mut [u8],
) -> Result<bool, SnapshotError> {
    let mut output = zstd::zstd_safe::OutBuffer::around(out);
    let mut ended = false;
    while output.pos() < output.capacity() {
        if ended {
            return Err(corrupt("a frame ends early"));
        }
        let before = (input.pos(), output.pos());
        let hint = dctx.decompress_stream(&mut output, input).map_err(|code| {
            corrupt(format!(
                "cannot decompress: {}",
                zstd::zstd_safe::get_error_name(code)
            ))
        })?;
        ended = hint == 0;
        if (input.pos(), output.pos()) == before {
            return Err(corrupt("a frame ends early"));
        }
    }
    Ok(ended)
}

/// Runs `f` with this thread's decompression context for heads compressed
/// with [`HEAD_DICTIONARY`].
pub(crate) fn with_head_dctx<R>(
    f: impl FnOnce(&mut zstd::zstd_safe::DCtx<'static>) -> Result<R, SnapshotError>,
) -> Result<R, SnapshotError> {
    HEAD_DCTX.with(|cell| {
        let mut slot = cell.borrow_mut();
        let dctx = match &mut *slot {
            Some(dctx) => dctx,
            empty => {
                let mut dctx = zstd::zstd_safe::DCtx::create();
                dctx.load_dictionary(HEAD_DICTIONARY)
                    .map_err(|_| corrupt("cannot load the head's dictionary"))?;
                empty.insert(dctx)
            }
        };
        f(dctx)
    })
}

pub(crate) fn with_dctx<R>(
    f: impl FnOnce(&mut zstd::zstd_safe::DCtx<'static>) -> Result<R, SnapshotError>,
) -> Result<R, SnapshotError> {
    DCTX.with(|cell| {
        let mut slot = cell.borrow_mut();
        let dctx = slot.get_or_insert_with(zstd::zstd_safe::DCtx::create);
        f(dctx)
    })
}
