//! One session relayed: frames pass as they are (text stays text, the provider's binary frames
//! go to the client as text, as LiteLLM's relay sends them), reading only each frame's type;
//! what LiteLLM's relay logs is kept for the session's replay, and its two actions on frames
//! are taken here too (a `session.update` lifted to the GA shape, a `response.create` after a
//! transcript). The session ends as LiteLLM's relay ends it.

use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{Message, Utf8Bytes};

use super::events::{
    AUDIO_APPEND, ClientFrame, Logged, RESPONSE_CREATE, TRANSCRIPTION_COMPLETED, client_frame,
    event_type, is_event, is_transcription_session,
};
use super::pool::close_quietly;
use super::upstream::{Dialed, Socket};

/// How often both sides are pinged (uvicorn's `ws_ping_interval`, the `websockets` client's
/// `ping_interval`), so idle sessions survive proxies and load balancers between.
const KEEPALIVE_EVERY: Duration = Duration::from_secs(20);
/// How long the client may take to answer the relay's close frame.
const CLIENT_CLOSE_WAIT: Duration = Duration::from_secs(1);

/// How a session ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SessionEnd {
    /// The provider closed it: its close code (None: the connection ended without a close
    /// frame) and reason.
    Provider { code: Option<u16>, reason: String },
    /// The client closed it, left, or sent a binary frame (LiteLLM's relay reads text only).
    Client,
}

/// What the client is told when the provider ends the session: LiteLLM's `error` event (None
/// for a normal close), close code and reason, worked out by LiteLLM's own functions.
#[derive(Clone, Debug)]
pub struct ClientClose {
    pub error_event: Option<String>,
    pub code: u16,
    pub reason: String,
}

/// Works out the client's close from the provider's (see `ClientClose`).
pub type CloseNotice = dyn Fn(&SessionEnd) -> Option<ClientClose> + Send + Sync;

/// One frame of the session's record: which side sent it, and the frame as it came.
#[derive(Clone, Debug)]
pub struct RecordedFrame {
    pub from_client: bool,
    pub text: Utf8Bytes,
}

/// Relays until either side ends the session; the record and how it ended.
pub(super) async fn relay(
    mut client: Socket,
    dialed: Dialed,
    logged: &Logged,
    notice: Option<Arc<CloseNotice>>,
) -> (Vec<RecordedFrame>, SessionEnd) {
    let Dialed {
        socket: mut provider,
        first_event,
    } = dialed;
    let mut session = Session::default();
    session
        .on_provider_frame(first_event, &mut client, &mut provider, logged)
        .await;
    // uvicorn pings the client, and the `websockets` client the provider, every 20 s.
    let mut keepalive = tokio::time::interval_at(
        tokio::time::Instant::now() + KEEPALIVE_EVERY,
        KEEPALIVE_EVERY,
    );
    let (end, client_dropped) = loop {
        tokio::select! {
            _ = keepalive.tick() => {
                let _ = client.send(Message::Ping(Default::default())).await;
                let _ = provider.send(Message::Ping(Default::default())).await;
            }
            from_client = client.next() => match from_client {
                // A frame LiteLLM's relay fails on ends it as a binary frame does.
                Some(Ok(Message::Text(text))) => {
                    if !session.on_client_frame(text, &mut provider).await {
                        break (SessionEnd::Client, true);
                    }
                }
                // LiteLLM reads text only: a binary frame ends its relay, and uvicorn then drops
                // the connection without a close frame.
                Some(Ok(Message::Binary(_))) => break (SessionEnd::Client, true),
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => {
                    break (SessionEnd::Client, false);
                }
                // Pings are answered by the socket itself; pongs need nothing.
                Some(Ok(_)) => {}
            },
            from_provider = provider.next() => match from_provider {
                Some(Ok(Message::Text(text))) => {
                    session.on_provider_frame(text, &mut client, &mut provider, logged).await;
                }
                Some(Ok(Message::Binary(bytes))) => {
                    // LiteLLM decodes them and skips what is not UTF-8.
                    if let Ok(text) = Utf8Bytes::try_from(bytes) {
                        session.on_provider_frame(text, &mut client, &mut provider, logged).await;
                    }
                }
                Some(Ok(Message::Close(frame))) => {
                    break (SessionEnd::Provider {
                        // A close frame without a code reads as 1005 in `websockets`.
                        code: Some(frame.as_ref().map_or(1005, |f| u16::from(f.code))),
                        reason: frame.map(|f| f.reason.to_string()).unwrap_or_default(),
                    }, false);
                }
                Some(Err(_)) | None => break (SessionEnd::Provider { code: None, reason: String::new() }, false),
                Some(Ok(_)) => {}
            },
        }
    };
    session.keep_last_client_frame();
    tokio::spawn(close_quietly(provider));
    match &end {
        SessionEnd::Client if client_dropped => drop(client),
        SessionEnd::Client => {
            // The client's close frame has its answer queued; send it.
            let _ = tokio::time::timeout(CLIENT_CLOSE_WAIT, client.flush()).await;
        }
        SessionEnd::Provider { .. } => {
            let told = match notice {
                Some(notice) => {
                    let end = end.clone();
                    tokio::task::spawn_blocking(move || notice(&end))
                        .await
                        .ok()
                        .flatten()
                }
                None => None,
            };
            let told = told.unwrap_or(ClientClose {
                error_event: None,
                code: 1011,
                reason: String::new(),
            });
            if let Some(event) = told.error_event {
                let _ = client.send(Message::text(event)).await;
            }
            let frame = CloseFrame {
                code: told.code.into(),
                reason: told.reason.into(),
            };
            let _ = tokio::time::timeout(CLIENT_CLOSE_WAIT, async {
                if client.close(Some(frame)).await.is_ok() {
                    while let Some(Ok(_)) = client.next().await {}
                }
            })
            .await;
        }
    }
    (session.record, end)
}

