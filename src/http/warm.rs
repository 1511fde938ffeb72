//! Warm upstream connections: each `rust: true` deployment's origin keeps connections open in
//! the shared pool, so the first call after startup or a quiet spell does not pay the connect
//! and TLS handshake.
//!
//! reqwest cannot dial a connection without a request (its connector never sees a destination
//! it did not get from one), so the warmer sends requests that carry nothing: `OPTIONS /` to
//! the origin, without credentials, headers of the deployment or a body. OPTIONS is the method
//! HTTP defines as a no-op that reads or changes nothing (RFC 9110 §9.3.7); no provider bills
//! a request without a key, and the answer (often a 404 or 405) is read and dropped. Each
//! round sends `count` of them at once: over HTTP/1.1 each takes its own pooled connection (or
//! dials one, when the upstream closed it), over HTTP/2 one connection carries them all and
//! the client's keep-alive pings hold it between rounds.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::task::{AbortHandle, JoinSet};

use super::client::Transport;

/// Failed rounds back off from this, doubling, to [`BACKOFF_MAX`]; a round that reached the
/// upstream resets it.
const BACKOFF_FIRST: Duration = Duration::from_millis(500);
const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// Warm connections per origin and timeout at most, whatever the setting says.
pub const MAX_CONNECTIONS: usize = 64;

/// One origin as one client reaches it: the pool is per client, and clients are per timeout.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WarmTarget {
    /// `scheme://host:port/`, nothing else of the deployment's URL.
    pub origin: reqwest::Url,
    pub timeout: Duration,
}

/// How a target is kept warm.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WarmPlan {
    pub connections: usize,
    pub interval: Duration,
}

/// The warming tasks of this process, by target, and their counts.
#[derive(Default)]
pub struct Warmer {
    tasks: Mutex<HashMap<WarmTarget, (WarmPlan, AbortHandle)>>,
    counts: Arc<WarmCounts>,
}

#[derive(Default)]
pub struct WarmCounts {
    /// Warming requests the upstream answered (any status).
    pub answered: AtomicU64,
    /// Warming requests that failed (refused, timed out, closed).
    pub failed: AtomicU64,
}

/// The origin of a provider URL (`scheme://host:port/`), None when it has none.
pub fn origin_of(url: &str) -> Option<reqwest::Url> {
    let mut origin = reqwest::Url::parse(url).ok()?;
    if !matches!(origin.scheme(), "http" | "https") || origin.host().is_none() {
        return None;
    }
    // Credentials in a URL never go with a warming request.
    origin.set_username("").ok()?;
    origin.set_password(None).ok()?;
    origin.set_path("/");
    origin.set_query(None);
    origin.set_fragment(None);
    Some(origin)
}

impl Warmer {
    /// Makes `targets` the warmed set: new ones start warming now, changed ones restart, the
    /// rest stop (their idle connections stay in the pool until it drops them). Never waits
    /// for the network.
    pub fn configure(
        &self,
        transport: Arc<dyn WarmSend>,
        runtime: &tokio::runtime::Handle,
        targets: HashMap<WarmTarget, WarmPlan>,
    ) {
        let mut tasks = self
            .tasks
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        tasks.retain(|target, (plan, task)| {
            let keep = targets.get(target) == Some(plan);
            if !keep {
                task.abort();
            }
            keep
        });
        for (target, plan) in targets {
            if plan.connections == 0 || tasks.contains_key(&target) {
                continue;
            }
            let task = runtime.spawn(keep_warm(
                Arc::clone(&transport),
                target.clone(),
                plan,
                Arc::clone(&self.counts),
            ));
            tasks.insert(target, (plan, task.abort_handle()));
        }
    }

    /// (targets warmed, warming requests answered, failed).
    pub fn counts(&self) -> (usize, u64, u64) {
        let targets = self
            .tasks
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .len();
        (
            targets,
            self.counts.answered.load(Ordering::Relaxed),
            self.counts.failed.load(Ordering::Relaxed),
        )
    }
}

/// What the warmer needs of the transport (the engine's, or a test's).
pub trait WarmSend: Send + Sync + 'static {
    /// One warming request; Ok(true) when the connection speaks HTTP/2.
    fn warm_once(
        &self,
        target: &WarmTarget,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<bool, ()>> + Send + '_>>;
}

impl WarmSend for Transport {
    fn warm_once(
        &self,
        target: &WarmTarget,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<bool, ()>> + Send + '_>> {
        let origin = target.origin.clone();
        let timeout = target.timeout;
        Box::pin(async move { self.warm(origin, timeout).await.map_err(|_| ()) })
    }
}

