//! Frames: a `u32` little-endian payload length, then that many bytes of
//! UTF-8 JSON. A declared length over [`MAX_CODEX_FRAME_BYTES`] is refused
//! before anything is allocated for it; its bytes are read and dropped in
//! small pieces, so the connection goes on with the next frame.

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};

/// Most payload bytes of one frame, either way (the protocol's limit:
/// 64 MiB).
pub const MAX_CODEX_FRAME_BYTES: usize = 64 * 1024 * 1024;

/// Bytes read at a time while an oversized frame is skipped.
const SKIP_CHUNK_BYTES: usize = 64 * 1024;

/// What reading a frame gave.
#[derive(Debug)]
pub(crate) enum Frame {
    /// A whole payload.
    Payload(Vec<u8>),
    /// A frame over the limit, skipped; its declared length.
    TooLarge(u64),
    /// The peer closed the stream at a frame boundary.
    End,
}

/// Reads one frame.
///
/// # Errors
///
/// When the stream fails, or ends inside a frame.
pub(crate) async fn read_frame(reader: &mut (impl AsyncRead + Unpin)) -> std::io::Result<Frame> {
    let mut prefix = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        let n = reader.read(&mut prefix[got..]).await?;
        if n == 0 {
            return if got == 0 {
                Ok(Frame::End)
            } else {
                Err(std::io::ErrorKind::UnexpectedEof.into())
            };
        }
        got += n;
    }
    let len = u32::from_le_bytes(prefix) as usize;
    if len > MAX_CODEX_FRAME_BYTES {
        let mut left = len;
        let mut chunk = vec![0u8; SKIP_CHUNK_BYTES];
        while left > 0 {
            let n = reader
                .read(&mut chunk[..left.min(SKIP_CHUNK_BYTES)])
                .await?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            left -= n;
        }
        return Ok(Frame::TooLarge(len as u64));
    }
    let mut payload = vec![0u8; len];
    reader.read_exact(&mut payload).await?;
    Ok(Frame::Payload(payload))
}

/// Writes one frame and flushes it.
///
/// # Errors
///
/// When the payload is over [`MAX_CODEX_FRAME_BYTES`] (nothing is
/// written), or the stream fails.
pub(crate) async fn write_frame(
    writer: &mut (impl AsyncWrite + Unpin),
    payload: &[u8],
) -> std::io::Result<()> {
    if payload.len() > MAX_CODEX_FRAME_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "code-mode IPC frame length {} exceeds {MAX_CODEX_FRAME_BYTES} bytes",
                payload.len()
            ),
        ));
    }
    writer
        .write_all(&(payload.len() as u32).to_le_bytes())
        .await?;
    writer.write_all(payload).await?;
    writer.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_frame_is_a_little_endian_length_and_json() {
        let mut out = Vec::new();
        write_frame(&mut out, br#"{"value":1}"#).await.unwrap();
        assert_eq!(&out[..4], &[0x0b, 0, 0, 0]);
        assert_eq!(&out[4..], br#"{"value":1}"#);
        let mut input = &out[..];
        assert!(
            matches!(read_frame(&mut input).await.unwrap(), Frame::Payload(p) if p == br#"{"value":1}"#)
        );
        assert!(matches!(read_frame(&mut input).await.unwrap(), Frame::End));
    }

    #[tokio::test]
    async fn a_frame_at_the_limit_is_read_and_one_over_is_skipped() {
        let mut stream = Vec::new();
        stream.extend_from_slice(&((MAX_CODEX_FRAME_BYTES + 1) as u32).to_le_bytes());
        stream.resize(4 + MAX_CODEX_FRAME_BYTES + 1, b' ');
        stream.extend_from_slice(&(MAX_CODEX_FRAME_BYTES as u32).to_le_bytes());
        stream.resize(stream.len() + MAX_CODEX_FRAME_BYTES, b' ');
        let mut input = &stream[..];
        assert!(matches!(
            read_frame(&mut input).await.unwrap(),
            Frame::TooLarge(n) if n == MAX_CODEX_FRAME_BYTES as u64 + 1
        ));
        assert!(matches!(
            read_frame(&mut input).await.unwrap(),
            Frame::Payload(p) if p.len() == MAX_CODEX_FRAME_BYTES
        ));
        // A declared 4 GiB frame allocates nothing up front: the stream
        // ends inside it.
        let mut input = &[0xff, 0xff, 0xff, 0xff, b'{'][..];
        assert_eq!(
            read_frame(&mut input).await.unwrap_err().kind(),
            std::io::ErrorKind::UnexpectedEof
        );
        let mut out = Vec::new();
        assert!(
            write_frame(&mut out, &vec![b' '; MAX_CODEX_FRAME_BYTES + 1])
                .await
                .is_err()
        );
        assert!(out.is_empty());
    }

    #[tokio::test]
    async fn a_stream_ending_inside_a_frame_is_an_error() {
        for bytes in [&[1u8, 0][..], &[5, 0, 0, 0, b'{'][..]] {
            let mut input = bytes;
            assert_eq!(
                read_frame(&mut input).await.unwrap_err().kind(),
                std::io::ErrorKind::UnexpectedEof
            );
        }
    }
}
