//! A minimal server-sent-events parser: enough of the WHATWG rules for what
//! providers send (`event:` and `data:` fields, `\n` or `\r\n` line ends,
//! comments), fed with body pieces that may split anywhere.

use bytes::{Buf, Bytes, BytesMut};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SseEvent {
    pub(crate) event: Option<String>,
    /// The `data` lines joined with `\n`, byte for byte.
    pub(crate) data: Bytes,
}

#[derive(Debug, Default)]
pub(crate) struct SseParser {
    buf: BytesMut,
    event: Option<String>,
    data: Option<BytesMut>,
}

impl SseParser {
    /// Bytes buffered that do not yet make a complete event.
    pub(crate) fn pending(&self) -> usize {
        self.buf.len() + self.data.as_ref().map_or(0, BytesMut::len)
    }

    pub(crate) fn push(&mut self, piece: &[u8]) {
        self.buf.extend_from_slice(piece);
    }

    /// The next complete event, if the buffered bytes hold one. An event
    /// still missing its blank line stays buffered (and is dropped at end of
    /// stream, as the SSE rules say).
    pub(crate) fn next_event(&mut self) -> Option<SseEvent> {
        while let Some(end) = self.buf.iter().position(|&b| b == b'\n') {
            let mut line = self.buf.split_to(end);
            self.buf.advance(1);
            if line.last() == Some(&b'\r') {
                line.truncate(line.len() - 1);
            }
            if line.is_empty() {
                let event = self.event.take();
                if let Some(data) = self.data.take() {
                    return Some(SseEvent { event, data: data.freeze() });
                }
                continue;
            }
            let (field, value) = match line.iter().position(|&b| b == b':') {
                Some(0) => continue, // comment
                Some(colon) => {
                    let value = &line[colon + 1..];
                    (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
                }
                None => (&line[..], &b""[..]),
            };
            match field {
                b"data" => match &mut self.data {
                    Some(data) => {
                        data.extend_from_slice(b"\n");
                        data.extend_from_slice(value);
                    }
                    None => self.data = Some(BytesMut::from(value)),
                },
                b"event" => self.event = Some(String::from_utf8_lossy(value).into_owned()),
                _ => {}
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(pieces: &[&[u8]]) -> Vec<SseEvent> {
        let mut parser = SseParser::default();
        let mut out = Vec::new();
        for piece in pieces {
            parser.push(piece);
            while let Some(event) = parser.next_event() {
                out.push(event);
            }
        }
        out
    }

    #[test]
    fn splits_anywhere_and_keeps_data_exact() {
        let stream: &[u8] = b": hi\r\nevent: a\r\ndata: {\"x\": 1}\r\n\r\ndata:[DONE]\n\ndata: 1\ndata: 2\n\nid: 3\n\ndata: tail";
        let expected = vec![
            SseEvent { event: Some("a".into()), data: Bytes::from_static(b"{\"x\": 1}") },
            SseEvent { event: None, data: Bytes::from_static(b"[DONE]") },
            SseEvent { event: None, data: Bytes::from_static(b"1\n2") },
        ];
        assert_eq!(events(&[stream]), expected);
        let bytewise: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(events(&bytewise), expected);
    }
}
