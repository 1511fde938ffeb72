//! JSON as Python's `json.dumps` writes it: with its defaults (`", "` and `": "` separators,
//! non-ASCII escaped as `\\uXXXX`, floats as `repr`), as LiteLLM serializes tool-call arguments;
//! and compact with raw UTF-8, as the proxy's `JSONResponse` writes answers.

use serde_json::Value;

/// How `json.dumps` was called.
#[derive(Clone, Copy)]
struct Style {
    item_separator: &'static str,
    key_separator: &'static str,
    /// `ensure_ascii=True`: every non-ASCII character as `\uXXXX` (UTF-16 units).
    ascii: bool,
}

const DEFAULTS: Style = Style {
    item_separator: ", ",
    key_separator: ": ",
    ascii: true,
};
const COMPACT: Style = Style {
    item_separator: ",",
    key_separator: ":",
    ascii: false,
};
const COMPACT_ASCII: Style = Style {
    ascii: true,
    ..COMPACT
};

/// `json.dumps(value)` with Python's defaults: `", "` and `": "` separators, non-ASCII escaped
/// as `\uXXXX`, floats as Python's `repr`.
pub fn python_json(value: &Value) -> String {
    let mut out = String::new();
    write_python_json(value, DEFAULTS, &mut out);
    out
}

/// `json.dumps(value, ensure_ascii=False, separators=(",", ":"))`: Starlette's `JSONResponse`.
pub fn python_json_compact(value: &Value) -> String {
    let mut out = String::new();
    write_python_json(value, COMPACT, &mut out);
    out
}

/// `json.dumps(value, separators=(",", ":"))`: compact, non-ASCII escaped (the proxy's
/// `message_start` restamp on `/v1/messages` streams).
pub fn python_json_compact_ascii(value: &Value) -> String {
    let mut out = String::new();
    write_python_json(value, COMPACT_ASCII, &mut out);
    out
}

fn write_python_json(value: &Value, style: Style, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(number) => match number.as_f64().filter(|_| number.is_f64()) {
            Some(float) => out.push_str(&python_float(float)),
            None => out.push_str(&number.to_string()),
        },
        Value::String(text) => write_python_string(text, style, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(style.item_separator);
                }
                write_python_json(item, style, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (key, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(style.item_separator);
                }
                write_python_string(key, style, out);
                out.push_str(style.key_separator);
                write_python_json(item, style, out);
            }
            out.push('}');
        }
    }
}

fn write_python_string(text: &str, style: Style, out: &mut String) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (style.ascii && (c as u32) > 0x7e) => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Python's `repr(float)`: the shortest round-trip digits, exponent form below 1e-4 and from
/// 1e16 (`1e-05`, `1e+16`), otherwise positional with at least one decimal (`100000.0`).
pub fn python_float(value: f64) -> String {
    if value.is_nan() {
        return "NaN".into();
    }
    if value.is_infinite() {
        return if value > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    if value == 0.0 {
        return if value.is_sign_negative() {
            "-0.0"
        } else {
            "0.0"
        }
        .into();
    }
    // `{:e}` gives the shortest round-trip digits: "1.5e-7", "1e16".
    let scientific = format!("{value:e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if !(-4..16).contains(&exponent) {
        let sign = if exponent < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exponent.abs());
    }
    let positional = format!("{value}");
    if positional.contains('.') {
        positional
    } else {
        format!("{positional}.0")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_json_matches_json_dumps() {
        let value: Value = serde_json::from_str(
            r#"{"city": "Paris", "n": 1.0, "big": 1e16, "small": 0.00001, "i": 3, "u": "é✓😀", "q": "a\"b\n", "l": [1, 2.5]}"#,
        )
        .unwrap();
        assert_eq!(
            python_json(&value),
            r#"{"city": "Paris", "n": 1.0, "big": 1e+16, "small": 1e-05, "i": 3, "u": "\u00e9\u2713\ud83d\ude00", "q": "a\"b\n", "l": [1, 2.5]}"#
        );
    }

    #[test]
    fn compact_json_matches_the_proxys_json_response() {
        let value: Value =
            serde_json::from_str(r#"{"u": "é✓😀", "q": "a\"b\n\u0001", "l": [1, 2.5, 1e16]}"#)
                .unwrap();
        assert_eq!(
            python_json_compact(&value),
            r#"{"u":"é✓😀","q":"a\"b\n\u0001","l":[1,2.5,1e+16]}"#
        );
    }

    #[test]
    fn floats_like_python_repr() {
        for (value, repr) in [
            (100000.0, "100000.0"),
            (0.0001, "0.0001"),
            (1.5e-7, "1.5e-07"),
            (123456789012345680.0, "1.2345678901234568e+17"),
            (0.1, "0.1"),
            (-2.5, "-2.5"),
        ] {
            assert_eq!(python_float(value), repr);
        }
    }
}
