//! The proxy's `message_start` restamp on `/v1/messages` streams (LiteLLM's
//! `AnthropicStreamModelRestamper`): until the first frame that decides it, whole frames go out
//! as they close and a torn one is held; the deciding frame — the first with `message_start` in
//! it, or else the first data frame that is not a ping — names the model group in place of the
//! provider's model; every byte after it passes untouched.
//!
//! Where Python would read the deciding frame differently from this port (bytes that are not
//! UTF-8, line breaks Python's `splitlines` knows and HTTP does not, JSON it parses or prints
//! differently, a frame past the proxy's 64 KiB hold), [`Unusual`] says so and the lane leaves
//! the whole stream to the proxy.

use serde_json::Value;

use super::answer::numbers_read_back_alike;
use crate::wire::pyjson::python_json_compact_ascii;

/// The proxy holds at most this much of a torn frame before giving up on the restamp.
const MAX_HELD_BYTES: usize = 65536;
const MESSAGE_START: &[u8] = b"message_start";
const PING_MARKERS: [&[u8]; 3] = [b"event: ping", b"\"type\": \"ping\"", b"\"type\":\"ping\""];
/// Characters where Python's `str.splitlines` or `str.strip` and this port would disagree.
const PYTHON_ONLY_BREAKS: [char; 9] = [
    '\u{0b}', '\u{0c}', '\u{1c}', '\u{1d}', '\u{1e}', '\u{1f}', '\u{85}', '\u{2028}', '\u{2029}',
];

/// The stream's deciding frame is one the lane does not restamp exactly as the proxy would.
#[derive(Debug, PartialEq, Eq)]
pub struct Unusual;

pub struct Restamper {
    model_group: String,
    held: Vec<u8>,
    armed: bool,
}

impl Restamper {
    pub fn new(model_group: &str) -> Self {
        Restamper {
            model_group: model_group.to_string(),
            held: Vec::new(),
            armed: true,
        }
    }

    /// Whether the restamp is still undecided (bytes may be held).
    pub fn armed(&self) -> bool {
        self.armed
    }

    /// What the proxy writes for one read of the provider's stream.
    pub fn process(&mut self, data: &[u8]) -> Result<Vec<u8>, Unusual> {
        if !self.armed {
            return Ok(data.to_vec());
        }
        let mut combined = std::mem::take(&mut self.held);
        combined.extend_from_slice(data);
        let Some(&last) = frame_ends(&combined).last() else {
            if combined.len() > MAX_HELD_BYTES {
                return Err(Unusual);
            }
            self.held = combined;
            return Ok(Vec::new());
        };
        let tail = combined.split_off(last);
        let mut emitted = self.restamped_closed_block(combined)?;
        if self.armed {
            self.held = tail;
        } else {
            emitted.extend_from_slice(&tail);
        }
        Ok(emitted)
    }

    /// What the proxy writes when the stream ends still undecided (the lane leaves such streams
    /// to the proxy; the tests check the port against it): the torn frame it held,
    /// restamped if it has `message_start` in it.
    #[cfg(test)]
    pub fn flush(&mut self) -> Result<Vec<u8>, Unusual> {
        self.armed = false;
        let held = std::mem::take(&mut self.held);
        if !contains(&held, MESSAGE_START) {
            return Ok(held);
        }
        Ok(restamped_frame(&held, &self.model_group)?.unwrap_or(held))
    }

    fn restamped_closed_block(&mut self, closed: Vec<u8>) -> Result<Vec<u8>, Unusual> {
        let mut start = 0;
        for end in frame_ends(&closed) {
            let frame = &closed[start..end];
            let is_data = contains(frame, b"data:")
                && !PING_MARKERS.iter().any(|marker| contains(frame, marker));
            if contains(frame, MESSAGE_START) || is_data {
                self.armed = false;
                if !contains(frame, MESSAGE_START) {
                    return Ok(closed);
                }
                let Some(restamped) = restamped_frame(frame, &self.model_group)? else {
                    return Ok(closed);
                };
                let mut out = Vec::with_capacity(closed.len() + self.model_group.len());
                out.extend_from_slice(&closed[..start]);
                out.extend_from_slice(&restamped);
                out.extend_from_slice(&closed[end..]);
                return Ok(out);
            }
            start = end;
        }
        Ok(closed)
    }
}

/// Where each frame ends: after `\r\n\r\n`, `\r\r` or `\n\n`, scanned left to right as
/// Python's `re.finditer` scans (the first alternative that matches at a position wins).
fn frame_ends(bytes: &[u8]) -> Vec<usize> {
    let mut ends = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let rest = &bytes[at..];
        let matched = [&b"\r\n\r\n"[..], b"\r\r", b"\n\n"]
            .into_iter()
            .find(|delimiter| rest.starts_with(delimiter));
        match matched {
            Some(delimiter) => {
                at += delimiter.len();
                ends.push(at);
            }
            None => at += 1,
        }
    }
    ends
}

pub(super) fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

/// The frame with its `message_start` data line(s) naming the model group; None when no line
/// changes (the proxy then sends the frame's bytes as they were).
fn restamped_frame(frame: &[u8], model_group: &str) -> Result<Option<Vec<u8>>, Unusual> {
    let text = std::str::from_utf8(frame).map_err(|_| Unusual)?;
    if text.contains(PYTHON_ONLY_BREAKS) {
        return Err(Unusual);
    }
    let mut out = String::with_capacity(text.len() + model_group.len());
    let mut changed = false;
    for line in text.split_inclusive(['\n', '\r']) {
        // `split_inclusive` cuts `\r\n` after its `\r`; Python's `splitlines` keeps it whole.
        if line == "\n" && out.ends_with('\r') {
            out.push('\n');
            continue;
        }
        match restamped_data_line(line, model_group)? {
            Some(new) => {
                changed = true;
                out.push_str(&new);
            }
            None => out.push_str(line),
        }
    }
    Ok(changed.then(|| out.into_bytes()))
}

