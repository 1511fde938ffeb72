//! What the relay reads of a realtime frame: its event type (the only field it parses of most
//! frames), and the one rewrite LiteLLM's relay makes on the way to a GA provider: a
//! `session.update` lifted from the beta session shape to the GA one (LiteLLM's
//! `RealTimeStreaming._remap_beta_session_to_ga`, field for field).

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::{Map, Value, json};

/// Backend events LiteLLM's relay reads whatever events it logs: the session's kind
/// (`session.*`, `transcription_session.*`), transcripts (input messages), and `response.done`
/// (tool calls and usage).
const ALWAYS_READ_BACKEND: &[&str] = &[
    "session.created",
    "session.updated",
    "transcription_session.created",
    "transcription_session.updated",
    TRANSCRIPTION_COMPLETED,
    "response.done",
];
/// The client's audio chunks: the bulk of a session's frames, and nothing LiteLLM logs reads
/// them (only the last client frame of a session is the logged `input`).
pub(super) const AUDIO_APPEND: &str = "input_audio_buffer.append";
/// A user's speech transcribed: LiteLLM's relay asks the provider for a response to it.
pub(super) const TRANSCRIPTION_COMPLETED: &str =
    "conversation.item.input_audio_transcription.completed";
/// What LiteLLM's relay sends then (its `json.dumps({"type": "response.create"})`).
pub(super) const RESPONSE_CREATE: &str = r#"{"type": "response.create"}"#;

#[derive(Deserialize)]
struct Typed<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
}

/// A frame's `type`: read from the frame's start when it opens with `{"type": "<plain
/// string>"` (as the provider's and the SDKs' events do), so a 6 KiB audio chunk is not read to
/// its end; else when the frame is a JSON object with a string `type`. It only sorts frames: an
/// action on a frame checks it whole (`is_event`).
pub(super) fn event_type(frame: &str) -> Option<Cow<'_, str>> {
    if let Some(kind) = leading_type(frame) {
        return Some(Cow::Borrowed(kind));
    }
    parsed_type(frame)
}

/// Whether the frame is a JSON object whose `type` is `kind`, reading all of it.
pub(super) fn is_event(frame: &str, kind: &str) -> bool {
    parsed_type(frame).is_some_and(|parsed| parsed == kind)
}

fn parsed_type(frame: &str) -> Option<Cow<'_, str>> {
    serde_json::from_str::<Typed>(frame).ok()?.kind
}

fn leading_type(frame: &str) -> Option<&str> {
    const JSON_SPACE: &[char] = &[' ', '\t', '\n', '\r'];
    let rest = frame
        .trim_start_matches(JSON_SPACE)
        .strip_prefix('{')?
        .trim_start_matches(JSON_SPACE)
        .strip_prefix("\"type\"")?
        .trim_start_matches(JSON_SPACE)
        .strip_prefix(':')?
        .trim_start_matches(JSON_SPACE)
        .strip_prefix('"')?;
    let end = rest.find(['"', '\\'])?;
    (rest.as_bytes()[end] == b'"').then(|| &rest[..end])
}

/// Which events the replay needs to log a session as LiteLLM does.
#[derive(Clone, Debug, Default)]
pub struct Logged {
    /// `litellm.logged_real_time_event_types` (None: `"*"`, every event).
    pub types: Option<Vec<String>>,
}

impl Logged {
    /// Whether a backend event goes into the session's record for the replay.
    pub(super) fn keeps_backend(&self, kind: Option<&str>) -> bool {
        let Some(kind) = kind else {
            // Not a JSON object with a type: forwarded as is, never logged.
            return self.types.is_none();
        };
        ALWAYS_READ_BACKEND.contains(&kind)
            || self
                .types
                .as_ref()
                .is_none_or(|types| types.iter().any(|logged| logged == kind))
    }
}

