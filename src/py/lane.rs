//! The fast lane's binding: start it on a listening socket, and hand it LiteLLM's state.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use pyo3::prelude::*;
use pyo3::types::PyList;

use super::bridge::{PreparedCall, settle_later};
use super::errors::{InvalidRequestError, transport_error_to_py};
use super::headers::header_list;
use super::lane_types::{LaneClaim, LaneCost, LaneDeployment, LanePricing, LaneReplay};
use super::stream::{Payload, PreparedStream};
use crate::lane::budget::{KeyBudget, ReservationRates};
use crate::lane::ratelimit::counting::{GaugeScripts, RedisCounting, TokenScripts};
use crate::lane::ratelimit::counting::{Reading, WindowKind};
use crate::lane::ratelimit::parallel::Gauge;
use crate::lane::ratelimit::redis::{Redis, RedisTarget};
use crate::lane::ratelimit::scopes::{Counting, KeyRates, RateScope};
use crate::lane::ratelimit::tokens::{self, TokenScope};
use crate::lane::{self, App, Group, Lane, Settings, Verdict};
use crate::model::LaneReason;
use crate::runtime;
use crate::stream::Piece;

struct Running {
    pid: u32,
    lane: Arc<Lane>,
    accept: tokio::task::AbortHandle,
}

static LANE: Mutex<Option<Running>> = Mutex::new(None);

pub(super) fn running() -> PyResult<Arc<Lane>> {
    let slot = LANE.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    match slot.as_ref() {
        Some(running) if running.pid == std::process::id() => Ok(Arc::clone(&running.lane)),
        _ => Err(InvalidRequestError::new_err("the fast lane is not running")),
    }
}

/// Starts the lane on the runtime: it accepts on the listening socket `listen_fd` (a duplicate
/// is taken; the caller keeps its own) and forwards what it does not serve to the app on the
/// Unix socket `app_socket`. Serves nothing until `lane_configure(None, ...)`.
/// `shared_socket`: other workers accept on the same socket. `keep_alive_timeout`: uvicorn's
/// `timeout_keep_alive` in seconds, for idle client connections (None: never closed).
#[pyfunction]
#[pyo3(signature = (listen_fd, app_socket, shared_socket, keep_alive_timeout))]
pub fn start_lane(
    listen_fd: i32,
    app_socket: String,
    shared_socket: bool,
    keep_alive_timeout: Option<f64>,
) -> PyResult<()> {
    use std::os::fd::{BorrowedFd, FromRawFd, IntoRawFd};

    // SAFETY: the caller passes an open listening socket it keeps open for this call.
    let borrowed = unsafe { BorrowedFd::borrow_raw(listen_fd) };
    let owned = borrowed
        .try_clone_to_owned()
        .map_err(|err| InvalidRequestError::new_err(format!("listen_fd: {err}")))?;
    // SAFETY: `owned` is a fresh duplicate that nothing else closes.
    let listener = unsafe { std::net::TcpListener::from_raw_fd(owned.into_raw_fd()) };
    listener
        .set_nonblocking(true)
        .map_err(|err| InvalidRequestError::new_err(format!("listen_fd: {err}")))?;
    let engine = runtime::engine().map_err(transport_error_to_py)?;
    let lane = Lane::new(
        App {
            socket: app_socket.into(),
        },
        Arc::clone(&engine),
        shared_socket,
        keep_alive_timeout
            .filter(|seconds| seconds.is_finite() && *seconds > 0.0)
            .map(std::time::Duration::from_secs_f64),
    );
    let serving = Arc::clone(&lane);
    let accept = engine.runtime.spawn(async move {
        if let Ok(listener) = tokio::net::TcpListener::from_std(listener) {
            lane::serve(listener, serving).await;
        }
    });
    let mut slot = LANE.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(previous) = slot.take() {
        previous.accept.abort();
    }
    *slot = Some(Running {
        pid: std::process::id(),
        lane,
        accept: accept.abort_handle(),
    });
    Ok(())
}

