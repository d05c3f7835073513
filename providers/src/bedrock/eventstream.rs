//! AWS's binary event-stream framing (`application/vnd.amazon.eventstream`),
//! in which Bedrock streams: each message is a prelude (total length,
//! headers length, both u32 big-endian, and the prelude's CRC-32), typed
//! headers, a payload, and the CRC-32 of all that came before. Fed with
//! body pieces that may split anywhere; a frame is only decoded whole.
//!
//! The CRC is CRC-32/ISO-HDLC (zlib's), from the `crc` crate already in the
//! tree. A frame whose declared length is past the provider's
//! `max_event_bytes` is refused from its prelude, before it is buffered.

use bytes::{Buf, BufMut, Bytes, BytesMut};

const CRC32: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC);
/// Prelude (12 bytes) plus the message CRC (4): a frame with nothing in it.
const MIN_FRAME: usize = 16;
/// Header value type 7: a UTF-8 string with a u16 length.
const STRING: u8 = 7;

/// One decoded message: its string headers (other header types are
/// skipped) and its payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Frame {
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) payload: Bytes,
}

impl Frame {
    /// The value of a string header, e.g. `:message-type`.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// Why bytes are not a frame: each is a malformed stream event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum FrameError {
    #[error("an event-stream frame declares {0} bytes, more than this provider's max_event_bytes")]
    TooLarge(usize),
    #[error("an event-stream frame's prelude fails its CRC")]
    PreludeCrc,
    #[error("an event-stream frame fails its message CRC")]
    MessageCrc,
    #[error("an event-stream frame is malformed: {0}")]
    Malformed(&'static str),
}

/// Buffers body pieces and yields whole frames.
#[derive(Debug)]
pub(crate) struct Decoder {
    buf: BytesMut,
    max_frame: usize,
}

impl Decoder {
    pub(crate) fn new(max_frame: usize) -> Self {
        Decoder { buf: BytesMut::new(), max_frame }
    }

    pub(crate) fn push(&mut self, piece: &[u8]) {
        self.buf.extend_from_slice(piece);
    }

    /// Bytes buffered that do not yet make a whole frame.
    pub(crate) fn pending(&self) -> usize {
        self.buf.len()
    }

    /// The next whole frame, `None` while its bytes are still to come.
    /// After an `Err` the stream is not to be read further.
    pub(crate) fn next_frame(&mut self) -> Option<Result<Frame, FrameError>> {
        let prelude = self.buf.get(..12)?;
        let total = read_u32(prelude, 0) as usize;
        let headers_len = read_u32(prelude, 4) as usize;
        if CRC32.checksum(&prelude[..8]) != read_u32(prelude, 8) {
            return Some(Err(FrameError::PreludeCrc));
        }
        if total > self.max_frame {
            return Some(Err(FrameError::TooLarge(total)));
        }
        if total < MIN_FRAME || headers_len > total - MIN_FRAME {
            return Some(Err(FrameError::Malformed("its lengths do not add up")));
        }
        if self.buf.len() < total {
            return None;
        }
        let frame = self.buf.split_to(total).freeze();
        Some(parse(&frame, headers_len))
    }
}

/// A whole frame's bytes (lengths and prelude CRC already checked).
fn parse(frame: &Bytes, headers_len: usize) -> Result<Frame, FrameError> {
    let end = frame.len() - 4;
    if CRC32.checksum(&frame[..end]) != read_u32(frame, end) {
        return Err(FrameError::MessageCrc);
    }
    let headers = parse_headers(&frame[12..12 + headers_len])?;
    Ok(Frame { headers, payload: frame.slice(12 + headers_len..end) })
}

/// The headers block: name (u8 length), type (u8), value. String values
/// are kept; every other type is skipped by its size.
fn parse_headers(mut block: &[u8]) -> Result<Vec<(String, String)>, FrameError> {
    let short = FrameError::Malformed("a header runs past its block");
    let mut headers = Vec::new();
    while !block.is_empty() {
        let name_len = usize::from(block.get_u8());
        let name = take(&mut block, name_len).ok_or(short.clone())?;
        let kind = *block.first().ok_or(short.clone())?;
        block.advance(1);
        let fixed = match kind {
            0 | 1 => Some(0),
            2 => Some(1),
            3 => Some(2),
            4 => Some(4),
            5 | 8 => Some(8),
            9 => Some(16),
            6 | STRING => None,
            _ => return Err(FrameError::Malformed("a header has an unknown type")),
        };
        let value = match fixed {
            Some(size) => take(&mut block, size).ok_or(short.clone())?,
            None => {
                let len = take(&mut block, 2).ok_or(short.clone())?;
                let len = usize::from(u16::from_be_bytes([len[0], len[1]]));
                take(&mut block, len).ok_or(short.clone())?
            }
        };
        if kind == STRING {
            let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
            headers.push((text(name), text(value)));
        }
    }
    Ok(headers)
}

/// The next `len` bytes of `block`, consumed; `None` when fewer remain.
fn take<'a>(block: &mut &'a [u8], len: usize) -> Option<&'a [u8]> {
    let (head, tail) = (block.get(..len)?, block.get(len..)?);
    *block = tail;
    Some(head)
}