/// Whether a session event says the session only transcribes (LiteLLM then asks no response
/// after a transcript).
pub(super) fn is_transcription_session(kind: &str, frame: &str) -> bool {
    match kind {
        "transcription_session.created" | "transcription_session.updated" => true,
        "session.created" | "session.updated" => {
            #[derive(Deserialize)]
            struct Session<'a> {
                #[serde(borrow, default)]
                session: Option<Typed<'a>>,
            }
            serde_json::from_str::<Session>(frame)
                .ok()
                .and_then(|event| event.session?.kind)
                .is_some_and(|kind| kind == "transcription")
        }
        _ => false,
    }
}

/// What LiteLLM's relay does with a client frame on its way to a GA provider.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum ClientFrame {
    /// Sent as it came.
    Forward,
    /// Sent rewritten: a `session.update` lifted to the GA session shape.
    Rewritten(String),
    /// LiteLLM's relay fails on it (a `TypeError` its client loop does not catch) and ends the
    /// session as if the client had left.
    EndsRelay,
}

/// Reads a client frame whole when LiteLLM's relay acts on its type (`kind`, as sorted).
pub(super) fn client_frame(kind: Option<&str>, frame: &str) -> ClientFrame {
    match kind {
        Some("session.update") => session_update_for_ga(frame),
        Some("conversation.item.create") if breaks_item_check(frame) => ClientFrame::EndsRelay,
        _ => ClientFrame::Forward,
    }
}

/// A `conversation.item.create` whose user `content` LiteLLM's relay cannot iterate (null, a
/// number, a boolean).
fn breaks_item_check(frame: &str) -> bool {
    let Ok(Value::Object(event)) = serde_json::from_str::<Value>(frame) else {
        return false;
    };
    if event.get("type").and_then(Value::as_str) != Some("conversation.item.create") {
        return false;
    }
    let Some(Value::Object(item)) = event.get("item") else {
        return false;
    };
    if item.get("type").and_then(Value::as_str) == Some("function_call_output")
        || item.get("role").and_then(Value::as_str) != Some("user")
    {
        return false;
    }
    matches!(
        item.get("content"),
        Some(Value::Null | Value::Number(_) | Value::Bool(_))
    )
}

/// A client `session.update` as LiteLLM sends it to a GA provider.
fn session_update_for_ga(frame: &str) -> ClientFrame {
    let Ok(Value::Object(mut event)) = serde_json::from_str::<Value>(frame) else {
        return ClientFrame::Forward;
    };
    if event.get("type").and_then(Value::as_str) != Some("session.update") {
        return ClientFrame::Forward;
    }
    let session = match event.get("session") {
        None => Map::new(),
        Some(Value::Object(session)) => session.clone(),
        Some(_) => return ClientFrame::Forward,
    };
    match remap_beta_session(session) {
        Ok(session) => {
            event.insert("session".into(), Value::Object(session));
            serde_json::to_string(&event).map_or(ClientFrame::Forward, ClientFrame::Rewritten)
        }
        Err(failure) => failure,
    }
}

