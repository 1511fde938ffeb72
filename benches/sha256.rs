//! SHA-256 throughput of the body hasher (the SigV4 payload digest) over a 64 MiB body: existing
//! base64 text (zero-copy slices) and raw bytes (base64-encoded while hashing). Prints one JSON
//! line per case; `benches/sha256.py` runs it beside Python's hashlib.

use std::time::Instant;

use _native::wire::body::{JsonBody, Node};
use bytes::Bytes;

const SIZE: usize = 64 * 1024 * 1024;
const ROUNDS: usize = 5;

fn measure(name: &str, body: &JsonBody) {
    let mut best = f64::INFINITY;
    for _ in 0..ROUNDS {
        let started = Instant::now();
        std::hint::black_box(body.sha256());
        best = best.min(started.elapsed().as_secs_f64());
    }
    let mib = body.content_length() as f64 / (1024.0 * 1024.0);
    println!(
        "{{\"case\": \"{name}\", \"body_mib\": {mib:.1}, \"best_s\": {best:.4}, \"mib_per_s\": {:.0}}}",
        mib / best
    );
}

fn main() {
    let raw: Vec<u8> = (0..SIZE)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let encoded = base64_text(&raw);
    let text = JsonBody::from_node(&Node::object([("bytes", Node::Str(Bytes::from(encoded)))]))
        .expect("base64 text is UTF-8");
    measure("base64 text, hashed as is", &text);
    let raw_body = JsonBody::from_node(&Node::object([("bytes", Node::Base64(Bytes::from(raw)))]))
        .expect("raw bytes need no check");
    measure("raw bytes, base64-encoded while hashing", &raw_body);
}

fn base64_text(raw: &[u8]) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .encode(raw)
        .into_bytes()
}
