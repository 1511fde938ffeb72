//! LiteLLM's stream wrapper rules (`CustomStreamWrapper.chunk_creator` and
//! `return_processed_chunk_logic` on its OpenAI branch, which Anthropic's chunks take too),
//! applied to chunks a provider's parser already put in OpenAI's shape.
//!
//! The rules, each mirroring LiteLLM: `created` is our clock at the first event, pinned; `id`
//! is each chunk's own; `model` is the requested one; the first emitted chunk carries
//! `role: assistant` and later ones none; chunks with nothing to show are dropped; a
//! `finish_reason` on an empty delta is emitted in place (mapped), one on a content chunk is
//! held and emitted raw after the last chunk, none at all becomes `stop`; usage never rides on
//! a content chunk (Python adds LiteLLM's own usage chunk at the end); 100 identical chunks in
//! a row fail the stream (LiteLLM's repetition guard).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::providers::stream::{Flow, StreamError};

/// LiteLLM's `REPEATED_STREAMING_CHUNK_LIMIT` default.
pub const REPEATED_CHUNK_LIMIT: usize = 100;

/// Which of LiteLLM's stream options apply to one stream.
#[derive(Clone, Debug, Default)]
pub struct StreamOptions {
    /// `stream_options` was given at all (LiteLLM's usage bookkeeping differs without it).
    pub given: bool,
    /// `stream_options.include_usage` is exactly `true`.
    pub include_usage: bool,
    /// The proxy asked for usage itself and strips chunks whose choices are all empty.
    pub strip_usage_artifacts: bool,
    /// `REPEATED_STREAMING_CHUNK_LIMIT`.
    pub repeat_limit: usize,
}

/// The tool calls of a stream whose blocks LiteLLM's parser turns into them (Anthropic's,
/// Bedrock's): a tool block opens a call (indexes count tool blocks from 0), its argument
/// pieces follow, and a block whose pieces were all empty closes with arguments `{}`.
pub struct ToolCallDeltas {
    index: i64,
    /// The open tool block: how many argument pieces came, and whether all were empty.
    open: Option<(usize, bool)>,
}

impl Default for ToolCallDeltas {
    fn default() -> Self {
        ToolCallDeltas {
            index: -1,
            open: None,
        }
    }
}

impl ToolCallDeltas {
    /// A tool block starts: the delta that opens its call.
    pub fn start(&mut self, id: Option<&Value>, name: Option<&Value>) -> Value {
        self.index += 1;
        self.open = Some((0, true));
        with_tool_call(json!({
            "id": id,
            "type": "function",
            "function": {"name": name, "arguments": ""},
            "index": self.index,
        }))
    }

    /// Another block starts.
    pub fn other_block(&mut self) {
        self.open = None;
    }

    pub fn is_open(&self) -> bool {
        self.open.is_some()
    }

    /// A piece of the call's arguments: its delta.
    pub fn arguments(&mut self, piece: &str) -> Value {
        if let Some((pieces, empty)) = &mut self.open {
            *pieces += 1;
            *empty &= piece.is_empty();
        }
        self.arguments_delta(piece)
    }

    /// A block ends: the `{}` of a tool block whose argument pieces were all empty.
    pub fn close(&mut self) -> Option<Value> {
        match self.open.take() {
            Some((pieces, true)) if pieces > 0 => Some(self.arguments_delta("{}")),
            _ => None,
        }
    }

    fn arguments_delta(&self, piece: &str) -> Value {
        with_tool_call(json!({
            "function": {"arguments": piece},
            "type": "function",
            "index": self.index,
        }))
    }
}

fn with_tool_call(call: Value) -> Value {
    json!({"content": "", "tool_calls": [call]})
}

/// A tool call being assembled from its deltas (for the logged answer).
#[derive(Default)]
struct ToolCall {
    index: i64,
    id: Option<String>,
    name: Option<String>,
    arguments: String,
}

pub struct ChatChunks {
    model: String,
    options: StreamOptions,
    created: Option<i64>,
    sent_first: bool,
    /// The finish chunk went out.
    sent_last: bool,
    /// A `finish_reason` seen on a content chunk (emitted raw at the end).
    held_finish: Option<Value>,
    last_id: Option<String>,
    last_service_tier: Option<Value>,
    /// The latest event's `system_fingerprint` (null included): LiteLLM's synthesized chunks
    /// carry it.
    last_fingerprint: Option<Value>,
    repeated: (Option<String>, usize),
    /// The answer as LiteLLM's `stream_chunk_builder` sees it.
    first_id: Option<String>,
    first_fingerprint: Option<Value>,
    content: String,
    saw_content: bool,
    reasoning: Option<String>,
    tool_calls: Vec<ToolCall>,
    finish: Option<Value>,
    usage: Option<Value>,
}

