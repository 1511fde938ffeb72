//! The outgoing JSON request body as a list of shared parts, streamed in chunks of at most
//! [`MAX_CHUNK`] bytes whose concatenation equals `serde_json::to_vec` of the same document.
//!
//! Large media stays in the caller's `Bytes` (zero-copy owners of Python buffers): unescaped
//! strings are emitted as slices of the original buffer, escaped strings and base64 are
//! produced one chunk at a time when polled, so no full-size copy of the body ever exists.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::escape::{escape_bounded, escape_into, escaped_len, write_str, write_value};
use super::media::{MediaError, check_base64};

/// Largest chunk yielded by [`Chunks`] and [`StreamingBody`].
pub const MAX_CHUNK: usize = 64 * 1024;

/// Raw bytes per base64 piece: a multiple of 3 (so pieces concatenate to the one-shot
/// encoding) whose encoding is exactly [`MAX_CHUNK`] bytes.
const B64_PIECE: usize = MAX_CHUNK / 4 * 3;

/// Strings and base64 whose JSON output is at most this long are copied into the surrounding
/// fragment: a separate chunk would cost more (a syscall or frame) than the copy.
const INLINE_MAX: usize = 1024;

/// Errors laying out a body: the caller's text or media is not what it claims to be.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("text is not valid UTF-8")]
    InvalidUtf8,
    #[error(transparent)]
    Media(#[from] MediaError),
}

/// A JSON document under construction; media stays as shared `Bytes`.
#[derive(Clone, Debug)]
pub enum Node {
    /// Serialized like serde_json (small values: numbers, short strings, small objects).
    Value(Value),
    /// Object with keys in this order (duplicates are emitted as given).
    Object(Vec<(String, Node)>),
    Array(Vec<Node>),
    /// A JSON string whose UTF-8 contents are these bytes, escaped on output exactly like
    /// serde_json. Checked for UTF-8 when the body is laid out.
    Str(Bytes),
    /// A JSON string holding the standard base64 (padded) of these raw bytes, encoded lazily.
    Base64(Bytes),
    /// A JSON string of base64 text the caller sent (a data URL payload), checked for the
    /// base64 alphabet and padding when the body is laid out, then sent as is.
    Base64Text(Bytes),
}

impl Node {
    /// An object from `(key, value)` pairs, in order.
    pub fn object<K, I>(pairs: I) -> Node
    where
        K: Into<String>,
        I: IntoIterator<Item = (K, Node)>,
    {
        Node::Object(pairs.into_iter().map(|(k, v)| (k.into(), v)).collect())
    }

    /// Total length of the shared text and media buffers inside (no scan).
    pub fn shared_len(&self) -> u64 {
        match self {
            Node::Value(_) => 0,
            Node::Object(pairs) => pairs.iter().map(|(_, node)| node.shared_len()).sum(),
            Node::Array(items) => items.iter().map(Node::shared_len).sum(),
            Node::Str(bytes) | Node::Base64(bytes) | Node::Base64Text(bytes) => bytes.len() as u64,
        }
    }

    /// Materialize as a `serde_json::Value` (tests and small bodies).
    pub fn to_value(&self) -> Value {
        match self {
            Node::Value(v) => v.clone(),
            Node::Object(pairs) => Value::Object(
                pairs
                    .iter()
                    .map(|(k, v)| (k.clone(), v.to_value()))
                    .collect(),
            ),
            Node::Array(items) => Value::Array(items.iter().map(Node::to_value).collect()),
            Node::Str(b) => Value::String(String::from_utf8_lossy(b).into_owned()),
            Node::Base64(b) => Value::String(STANDARD.encode(b)),
            Node::Base64Text(b) => Value::String(String::from_utf8_lossy(b).into_owned()),
        }
    }
}

impl From<Value> for Node {
    fn from(v: Value) -> Node {
        Node::Value(v)
    }
}