/// LiteLLM's beta -> GA session mapping, failing where LiteLLM's does: an `AttributeError`
/// (caught: the frame goes unchanged, `Forward`) or a `TypeError` (`EndsRelay`).
fn remap_beta_session(mut session: Map<String, Value>) -> Result<Map<String, Value>, ClientFrame> {
    if !session.contains_key("type") {
        session.insert("type".into(), json!("realtime"));
    }
    if let Some(modalities) = session.shift_remove("modalities")
        && !session.contains_key("output_modalities")
    {
        // `{m.lower() for m in (mods or [])}`
        let listed: Vec<String> = match modalities {
            ref falsy if is_falsy(falsy) => Vec::new(),
            Value::Array(items) => items
                .iter()
                .map(|item| item.as_str().map(str::to_lowercase))
                .collect::<Option<_>>()
                .ok_or(ClientFrame::Forward)?,
            Value::String(text) => text.chars().map(|c| c.to_lowercase().collect()).collect(),
            Value::Object(keys) => keys.keys().map(|key| key.to_lowercase()).collect(),
            _ => return Err(ClientFrame::EndsRelay),
        };
        if listed.iter().any(|m| m == "audio") {
            session.insert("output_modalities".into(), json!(["audio"]));
        } else if listed.iter().any(|m| m == "text") {
            session.insert("output_modalities".into(), json!(["text"]));
        }
    }
    let mut input = Map::new();
    let mut output = Map::new();
    if let Some(voice) = session.shift_remove("voice") {
        output.insert("voice".into(), voice);
    }
    if let Some(format) = session.shift_remove("input_audio_format") {
        input.insert("format".into(), audio_format(format));
    }
    if let Some(format) = session.shift_remove("output_audio_format") {
        output.insert("format".into(), audio_format(format));
    }
    if let Some(turns) = session.shift_remove("turn_detection") {
        input.insert("turn_detection".into(), turns);
    }
    if let Some(transcription) = session.shift_remove("input_audio_transcription") {
        input.insert("transcription".into(), transcription);
    }
    if input.is_empty() && output.is_empty() {
        return Ok(session);
    }
    // `session.get("audio") or {}`, then item assignment into it.
    let mut audio = match session.get("audio") {
        Some(Value::Object(existing)) => existing.clone(),
        Some(other) if !is_falsy(other) => return Err(ClientFrame::EndsRelay),
        _ => Map::new(),
    };
    for (side, lifted) in [("input", input), ("output", output)] {
        if lifted.is_empty() {
            continue;
        }
        match audio.get_mut(side) {
            Some(Value::Object(existing)) => existing.extend(lifted),
            _ => {
                audio.insert(side.into(), Value::Object(lifted));
            }
        }
    }
    session.insert("audio".into(), Value::Object(audio));
    Ok(session)
}

/// Python's truth value of a JSON value.
fn is_falsy(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(items) => items.is_empty(),
        Value::Object(map) => map.is_empty(),
    }
}

