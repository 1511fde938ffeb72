//! Server-sent events off the wire: bytes in whatever pieces TCP delivers them, events out.
//!
//! Works on bytes, so a UTF-8 sequence split across reads is whole again by the time an event's
//! data is parsed. Lines end with `\n`, `\r\n` or `\r` (the SSE grammar); `data:` lines of one
//! event are joined with `\n`; comments (`:`) and the `id`/`retry` fields are ignored.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, when the event names one (Anthropic does, OpenAI does not).
    pub event: Option<String>,
    pub data: Vec<u8>,
}

#[derive(Debug, thiserror::Error)]
pub enum SseError {
    #[error("the provider sent a stream line longer than {MAX_LINE} bytes")]
    LineTooLong,
}

/// A line (or an event's joined data) may not exceed this: a stream that never ends a line
/// cannot grow memory without bound.
pub const MAX_LINE: usize = 16 * 1024 * 1024;

#[derive(Default)]
pub struct SseDecoder {
    /// The current, unfinished line.
    line: Vec<u8>,
    /// The previous piece ended with `\r`: a `\n` at the start of the next one ends nothing.
    after_cr: bool,
    data: Vec<u8>,
    has_data: bool,
    event: Option<String>,
}

impl SseDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds one piece of the body; complete events are appended to `out`.
    pub fn feed(&mut self, mut piece: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if self.after_cr {
            self.after_cr = false;
            if let Some(rest) = piece.strip_prefix(b"\n") {
                piece = rest;
            }
        }
        while let Some(end) = piece.iter().position(|&b| b == b'\n' || b == b'\r') {
            self.push(&piece[..end])?;
            let line = std::mem::take(&mut self.line);
            self.line_done(&line, out)?;
            self.line = line;
            self.line.clear();
            let crlf = piece[end] == b'\r';
            piece = &piece[end + 1..];
            if crlf {
                match piece.first() {
                    Some(b'\n') => piece = &piece[1..],
                    None => self.after_cr = true,
                    Some(_) => {}
                }
            }
        }
        self.push(piece)
    }

    /// The body ended: an event whose closing blank line never came is dispatched anyway (the
    /// OpenAI SDK's decoder does the same with a final unterminated `data:` line).
    pub fn finish(&mut self, out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.line_done(&line, out)?;
        }
        self.dispatch(out);
        Ok(())
    }

    fn push(&mut self, bytes: &[u8]) -> Result<(), SseError> {
        if self.line.len() + bytes.len() > MAX_LINE {
            return Err(SseError::LineTooLong);
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    fn line_done(&mut self, line: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if line.is_empty() {
            self.dispatch(out);
            return Ok(());
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(0) => return Ok(()), // a comment (keep-alive pings)
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"data" => {
                if self.has_data {
                    self.data.push(b'\n');
                }
                if self.data.len() + value.len() > MAX_LINE {
                    return Err(SseError::LineTooLong);
                }
                self.data.extend_from_slice(value);
                self.has_data = true;
            }
            b"event" => self.event = Some(String::from_utf8_lossy(value).into_owned()),
            _ => {}
        }
        Ok(())
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        let event = self.event.take();
        if !self.has_data {
            return;
        }
        self.has_data = false;
        out.push(SseEvent {
            event,
            data: std::mem::take(&mut self.data),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_in_pieces(body: &[u8], cut: &[usize]) -> Vec<SseEvent> {
        let mut decoder = SseDecoder::new();
        let mut out = Vec::new();
        let mut start = 0;
        for &end in cut.iter().chain(std::iter::once(&body.len())) {
            decoder.feed(&body[start..end], &mut out).unwrap();
            start = end;
        }
        decoder.finish(&mut out).unwrap();
        out
    }

    const BODY: &[u8] = "event: message_start\ndata: {\"a\":\"h\u{e9}\u{1F600}\"}\n\n: ping\n\ndata: x\r\ndata: y\r\n\r\ndata:[DONE]\r\r".as_bytes();

    fn expected() -> Vec<SseEvent> {
        vec![
            SseEvent {
                event: Some("message_start".into()),
                data: "{\"a\":\"h\u{e9}\u{1F600}\"}".as_bytes().to_vec(),
            },
            SseEvent {
                event: None,
                data: b"x\ny".to_vec(),
            },
            SseEvent {
                event: None,
                data: b"[DONE]".to_vec(),
            },
        ]
    }

    #[test]
    fn whole_body_at_once() {
        assert_eq!(decode_in_pieces(BODY, &[]), expected());
    }

    #[test]
    fn split_at_every_byte_boundary() {
        for cut in 1..BODY.len() {
            assert_eq!(decode_in_pieces(BODY, &[cut]), expected(), "cut at {cut}");
        }
    }

    #[test]
    fn one_byte_at_a_time() {
        let cuts: Vec<usize> = (1..BODY.len()).collect();
        assert_eq!(decode_in_pieces(BODY, &cuts), expected());
    }

    #[test]
    fn unterminated_last_event_is_dispatched_at_the_end() {
        let events = decode_in_pieces(b"data: a\n\ndata: b", &[]);
        assert_eq!(events.len(), 2);
        assert_eq!(events[1].data, b"b");
    }

    #[test]
    fn endless_line_is_an_error_not_unbounded_memory() {
        let mut decoder = SseDecoder::new();
        let piece = vec![b'a'; 1024 * 1024];
        let mut out = Vec::new();
        let mut failed = false;
        for _ in 0..20 {
            if decoder.feed(&piece, &mut out).is_err() {
                failed = true;
                break;
            }
        }
        assert!(failed);
    }
}