impl Node {
    /// A parsed JSON document as the tree the provider transforms walk (objects and arrays as
    /// nodes, keys in order), as the binding builds it from Python values.
    pub fn document(value: Value) -> Node {
        match value {
            Value::Array(items) => Node::Array(items.into_iter().map(Node::document).collect()),
            Value::Object(fields) => Node::Object(
                fields
                    .into_iter()
                    .map(|(name, item)| (name, Node::document(item)))
                    .collect(),
            ),
            scalar => Node::Value(scalar),
        }
    }
}

impl From<&str> for Node {
    fn from(s: &str) -> Node {
        Node::Str(Bytes::copy_from_slice(s.as_bytes()))
    }
}

impl From<String> for Node {
    /// Zero copy: the `String`'s buffer becomes the `Bytes`.
    fn from(s: String) -> Node {
        Node::Str(Bytes::from(s))
    }
}

impl From<Vec<Node>> for Node {
    fn from(items: Vec<Node>) -> Node {
        Node::Array(items)
    }
}

#[derive(Clone, Debug)]
enum Part {
    /// Serialized JSON (punctuation, keys, small values), adjacent pieces coalesced.
    Fragment(Bytes),
    /// String contents without the quotes; `escape` is false when the bytes are emitted as-is.
    Str { bytes: Bytes, escape: bool },
    /// Raw bytes emitted as base64 without the quotes.
    Base64(Bytes),
}

/// A serialized JSON body whose large strings and media are still shared `Bytes`.
#[derive(Clone, Debug)]
pub struct JsonBody {
    parts: Arc<[Part]>,
    len: u64,
}

impl JsonBody {
    /// Lay out `node` as parts: checks and scans every string once (UTF-8, escaping, base64
    /// text), encodes no large media. O(size of the text and media): for multi-MiB documents,
    /// call it off the event loop's thread.
    pub fn from_node(node: &Node) -> Result<JsonBody, BodyError> {
        let mut b = Builder::default();
        b.node(node)?;
        b.flush();
        Ok(JsonBody {
            parts: b.parts.into(),
            len: b.len,
        })
    }

    /// Convenience for a plain `serde_json::Value`.
    pub fn from_json(value: &Value) -> JsonBody {
        let mut b = Builder::default();
        write_value(&mut b.buf, value);
        b.flush();
        JsonBody {
            parts: b.parts.into(),
            len: b.len,
        }
    }

    /// A body someone already serialized, sent as is (zero copy, sliced into chunks).
    pub fn from_raw_json(json: Bytes) -> JsonBody {
        let len = json.len() as u64;
        let parts: Vec<Part> = if json.is_empty() {
            Vec::new()
        } else {
            vec![Part::Fragment(json)]
        };
        JsonBody {
            parts: parts.into(),
            len,
        }
    }

    /// Exact body length in bytes, known without encoding anything.
    pub fn content_length(&self) -> u64 {
        self.len
    }

    /// The body as chunks of 1..=[`MAX_CHUNK`] bytes; cheap to create.
    pub fn chunks(&self) -> Chunks {
        Chunks {
            parts: Arc::clone(&self.parts),
            part: 0,
            offset: 0,
            remaining: self.len,
        }
    }

    /// SHA-256 of the body in one streaming pass.
    pub fn sha256(&self) -> [u8; 32] {
        let mut h = Sha256::new();
        for chunk in self.chunks() {
            h.update(&chunk);
        }
        h.finalize().into()
    }

    /// Lowercase hex SHA-256, as SigV4 wants it.
    pub fn sha256_hex(&self) -> String {
        hex_lower(&self.sha256())
    }

    /// The whole body in one buffer (tests, debugging, small bodies).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(usize::try_from(self.len).unwrap_or(0));
        for chunk in self.chunks() {
            out.extend_from_slice(&chunk);
        }
        out
    }

    /// An `http_body::Body` yielding the chunks lazily, with an exact size hint.
    pub fn into_http_body(self) -> StreamingBody {
        StreamingBody {
            chunks: self.chunks(),
        }
    }
}