/// Stops accepting connections (open ones are served to the end); replays keep running.
#[pyfunction]
pub fn lane_stop() {
    let slot = LANE.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(running) = slot.as_ref() {
        running.accept.abort();
        running.lane.realtime.close();
    }
}

/// The proxy-wide settings: why the lane serves nothing (the setting that turns it off, None
/// when it serves), the headers every answer carries, and the provider headers LiteLLM passes
/// on under their own names, and whether LiteLLM keeps end users (a database).
#[pyfunction]
#[pyo3(signature = (off, headers, openai_headers, end_users = false))]
pub fn lane_configure(
    off: Option<String>,
    headers: Vec<(String, String)>,
    openai_headers: Vec<String>,
    end_users: bool,
) -> PyResult<()> {
    running()?.table.set_settings(Settings {
        headers,
        openai_headers: openai_headers.into_iter().collect(),
        off,
        end_users,
    });
    Ok(())
}

/// Replaces the groups the lane serves: `{group: [deployment]}`, and per group the prices
/// LiteLLM's budget reservation reads, `(input per token, output per token, max output tokens)`
/// (a group without them: requests of keys with a budget go to the proxy).
#[pyfunction]
#[pyo3(signature = (groups, reservation_rates = HashMap::new()))]
pub fn lane_set_groups(
    groups: HashMap<String, Vec<Bound<'_, LaneDeployment>>>,
    reservation_rates: HashMap<String, (f64, f64, u64)>,
) -> PyResult<()> {
    let lane = running()?;
    let mut table = HashMap::new();
    for (name, entries) in groups {
        if entries.is_empty() {
            continue;
        }
        let deployments = entries
            .iter()
            .map(|entry| Arc::clone(&entry.get().inner))
            .collect();
        let weights: Option<Vec<f64>> = entries.iter().map(|entry| entry.get().weight).collect();
        let reservation = reservation_rates
            .get(&name)
            .and_then(|&(input, output, ceiling)| {
                let valid = |rate: f64| rate.is_finite() && rate >= 0.0;
                (valid(input) && valid(output)).then_some(ReservationRates {
                    input_per_token: input,
                    output_per_token: output,
                    max_output_tokens: ceiling,
                })
            });
        let group = Group {
            deployments,
            weights: weights.unwrap_or_default(),
            reservation,
        };
        table.insert(name, Arc::new(group));
    }
    lane.table.set_groups(table);
    Ok(())
}

/// What LiteLLM sends on a `/v1/messages` call to the deployment `deployment_id` for requests
/// of one kind (`key`: see the lane's `messages::request::decision_key`): the headers besides the credential.
#[pyfunction]
pub fn lane_learn_messages_headers(
    deployment_id: String,
    key: String,
    headers: Vec<(String, String)>,
) -> PyResult<()> {
    let headers = header_list(headers)?;
    running()?
        .table
        .learn_messages_headers(deployment_id, key, headers);
    Ok(())
}

/// The lane's cost of an Anthropic answer whose `usage` is `usage_json`, at these prices (the
/// Anthropic cache's, None when the lane leaves cache use to the proxy), or None for a usage
/// the lane leaves to the proxy. For the Python layer's check against LiteLLM's own cost.
#[pyfunction]
pub fn lane_messages_cost(usage_json: &str, pricing: &LanePricing) -> Option<LaneCost> {
    let usage: serde_json::Value = serde_json::from_str(usage_json).ok()?;
    let cost = lane::MessagesUsage::read(&usage)?.cost(pricing.pricing())?;
    Some(LaneCost::from(cost))
}

/// The groups whose deployments the router is cooling down (the proxy serves them meanwhile).
#[pyfunction]
pub fn lane_set_cooling(groups: Vec<String>) -> PyResult<()> {
    running()?
        .table
        .set_cooling(groups.into_iter().collect::<HashSet<_>>());
    Ok(())
}

