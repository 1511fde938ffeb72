//! A chat conversation in the form Anthropic's Messages and Bedrock's Converse share, as
//! LiteLLM builds both: system and developer turns lifted into one list of blocks, tool results
//! riding in user turns, tool calls after the assistant's text, and consecutive turns of one
//! role merged (both APIs need alternating roles). Each provider writes its own blocks.

use serde_json::Value;

use super::error::Refusal;
use crate::model::{Content, Decline, Message, Role};
use crate::wire::body::Node;

/// How one provider writes the blocks of a turn.
pub struct BlockWriters {
    pub content: fn(&Content) -> Result<Vec<Node>, Refusal>,
    pub tool_result: fn(&Message) -> Result<Node, Decline>,
    pub tool_uses: fn(&Value) -> Result<Vec<Node>, Decline>,
}

/// The system blocks, and the alternating turns with their blocks.
pub struct Turns {
    system: Vec<Node>,
    turns: Vec<(Role, Vec<Node>)>,
}

impl Turns {
    pub fn new(messages: &[Message], write: &BlockWriters) -> Result<Turns, Refusal> {
        let mut system = Vec::new();
        let mut turns: Vec<(Role, Vec<Node>)> = Vec::new();
        for message in messages {
            if message.role.is_instruction() {
                system.extend((write.content)(&message.content)?);
                continue;
            }
            let (role, blocks) = match (message.role, &message.tool_calls) {
                (Role::Tool, _) => (Role::User, vec![(write.tool_result)(message)?]),
                (Role::Assistant, Some(calls)) => {
                    let mut blocks = match &message.content {
                        Content::Absent => Vec::new(),
                        content => (write.content)(content)?,
                    };
                    blocks.extend((write.tool_uses)(calls)?);
                    (Role::Assistant, blocks)
                }
                (role, _) => (role, (write.content)(&message.content)?),
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