fn restamped_data_line(line: &str, model_group: &str) -> Result<Option<String>, Unusual> {
    let Some(payload) = line.trim().strip_prefix("data:") else {
        return Ok(None);
    };
    let payload = payload.trim();
    if payload.is_empty() || payload == "[DONE]" {
        return Ok(None);
    }
    let Value::Object(mut event) = serde_json::from_str::<Value>(payload).map_err(|_| Unusual)?
    else {
        return Ok(None);
    };
    if !event.values().all(numbers_read_back_alike) {
        return Err(Unusual);
    }
    if event.get("type").and_then(Value::as_str) != Some("message_start") {
        return Ok(None);
    }
    let Some(Value::Object(message)) = event.get_mut("message") else {
        return Ok(None);
    };
    if message.get("model").and_then(Value::as_str) == Some(model_group) {
        return Ok(None);
    }
    message.insert("model".into(), Value::String(model_group.to_string()));
    let ending = &line[line.trim_end_matches(['\r', '\n']).len()..];
    Ok(Some(format!(
        "data: {}{ending}",
        python_json_compact_ascii(&Value::Object(event))
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    const START: &str = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":\
        {\"id\":\"msg_1\",\"model\":\"claude-x\",\"content\":[],\"usage\":{\"input_tokens\":3}}}\n\n";

    fn whole(chunks: &[&[u8]]) -> Result<Vec<u8>, Unusual> {
        let mut restamper = Restamper::new("grüp");
        let mut out = Vec::new();
        for chunk in chunks {
            out.extend(restamper.process(chunk)?);
        }
        out.extend(restamper.flush()?);
        Ok(out)
    }

    #[test]
    fn names_the_group_in_message_start_and_passes_the_rest() {
        let stream = format!("{START}event: ping\ndata: {{\"type\": \"ping\"}}\n\n");
        let out = String::from_utf8(whole(&[stream.as_bytes()]).unwrap()).unwrap();
        assert!(out.starts_with(
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\
             \"model\":\"gr\\u00fcp\",\"content\":[]"
        ));
        assert!(out.ends_with("event: ping\ndata: {\"type\": \"ping\"}\n\n"));
    }

    #[test]
    fn a_torn_first_frame_is_held_until_it_closes() {
        let bytes = START.as_bytes();
        let mut restamper = Restamper::new("g");
        assert_eq!(restamper.process(&bytes[..30]).unwrap(), b"");
        assert!(restamper.armed());
        let out = restamper.process(&bytes[30..]).unwrap();
        assert!(!restamper.armed());
        assert!(String::from_utf8(out).unwrap().contains("\"model\":\"g\""));
        // Once decided, bytes pass as they are, torn frames too.
        assert_eq!(restamper.process(b"event: x\nda").unwrap(), b"event: x\nda");
    }

    #[test]
    fn pings_before_the_start_go_out_unchanged_and_do_not_decide() {
        let stream = format!("event: ping\ndata: {{\"type\": \"ping\"}}\n\n{START}");
        let mut restamper = Restamper::new("g");
        let out = String::from_utf8(restamper.process(stream.as_bytes()).unwrap()).unwrap();
        assert!(out.starts_with("event: ping\n"));
        assert!(out.contains("\"model\":\"g\""));
    }

    #[test]
    fn another_first_data_frame_decides_with_no_restamp() {
        let stream = format!("data: {{\"type\":\"other\"}}\r\n\r\n{START}");
        assert_eq!(whole(&[stream.as_bytes()]).unwrap(), stream.as_bytes());
    }

    #[test]
    fn crlf_lines_keep_their_endings() {
        let stream = START.replace('\n', "\r\n");
        let out = String::from_utf8(whole(&[stream.as_bytes()]).unwrap()).unwrap();
        assert!(out.contains("\"model\":\"gr\\u00fcp\""));
        assert!(out.ends_with("}}\r\n\r\n"));
        assert!(out.starts_with("event: message_start\r\ndata: {"));
    }

    #[test]
    fn the_same_model_leaves_the_bytes_alone() {
        let stream = START.replace("claude-x", "grüp");
        assert_eq!(whole(&[stream.as_bytes()]).unwrap(), stream.as_bytes());
    }

    #[test]
    fn frames_python_reads_otherwise_are_unusual() {
        for odd in [
            START.replace("claude-x", "a\u{2028}b"),
            START.replace("3}", "1e400}"),
            START.replace("3}", "1e16}"),
        ] {
            assert_eq!(whole(&[odd.as_bytes()]), Err(Unusual), "{odd}");
        }
        let mut bad = START.as_bytes().to_vec();
        bad[40] = 0xff;
        assert_eq!(whole(&[&bad]), Err(Unusual));
        assert_eq!(whole(&[&vec![b'x'; MAX_HELD_BYTES + 1]]), Err(Unusual));
    }

    #[test]
    fn a_stream_ending_undecided_flushes_its_torn_frame() {
        let torn = START.trim_end();
        let out = String::from_utf8(whole(&[torn.as_bytes()]).unwrap()).unwrap();
        assert!(out.contains("\"model\":\"gr\\u00fcp\""));
        assert!(!out.ends_with('\n'));
    }
}
