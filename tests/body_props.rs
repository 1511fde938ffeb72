//! Property tests: a streamed `JsonBody` is byte-identical to `serde_json::to_vec`.

use std::pin::Pin;
use std::task::{Context, Poll};

use _native::wire::body::{JsonBody, MAX_CHUNK, Node};
use bytes::Bytes;
use http_body::Body as _;
use proptest::prelude::*;
use serde_json::Value;
use sha2::{Digest, Sha256};

const B64_PIECE: usize = MAX_CHUNK / 4 * 3;

/// Lengths straddling the interesting boundaries (empty, inline limit, chunk size, 3 chunks).
fn text_len() -> impl Strategy<Value = usize> {
    prop_oneof![
        0usize..=2,
        1..200usize,
        1020..=1030usize,
        MAX_CHUNK - 2..=MAX_CHUNK + 2,
        3 * MAX_CHUNK - 5..=3 * MAX_CHUNK + 5,
    ]
}

fn raw_len() -> impl Strategy<Value = usize> {
    prop_oneof![
        0usize..=4,
        760..=780usize,
        B64_PIECE - 3..=B64_PIECE + 3,
        2 * B64_PIECE - 3..=2 * B64_PIECE + 3,
        3 * B64_PIECE - 3..=3 * B64_PIECE + 3,
    ]
}

fn any_char() -> impl Strategy<Value = char> {
    prop_oneof![
        prop::char::range('a', 'z'),
        prop::sample::select(vec![
            '"', '\\', '/', '\n', '\r', '\t', '\u{8}', '\u{c}', '\0', '\u{1}', '\u{1f}', '\u{7f}',
            'é', '\u{2028}', '😀', ' ',
        ]),
        any::<char>(),
    ]
}

/// A string of about `len` bytes cycling a random pattern (cheap even for 200 KiB).
fn text() -> impl Strategy<Value = String> {
    (prop::collection::vec(any_char(), 1..12), text_len()).prop_map(|(pattern, len)| {
        let mut s = String::with_capacity(len + 4);
        for c in pattern.iter().cycle() {
            if s.len() + c.len_utf8() > len {
                break;
            }
            s.push(*c);
        }
        s
    })
}

fn raw_bytes() -> impl Strategy<Value = Bytes> {
    (any::<u64>(), raw_len()).prop_map(|(seed, len)| {
        let mut x = seed | 1;
        let v: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        Bytes::from(v)
    })
}

fn small_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from), // NaN/inf become null, like serde_json
        prop::collection::vec(any_char(), 0..20)
            .prop_map(|c| Value::String(c.into_iter().collect())),
    ];
    leaf.prop_recursive(2, 12, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((prop::collection::vec(any_char(), 0..6), inner), 0..4).prop_map(
                |kv| {
                    Value::Object(
                        kv.into_iter()
                            .map(|(k, v)| (k.into_iter().collect(), v))
                            .collect(),
                    )
                }
            ),
        ]
    })
}

fn node() -> impl Strategy<Value = Node> {
    let leaf = prop_oneof![
        small_value().prop_map(Node::Value),
        text().prop_map(|s| Node::Str(Bytes::from(s))),
        raw_bytes().prop_map(Node::Base64),
    ];
    leaf.prop_recursive(3, 10, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Node::Array),
            // Unique keys: `to_value` would merge duplicates, the body keeps them.
            prop::collection::btree_map(
                prop::collection::vec(any_char(), 0..8)
                    .prop_map(|c| c.into_iter().collect::<String>()),
                inner,
                0..4
            )
            .prop_map(Node::object),
        ]
    })
}

fn poll_all(body: JsonBody) -> (Option<u64>, Vec<u8>) {
    let mut http = body.into_http_body();
    let hint = http.size_hint().exact();
    let mut cx = Context::from_waker(std::task::Waker::noop());
    let mut out = Vec::new();
    while let Poll::Ready(Some(frame)) = Pin::new(&mut http).poll_frame(&mut cx) {
        out.extend_from_slice(&frame.unwrap().into_data().unwrap());
    }
    (hint, out)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn body_matches_serde_json(node in node()) {
        let expected = serde_json::to_vec(&node.to_value()).unwrap();
        let body = JsonBody::from_node(&node).unwrap();
        prop_assert_eq!(body.content_length(), expected.len() as u64);
        let mut joined = Vec::with_capacity(expected.len());
        for chunk in body.chunks() {
            prop_assert!(!chunk.is_empty() && chunk.len() <= MAX_CHUNK, "chunk len {}", chunk.len());
            joined.extend_from_slice(&chunk);
        }
        prop_assert!(joined == expected, "body differs from serde_json");
        let digest: [u8; 32] = Sha256::digest(&expected).into();
        prop_assert_eq!(body.sha256(), digest);
        let (hint, polled) = poll_all(body);
        prop_assert_eq!(hint, Some(expected.len() as u64));
        prop_assert!(polled == expected, "polled body differs");
    }

    #[test]
    fn json_values_match_serde_json(v in small_value()) {
        prop_assert_eq!(JsonBody::from_json(&v).to_vec(), serde_json::to_vec(&v).unwrap());
    }
}
