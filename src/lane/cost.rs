//! What an answer cost, for every route: usage (token counts) -> cost, the same float
//! operations in the same order as LiteLLM's cost calculator, and the proxy's split of it for
//! its headers. The prices are LiteLLM's, handed over by the Python layer where its cost is
//! linear in the token counts (checked against LiteLLM when a group is loaded).

use serde_json::Value;

/// What a served answer cost, as LiteLLM's cost calculator works it out for linear prices.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cost {
    pub input: f64,
    pub output: f64,
    pub total: f64,
    /// The reasoning tokens' share of `output` (LiteLLM's breakdown header; 0: none).
    pub reasoning: f64,
    /// Cached prompt tokens' cost, not in `input` (the proxy's additive split; 0: none).
    pub cache_read: f64,
    /// Prompt-cache writes' cost, not in `input` (the proxy's additive split; 0: none).
    pub cache_creation: f64,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pricing {
    pub input_per_token: f64,
    pub output_per_token: f64,
    /// Cached prompt tokens (OpenAI's), when LiteLLM prices them at one rate of their own.
    pub cache_read_per_token: Option<f64>,
    /// Anthropic's prompt cache on `/v1/messages`, when LiteLLM's cost of an answer that reads
    /// or writes it is exactly the lane's (checked against LiteLLM when the group is loaded).
    pub anthropic_cache: Option<CachePrices>,
}

/// Per token: cache reads, and cache writes that live 5 minutes or 1 hour.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CachePrices {
    pub read: f64,
    pub write_5m: f64,
    pub write_1h: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
    /// Of `completion_tokens` (priced as output; LiteLLM reports their share).
    pub reasoning_tokens: u64,
    /// Of `prompt_tokens`, read from the provider's prompt cache (priced apart).
    pub cached_tokens: u64,
    /// Anthropic's counts, when its answer read or wrote the prompt cache (priced apart, as on
    /// `/v1/messages`).
    pub anthropic_cache: Option<MessagesUsage>,
}

impl Usage {
    /// The cost as LiteLLM's `generic_cost_per_token` works it out, the same float operations
    /// in the same order, and the proxy's split of it for the headers; None for cached tokens
    /// without a price of their own (the proxy writes that answer).
    pub fn cost(&self, pricing: Pricing) -> Option<Cost> {
        if let Some(anthropic) = self.anthropic_cache {
            return anthropic.cost(pricing);
        }
        // Cached tokens: the rest of the prompt at the input price, plus the cached ones at
        // theirs; the proxy's `input` header is that sum less the cached part.
        let (prompt_cost, cache_read) = if self.cached_tokens > 0 {
            let rate = pricing.cache_read_per_token?;
            let text = self.prompt_tokens.checked_sub(self.cached_tokens)?;
            let cache_read = self.cached_tokens as f64 * rate;
            (
                text as f64 * pricing.input_per_token + cache_read,
                cache_read,
            )
        } else {
            (self.prompt_tokens as f64 * pricing.input_per_token, 0.0)
        };
        // With reasoning tokens LiteLLM prices the text and the reasoning apart and adds them
        // (the same rate here: the lane serves models without a reasoning price of their own).
        let reasoning = self.reasoning_tokens as f64 * pricing.output_per_token;
        let output = if self.reasoning_tokens > 0 {
            let text = self.completion_tokens.saturating_sub(self.reasoning_tokens);
            text as f64 * pricing.output_per_token + reasoning
        } else {
            self.completion_tokens as f64 * pricing.output_per_token
        };
        Some(Cost {
            input: prompt_cost - cache_read,
            output,
            total: prompt_cost + output,
            reasoning,
            cache_read,
            cache_creation: 0.0,
        })
    }
}

/// An Anthropic answer's token counts: input (the uncached part), output, and the prompt
/// cache's reads and writes by lifetime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MessagesUsage {
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write_5m: u64,
    pub cache_write_1h: u64,
}

impl MessagesUsage {
    /// Anthropic's usage, when its cost is tokens alone: input, output and the prompt cache (its
    /// writes split by lifetime when there are any), the standard tier, nothing else.
    pub fn read(value: &Value) -> Option<MessagesUsage> {
        let fields = value.as_object()?;
        let count = |name: &str| match fields.get(name) {
            None | Some(Value::Null) => Some(0),
            Some(value) => value.as_u64(),
        };
        let known = [
            "input_tokens",
            "output_tokens",
            "cache_creation_input_tokens",
            "cache_read_input_tokens",
            "cache_creation",
            "service_tier",
        ];
        if fields.keys().any(|name| !known.contains(&name.as_str())) {
            return None;
        }
        if !fields
            .get("service_tier")
            .is_none_or(|tier| tier.is_null() || tier == "standard")
        {
            return None;
        }
        let writes = count("cache_creation_input_tokens")?;
        let (cache_write_5m, cache_write_1h) = match fields.get("cache_creation") {
            None | Some(Value::Null) if writes == 0 => (0, 0),
            Some(Value::Object(split)) => {
                let part = |name: &str| match split.get(name) {
                    None | Some(Value::Null) => Some(0),
                    Some(value) => value.as_u64(),
                };
                if split.keys().any(|name| {
                    name != "ephemeral_5m_input_tokens" && name != "ephemeral_1h_input_tokens"
                }) {
                    return None;
                }
                (
                    part("ephemeral_5m_input_tokens")?,
                    part("ephemeral_1h_input_tokens")?,
                )
            }
            // Writes without their split: LiteLLM's reading of those is not the lane's to guess.
            _ => return None,
        };
        if cache_write_5m.checked_add(cache_write_1h)? != writes {
            return None;
        }
        Some(MessagesUsage {
            input: fields.get("input_tokens")?.as_u64()?,
            output: fields.get("output_tokens")?.as_u64()?,
            cache_read: count("cache_read_input_tokens")?,
            cache_write_5m,
            cache_write_1h,
        })
    }

