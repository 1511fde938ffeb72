//! Rate limits on the lane (#26): rpm limits on a key, its user, its team and its team
//! membership, against LiteLLM's v3 limiter's own windows (`scopes`), in the worker or in the
//! proxy's Redis (`redis`: the client the lane counts there with); parallel-request limits on
//! a key against the limiter's concurrency gauge in Redis (`parallel`); tpm limits on the same
//! scopes as rpm, reserved in the limiter's token windows in Redis (`tokens`); what the three
//! share (`counting`).

pub mod counting;
pub mod parallel;
pub mod redis;
pub mod scopes;
pub mod tokens;
