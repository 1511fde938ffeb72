//! LiteLLM's simple-shuffle routing, as the lane draws it: a deployment picked at random in
//! proportion to its weight (`weight`, `rpm` or `tpm` in its params), or uniformly when none has a
//! positive weight. The chat routes' groups and the realtime relay's draw from one of these each.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

const GOLDEN_GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// Uniform draws in [0, 1): splitmix64 over a counter seeded by the clock (routing needs spread,
/// not secrecy).
pub struct Shuffle {
    state: AtomicU64,
}

impl Default for Shuffle {
    fn default() -> Self {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Shuffle {
            state: AtomicU64::new(nanos),
        }
    }
}

impl Shuffle {
    fn draw(&self) -> f64 {
        let mut z = self
            .state
            .fetch_add(GOLDEN_GAMMA, Ordering::Relaxed)
            .wrapping_add(GOLDEN_GAMMA);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    /// The index of the deployment picked among `count`, by `weights` (one per deployment; empty,
    /// or none positive: uniform). `count` must be at least 1.
    pub fn pick(&self, count: usize, weights: &[f64]) -> usize {
        pick_index(self.draw(), count, weights)
    }
}

fn pick_index(draw: f64, count: usize, weights: &[f64]) -> usize {
    let total: f64 = weights.iter().map(|weight| weight.max(0.0)).sum();
    if weights.len() == count && total > 0.0 {
        let mut target = draw * total;
        for (index, weight) in weights.iter().enumerate() {
            let weight = weight.max(0.0);
            if target < weight {
                return index;
            }
            target -= weight;
        }
    }
    ((draw * count as f64) as usize).min(count.saturating_sub(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_split_the_draw_in_order() {
        let weights = [1.0, 3.0];
        assert_eq!(pick_index(0.0, 2, &weights), 0);
        assert_eq!(pick_index(0.24, 2, &weights), 0);
        assert_eq!(pick_index(0.26, 2, &weights), 1);
        assert_eq!(pick_index(0.999, 2, &weights), 1);
        // A deployment without weight is never picked while another has one.
        assert_eq!(pick_index(0.1, 2, &[0.0, 2.0]), 1);
    }

    #[test]
    fn without_positive_weights_the_pick_is_uniform() {
        for weights in [&[][..], &[0.0, 0.0, 0.0], &[-1.0, 0.0, -2.0]] {
            assert_eq!(pick_index(0.0, 3, weights), 0);
            assert_eq!(pick_index(0.5, 3, weights), 1);
            assert_eq!(pick_index(0.99, 3, weights), 2);
        }
    }

    #[test]
    fn draws_spread_over_the_deployments() {
        let shuffle = Shuffle::default();
        let mut seen = [0usize; 4];
        for _ in 0..4000 {
            seen[shuffle.pick(4, &[])] += 1;
        }
        assert!(seen.iter().all(|n| (800..1200).contains(n)), "{seen:?}");
    }
}
