//! LiteLLM's usage-based routing (`usage-based-routing-v2`), as the lane picks by it: the
//! deployment with the fewest tokens this minute, at random among ties, leaving out those that
//! would pass their rpm or tpm limit (`_return_potential_deployments`). Each deployment's
//! counts are the router's counters (`<id>:<model>:tpm|rpm:<HH-MM>`) as the Python layer last
//! read them, plus what the lane picked or answered that the router has not counted yet (its
//! batch and replays count them: `counted`).
//!
//! Where any deployment is near a limit, or the prompt's tokens cannot be bounded against a
//! tpm limit (LiteLLM counts them with its `token_counter`), the lane picks nothing: the proxy's
//! router decides (`LaneReason::RoutingLimit`), once the lane's counts reached it.

use std::sync::{Arc, Mutex, MutexGuard};

use super::shuffle::Shuffle;
use super::usage::current_minute;

/// One deployment's usage this minute for the router's pick, and its limits.
#[derive(Debug)]
pub struct DeploymentUsage {
    tpm_limit: Option<i64>,
    rpm_limit: Option<i64>,
    counts: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    /// The UTC minute (minutes since the epoch) of the router's counters read.
    minute: u64,
    tpm: i64,
    rpm: i64,
    /// Picked or answered by the lane, not yet counted by the router, and the minute they
    /// belong to (the router's counters start over each minute, and so do these).
    pending_minute: u64,
    pending_tpm: i64,
    pending_rpm: i64,
}

impl Counts {
    fn roll(&mut self, now: u64) {
        if self.pending_minute != now {
            self.pending_minute = now;
            self.pending_tpm = 0;
            self.pending_rpm = 0;
        }
    }

    /// With no request pending, no tokens are (the router's total for an answer may differ
    /// from the lane's: nothing lingers).
    fn settle_tokens(&mut self) {
        if self.pending_rpm == 0 {
            self.pending_tpm = 0;
        }
    }

    /// (tpm, rpm) this minute: the router's, if read this minute, and the lane's not counted.
    fn current(&mut self, now: u64) -> (i64, i64) {
        self.roll(now);
        let fresh = self.minute == now;
        (
            self.pending_tpm + if fresh { self.tpm } else { 0 },
            self.pending_rpm + if fresh { self.rpm } else { 0 },
        )
    }
}

impl DeploymentUsage {
    pub fn new(tpm_limit: Option<i64>, rpm_limit: Option<i64>) -> DeploymentUsage {
        DeploymentUsage {
            tpm_limit,
            rpm_limit,
            counts: Mutex::new(Counts::default()),
        }
    }

    fn counts(&self) -> MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The router's counters for the deployment as just read (`minute`: minutes since the
    /// epoch, UTC, as the router keys them).
    pub fn read(&self, minute: u64, tpm: i64, rpm: i64) {
        let mut counts = self.counts();
        counts.minute = minute;
        counts.tpm = tpm;
        counts.rpm = rpm;
    }

    /// The router counted `rpm` requests and `tokens` tokens the lane picked or answered: they
    /// move from the lane's pending counts to the router's.
    pub fn counted(&self, rpm: i64, tokens: i64) {
        let now = current_minute();
        let mut counts = self.counts();
        counts.roll(now);
        counts.pending_rpm = (counts.pending_rpm - rpm).max(0);
        counts.pending_tpm = (counts.pending_tpm - tokens).max(0);
        counts.settle_tokens();
        if counts.minute == now {
            counts.rpm += rpm;
            counts.tpm += tokens;
        }
    }

    /// An answer's total tokens, which the router counts once it is logged.
    pub fn answered(&self, tokens: i64) {
        let now = current_minute();
        let mut counts = self.counts();
        counts.roll(now);
        counts.pending_tpm += tokens;
    }

    /// Whether the lane picked requests the router has not counted yet.
    pub fn pending(&self) -> bool {
        let mut counts = self.counts();
        counts.roll(current_minute());
        counts.pending_rpm > 0
    }

    /// Whether the router could leave the deployment out for a prompt of at most
    /// `prompt_tokens` tokens (None: unknown), at these counts.
    fn near_limit(&self, (tpm, rpm): (i64, i64), prompt_tokens: Option<i64>) -> bool {
        let over_rpm = self.rpm_limit.is_some_and(|limit| rpm + 1 >= limit);
        let over_tpm = self.tpm_limit.is_some_and(|limit| {
            prompt_tokens.is_none_or(|tokens| tpm.saturating_add(tokens) > limit)
        });
        over_rpm || over_tpm
    }

    fn has_tpm_limit(&self) -> bool {
        self.tpm_limit.is_some()
    }
}

/// The pick counted on its deployment (the router counts its request before the provider
/// call): given back when the request ends before it has a ticket (the proxy then serves it,
/// or nobody does), kept once the ticket carries it to the router's count.
#[derive(Debug)]
pub struct PickCounted(Option<Arc<DeploymentUsage>>);

impl PickCounted {
    pub fn keep(mut self) {
        self.0 = None;
    }
}

impl Drop for PickCounted {
    fn drop(&mut self) {
        if let Some(usage) = self.0.take() {
            let mut counts = usage.counts();
            counts.pending_rpm = (counts.pending_rpm - 1).max(0);
            counts.settle_tokens();
        }
    }
}