impl ChatChunks {
    pub fn new(model: String, options: StreamOptions) -> Self {
        ChatChunks {
            model,
            options,
            created: None,
            sent_first: false,
            sent_last: false,
            held_finish: None,
            last_id: None,
            last_service_tier: None,
            last_fingerprint: None,
            repeated: (None, 0),
            first_id: None,
            first_fingerprint: None,
            content: String::new(),
            saw_content: false,
            reasoning: None,
            tool_calls: Vec::new(),
            finish: None,
            usage: None,
        }
    }

    /// One chunk in OpenAI's shape (as the provider's parser made it), through LiteLLM's
    /// wrapper rules; what to emit is appended to `out`.
    pub fn process(
        &mut self,
        chunk: Map<String, Value>,
        out: &mut Vec<Value>,
    ) -> Result<Flow, StreamError> {
        self.created.get_or_insert_with(unix_now);
        let id = match chunk.get("id") {
            Some(Value::String(id)) => id.clone(),
            _ => fresh_id(),
        };
        self.last_id = Some(id.clone());
        let fingerprint = chunk.get("system_fingerprint").cloned();
        self.last_fingerprint = fingerprint.clone();
        if let Some(tier) = chunk.get("service_tier").filter(|t| !t.is_null()) {
            self.last_service_tier = Some(tier.clone());
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            self.record_usage(usage);
        }
        let choices = match chunk.get("choices") {
            Some(Value::Array(choices)) => choices.as_slice(),
            _ => &[],
        };
        let Some(choice) = choices.first() else {
            // Usage-only and empty events: shown only when the caller asked for usage, and
            // never the one that carried usage (stripped, it is empty).
            let has_usage = chunk.get("usage").is_some_and(Value::is_object);
            if self.options.include_usage && !self.options.strip_usage_artifacts && !has_usage {
                let mut empty = self.header(&id, fingerprint.as_ref());
                empty.insert("choices".into(), json!([]));
                out.push(Value::Object(empty));
            }
            return Ok(Flow::More);
        };
        let empty = Map::new();
        let delta = choice
            .get("delta")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        let finish = choice.get("finish_reason").filter(|f| !f.is_null());
        let shows_output = has_output(delta, !self.sent_first);

        if let Some(reason) = finish {
            self.finish = Some(reason.clone());
            if reason.as_str() == Some("error") {
                return Err(StreamError::Provider(json!({
                    "message": "the provider ended the stream with finish_reason \"error\"",
                })));
            }
            let content_or_tools = matches!(delta.get("content"), Some(Value::String(t)) if !t.is_empty())
                || matches!(delta.get("tool_calls"), Some(Value::Array(c)) if !c.is_empty());
            if !content_or_tools {
                if !self.sent_last {
                    self.sent_last = true;
                    let mapped = map_finish_reason(reason.as_str().unwrap_or(""));
                    let mut finish_chunk = self.header(&id, fingerprint.as_ref());
                    finish_chunk.insert(
                        "choices".into(),
                        json!([{"finish_reason": mapped, "index": 0, "delta": {}}]),
                    );
                    copy_extras(&chunk, &mut finish_chunk);
                    out.push(Value::Object(finish_chunk));
                    if !self.options.given && self.usage.is_none() {
                        // LiteLLM stores a zero usage on this chunk when no stream options
                        // were given; its builder then logs those zeros.
                        self.usage = Some(json!({
                            "prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0,
                        }));
                    }
                }
                return Ok(Flow::More);
            }
            self.held_finish = Some(reason.clone());
        } else if !shows_output {
            return Ok(Flow::More);
        }

        let role = (!self.sent_first).then_some("assistant");
        let Ok(first_delta) = output_delta(delta, role) else {
            // LiteLLM drops a chunk whose tool call does not validate.
            return Ok(Flow::More);
        };
        let mut rebuilt = Vec::with_capacity(choices.len());
        for (position, choice) in choices.iter().enumerate() {
            let delta = if position == 0 {
                first_delta.clone()
            } else {
                let delta = choice
                    .get("delta")
                    .and_then(Value::as_object)
                    .unwrap_or(&empty);
                match output_delta(delta, None) {
                    Ok(delta) => delta,
                    Err(()) => return Ok(Flow::More),
                }
            };
            rebuilt.push(output_choice(choice, delta));
        }
        self.check_repetition()?;
        self.count_repetition(delta.get("content").and_then(Value::as_str));
        self.record_delta(delta);
        self.sent_first = true;
        self.first_id.get_or_insert_with(|| id.clone());
        if self.first_fingerprint.is_none() {
            self.first_fingerprint = fingerprint.clone().filter(|f| !f.is_null());
        }
        let mut emitted = self.header(&id, fingerprint.as_ref());
        emitted.insert("choices".into(), Value::Array(rebuilt));
        copy_extras(&chunk, &mut emitted);
        out.push(Value::Object(emitted));
        Ok(Flow::More)
    }