/// LiteLLM's `_AUDIO_FORMAT_MAP`: beta format names to GA format objects.
fn audio_format(format: Value) -> Value {
    match format.as_str() {
        Some("pcm16") => json!({"type": "audio/pcm", "rate": 24000}),
        Some("g711_ulaw") => json!({"type": "audio/G711-ulaw", "rate": 8000}),
        Some("g711_alaw") => json!({"type": "audio/G711-alaw", "rate": 8000}),
        _ => format,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_type_is_read_without_building_the_frame() {
        let frame = r#"{"type":"input_audio_buffer.append","audio":"AAAA"}"#;
        assert_eq!(event_type(frame).as_deref(), Some(AUDIO_APPEND));
        assert_eq!(event_type(r#"{"audio":"AAAA"}"#), None);
        assert_eq!(event_type("[1,2]"), None);
        assert_eq!(event_type("not json"), None);
        assert_eq!(event_type(r#"{"type":"a\"b"}"#).as_deref(), Some("a\"b"));
        assert_eq!(
            event_type(r#" { "type" : "x", "a": 1}"#).as_deref(),
            Some("x")
        );
        assert_eq!(
            event_type(r#"{"event_id":"e","type":"x"}"#).as_deref(),
            Some("x")
        );
        // Sorting reads the start only; acting reads the frame whole.
        assert_eq!(event_type(r#"{"type":"x", broken"#).as_deref(), Some("x"));
        assert!(!is_event(r#"{"type":"x", broken"#, "x"));
        assert!(is_event(r#"{"type":"x","a":[1]}"#, "x"));
    }

    #[test]
    fn a_beta_session_update_is_lifted_as_litellm_lifts_it() {
        let frame = r#"{"type":"session.update","session":{"modalities":["text","AUDIO"],"voice":"alloy","input_audio_format":"pcm16","turn_detection":null,"instructions":"hi","audio":{"output":{"speed":1.0}}}}"#;
        let sent: Value = serde_json::from_str(&rewritten(frame)).unwrap();
        assert_eq!(
            sent,
            json!({"type": "session.update", "session": {
                "instructions": "hi",
                "audio": {"output": {"speed": 1.0, "voice": "alloy"},
                          "input": {"format": {"type": "audio/pcm", "rate": 24000},
                                    "turn_detection": null}},
                "type": "realtime",
                "output_modalities": ["audio"],
            }})
        );
    }

    #[test]
    fn a_ga_session_update_gains_only_its_type() {
        let frame = r#"{"type":"session.update","session":{"type":"realtime","instructions":"x"}}"#;
        let sent: Value = serde_json::from_str(&rewritten(frame)).unwrap();
        assert_eq!(sent, serde_json::from_str::<Value>(frame).unwrap());
        let bare: Value = serde_json::from_str(&rewritten(r#"{"type":"session.update"}"#)).unwrap();
        assert_eq!(
            bare,
            json!({"type": "session.update", "session": {"type": "realtime"}})
        );
        assert_eq!(
            session_update_for_ga(r#"{"type":"session.update","session":null}"#),
            ClientFrame::Forward
        );
        assert_eq!(
            session_update_for_ga(r#"{"type":"response.create"}"#),
            ClientFrame::Forward
        );
    }

    fn rewritten(frame: &str) -> String {
        match session_update_for_ga(frame) {
            ClientFrame::Rewritten(sent) => sent,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn frames_litellms_relay_fails_on_are_known() {
        let update = |session: &str| {
            session_update_for_ga(&format!(
                r#"{{"type":"session.update","session":{session}}}"#
            ))
        };
        // A list of non-strings: an AttributeError LiteLLM catches, the frame goes unchanged.
        assert_eq!(update(r#"{"modalities":[1]}"#), ClientFrame::Forward);
        // A number: a TypeError that ends LiteLLM's relay.
        assert_eq!(update(r#"{"modalities":5}"#), ClientFrame::EndsRelay);
        assert_eq!(
            update(r#"{"voice":"x","audio":[1]}"#),
            ClientFrame::EndsRelay
        );
        // A string is iterated by character: nothing matches, `modalities` still goes.
        let sent: Value = serde_json::from_str(&rewritten(
            r#"{"type":"session.update","session":{"modalities":"audio"}}"#,
        ))
        .unwrap();
        assert_eq!(sent["session"], json!({"type": "realtime"}));
        let item = |item: &str| {
            client_frame(
                Some("conversation.item.create"),
                &format!(r#"{{"type":"conversation.item.create","item":{item}}}"#),
            )
        };
        assert_eq!(
            item(r#"{"role":"user","content":null}"#),
            ClientFrame::EndsRelay
        );
        assert_eq!(
            item(r#"{"role":"user","content":"text"}"#),
            ClientFrame::Forward
        );
        assert_eq!(
            item(r#"{"role":"assistant","content":null}"#),
            ClientFrame::Forward
        );
        assert_eq!(
            item(r#"{"type":"function_call_output","role":"user","content":3}"#),
            ClientFrame::Forward
        );
    }

    #[test]
    fn transcription_sessions_are_recognised() {
        assert!(is_transcription_session(
            "session.created",
            r#"{"type":"session.created","session":{"type":"transcription"}}"#
        ));
        assert!(!is_transcription_session(
            "session.created",
            r#"{"type":"session.created","session":{"type":"realtime"}}"#
        ));
        assert!(is_transcription_session(
            "transcription_session.created",
            "{}"
        ));
    }

    #[test]
    fn the_record_keeps_what_litellm_reads() {
        let default = Logged {
            types: Some(vec!["session.created".into(), "response.done".into()]),
        };
        assert!(default.keeps_backend(Some("response.done")));
        assert!(default.keeps_backend(Some(TRANSCRIPTION_COMPLETED)));
        assert!(!default.keeps_backend(Some("response.output_audio.delta")));
        assert!(!default.keeps_backend(None));
        let every = Logged { types: None };
        assert!(every.keeps_backend(Some("response.output_audio.delta")));
    }
}