/// One rpm or tpm window of a key: LiteLLM's descriptor and value, the limit, what the window
/// counted and when it ends (Unix seconds; 0: no window; both 0 where Redis counts).
type RateScopeArgs = (String, String, u64, u64, f64);
/// A parallel-request gauge: (descriptor, value, limit, the slots LiteLLM's registry in the
/// worker holds; 0 where Redis keeps the gauge).
type GaugeArgs = (String, String, u64, u64);
/// A key's rate limits: (rpm windows, tpm windows, gauges, counted in Redis).
type RatesArgs = (Vec<RateScopeArgs>, Vec<RateScopeArgs>, Vec<GaugeArgs>, bool);

fn unix_time(seconds: f64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs_f64(seconds.max(0.0))
}

/// LiteLLM's verdict on a key (by its SHA-256 hex): the groups it may call (None: all), its
/// expiry (Unix seconds), how long the verdict holds, and its spend; for a key with budgets,
/// its headroom (`min(max_budget - counter)` over LiteLLM's counters); the proxy's headers about
/// its limits (`x-litellm-key-rpm-limit`...); for a key with rate limits, `([rpm scope],
/// [tpm scope], [parallel-request gauge], counted in Redis)`.
/// `release`: the hold of the replay whose counts the verdict was read after (see
/// `lane::budget`, `lane::ratelimit`).
#[pyfunction]
#[pyo3(signature = (
    key_hash, groups, expires_at, valid_for, spend, *, headroom=None, key_headers=vec![],
    rates=None, release=None,
))]
#[allow(clippy::too_many_arguments)]
pub fn lane_set_key(
    key_hash: String,
    groups: Option<Vec<String>>,
    expires_at: Option<f64>,
    valid_for: f64,
    spend: f64,
    headroom: Option<f64>,
    key_headers: Vec<(String, String)>,
    rates: Option<RatesArgs>,
    release: Option<u64>,
) -> PyResult<()> {
    let at = unix_time;
    let verdict = Verdict {
        groups: groups.map(|groups| groups.into_iter().collect()),
        expires_at: expires_at.map(at),
        valid_until: SystemTime::now() + Duration::from_secs_f64(valid_for.clamp(0.0, 1e9)),
        spend,
        spend_since: 0.0,
        // A headroom that is not a number admits nothing (NaN fails every comparison).
        budget: headroom.map(|headroom| KeyBudget { headroom }),
        key_headers,
        rates: rates.map(|(scopes, tokens, gauges, in_redis)| KeyRates {
            scopes: scopes
                .into_iter()
                .map(
                    |(descriptor, value, limit, counted, window_ends)| RateScope {
                        descriptor,
                        value,
                        limit,
                        counted,
                        window_ends: at(window_ends),
                    },
                )
                .collect(),
            tokens: tokens
                .into_iter()
                .map(
                    |(descriptor, value, limit, counted, window_ends)| TokenScope {
                        descriptor,
                        value,
                        limit,
                        counted,
                        window_ends: at(window_ends),
                    },
                )
                .collect(),
            gauges: gauges
                .into_iter()
                .map(|(descriptor, value, limit, in_flight)| Gauge {
                    descriptor,
                    value,
                    limit,
                    in_flight,
                })
                .collect(),
            counting: if in_redis {
                Counting::Redis
            } else {
                Counting::Worker
            },
        }),
    };
    running()?.set_verdict(key_hash, verdict, release);
    Ok(())
}

/// New readings of the worker's rate-limit windows, whichever keys they belong to:
/// `(kind, descriptor, value, counted, window end)`, kind `requests` or `tokens` (read again
/// once LiteLLM's limiter settled a request's tokens).
#[pyfunction]
pub fn lane_set_readings(readings: Vec<(String, String, String, u64, f64)>) -> PyResult<()> {
    let found = readings
        .into_iter()
        .filter_map(|(kind, descriptor, value, counted, window_ends)| {
            let counter = WindowKind::named(&kind)?.held_counter(&descriptor, &value);
            let reading = Reading {
                counted,
                window_ends: unix_time(window_ends),
            };
            Some((counter, reading))
        })
        .collect();
    running()?.set_readings(found);
    Ok(())
}

