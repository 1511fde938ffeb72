//! Rate limits on the lane (#26): rpm limits on a key, its user, its team and its team
//! membership, against LiteLLM's v3 limiter's own windows (`scopes`), in the worker or in the
//! proxy's Redis (`redis`: the client the lane counts there with).

pub mod redis;
pub mod scopes;
