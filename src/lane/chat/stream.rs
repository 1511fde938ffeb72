//! Chat streams on the lane: the provider's events become the proxy's SSE frames in Rust,
//! written to the client as they arrive; LiteLLM's logging runs in the replay afterwards.
//!
//! The lane answers only once the first chunk is in: a stream that fails or ends before it is
//! answered by the proxy (LiteLLM then answers with an error status, not a stream). After the
//! first chunk the lane writes every frame itself, the first chunk's too (the proxy names the
//! model group in it, as in the others). Its end is `data: [DONE]` unless the client asked for
//! the usage chunk or the stream failed: LiteLLM writes those ends from its own state (usage and
//! cost, its exception mapping), so the proxy's end goes to the client (see `streamed`).

use serde_json::Value;

use crate::http::UpstreamRequest;
use crate::lane::head::Head;
use crate::lane::headers::{CostHeaders, HeaderSet, answer_headers};
use crate::lane::served::{ClientRequest, Served};
use crate::lane::state::Serving;
use crate::lane::streamed::{self, End, StreamFrames, end_piece};
use crate::stream::{Batch, Piece, StreamTransform, proxy_frame};

/// A chat stream's frames: the proxy's SSE frame of each chunk, naming the model group.
struct ChatFrames {
    model_group: String,
    /// The client asked for the usage chunk (`stream_options.include_usage`).
    usage_chunk: bool,
    /// What the replay hands LiteLLM first.
    first_chunk: Value,
}

impl StreamFrames for ChatFrames {
    const RAW: bool = false;
    const CLOSING: &'static [u8] = b"data: [DONE]\n\n";

    fn frames(&mut self, batch: Batch) -> Vec<u8> {
        let mut frames = Vec::new();
        for chunk in &batch.chunks {
            proxy_frame(chunk, &self.model_group, &mut frames);
        }
        frames
    }

    fn proxy_writes(&self, end: &End) -> bool {
        end.is_err() || self.usage_chunk
    }

    fn pieces(&self, end: End) -> Vec<Piece> {
        vec![
            Piece::Chunks(vec![self.first_chunk.clone()]),
            end_piece(end),
        ]
    }
}

pub(super) async fn serve(
    request: ClientRequest<'_>,
    mut head: Head,
    upstream: UpstreamRequest,
    transform: Box<dyn StreamTransform>,
    usage_chunk: bool,
    serving: Serving,
) -> Served {
    let lane = request.lane;
    let mut opened = match streamed::open(request, &head, upstream, transform, false).await {
        Ok(opened) => opened,
        Err(served) => return served,
    };
    let first = tokio::select! {
        first = opened.receiver.next_batch(1) => first,
        // Dropping the receiver ends the pump and closes the provider connection.
        () = request.connection.closed() => return Served::Gone,
    };
    let upstream_ms = opened.upstream_ms();
    let Some(first) = first else {
        return Served::Gone;
    };
    let Some(first_chunk) = first.chunks.into_iter().next() else {
        // Over before any chunk: the proxy answers (with LiteLLM's error status, say).
        let pieces = first.end.into_iter().map(end_piece).collect();
        return streamed::to_proxy(lane, &head, opened, pieces, false);
    };
    if let Some(usage) = &head.deployment.usage {
        // The router counts a stream's request as it opens, its tokens once it is logged.
        head.group_usage = usage.serve(0);
    }
    let headers = answer_headers(
        &lane.table.settings(),
        &head,
        HeaderSet::Chat,
        CostHeaders::Stream,
        upstream_ms,
        &opened.provider_headers,
    );
    let mut first_frame = Vec::new();
    proxy_frame(&first_chunk, &head.model_group, &mut first_frame);
    let frames = ChatFrames {
        model_group: head.model_group.clone(),
        usage_chunk,
        first_chunk,
    };
    streamed::answer_with(
        request,
        head,
        opened,
        frames,
        first_frame,
        first.end,
        headers,
        serving,
    )
}
