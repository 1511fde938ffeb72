//! A deployment's slots for calls in flight (`max_parallel_requests` in its params, or derived
//! by LiteLLM from its rpm/tpm or the router's `default_max_parallel_requests`). LiteLLM's router
//! refuses a call past them with a 429 and sends nothing. One count serves both paths: the
//! Python layer installs it as the router's own slot object for the deployment, and the lane
//! takes a slot from it around its provider call, so neither admits a call the other's count
//! would have refused.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug)]
pub struct DeploymentSlots {
    limit: u64,
    in_flight: AtomicU64,
}

impl DeploymentSlots {
    pub fn new(limit: u64) -> Arc<DeploymentSlots> {
        Arc::new(DeploymentSlots {
            limit,
            in_flight: AtomicU64::new(0),
        })
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Acquire)
    }

    /// One slot, if one is free (false: every slot is in use).
    pub fn try_take(&self) -> bool {
        self.in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |in_flight| {
                (in_flight < self.limit).then_some(in_flight + 1)
            })
            .is_ok()
    }

    /// Gives a slot taken with `try_take` back (never below zero).
    pub fn give_back(&self) {
        let _ = self
            .in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |in_flight| {
                in_flight.checked_sub(1)
            });
    }

    /// A slot the lane holds until it is dropped (the provider call ended, the client left).
    pub fn hold(self: &Arc<Self>) -> Option<SlotHeld> {
        self.try_take().then(|| SlotHeld(Arc::clone(self)))
    }
}

pub struct SlotHeld(Arc<DeploymentSlots>);

impl Drop for SlotHeld {
    fn drop(&mut self) {
        self.0.give_back();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_past_the_slots_is_refused_until_one_is_given_back() {
        let slots = DeploymentSlots::new(2);
        let first = slots.hold().expect("a free slot");
        assert!(slots.try_take());
        assert!(slots.hold().is_none());
        assert_eq!(slots.in_flight(), 2);
        drop(first);
        assert_eq!(slots.in_flight(), 1);
        assert!(slots.hold().is_some());
        slots.give_back();
        slots.give_back();
        assert_eq!(slots.in_flight(), 0);
    }

    #[test]
    fn concurrent_takers_never_pass_the_limit() {
        let slots = DeploymentSlots::new(3);
        let taken: u64 = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..16)
                .map(|_| scope.spawn(|| u64::from(slots.try_take())))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap_or(0)).sum()
        });
        assert_eq!(taken, 3);
        assert_eq!(slots.in_flight(), 3);
    }
}