    /// The upstream ended: LiteLLM's closing chunk if none went out, and the whole answer as
    /// one chunk.
    pub fn finish(&mut self, out: &mut Vec<Value>) -> Result<Value, StreamError> {
        if !self.sent_last {
            self.sent_last = true;
            let reason = self.held_finish.clone().unwrap_or(Value::from("stop"));
            out.push(self.finish_chunk(reason));
        }
        Ok(self.summary())
    }

    pub fn saw_finish(&self) -> bool {
        self.finish.is_some()
    }

    fn header(&self, id: &str, fingerprint: Option<&Value>) -> Map<String, Value> {
        let mut chunk = Map::new();
        chunk.insert("id".into(), Value::from(id));
        chunk.insert("created".into(), Value::from(self.created.unwrap_or(0)));
        chunk.insert("model".into(), Value::from(self.model.as_str()));
        chunk.insert("object".into(), Value::from("chat.completion.chunk"));
        if let Some(fingerprint) = fingerprint.filter(|v| !v.is_null()) {
            chunk.insert("system_fingerprint".into(), fingerprint.clone());
        }
        chunk
    }

    /// The closing chunk LiteLLM synthesizes (`finish_reason_handler`): the latest event's id
    /// and fingerprint.
    fn finish_chunk(&self, reason: Value) -> Value {
        let id = self.last_id.clone().unwrap_or_default();
        let mut chunk = self.header(&id, self.last_fingerprint.as_ref());
        chunk.insert(
            "choices".into(),
            json!([{"finish_reason": reason, "index": 0, "delta": {}}]),
        );
        if let Some(tier) = self.last_service_tier.clone() {
            chunk.insert("service_tier".into(), tier);
        }
        Value::Object(chunk)
    }

    fn record_usage(&mut self, usage: &Value) {
        // LiteLLM keeps the last usage that reports any tokens.
        let reports = [
            "prompt_tokens",
            "completion_tokens",
            "total_tokens",
            "input_tokens",
            "output_tokens",
        ]
        .iter()
        .any(|key| usage.get(key).and_then(Value::as_i64).unwrap_or(0) > 0);
        if reports || self.usage.is_none() {
            self.usage = Some(usage.clone());
        }
    }

    fn record_delta(&mut self, delta: &Map<String, Value>) {
        if let Some(Value::String(text)) = delta.get("content") {
            self.content.push_str(text);
            self.saw_content = true;
        }
        if let Some(Value::String(text)) = delta
            .get("reasoning_content")
            .or_else(|| delta.get("reasoning"))
        {
            self.reasoning
                .get_or_insert_with(String::new)
                .push_str(text);
        }
        if let Some(Value::Array(calls)) = delta.get("tool_calls") {
            for call in calls {
                let index = call.get("index").and_then(Value::as_i64).unwrap_or(0);
                let position = match self.tool_calls.iter().position(|c| c.index == index) {
                    Some(position) => position,
                    None => {
                        self.tool_calls.push(ToolCall {
                            index,
                            ..ToolCall::default()
                        });
                        self.tool_calls.len() - 1
                    }
                };
                let entry = &mut self.tool_calls[position];
                if let Some(Value::String(id)) = call.get("id") {
                    entry.id.get_or_insert_with(|| id.clone());
                }
                let function = call.get("function");
                if let Some(Value::String(name)) = function.and_then(|f| f.get("name")) {
                    entry.name.get_or_insert_with(|| name.clone());
                }
                if let Some(Value::String(args)) = function.and_then(|f| f.get("arguments")) {
                    entry.arguments.push_str(args);
                }
            }
        }
    }

