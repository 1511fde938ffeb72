//! JSON string escaping exactly as serde_json escapes (compact output), for a whole string or
//! a bounded piece of one at a time (the streamed body's chunks).

use serde_json::Value;

/// serde_json's escape table: 0 = emit as-is, `u` = `\u00XX`, else the letter after `\`.
static ESCAPE: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 0x20 {
        t[i] = b'u';
        i += 1;
    }
    t[0x08] = b'b';
    t[0x09] = b't';
    t[0x0a] = b'n';
    t[0x0c] = b'f';
    t[0x0d] = b'r';
    t[b'"' as usize] = b'"';
    t[b'\\' as usize] = b'\\';
    t
};

/// Extra output bytes per input byte when escaped.
fn escape_extra(b: u8) -> usize {
    match ESCAPE[usize::from(b)] {
        0 => 0,
        b'u' => 5,
        _ => 1,
    }
}

/// Length of the escaped form of `s` (without quotes).
pub(super) fn escaped_len(s: &[u8]) -> usize {
    // Branch-free OR per block vectorizes; only blocks that need escaping are counted.
    let mut extra = 0;
    for block in s.chunks(256) {
        let needs = block.iter().fold(false, |acc, &b| {
            acc | (b < 0x20) | (b == b'"') | (b == b'\\')
        });
        if needs {
            extra += block.iter().map(|&b| escape_extra(b)).sum::<usize>();
        }
    }
    s.len() + extra
}

/// Append `s` escaped (without quotes).
pub(super) fn escape_into(out: &mut Vec<u8>, s: &[u8]) {
    let mut start = 0;
    for (i, &b) in s.iter().enumerate() {
        let e = ESCAPE[usize::from(b)];
        if e != 0 {
            out.extend_from_slice(&s[start..i]);
            push_escape(out, b, e);
            start = i + 1;
        }
    }
    out.extend_from_slice(&s[start..]);
}

fn push_escape(out: &mut Vec<u8>, b: u8, e: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    if e == b'u' {
        out.extend_from_slice(&[
            b'\\',
            b'u',
            b'0',
            b'0',
            HEX[usize::from(b >> 4)],
            HEX[usize::from(b & 0x0f)],
        ]);
    } else {
        out.extend_from_slice(&[b'\\', e]);
    }
}

/// Escape a prefix of `s` into `out` without letting `out` exceed `cap`; returns input consumed.
pub(super) fn escape_bounded(out: &mut Vec<u8>, s: &[u8], cap: usize) -> usize {
    let mut i = 0;
    while i < s.len() {
        let room = cap - out.len();
        if room == 0 {
            break;
        }
        // Copy the run of plain bytes that fits.
        let limit = (i + room).min(s.len());
        let run_end = s[i..limit]
            .iter()
            .position(|&b| ESCAPE[usize::from(b)] != 0)
            .map_or(limit, |p| i + p);
        out.extend_from_slice(&s[i..run_end]);
        i = run_end;
        if i == limit {
            continue;
        }
        let b = s[i];
        let e = ESCAPE[usize::from(b)];
        let need = if e == b'u' { 6 } else { 2 };
        if cap - out.len() < need {
            break;
        }
        push_escape(out, b, e);
        i += 1;
    }
    i
}

/// Append a JSON string (with quotes).
pub(super) fn write_str(out: &mut Vec<u8>, s: &[u8]) {
    out.push(b'"');
    escape_into(out, s);
    out.push(b'"');
}

/// Serialize `v` exactly like `serde_json::to_vec` (compact), infallibly.
pub(super) fn write_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        // Number's Display is the same itoa/float formatter serde_json serializes with.
        Value::Number(n) => out.extend_from_slice(n.to_string().as_bytes()),
        Value::String(s) => write_str(out, s.as_bytes()),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(out, item);
            }
            out.push(b']');
        }
        Value::Object(map) => {
            out.push(b'{');
            for (i, (k, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_str(out, k.as_bytes());
                out.push(b':');
                write_value(out, item);
            }
            out.push(b'}');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_table_matches_serde_json() {
        for b in 0u8..=0x7f {
            let s = String::from(char::from(b));
            let mut out = Vec::new();
            write_str(&mut out, s.as_bytes());
            assert_eq!(out, serde_json::to_vec(&s).unwrap(), "byte {b:#x}");
            assert_eq!(escaped_len(s.as_bytes()) + 2, out.len());
        }
    }
}