/// A request the proxy serves takes a slot in the worker's parallel-request gauge `gauge_key`
/// (`{api_key:…}:max_parallel_requests`), whose LiteLLM registry holds `registered` slots
/// without it: whether it fits beside the lane's slots, and how many the lane holds.
#[pyfunction]
pub fn lane_enter_gauge(gauge_key: String, limit: u64, registered: u64) -> PyResult<(bool, u64)> {
    Ok(running()?.enter_gauge(gauge_key, limit, registered))
}

/// LiteLLM's registry in the worker holds `registered` slots in the gauge `gauge_key` (read
/// again once a request of the proxy gave its slot back).
#[pyfunction]
pub fn lane_set_gauge(gauge_key: String, registered: u64) -> PyResult<()> {
    running()?.set_gauge(gauge_key, registered);
    Ok(())
}

/// LiteLLM's coordination Redis: host, port, username, password, db.
type RedisArgs = (String, u16, Option<String>, Option<String>, i64);

/// The tokens the lane reserves for a chat or `/v1/messages` body in a key's tpm windows, whose
/// smallest limit is `min_limit` (the v3 limiter's estimate), or None where it sends the request
/// to the proxy instead (see `lane::ratelimit::tokens`). For the differential test against the
/// limiter's own estimate.
#[pyfunction]
pub fn lane_tpm_estimate(body: &[u8], min_limit: u64) -> Option<u64> {
    tokens::estimate(body, min_limit).ok()
}

/// Where the lane counts rpm windows: LiteLLM's coordination Redis (`(host, port, username,
/// password, db)`), with the limiter's own script and window, or None (the worker's memory);
/// `token_scripts`: the limiter's check-and-increment and window-guarded increment scripts;
/// `gauge_scripts`: its parallel-request acquire and release scripts and slot TTL.
#[pyfunction]
#[pyo3(signature = (redis, script, window_size, token_scripts, gauge_scripts))]
pub fn lane_set_rate_counting(
    redis: Option<RedisArgs>,
    script: String,
    window_size: u64,
    token_scripts: (String, String),
    gauge_scripts: (String, String, u64),
) -> PyResult<()> {
    let (check_and_increment, window_guarded_increment) = token_scripts;
    let token_scripts = TokenScripts {
        check_and_increment,
        window_guarded_increment,
    };
    let (acquire, release, slot_ttl) = gauge_scripts;
    let gauge_scripts = GaugeScripts {
        acquire,
        release,
        slot_ttl,
    };
    let counting = redis.map(|(host, port, username, password, db)| RedisCounting {
        redis: Redis::new(RedisTarget {
            host,
            port,
            username,
            password,
            db,
        }),
        script,
        window_size,
        token_scripts,
        gauge_scripts,
    });
    running()?.set_rate_counting(counting);
    Ok(())
}

/// Releases a served request's hold on its key's budget and rpm windows (its replay ended
/// before they were counted); nothing if it was released already.
#[pyfunction]
pub fn lane_release_hold(hold: u64) -> PyResult<()> {
    running()?.holds.release(hold);
    Ok(())
}

/// Forgets the verdicts that list groups (the groups served changed); see `Table`.
#[pyfunction]
pub fn lane_forget_group_lists() -> PyResult<()> {
    running()?.table.forget_group_lists();
    Ok(())
}