fn read_u32(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0; 4];
    if let Some(slice) = bytes.get(at..at + 4) {
        word.copy_from_slice(slice);
    }
    u32::from_be_bytes(word)
}

/// One frame with string headers, as a service sends it (the simulator's,
/// and the tests').
pub(crate) fn encode(headers: &[(&str, &str)], payload: &[u8]) -> Bytes {
    let mut block = BytesMut::new();
    for (name, value) in headers {
        block.put_u8(u8::try_from(name.len()).unwrap_or(u8::MAX));
        block.put_slice(&name.as_bytes()[..name.len().min(255)]);
        block.put_u8(STRING);
        block.put_u16(u16::try_from(value.len()).unwrap_or(u16::MAX));
        block.put_slice(&value.as_bytes()[..value.len().min(usize::from(u16::MAX))]);
    }
    let total = MIN_FRAME + block.len() + payload.len();
    let mut frame = BytesMut::with_capacity(total);
    frame.put_u32(u32::try_from(total).unwrap_or(u32::MAX));
    frame.put_u32(u32::try_from(block.len()).unwrap_or(u32::MAX));
    frame.put_u32(CRC32.checksum(&frame[..8]));
    frame.put_slice(&block);
    frame.put_slice(payload);
    frame.put_u32(CRC32.checksum(&frame));
    frame.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(payload: &str) -> Bytes {
        encode(
            &[(":message-type", "event"), (":event-type", "chunk"), (":content-type", "application/json")],
            payload.as_bytes(),
        )
    }

    fn frames(decoder: &mut Decoder) -> Vec<Result<Frame, FrameError>> {
        std::iter::from_fn(|| decoder.next_frame()).take(10).collect()
    }

    #[test]
    fn good_frames_decode_whole_however_the_bytes_are_split() {
        let one = chunk(r#"{"bytes":"eyJ0eXBlIjoicGluZyJ9"}"#);
        let two = chunk("{}");
        let stream = [one.as_ref(), two.as_ref()].concat();
        for cut in 0..=stream.len() {
            let mut decoder = Decoder::new(1024);
            decoder.push(&stream[..cut]);
            let mut got = frames(&mut decoder);
            decoder.push(&stream[cut..]);
            got.extend(frames(&mut decoder));
            assert_eq!(got.len(), 2, "cut at {cut}");
            let first = got[0].clone().unwrap();
            assert_eq!(first.header(":event-type"), Some("chunk"));
            assert_eq!(first.payload, Bytes::from_static(br#"{"bytes":"eyJ0eXBlIjoicGluZyJ9"}"#));
            assert_eq!(got[1].clone().unwrap().payload, Bytes::from_static(b"{}"));
            assert_eq!(decoder.pending(), 0);
        }
        let mut bytewise = Decoder::new(1024);
        let mut got = Vec::new();
        for byte in &stream {
            bytewise.push(&[*byte]);
            got.extend(frames(&mut bytewise));
        }
        assert_eq!(got.len(), 2);
    }

    #[test]
    fn a_known_frame_from_the_aws_spec_decodes() {
        // awslabs/aws-c-event-stream's tests (message_deserializer_test.c,
        // "application data, no headers"): payload `{'foo':'bar'}`.
        let frame = [
            0x00, 0x00, 0x00, 0x1D, 0x00, 0x00, 0x00, 0x00, 0xFD, 0x52, 0x8C, 0x5A, 0x7B, 0x27, 0x66, 0x6F,
            0x6F, 0x27, 0x3A, 0x27, 0x62, 0x61, 0x72, 0x27, 0x7D, 0xC3, 0x65, 0x39, 0x36,
        ];
        let mut decoder = Decoder::new(1024);
        decoder.push(&frame);
        let decoded = decoder.next_frame().unwrap().unwrap();
        assert_eq!(decoded.payload, Bytes::from_static(b"{'foo':'bar'}"));
        assert!(decoded.headers.is_empty());
        assert_eq!(encode(&[], b"{'foo':'bar'}").as_ref(), frame);
    }

    #[test]
    fn bad_crcs_and_lengths_are_malformed_frames() {
        let good = chunk("{}");
        let mut prelude = good.to_vec();
        prelude[3] ^= 1;
        let mut message = good.to_vec();
        let last = message.len() - 5;
        message[last] ^= 1;
        for (bytes, expected) in [(prelude, FrameError::PreludeCrc), (message, FrameError::MessageCrc)] {
            let mut decoder = Decoder::new(1024);
            decoder.push(&bytes);
            assert_eq!(decoder.next_frame(), Some(Err(expected)));
        }
        let mut short = Vec::new();
        short.put_u32(8);
        short.put_u32(0);
        short.put_u32(CRC32.checksum(&short));
        let mut decoder = Decoder::new(1024);
        decoder.push(&short);
        assert!(matches!(decoder.next_frame(), Some(Err(FrameError::Malformed(_)))));
    }

    #[test]
    fn a_frame_past_the_limit_is_refused_from_its_prelude() {
        let big = chunk(&"x".repeat(600));
        let mut decoder = Decoder::new(512);
        decoder.push(&big[..12]);
        assert_eq!(decoder.next_frame(), Some(Err(FrameError::TooLarge(big.len()))));
        let mut huge = Vec::new();
        huge.put_u32(u32::MAX);
        huge.put_u32(u32::MAX);
        huge.put_u32(CRC32.checksum(&huge));
        let mut decoder = Decoder::new(usize::MAX);
        decoder.push(&huge);
        assert!(matches!(decoder.next_frame(), Some(Err(FrameError::Malformed(_)))));
    }

    #[test]
    fn headers_of_other_types_are_skipped() {
        let mut block = BytesMut::new();
        for (name, kind, value) in [
            ("t", 0u8, &[][..]),
            ("b", 2, &[7][..]),
            ("i", 4, &[0, 0, 0, 1][..]),
            ("a", 6, &[0, 2, 9, 9][..]),
            ("u", 9, &[0; 16][..]),
        ] {
            block.put_u8(1);
            block.put_slice(name.as_bytes());
            block.put_u8(kind);
            block.put_slice(value);
        }
        block.put_u8(2);
        block.put_slice(b"ok");
        block.put_u8(STRING);
        block.put_u16(3);
        block.put_slice(b"yes");
        assert_eq!(parse_headers(&block), Ok(vec![("ok".into(), "yes".into())]));
        assert!(parse_headers(&[1, b'x', 7, 0, 9]).is_err(), "a string past the block");
        assert!(parse_headers(&[1, b'x', 42]).is_err(), "an unknown type");
    }
}