/// Lowercase hex of `bytes`.
pub fn hex_lower(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        s.push(char::from(HEX[usize::from(b >> 4)]));
        s.push(char::from(HEX[usize::from(b & 0x0f)]));
    }
    s
}

#[derive(Default)]
struct Builder {
    parts: Vec<Part>,
    /// Pending serialized bytes, flushed as one `Fragment`.
    buf: Vec<u8>,
    /// Length of everything already pushed to `parts`.
    len: u64,
}

impl Builder {
    fn flush(&mut self) {
        if !self.buf.is_empty() {
            let buf = std::mem::take(&mut self.buf);
            self.len += buf.len() as u64;
            self.parts.push(Part::Fragment(Bytes::from(buf)));
        }
    }

    fn push(&mut self, part: Part, len: usize) {
        if len > 0 {
            self.flush();
            self.len += len as u64;
            self.parts.push(part);
        }
    }

    fn node(&mut self, node: &Node) -> Result<(), BodyError> {
        match node {
            Node::Value(v) => write_value(&mut self.buf, v),
            Node::Object(pairs) => {
                self.buf.push(b'{');
                for (i, (k, v)) in pairs.iter().enumerate() {
                    if i > 0 {
                        self.buf.push(b',');
                    }
                    write_str(&mut self.buf, k.as_bytes());
                    self.buf.push(b':');
                    self.node(v)?;
                }
                self.buf.push(b'}');
            }
            Node::Array(items) => {
                self.buf.push(b'[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        self.buf.push(b',');
                    }
                    self.node(v)?;
                }
                self.buf.push(b']');
            }
            Node::Str(bytes) => {
                std::str::from_utf8(bytes).map_err(|_| BodyError::InvalidUtf8)?;
                self.buf.push(b'"');
                let out_len = escaped_len(bytes);
                if out_len <= INLINE_MAX {
                    escape_into(&mut self.buf, bytes);
                } else {
                    let escape = out_len != bytes.len();
                    self.push(
                        Part::Str {
                            bytes: bytes.clone(),
                            escape,
                        },
                        out_len,
                    );
                }
                self.buf.push(b'"');
            }
            Node::Base64(raw) => {
                self.buf.push(b'"');
                let out_len = base64_len(raw.len());
                if out_len <= INLINE_MAX {
                    self.buf.extend_from_slice(STANDARD.encode(raw).as_bytes());
                } else {
                    self.push(Part::Base64(raw.clone()), out_len);
                }
                self.buf.push(b'"');
            }
            Node::Base64Text(text) => {
                check_base64(text)?;
                // The base64 alphabet needs no escaping: a plain string.
                self.buf.push(b'"');
                if text.len() <= INLINE_MAX {
                    self.buf.extend_from_slice(text);
                } else {
                    self.push(
                        Part::Str {
                            bytes: text.clone(),
                            escape: false,
                        },
                        text.len(),
                    );
                }
                self.buf.push(b'"');
            }
        }
        Ok(())
    }
}

/// Padded base64 length of `n` raw bytes.
fn base64_len(n: usize) -> usize {
    n.div_ceil(3) * 4
}

/// Iterator over a body's chunks; each is 1..=[`MAX_CHUNK`] bytes.
#[derive(Clone, Debug)]
pub struct Chunks {
    parts: Arc<[Part]>,
    part: usize,
    /// Input offset within the current part.
    offset: usize,
    /// Output bytes not yet yielded.
    remaining: u64,
}

impl Iterator for Chunks {
    type Item = Bytes;