    /// LiteLLM's repetition guard: before a chunk is emitted, the ones emitted so far must not
    /// end in `repeat_limit` identical contents (longer than 2 characters).
    fn check_repetition(&self) -> Result<(), StreamError> {
        match &self.repeated {
            (Some(text), count)
                if self.options.repeat_limit > 0 && *count >= self.options.repeat_limit =>
            {
                Err(StreamError::Repetition(text.clone()))
            }
            _ => Ok(()),
        }
    }

    fn count_repetition(&mut self, content: Option<&str>) {
        match content.filter(|text| text.chars().count() > 2) {
            None => self.repeated = (None, 1),
            Some(text) if self.repeated.0.as_deref() == Some(text) => self.repeated.1 += 1,
            Some(text) => self.repeated = (Some(text.to_string()), 1),
        }
    }
}

/// LiteLLM's `is_chunk_non_empty` for one delta.
fn has_output(delta: &Map<String, Value>, first: bool) -> bool {
    let present = |key: &str| delta.get(key).is_some_and(|v| !v.is_null());
    matches!(delta.get("content"), Some(Value::String(text)) if !text.is_empty())
        || matches!(delta.get("tool_calls"), Some(Value::Array(calls)) if !calls.is_empty())
        || present("function_call")
        || present("reasoning_content")
        || present("reasoning")
        || present("annotations")
        || present("provider_specific_fields")
        || present("reasoning_items")
        || (first && present("role"))
}

/// LiteLLM's `map_finish_reason` for the values OpenAI-compatible servers send.
pub(crate) fn map_finish_reason(reason: &str) -> &'static str {
    match reason {
        "length" | "max_tokens" | "MAX_TOKENS" | "compaction" => "length",
        "tool_calls" | "tool_use" => "tool_calls",
        "function_call" => "function_call",
        "content_filter"
        | "content_filtered"
        | "refusal"
        | "SAFETY"
        | "sensitive"
        | "guardrail_intervened"
        | "RECITATION"
        | "ERROR_TOXIC" => "content_filter",
        _ => "stop",
    }
}

/// A tool call delta as LiteLLM's `ChatCompletionDeltaToolCall` dumps it.
fn tool_call_delta(call: &Value) -> Result<Value, ()> {
    let Some(call) = call.as_object() else {
        return Err(());
    };
    let Some(function) = call.get("function").and_then(Value::as_object) else {
        return Err(());
    };
    let mut out = Map::new();
    if let Some(id) = call.get("id").filter(|v| !v.is_null()) {
        out.insert("id".into(), id.clone());
    }
    let mut f = Map::new();
    let arguments = match function.get("arguments") {
        None | Some(Value::Null) => Value::from(""),
        Some(args) => args.clone(),
    };
    f.insert("arguments".into(), arguments);
    if let Some(name) = function.get("name").filter(|v| !v.is_null()) {
        f.insert("name".into(), name.clone());
    }
    out.insert("function".into(), Value::Object(f));
    let kind = match call.get("type") {
        None | Some(Value::Null) => Value::from("function"),
        Some(kind) => kind.clone(),
    };
    out.insert("type".into(), kind);
    out.insert(
        "index".into(),
        call.get("index").cloned().unwrap_or(Value::from(0)),
    );
    Ok(Value::Object(out))
}

/// Delta keys LiteLLM's `Delta` declares, in its dump order around the extras.
const DELTA_HEAD: &[&str] = &[
    "reasoning_content",
    "thinking_blocks",
    "reasoning_items",
    "provider_specific_fields",
];
const DELTA_TAIL: &[&str] = &[
    "content",
    "role",
    "function_call",
    "tool_calls",
    "audio",
    "images",
    "annotations",
];

/// A delta as LiteLLM dumps it (nulls dropped, `reasoning` renamed, role as decided).
fn output_delta(delta: &Map<String, Value>, role: Option<&str>) -> Result<Value, ()> {
    let mut out = Map::new();
    let value_of = |key: &str| -> Option<Value> {
        match key {
            "reasoning_content" => delta
                .get("reasoning_content")
                .filter(|v| !v.is_null())
                .or_else(|| delta.get("reasoning").filter(|v| !v.is_null()))
                .cloned(),
            "role" => role.map(Value::from),
            _ => delta.get(key).filter(|v| !v.is_null()).cloned(),
        }
    };
    for key in DELTA_HEAD {
        if let Some(value) = value_of(key) {
            out.insert((*key).into(), value);
        }
    }
    for (key, value) in delta {
        let declared = DELTA_HEAD.contains(&key.as_str())
            || DELTA_TAIL.contains(&key.as_str())
            || key == "reasoning";
        if !declared && !value.is_null() {
            out.insert(key.clone(), value.clone());
        }
    }
    for key in DELTA_TAIL {
        let Some(value) = value_of(key) else { continue };
        if *key == "tool_calls" {
            let calls = value
                .as_array()
                .ok_or(())?
                .iter()
                .map(tool_call_delta)
                .collect::<Result<Vec<_>, ()>>()?;
            out.insert("tool_calls".into(), Value::Array(calls));
        } else {
            out.insert((*key).into(), value);
        }
    }
    Ok(Value::Object(out))
}

