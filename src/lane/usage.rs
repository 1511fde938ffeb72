//! A model group's usage this minute, as LiteLLM's router puts it in its answers' headers
//! (`x-ratelimit-remaining-requests`, `-tokens`, and their limits) for a group with tpm or rpm
//! limits: the requests and tokens its router counted this minute (the Python layer's reading
//! of the router's counters, `read`), plus what the lane served that the router has not counted
//! yet (its replays and the batch's logging count them: `counted`). The router counts an answer
//! before it writes the headers, so an answer's own request and tokens are in its headers; a
//! stream's request is counted as it opens (`serve(0)`), its tokens by the router's success
//! callback once it is logged (in the batch, as LiteLLM logs a stream after its end).

use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Debug)]
pub struct GroupUsage {
    rpm_limit: Option<i64>,
    tpm_limit: Option<i64>,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// The UTC minute of the router's counters read (minutes since the epoch).
    minute: u64,
    rpm: i64,
    tpm: i64,
    /// Served by the lane, not yet counted by the router.
    pending_rpm: i64,
    pending_tpm: i64,
}

impl GroupUsage {
    pub fn new(rpm_limit: Option<i64>, tpm_limit: Option<i64>) -> GroupUsage {
        GroupUsage {
            rpm_limit,
            tpm_limit,
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The router's counters for the group as just read (`minute`: minutes since the epoch,
    /// UTC, as the router keys them).
    pub fn read(&self, minute: u64, rpm: i64, tpm: i64) {
        let mut state = self.state();
        state.minute = minute;
        state.rpm = rpm;
        state.tpm = tpm;
    }

    /// The router counted `rpm` requests and `tokens` tokens the lane served (a replay): they
    /// move from the lane's pending counts to the router's.
    pub fn counted(&self, rpm: i64, tokens: i64) {
        let mut state = self.state();
        state.pending_rpm = (state.pending_rpm - rpm).max(0);
        state.pending_tpm = (state.pending_tpm - tokens).max(0);
        if state.minute == current_minute() {
            state.rpm += rpm;
            state.tpm += tokens;
        }
    }

    /// Counts an answer the lane serves (one request, its total tokens) and returns the router's
    /// headers for it, in the router's order.
    pub fn serve(&self, tokens: i64) -> Vec<(String, String)> {
        let mut state = self.state();
        state.pending_rpm += 1;
        state.pending_tpm += tokens;
        let fresh = state.minute == current_minute();
        let rpm = state.pending_rpm + if fresh { state.rpm } else { 0 };
        let tpm = state.pending_tpm + if fresh { state.tpm } else { 0 };
        drop(state);
        let mut headers = Vec::with_capacity(4);
        if let Some(limit) = self.tpm_limit {
            headers.push((
                "x-ratelimit-remaining-tokens".into(),
                (limit - tpm).to_string(),
            ));
            headers.push(("x-ratelimit-limit-tokens".into(), limit.to_string()));
        }
        if let Some(limit) = self.rpm_limit {
            headers.push((
                "x-ratelimit-remaining-requests".into(),
                (limit - rpm).to_string(),
            ));
            headers.push(("x-ratelimit-limit-requests".into(), limit.to_string()));
        }
        headers
    }
}

/// The current UTC minute, in minutes since the epoch.
pub fn current_minute() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs() / 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value<'a>(headers: &'a [(String, String)], name: &str) -> &'a str {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map_or("", |(_, v)| v)
    }

    #[test]
    fn an_answer_counts_itself_on_the_routers_counts() {
        let usage = GroupUsage::new(Some(100), Some(1000));
        usage.read(current_minute(), 10, 200);
        let headers = usage.serve(30);
        assert_eq!(value(&headers, "x-ratelimit-remaining-requests"), "89");
        assert_eq!(value(&headers, "x-ratelimit-remaining-tokens"), "770");
        assert_eq!(value(&headers, "x-ratelimit-limit-requests"), "100");
        // Its replay counts it: the totals stay the same.
        usage.counted(1, 30);
        let headers = usage.serve(0);
        assert_eq!(value(&headers, "x-ratelimit-remaining-requests"), "88");
        assert_eq!(value(&headers, "x-ratelimit-remaining-tokens"), "770");
    }

    #[test]
    fn a_streams_tokens_count_once_the_router_counted_them() {
        let usage = GroupUsage::new(Some(100), Some(1000));
        usage.read(current_minute(), 0, 0);
        let opened = usage.serve(0);
        assert_eq!(value(&opened, "x-ratelimit-remaining-requests"), "99");
        assert_eq!(value(&opened, "x-ratelimit-remaining-tokens"), "1000");
        // The batch's logging: the router's count of its request as it opened, then of its
        // tokens at its end.
        usage.counted(1, 0);
        let next = usage.serve(0);
        assert_eq!(value(&next, "x-ratelimit-remaining-tokens"), "1000");
        usage.counted(0, 14);
        let after = usage.serve(0);
        assert_eq!(value(&after, "x-ratelimit-remaining-requests"), "97");
        assert_eq!(value(&after, "x-ratelimit-remaining-tokens"), "986");
    }

    #[test]
    fn a_reading_of_another_minute_counts_nothing() {
        let usage = GroupUsage::new(Some(5), None);
        usage.read(current_minute().saturating_sub(2), 4, 0);
        let headers = usage.serve(7);
        assert_eq!(value(&headers, "x-ratelimit-remaining-requests"), "4");
        assert_eq!(headers.len(), 2);
    }
}