/// The outcome behind a ticket, once.
#[pyfunction]
pub fn lane_claim(py: Python<'_>, ticket: &str) -> PyResult<Option<LaneClaim>> {
    let lane = running()?;
    let awaits_tail = lane.awaits_tail(ticket);
    let Some(ticket) = lane.claim(ticket) else {
        return Ok(None);
    };
    let stream_failed = match &ticket.outcome {
        lane::Outcome::Stream(outcome) => outcome
            .pieces
            .iter()
            .any(|piece| matches!(piece, Piece::Failed(_))),
        lane::Outcome::Call(_) => false,
    };
    let usage = match &ticket.outcome {
        lane::Outcome::Call(Ok(completion)) if completion.raw.is_none() => {
            completion.body.get("usage").map(|usage| usage.to_string())
        }
        _ => None,
    };
    let call = match ticket.outcome {
        lane::Outcome::Call(outcome) => {
            Py::new(py, PreparedCall::done(outcome, String::new()))?.into_any()
        }
        lane::Outcome::Stream(outcome) => {
            let payload = if outcome.raw {
                Payload::Raw
            } else {
                Payload::Chunks
            };
            Py::new(
                py,
                PreparedStream::replayed(outcome.opened, outcome.pieces, payload),
            )?
            .into_any()
        }
    };
    Ok(Some(LaneClaim {
        deployment_id: ticket.deployment_id,
        call_id_added: ticket.call_id_added,
        call,
        hold: ticket.hold,
        rate_limited: ticket.counted.rate_limited,
        rate_counts: ticket.counted.rate_counts,
        parallel_counts: ticket.counted.parallel_counts,
        tokens_reserved: ticket
            .counted
            .tokens_reserved
            .map(|reserved| (reserved.tokens, reserved.counts)),
        usage,
        awaits_tail,
        stream_failed,
    }))
}

/// The end of the proxy's answer to a stream's replay (everything after its first chunk's
/// frame), for the lane to send to the client still waiting for it.
#[pyfunction]
pub fn lane_stream_tail(ticket: &str, tail: &[u8]) -> PyResult<()> {
    running()?.send_tail(ticket, bytes::Bytes::copy_from_slice(tail));
    Ok(())
}

/// Settles `future` (on `event_loop`, through `settle`) with every served request waiting for
/// its replay (`[LaneReplay]`), once there is one.
#[pyfunction]
pub fn lane_next_replays(
    event_loop: Py<PyAny>,
    future: Py<PyAny>,
    settle: Py<PyAny>,
) -> PyResult<()> {
    let lane = running()?;
    let engine = runtime::engine().map_err(transport_error_to_py)?;
    engine.runtime.spawn(async move {
        let replays = lane.next_replays().await;
        settle_later(event_loop, settle, future, move |py| {
            let items = replays
                .into_iter()
                .map(|replay| LaneReplay::new(py, replay))
                .collect::<Vec<_>>();
            Ok(PyList::new(py, items)?.into_any().unbind())
        });
    });
    Ok(())
}

/// The proxy finished replaying one served request.
#[pyfunction]
pub fn lane_replayed() -> PyResult<()> {
    running()?.replayed();
    Ok(())
}

/// Requests per outcome since the lane started.
#[pyfunction]
pub fn lane_counts() -> PyResult<HashMap<String, u64>> {
    Ok(running()?.counts())
}

/// One route and model group's tally: `(route, model group, requests, bucket counts, seconds)`.
type ServedRow = (&'static str, String, u64, Vec<u64>, f64);

/// What the lane served since it started, per route and group; the buckets are those of
/// `lane_upstream_buckets()` plus one past them (the provider calls' durations).
#[pyfunction]
pub fn lane_served() -> PyResult<Vec<ServedRow>> {
    Ok(running()?
        .served()
        .into_iter()
        .map(|(route, group, tally)| {
            (
                route,
                group,
                tally.requests,
                tally.buckets,
                tally.upstream_s,
            )
        })
        .collect())
}

/// The upper bounds, in seconds, of the lane's upstream-duration buckets.
#[pyfunction]
pub fn lane_upstream_buckets() -> Vec<f64> {
    lane::UPSTREAM_BUCKETS_S.to_vec()
}

/// Served requests whose replay through the proxy has not finished.
#[pyfunction]
pub fn lane_backlog() -> PyResult<usize> {
    Ok(running()?.backlog())
}

/// Every reason the fast lane sends a request to the proxy: what `lane_counts()` counts
/// besides its outcomes, and the docs list.
#[pyfunction]
pub fn lane_reasons() -> Vec<&'static str> {
    LaneReason::ALL
        .iter()
        .map(|reason| reason.as_str())
        .collect()
}