#[derive(Default)]
struct Session {
    record: Vec<RecordedFrame>,
    /// The last client frame when the record left it out (an audio chunk): LiteLLM logs a
    /// session's last client frame as its `input`.
    last_client_left_out: Option<Utf8Bytes>,
    transcription_only: bool,
}

impl Session {
    /// Relays one client frame; false when LiteLLM's relay would have ended the session on it.
    async fn on_client_frame(&mut self, text: Utf8Bytes, provider: &mut Socket) -> bool {
        let kind = event_type(&text);
        let action = client_frame(kind.as_deref(), &text);
        if kind.as_deref() == Some(AUDIO_APPEND) {
            self.last_client_left_out = Some(text.clone());
        } else {
            self.last_client_left_out = None;
            self.record.push(RecordedFrame {
                from_client: true,
                text: text.clone(),
            });
        }
        let sent = match action {
            ClientFrame::Forward => text,
            ClientFrame::Rewritten(sent) => Utf8Bytes::from(sent),
            ClientFrame::EndsRelay => return false,
        };
        // A provider gone mid-send ends the session through its own side of the select.
        let _ = provider.send(Message::Text(sent)).await;
        true
    }

    async fn on_provider_frame(
        &mut self,
        text: Utf8Bytes,
        client: &mut Socket,
        provider: &mut Socket,
        logged: &Logged,
    ) {
        let kind = event_type(&text);
        if let Some(kind) = kind.as_deref()
            && is_transcription_session(kind, &text)
        {
            self.transcription_only = true;
        }
        if logged.keeps_backend(kind.as_deref()) {
            self.record.push(RecordedFrame {
                from_client: false,
                text: text.clone(),
            });
        }
        let transcript = kind.as_deref() == Some(TRANSCRIPTION_COMPLETED)
            && is_event(&text, TRANSCRIPTION_COMPLETED);
        let _ = client.send(Message::Text(text)).await;
        if transcript && !self.transcription_only {
            let _ = provider.send(Message::text(RESPONSE_CREATE)).await;
        }
    }

    fn keep_last_client_frame(&mut self) {
        if let Some(text) = self.last_client_left_out.take() {
            self.record.push(RecordedFrame {
                from_client: true,
                text,
            });
        }
    }
}