async fn keep_warm(
    transport: Arc<dyn WarmSend>,
    target: WarmTarget,
    plan: WarmPlan,
    counts: Arc<WarmCounts>,
) {
    let mut backoff = BACKOFF_FIRST;
    // Until an answer says HTTP/2, each round warms `connections` connections.
    let mut http2 = false;
    loop {
        let mut round = JoinSet::new();
        for _ in 0..if http2 { 1 } else { plan.connections } {
            let transport = Arc::clone(&transport);
            let target = target.clone();
            round.spawn(async move { transport.warm_once(&target).await });
        }
        let mut answered = false;
        while let Some(outcome) = round.join_next().await {
            match outcome {
                Ok(Ok(speaks_h2)) => {
                    answered = true;
                    http2 = speaks_h2;
                    counts.answered.fetch_add(1, Ordering::Relaxed);
                }
                _ => {
                    counts.failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        let wait = if answered {
            backoff = BACKOFF_FIRST;
            plan.interval
        } else {
            let wait = backoff;
            backoff = (backoff * 2).min(BACKOFF_MAX);
            wait.min(plan.interval.max(BACKOFF_FIRST))
        };
        tokio::time::sleep(wait).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Answers every warming request at once, as HTTP/2 or not, and notes when each came.
    struct Answering {
        http2: bool,
        sent: Mutex<Vec<std::time::Instant>>,
    }

    impl WarmSend for Answering {
        fn warm_once(
            &self,
            _target: &WarmTarget,
        ) -> std::pin::Pin<Box<dyn Future<Output = Result<bool, ()>> + Send + '_>> {
            if let Ok(mut sent) = self.sent.lock() {
                sent.push(std::time::Instant::now());
            }
            Box::pin(async move { Ok(self.http2) })
        }
    }

    /// The sizes of the rounds warming one target of 3 connections every 50 ms sent, until it
    /// was removed; and checks that removing it stopped them.
    fn rounds(http2: bool) -> Vec<usize> {
        let runtime = tokio::runtime::Runtime::new().expect("a runtime");
        let sender = Arc::new(Answering {
            http2,
            sent: Mutex::new(Vec::new()),
        });
        let target = WarmTarget {
            origin: origin_of("http://127.0.0.1:9/v1").expect("a URL with an origin"),
            timeout: Duration::from_secs(5),
        };
        let plan = WarmPlan {
            connections: 3,
            interval: Duration::from_millis(50),
        };
        let warmer = Warmer::default();
        warmer.configure(
            sender.clone(),
            runtime.handle(),
            HashMap::from([(target, plan)]),
        );
        std::thread::sleep(Duration::from_millis(180));
        warmer.configure(sender.clone(), runtime.handle(), HashMap::new());
        let sent = |sender: &Answering| sender.sent.lock().map(|s| s.clone()).unwrap_or_default();
        std::thread::sleep(Duration::from_millis(20));
        let stopped = sent(&sender);
        std::thread::sleep(Duration::from_millis(120));
        assert_eq!(sent(&sender).len(), stopped.len(), "kept warming");
        // Requests of one round come together; rounds are 50 ms apart.
        let mut sizes = vec![0];
        for pair in stopped.windows(2) {
            if pair[1] - pair[0] > Duration::from_millis(25) {
                sizes.push(0);
            }
            *sizes.last_mut().expect("one round at least") += 1;
        }
        sizes[0] += 1;
        sizes
    }

    #[test]
    fn http1_rounds_warm_each_connection() {
        let sizes = rounds(false);
        assert!(sizes.len() >= 2, "{sizes:?}");
        assert!(sizes.iter().all(|size| *size == 3), "{sizes:?}");
    }

    #[test]
    fn http2_rounds_send_one_request_after_the_first() {
        let sizes = rounds(true);
        assert!(sizes.len() >= 2, "{sizes:?}");
        assert_eq!(sizes[0], 3, "{sizes:?}");
        assert!(sizes[1..].iter().all(|size| *size == 1), "{sizes:?}");
    }

    #[test]
    fn the_origin_drops_the_path_query_and_credentials() {
        let origin = origin_of("https://user:secret@api.example.com:8443/v1/chat?key=k#x");
        assert_eq!(
            origin.map(|url| url.to_string()),
            Some("https://api.example.com:8443/".to_string())
        );
        assert_eq!(origin_of("unix:/tmp/socket"), None);
    }
}
