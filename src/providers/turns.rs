//! A chat conversation in the form Anthropic's Messages and Bedrock's Converse share, as
//! LiteLLM builds both: system and developer turns lifted into one list of blocks, tool results
//! riding in user turns, tool calls after the assistant's text, and consecutive turns of one
//! role merged (both APIs need alternating roles). Each provider writes its own blocks.

use bytes::Bytes;
use serde_json::Value;

use super::error::Refusal;
use super::rules::native_body_decline;
use crate::model::{Content, ContentPart, Decline, DeclineCode, Message, Role};
use crate::wire::body::Node;
use crate::wire::media::{DataUrl, parse_data_url};

/// How one provider writes the blocks of a turn.
pub struct BlockWriters {
    pub text: fn(&Bytes) -> Node,
    /// An image given as a data URL (the base64 stays a slice of the caller's).
    pub image: fn(DataUrl) -> Result<Node, Refusal>,
    pub tool_result: fn(&Message) -> Result<Node, Decline>,
    pub tool_uses: fn(&Value) -> Result<Vec<Node>, Decline>,
}

/// The system blocks, and the alternating turns with their blocks.
pub struct Turns {
    system: Vec<Node>,
    turns: Vec<(Role, Vec<Node>)>,
}

impl Turns {
    /// A request's conversation, checked in this order (the first decline counts): the message
    /// shapes these providers leave to LiteLLM (`native_body_decline`), the provider's tool
    /// fields (`tool_fields`, kept for its body), then the turns.
    pub fn checked<T>(
        messages: &[Message],
        write: &BlockWriters,
        tool_fields: impl FnOnce() -> Result<T, Decline>,
    ) -> Result<(T, Turns), Refusal> {
        if let Some(decline) = native_body_decline(messages) {
            return Err(decline.into());
        }
        let tool_fields = tool_fields()?;
        Ok((tool_fields, Turns::new(messages, write)?))
    }

    fn new(messages: &[Message], write: &BlockWriters) -> Result<Turns, Refusal> {
        let mut system = Vec::new();
        let mut turns: Vec<(Role, Vec<Node>)> = Vec::new();
        for message in messages {
            if message.role.is_instruction() {
                system.extend(content_blocks(&message.content, write)?);
                continue;
            }
            let (role, blocks) = match (message.role, &message.tool_calls) {
                (Role::Tool, _) => (Role::User, vec![(write.tool_result)(message)?]),
                (Role::Assistant, Some(calls)) => {
                    let mut blocks = match &message.content {
                        Content::Absent => Vec::new(),
                        content => content_blocks(content, write)?,
                    };
                    blocks.extend((write.tool_uses)(calls)?);
                    (Role::Assistant, blocks)
                }
                (role, _) => (role, content_blocks(&message.content, write)?),
            };
            match turns.last_mut() {
                Some((last, existing)) if *last == role => existing.extend(blocks),
                _ => turns.push((role, blocks)),
            }
        }
        Ok(Turns { system, turns })
    }

    /// Appends the body's `messages` (`[{"role", "content": [blocks]}]`) and, when there are
    /// system blocks, its `system`.
    pub fn push_into(self, fields: &mut Vec<(String, Node)>) {
        let messages = self
            .turns
            .into_iter()
            .map(|(role, blocks)| {
                Node::object([
                    ("role", Node::from(role.as_str())),
                    ("content", Node::Array(blocks)),
                ])
            })
            .collect();
        fields.push(("messages".into(), Node::Array(messages)));
        if !self.system.is_empty() {
            fields.push(("system".into(), Node::Array(self.system)));
        }
    }
}

/// A message's content as the provider's blocks (images only reach here from user turns: see
/// `native_body_decline`).
fn content_blocks(content: &Content, write: &BlockWriters) -> Result<Vec<Node>, Refusal> {
    let parts = match content {
        Content::Text(text) => return Ok(vec![(write.text)(text)]),
        Content::Parts(parts) => parts,
        // Tool-calling turns are declined before (`native_body_decline`).
        Content::Absent => {
            return Err(Decline::new(DeclineCode::MessageWithoutContent, "no content").into());
        }
    };
    parts
        .iter()
        .map(|part| match part {
            ContentPart::Text(text) => Ok((write.text)(text)),
            ContentPart::Image(image) => {
                // LiteLLM downloads http(s) images for these providers; that I/O stays in
                // Python.
                if !image.url.starts_with(b"data:") {
                    return Err(
                        Decline::new(DeclineCode::ImageUrlRemote, "non-data image URL").into(),
                    );
                }
                (write.image)(parse_data_url(&image.url)?)
            }
        })
        .collect()
}