static FRESH_IDS: AtomicU64 = AtomicU64::new(0);

/// `chatcmpl-<uuid4>` for a chunk without an id, as LiteLLM makes one.
pub(crate) fn fresh_id() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let counter = FRESH_IDS.fetch_add(1, Ordering::Relaxed);
    let digest = Sha256::digest(format!("{nanos}:{counter}:{}", std::process::id()));
    let mut bytes: [u8; 16] = digest[..16].try_into().unwrap_or([0; 16]);
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "chatcmpl-{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Top-level chunk keys LiteLLM handles itself; any other is copied onto the chunk.
const CHUNK_KEYS: &[&str] = &[
    "id",
    "object",
    "created",
    "model",
    "system_fingerprint",
    "choices",
    "usage",
    "service_tier",
];

impl ChatChunks {
    /// The whole answer as one chunk: Python hands it to LiteLLM's `stream_chunk_builder`,
    /// which prices and assembles it exactly as it would the thousands of chunks.
    fn summary(&self) -> Value {
        let mut delta = Map::new();
        if let Some(reasoning) = &self.reasoning {
            delta.insert("reasoning_content".into(), Value::from(reasoning.as_str()));
        }
        if self.saw_content || self.tool_calls.is_empty() {
            delta.insert("content".into(), Value::from(self.content.as_str()));
        }
        delta.insert("role".into(), Value::from("assistant"));
        if !self.tool_calls.is_empty() {
            let calls: Vec<Value> = self
                .tool_calls
                .iter()
                .map(|call| {
                    json!({
                        "id": call.id,
                        "function": {"arguments": call.arguments, "name": call.name},
                        "type": "function",
                        "index": call.index,
                    })
                })
                .collect();
            delta.insert("tool_calls".into(), Value::Array(calls));
        }
        let mut summary = self.header(
            self.first_id.as_deref().unwrap_or(""),
            self.first_fingerprint.as_ref(),
        );
        let finish = self.finish.clone().unwrap_or(Value::from("stop"));
        summary.insert(
            "choices".into(),
            json!([{"finish_reason": finish, "index": 0, "delta": delta}]),
        );
        if let Some(usage) = &self.usage {
            summary.insert("usage".into(), usage.clone());
        }
        if let Some(tier) = &self.last_service_tier {
            summary.insert("service_tier".into(), tier.clone());
        }
        // What LiteLLM's own usage chunk is stamped with (Python pops it).
        summary.insert(
            "_latest".into(),
            json!({"id": self.last_id, "system_fingerprint": self.last_fingerprint}),
        );
        Value::Object(summary)
    }
}

fn output_choice(choice: &Value, delta: Value) -> Value {
    let mut out = Map::new();
    if let Some(choice) = choice.as_object() {
        for (key, value) in choice {
            let declared = matches!(
                key.as_str(),
                "finish_reason" | "index" | "delta" | "logprobs" | "message"
            );
            if !declared && !value.is_null() {
                out.insert(key.clone(), value.clone());
            }
        }
    }
    out.insert(
        "index".into(),
        choice.get("index").cloned().unwrap_or(Value::from(0)),
    );
    out.insert("delta".into(), delta);
    if let Some(logprobs) = choice.get("logprobs").filter(|l| !l.is_null()) {
        out.insert("logprobs".into(), logprobs.clone());
    }
    Value::Object(out)
}

/// The upstream's service tier unless null, then its other top-level keys (OpenAI's
/// `obfuscation`, say) in upstream order, as LiteLLM's chunk has them.
fn copy_extras(upstream: &Map<String, Value>, chunk: &mut Map<String, Value>) {
    if let Some(tier) = upstream.get("service_tier").filter(|t| !t.is_null()) {
        chunk.insert("service_tier".into(), tier.clone());
    }
    for (key, value) in upstream {
        if !CHUNK_KEYS.contains(&key.as_str()) && key != "error" {
            chunk.insert(key.clone(), value.clone());
        }
    }
}

pub(crate) fn is_truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}