/// The pick among `usages` (one per deployment, in order): its index and its count, or None
/// where the router might leave a deployment out (near a limit; a prompt not bounded against a
/// tpm limit). `body`: the request as sent, whose size bounds its prompt's tokens.
pub fn pick(
    usages: &[&Arc<DeploymentUsage>],
    body: &[u8],
    shuffle: &Shuffle,
) -> Option<(usize, PickCounted)> {
    let prompt_tokens = if usages.iter().any(|usage| usage.has_tpm_limit()) {
        Some(prompt_bound(body)?)
    } else {
        Some(0)
    };
    let now = current_minute();
    let mut lowest = i64::MAX;
    let mut ties = Vec::with_capacity(usages.len());
    for (index, usage) in usages.iter().enumerate() {
        let current = usage.counts().current(now);
        if usage.near_limit(current, prompt_tokens) {
            return None;
        }
        if current.0 < lowest {
            lowest = current.0;
            ties.clear();
        }
        if current.0 == lowest {
            ties.push(index);
        }
    }
    let index = *ties.get(shuffle.pick(ties.len().max(1), &[]))?;
    let usage = Arc::clone(usages[index]);
    {
        let mut counts = usage.counts();
        counts.roll(now);
        counts.pending_rpm += 1;
    }
    Some((index, PickCounted(Some(usage))))
}

/// Content kinds LiteLLM's `token_counter` may count above their bytes (images by their size,
/// documents and files by their content): a body naming one (anywhere: the scan is by bytes)
/// has no bound here. Kinds it cannot count count 0 there, below any bound.
const UNBOUNDED_KINDS: [&[u8]; 3] = [b"image", b"file", b"document"];

/// An upper bound of the prompt's tokens as LiteLLM's `token_counter` counts them: the body's
/// size in bytes (a token is at least a byte of text, and a message's few tokens of framing
/// are fewer than its JSON's), unless it names a kind counted otherwise.
fn prompt_bound(body: &[u8]) -> Option<i64> {
    let named = |kind: &[u8]| body.windows(kind.len()).any(|window| window == kind);
    if UNBOUNDED_KINDS.iter().any(|kind| named(kind)) {
        return None;
    }
    i64::try_from(body.len()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usages(limits: &[(Option<i64>, Option<i64>)]) -> Vec<Arc<DeploymentUsage>> {
        limits
            .iter()
            .map(|&(tpm, rpm)| Arc::new(DeploymentUsage::new(tpm, rpm)))
            .collect()
    }

    fn picked(usages: &[Arc<DeploymentUsage>], body: &[u8]) -> Option<usize> {
        let refs: Vec<&Arc<DeploymentUsage>> = usages.iter().collect();
        pick(&refs, body, &Shuffle::default()).map(|(index, counted)| {
            counted.keep();
            index
        })
    }

    #[test]
    fn the_fewest_tokens_this_minute_win() {
        let found = usages(&[(None, None), (None, None)]);
        found[0].read(current_minute(), 30, 1);
        found[1].read(current_minute(), 10, 1);
        assert_eq!(picked(&found, b"{}"), Some(1));
        // Its answer's tokens count at once, before the router's next reading.
        found[1].answered(25);
        assert_eq!(picked(&found, b"{}"), Some(0));
        // The router counted them: the same figures, nothing counted twice.
        found[1].counted(1, 25);
        assert_eq!(picked(&found, b"{}"), Some(0));
    }

    #[test]
    fn ties_are_drawn_at_random() {
        let found = usages(&[(None, None), (None, None), (None, None)]);
        let mut seen = [0usize; 3];
        for _ in 0..300 {
            seen[picked(&found, b"{}").unwrap_or(9)] += 1;
        }
        assert!(seen.iter().all(|n| *n > 50), "{seen:?}");
    }

    #[test]
    fn near_a_limit_the_router_decides() {
        let found = usages(&[(None, Some(3)), (None, None)]);
        found[0].read(current_minute(), 0, 1);
        found[1].read(current_minute(), 50, 0);
        assert_eq!(picked(&found, b"{}"), Some(0));
        // 2 + 1 >= 3: the router would leave it out.
        assert_eq!(picked(&found, b"{}"), None);
        let tpm = usages(&[(Some(100), None)]);
        tpm[0].read(current_minute(), 90, 0);
        assert_eq!(picked(&tpm, b"{\"a\":1}"), Some(0));
        assert_eq!(picked(&tpm, b"{\"messages\":\"twelve bytes\"}"), None);
    }

    #[test]
    fn a_prompt_with_images_has_no_bound_against_a_tpm_limit() {
        let body = br#"{"messages":[{"role":"user","content":[{"type":"image_url"}]}]}"#;
        assert_eq!(picked(&usages(&[(Some(1_000_000), None)]), body), None);
        assert_eq!(picked(&usages(&[(None, Some(1_000_000))]), body), Some(0));
    }

    #[test]
    fn a_pick_without_a_ticket_is_given_back() {
        let found = usages(&[(None, Some(3))]);
        let refs: Vec<&Arc<DeploymentUsage>> = found.iter().collect();
        let shuffle = Shuffle::default();
        for _ in 0..5 {
            let (_, counted) = pick(&refs, b"{}", &shuffle).expect("picked");
            drop(counted);
        }
        assert!(!found[0].pending());
    }

    #[test]
    fn a_reading_of_another_minute_counts_nothing() {
        let found = usages(&[(None, Some(5))]);
        found[0].read(current_minute().saturating_sub(1), 0, 9);
        assert_eq!(picked(&found, b"{}"), Some(0));
    }
}
