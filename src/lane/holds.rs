//! Holds: what the lane admitted against LiteLLM's counters that LiteLLM has not counted yet.
//!
//! The lane answers before LiteLLM's auth and hooks run; the replay counts the request in
//! LiteLLM's own counters afterwards (the budget reservation, the rate limiter's window). Until
//! then each admitted request holds what it will count, on every counter it will count on (a
//! key's budget, an rpm scope shared by every key of a team...), so that the lane's next
//! admissions see it. The Python layer releases a hold once LiteLLM's counters hold the
//! replay's count (it reads them again then); a request that ends before its ticket releases
//! its hold as it drops, and a lost ticket's hold lapses `HOLD_LIFETIME` after it was kept for
//! the replay. A hold still owned by its request (a parallel-request slot, until the answer is
//! complete) lasts as long as the request, however long its stream.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// A hold whose replay never reported back (its ticket lost) stops counting after this.
const HOLD_LIFETIME: Duration = Duration::from_secs(120);
/// How long a request the lane refused on a counter waits for that counter's holds to go.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// One counter a request would count on: `amount` fits while `held + amount ≤ room`.
#[derive(Clone, Debug, PartialEq)]
pub struct Claim {
    /// The counter, as the lane names it (a key hash for its budget, `rpm:…` for a window).
    pub counter: String,
    pub amount: f64,
    /// What the counter has left, as LiteLLM's counters were last read (less any margin).
    pub room: f64,
}

#[derive(Default)]
pub struct Holds {
    state: Mutex<HoldState>,
    released: Notify,
}

/// A live hold's counters, and when it was kept for its replay (None: still owned).
type LiveHold = (Vec<(String, f64)>, Option<Instant>);

#[derive(Default)]
struct HoldState {
    by_counter: HashMap<String, f64>,
    live: HashMap<u64, LiveHold>,
    next_id: u64,
    last_purge: Option<Instant>,
}

impl HoldState {
    fn release(&mut self, id: u64) -> bool {
        let Some((counters, _)) = self.live.remove(&id) else {
            return false;
        };
        for (counter, amount) in counters {
            if let Some(held) = self.by_counter.get_mut(&counter) {
                *held -= amount;
                // Float sums drift: a counter is free once what it holds is (nearly) nothing.
                if *held <= amount.abs() * 1e-9 {
                    self.by_counter.remove(&counter);
                }
            }
        }
        true
    }

    /// Drops kept holds past their lifetime (at most once a second).
    fn purge(&mut self, now: Instant) {
        if self
            .last_purge
            .is_some_and(|last| now.duration_since(last) < Duration::from_secs(1))
        {
            return;
        }
        self.last_purge = Some(now);
        let expired: Vec<u64> = self
            .live
            .iter()
            .filter(|(_, (_, kept))| {
                kept.is_some_and(|kept| now.duration_since(kept) >= HOLD_LIFETIME)
            })
            .map(|(id, _)| *id)
            .collect();
        for id in expired {
            self.release(id);
        }
    }
}

impl Holds {
    /// Holds every claim at once if each fits; else the index of the first that does not. With
    /// the hold: what each claim's counter holds now, this request included.
    pub fn try_hold(self: &Arc<Self>, claims: &[Claim]) -> Result<(Hold, Vec<f64>), usize> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.purge(Instant::now());
        let mut held_after = Vec::with_capacity(claims.len());
        for (index, claim) in claims.iter().enumerate() {
            let held = state.by_counter.get(&claim.counter).copied().unwrap_or(0.0);
            // A room or amount that is not a number admits nothing.
            let fits = (held + claim.amount)
                .partial_cmp(&claim.room)
                .is_some_and(|order| order.is_le());
            if !fits {
                return Err(index);
            }
            held_after.push(held + claim.amount);
        }
        state.next_id += 1;
        let id = state.next_id;
        for claim in claims {
            *state.by_counter.entry(claim.counter.clone()).or_default() += claim.amount;
        }
        let counters = claims
            .iter()
            .map(|claim| (claim.counter.clone(), claim.amount))
            .collect();
        state.live.insert(id, (counters, None));
        Ok((
            Hold {
                holds: Arc::clone(self),
                id,
            },
            held_after,
        ))
    }

    /// Releases a kept hold (its replay was counted, or ended); false if it was gone already.
    pub fn release(&self, id: u64) -> bool {
        let released = self
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .release(id);
        if released {
            self.released.notify_waiters();
        }
        released
    }

    /// What the counter holds now.
    pub fn held(&self, counter: &str) -> f64 {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.by_counter.get(counter).copied().unwrap_or(0.0)
    }

    /// Waits until none of the counters holds anything (every replay on them counted), at
    /// most `timeout`.
    pub async fn drained(&self, counters: &[String], timeout: Duration) {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.released.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if counters.iter().all(|counter| self.held(counter) <= 0.0) {
                return;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return;
            }
        }
    }
}