    /// The cost as LiteLLM's `generic_cost_per_token` works it out for Anthropic, the same float
    /// operations in the same order, and the proxy's additive split of it for the headers; None
    /// for cache reads or writes without checked prices (the proxy writes that answer).
    pub fn cost(&self, pricing: Pricing) -> Option<Cost> {
        let output = self.output as f64 * pricing.output_per_token;
        let mut prompt = self.input as f64 * pricing.input_per_token;
        if self.cache_read == 0 && self.cache_write_5m == 0 && self.cache_write_1h == 0 {
            return Some(Cost {
                input: prompt,
                output,
                total: prompt + output,
                reasoning: 0.0,
                cache_read: 0.0,
                cache_creation: 0.0,
            });
        }
        let prices = pricing.anthropic_cache?;
        let cache_read = self.cache_read as f64 * prices.read;
        prompt += cache_read;
        let cache_creation = self.cache_write_5m as f64 * prices.write_5m
            + self.cache_write_1h as f64 * prices.write_1h;
        prompt += cache_creation;
        Some(Cost {
            input: prompt - cache_read - cache_creation,
            output,
            total: prompt + output,
            reasoning: 0.0,
            cache_read,
            cache_creation,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::wire::pyjson::python_float;

    #[test]
    fn costs_like_litellm() {
        let usage = Usage {
            prompt_tokens: 11,
            completion_tokens: 7,
            total_tokens: 18,
            reasoning_tokens: 0,
            cached_tokens: 0,
            anthropic_cache: None,
        };
        let pricing = Pricing {
            input_per_token: 1.5e-07,
            output_per_token: 6e-07,
            cache_read_per_token: Some(7.5e-08),
            anthropic_cache: None,
        };
        let cost = usage.cost(pricing).unwrap();
        assert_eq!(python_float(cost.input), "1.6499999999999999e-06");
        assert_eq!(python_float(cost.total), "5.85e-06");
        // 5 of the 7 reasoning: text and reasoning priced apart, then added, as LiteLLM does
        // (7 * 6e-07 would be 4.2e-06).
        let reasoning = Usage {
            reasoning_tokens: 5,
            ..usage
        };
        let cost = reasoning.cost(pricing).unwrap();
        assert_eq!(python_float(cost.output), "4.2000000000000004e-06");
        assert_eq!(python_float(cost.reasoning), "3e-06");
        // 1024 of 1919 prompt tokens cached: the proxy's headers for it, from LiteLLM 1.106.12.
        let cached = Usage {
            prompt_tokens: 1919,
            completion_tokens: 10,
            total_tokens: 1929,
            reasoning_tokens: 0,
            cached_tokens: 1024,
            anthropic_cache: None,
        };
        let cost = cached.cost(pricing).unwrap();
        assert_eq!(python_float(cost.input), "0.00013424999999999998");
        assert_eq!(python_float(cost.cache_read), "7.68e-05");
        assert_eq!(python_float(cost.total), "0.00021705");
        let unpriced = Pricing {
            cache_read_per_token: None,
            ..pricing
        };
        assert!(cached.cost(unpriced).is_none());
    }

    /// Cache reads and writes priced as LiteLLM 1.106.12 prices them for claude-sonnet-4-5
    /// (the proxy's headers for this usage: total 0.004965, input 0.0036, cache read
    /// 8.999999999999999e-05, cache creation 0.00075, output 0.000525).
    #[test]
    fn prices_the_prompt_cache_as_litellm_does() {
        let usage = MessagesUsage::read(&json!({
            "input_tokens": 1200,
            "output_tokens": 35,
            "cache_creation_input_tokens": 200,
            "cache_read_input_tokens": 300,
            "cache_creation": {"ephemeral_5m_input_tokens": 200, "ephemeral_1h_input_tokens": 0},
            "service_tier": "standard",
        }))
        .unwrap();
        let mut pricing = Pricing {
            input_per_token: 3e-06,
            output_per_token: 1.5e-05,
            cache_read_per_token: None,
            anthropic_cache: None,
        };
        assert!(usage.cost(pricing).is_none(), "unchecked cache prices");
        pricing.anthropic_cache = Some(CachePrices {
            read: 3e-07,
            write_5m: 3.75e-06,
            write_1h: 6e-06,
        });
        let cost = usage.cost(pricing).unwrap();
        let written = [
            cost.total,
            cost.input,
            cost.cache_read,
            cost.cache_creation,
            cost.output,
        ]
        .map(python_float);
        assert_eq!(
            written,
            [
                "0.004965",
                "0.0036",
                "8.999999999999999e-05",
                "0.00075",
                "0.000525"
            ]
        );
    }
}