    fn next(&mut self) -> Option<Bytes> {
        loop {
            let part = self.parts.get(self.part)?;
            let (input_len, out) = match part {
                Part::Fragment(b)
                | Part::Str {
                    bytes: b,
                    escape: false,
                } => {
                    let end = (self.offset + MAX_CHUNK).min(b.len());
                    let out = (self.offset < end).then(|| b.slice(self.offset..end));
                    self.offset = end;
                    (b.len(), out)
                }
                Part::Str {
                    bytes: b,
                    escape: true,
                } => {
                    let rest = &b[self.offset.min(b.len())..];
                    let out = (!rest.is_empty()).then(|| {
                        let cap = MAX_CHUNK.min(rest.len().saturating_mul(6));
                        let mut buf = Vec::with_capacity(cap);
                        self.offset += escape_bounded(&mut buf, rest, MAX_CHUNK);
                        Bytes::from(buf)
                    });
                    (b.len(), out)
                }
                Part::Base64(raw) => {
                    let end = (self.offset + B64_PIECE).min(raw.len());
                    let out = (self.offset < end)
                        .then(|| Bytes::from(STANDARD.encode(&raw[self.offset..end])));
                    self.offset = end;
                    (raw.len(), out)
                }
            };
            if self.offset >= input_len {
                self.part += 1;
                self.offset = 0;
            }
            if let Some(out) = out {
                self.remaining = self.remaining.saturating_sub(out.len() as u64);
                return Some(out);
            }
        }
    }
}

/// [`JsonBody`] as an `http_body::Body` with an exact size hint, so hyper sends
/// `Content-Length` rather than chunked encoding; chunks are produced when polled.
#[derive(Clone, Debug)]
pub struct StreamingBody {
    chunks: Chunks,
}