/// An admitted request's hold: released when dropped, unless `kept` for its replay (then
/// released by id, or after `HOLD_LIFETIME`).
pub struct Hold {
    holds: Arc<Holds>,
    id: u64,
}

impl Hold {
    /// Keeps the hold past this request's serving, for its replay to release by id.
    pub fn keep(self) -> u64 {
        let id = self.id;
        let mut state = self.holds.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, kept)) = state.live.get_mut(&id) {
            *kept = Some(Instant::now());
        }
        drop(state);
        std::mem::forget(self);
        id
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.holds.release(self.id);
    }
}

impl std::fmt::Debug for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hold").field("id", &self.id).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(counter: &str, amount: f64, room: f64) -> Claim {
        Claim {
            counter: counter.into(),
            amount,
            room,
        }
    }

    #[test]
    fn only_holds_kept_for_a_replay_lapse() {
        let holds = Arc::new(Holds::default());
        let (owned, _) = holds.try_hold(&[claim("slot", 1.0, 2.0)]).unwrap();
        let (kept, _) = holds.try_hold(&[claim("rpm", 1.0, 2.0)]).unwrap();
        let _kept = kept.keep();
        let later = Instant::now() + HOLD_LIFETIME + Duration::from_secs(1);
        holds
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .purge(later);
        // A request's own hold (a long stream's slot) lasts as long as the request.
        assert_eq!((holds.held("slot"), holds.held("rpm")), (1.0, 0.0));
        drop(owned);
        assert_eq!(holds.held("slot"), 0.0);
    }

    #[tokio::test]
    async fn holds_admit_while_every_claim_fits_and_release_on_drop() {
        let holds = Arc::new(Holds::default());
        let (first, held) = holds.try_hold(&[claim("k", 1.0, 4.0)]).unwrap();
        assert_eq!(held, vec![1.0]);
        let (kept, _) = holds.try_hold(&[claim("k", 1.0, 4.0)]).unwrap();
        let kept = kept.keep();
        assert_eq!(holds.held("k"), 2.0);
        // 2 + 1 > 2.9: refused, and nothing of the request is held; another counter is free.
        assert_eq!(
            holds
                .try_hold(&[claim("team", 1.0, 5.0), claim("k", 1.0, 2.9)])
                .unwrap_err(),
            1
        );
        assert_eq!(holds.held("team"), 0.0);
        assert!(holds.try_hold(&[claim("other", 1.0, 1.0)]).is_ok());
        drop(first);
        assert_eq!(holds.held("k"), 1.0);
        assert!(holds.release(kept));
        assert!(!holds.release(kept));
        assert_eq!(holds.held("k"), 0.0);
        holds.drained(&["k".into()], Duration::from_secs(5)).await;
    }

    #[tokio::test]
    async fn a_hold_on_several_counters_counts_on_each() {
        let holds = Arc::new(Holds::default());
        let claims = [claim("key", 0.5, 10.0), claim("rpm:team:t", 1.0, 2.0)];
        let (a, held) = holds.try_hold(&claims).unwrap();
        assert_eq!(held, vec![0.5, 1.0]);
        let (_b, held) = holds.try_hold(&claims).unwrap();
        assert_eq!(held, vec![1.0, 2.0]);
        assert_eq!(holds.try_hold(&claims).unwrap_err(), 1);
        drop(a);
        assert_eq!(holds.held("rpm:team:t"), 1.0);
        assert_eq!(holds.held("key"), 0.5);
    }

    #[tokio::test]
    async fn a_drain_waits_for_the_counters_holds() {
        let holds = Arc::new(Holds::default());
        let id = holds.try_hold(&[claim("k", 1.0, 5.0)]).unwrap().0.keep();
        let waiting = {
            let holds = Arc::clone(&holds);
            tokio::spawn(async move {
                holds
                    .drained(&["other".into(), "k".into()], Duration::from_secs(30))
                    .await
            })
        };
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        holds.release(id);
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .unwrap()
            .unwrap();
    }
}