impl http_body::Body for StreamingBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.chunks.next().map(|c| Ok(http_body::Frame::data(c))))
    }

    fn is_end_stream(&self) -> bool {
        self.chunks.remaining == 0
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.chunks.remaining)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(node: &Node) -> JsonBody {
        let body = JsonBody::from_node(node).unwrap();
        let expected = serde_json::to_vec(&node.to_value()).unwrap();
        let chunks: Vec<Bytes> = body.chunks().collect();
        assert!(chunks.iter().all(|c| !c.is_empty() && c.len() <= MAX_CHUNK));
        assert_eq!(body.to_vec(), expected);
        assert_eq!(body.content_length(), expected.len() as u64);
        let digest: [u8; 32] = Sha256::digest(&expected).into();
        assert_eq!(body.sha256(), digest);
        body
    }

    #[test]
    fn values_match_serde_json() {
        let v = json!({
            "model": "x", "n": [1, -2, 3.5, 1e300, -0.0, 0.1, null, true, false],
            "nested": {"a/b": "é\u{1F600}\"\\\n\u{7f}", "": []}, "big": u64::MAX, "neg": i64::MIN
        });
        assert_eq!(
            JsonBody::from_json(&v).to_vec(),
            serde_json::to_vec(&v).unwrap()
        );
        check(&Node::Value(v));
    }

    #[test]
    fn invalid_utf8_rejected() {
        let invalid = Node::Str(Bytes::from_static(b"\xff\xfe"));
        assert!(matches!(
            JsonBody::from_node(&invalid),
            Err(BodyError::InvalidUtf8)
        ));
        assert!(JsonBody::from_node(&Node::Str(Bytes::from_static("ok é".as_bytes()))).is_ok());
    }

    #[test]
    fn base64_text_is_checked_at_layout_and_sent_as_is() {
        let valid = Bytes::from("QUJD".repeat(MAX_CHUNK));
        let body = JsonBody::from_node(&Node::object([("data", Node::Base64Text(valid.clone()))]))
            .unwrap();
        let expected = [b"{\"data\":\"".as_slice(), &valid, b"\"}"].concat();
        assert_eq!(body.to_vec(), expected);
        for invalid in ["QUJ", "QU\"D", ""] {
            let node = Node::Base64Text(Bytes::from(invalid));
            assert!(
                matches!(JsonBody::from_node(&node), Err(BodyError::Media(_))),
                "{invalid}"
            );
        }
    }

    #[test]
    fn large_plain_string_is_zero_copy() {
        let data = Bytes::from("a".repeat(3 * MAX_CHUNK + 7));
        let range = data.as_ptr() as usize..data.as_ptr() as usize + data.len();
        let body = check(&Node::object([("text", Node::Str(data.clone()))]));
        let inside: Vec<Bytes> = body
            .chunks()
            .filter(|c| range.contains(&(c.as_ptr() as usize)))
            .collect();
        assert_eq!(inside.iter().map(Bytes::len).sum::<usize>(), data.len());
        assert!(inside.iter().all(|c| c.len() <= MAX_CHUNK));
    }

    #[test]
    fn escaped_string_straddles_chunks() {
        // Each 6-byte escape must never straddle a chunk limit.
        for n in [
            MAX_CHUNK / 6 - 1,
            MAX_CHUNK / 6,
            MAX_CHUNK / 6 + 1,
            MAX_CHUNK,
        ] {
            let mut s = "\u{1}".repeat(n);
            s.push_str(&"x\"".repeat(n));
            check(&Node::from(s));
        }
    }

    #[test]
    fn base64_pieces_concatenate() {
        for n in [
            0,
            1,
            2,
            3,
            767,
            768,
            769,
            B64_PIECE - 1,
            B64_PIECE,
            B64_PIECE + 1,
            2 * B64_PIECE + 2,
        ] {
            let raw: Vec<u8> = (0..n).map(|i| (i * 7 + 3) as u8).collect();
            let body = check(&Node::object([("data", Node::Base64(Bytes::from(raw)))]));
            assert_eq!(body.content_length(), (base64_len(n) + 11) as u64);
        }
    }

    #[test]
    fn http_body_polls_same_bytes() {
        use http_body::Body as _;
        let node = Node::object([
            ("a", Node::Base64(Bytes::from(vec![9u8; 200_000]))),
            ("b", Node::from("q\"".repeat(50_000))),
        ]);
        let body = JsonBody::from_node(&node).unwrap();
        let expected = body.to_vec();
        let mut http = body.into_http_body();
        assert_eq!(http.size_hint().exact(), Some(expected.len() as u64));
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut got = Vec::new();
        while let Poll::Ready(Some(frame)) = Pin::new(&mut http).poll_frame(&mut cx) {
            let data = frame.unwrap().into_data().unwrap();
            assert!(!data.is_empty() && data.len() <= MAX_CHUNK);
            got.extend_from_slice(&data);
            assert_eq!(
                http.size_hint().exact(),
                Some((expected.len() - got.len()) as u64)
            );
        }
        assert!(http.is_end_stream());
        assert_eq!(got, expected);
    }

    fn assert_send_sync<T: Send + Sync + 'static>() {}

    #[test]
    fn streaming_body_is_send_sync() {
        assert_send_sync::<StreamingBody>();
        assert_send_sync::<JsonBody>();
    }

    /// Throughput of `sha256()` over a 64 MiB body (run with `--release --ignored --nocapture`).
    #[test]
    #[ignore]
    fn sha256_throughput() {
        let text = Bytes::from("a".repeat(64 << 20));
        let start = std::time::Instant::now();
        let node = Node::Str(text);
        let body = JsonBody::from_node(&node).unwrap();
        let secs = start.elapsed().as_secs_f64();
        println!(
            "UTF-8 check + escape scan of 64 MiB: {:.0} MiB/s",
            64.0 / secs
        );
        std::hint::black_box(body.sha256()); // warm-up: page faults, CPU feature detection
        let start = std::time::Instant::now();
        let rounds = 8;
        for _ in 0..rounds {
            std::hint::black_box(body.sha256());
        }
        let secs = start.elapsed().as_secs_f64() / f64::from(rounds);
        println!("sha256 64 MiB: {:.0} MiB/s", 64.0 / secs);
        let raw = JsonBody::from_node(&Node::Base64(Bytes::from(vec![7u8; 48 << 20]))).unwrap();
        let start = std::time::Instant::now();
        std::hint::black_box(raw.sha256());
        let secs = start.elapsed().as_secs_f64();
        println!(
            "base64 encode + sha256 of 64 MiB output: {:.0} MiB/s",
            64.0 / secs
        );
    }
}
