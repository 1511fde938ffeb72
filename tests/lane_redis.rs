//! The lane's Redis client against a real `redis-server` on a loopback port of its own.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use _native::lane::ratelimit::redis::{Redis, RedisError, RedisTarget, Reply};

const REDIS_SERVER: &str = "/usr/bin/redis-server";

/// A `redis-server` child, killed when the test ends however it ends.
struct Server {
    child: Child,
    port: u16,
}

impl Server {
    /// Starts one with `extra` arguments, or `None` (the test skips) without a `redis-server`.
    fn start(extra: &[&str]) -> Option<Self> {
        if !Path::new(REDIS_SERVER).exists() {
            eprintln!("skipped: no {REDIS_SERVER}");
            return None;
        }
        let port = free_port();
        let child = Command::new(REDIS_SERVER)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        let mut server = Self { child, port };
        server.wait_until_answering();
        Some(server)
    }

    /// Polls with PING until Redis answers anything (`+PONG`, or `-NOAUTH` behind a password).
    fn wait_until_answering(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("redis-server exited: {status}");
            }
            if pings(self.port) {
                return;
            }
            assert!(Instant::now() < deadline, "redis-server never answered");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn target(&self) -> RedisTarget {
        RedisTarget {
            host: "127.0.0.1".into(),
            port: self.port,
            username: None,
            password: None,
            db: 0,
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    listener.local_addr().unwrap().port()
}

fn pings(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect((Ipv4Addr::LOCALHOST, port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
    let mut first = [0_u8; 1];
    stream.write_all(b"*1\r\n$4\r\nPING\r\n").is_ok()
        && stream.read(&mut first).unwrap_or(0) == 1
        && matches!(first[0], b'+' | b'-')
}

fn bulk(text: &str) -> Reply {
    Reply::Bulk(text.as_bytes().to_vec())
}

#[tokio::test]
async fn set_get_and_incr() {
    let Some(server) = Server::start(&[]) else {
        return;
    };
    let redis = Redis::new(server.target());
    assert_eq!(
        redis.command(&[b"SET", b"k", b"v"]).await.unwrap(),
        Reply::Status("OK".into())
    );
    assert_eq!(redis.command(&[b"GET", b"k"]).await.unwrap(), bulk("v"));
    assert_eq!(
        redis.command(&[b"GET", b"missing"]).await.unwrap(),
        Reply::Nil
    );
    assert_eq!(
        redis.command(&[b"INCR", b"n"]).await.unwrap(),
        Reply::Int(1)
    );
    let counter = redis.command(&[b"INCRBY", b"n", b"41"]).await.unwrap();
    assert_eq!(counter.as_i64(), Some(42));
    assert_eq!(
        redis.command(&[b"GET", b"n"]).await.unwrap().as_i64(),
        Some(42)
    );
}

#[tokio::test]
async fn eval_returns_mixed_arrays() {
    let Some(server) = Server::start(&[]) else {
        return;
    };
    let redis = Redis::new(server.target());
    assert_eq!(
        redis
            .eval("return {1, 'a', false}", &[], &[])
            .await
            .unwrap(),
        Reply::Array(vec![Reply::Int(1), bulk("a"), Reply::Nil])
    );
    let keys = ["k1".to_string(), "k2".to_string()];
    let args = ["x".to_string()];
    assert_eq!(
        redis
            .eval("return {KEYS[1], KEYS[2], ARGV[1], {#KEYS}}", &keys, &args)
            .await
            .unwrap(),
        Reply::Array(vec![
            bulk("k1"),
            bulk("k2"),
            bulk("x"),
            Reply::Array(vec![Reply::Int(2)]),
        ])
    );
}

#[tokio::test]
async fn error_replies_are_server_errors_and_keep_the_connection() {
    let Some(server) = Server::start(&[]) else {
        return;
    };
    let redis = Redis::new(server.target());
    let error = redis.command(&[b"NOSUCHCOMMAND"]).await.unwrap_err();
    assert!(
        matches!(error, RedisError::Server(ref m) if m.starts_with("ERR")),
        "{error:?}"
    );
    let error = redis.eval("return redis.error_reply('MYERR nope')", &[], &[]);
    assert!(matches!(error.await.unwrap_err(), RedisError::Server(m) if m == "MYERR nope"));
    // The pooled connection read each error in full: the next reply is its own.
    assert_eq!(
        redis.command(&[b"PING"]).await.unwrap(),
        Reply::Status("PONG".into())
    );
    let clients = redis.command(&[b"CLIENT", b"LIST"]).await.unwrap();
    let Reply::Bulk(clients) = clients else {
        panic!("{clients:?}");
    };
    assert_eq!(
        clients
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .count(),
        1
    );
}

#[tokio::test]
async fn passwords_and_databases() {
    let Some(server) = Server::start(&["--requirepass", "secret"]) else {
        return;
    };
    let with_password = Redis::new(RedisTarget {
        password: Some("secret".into()),
        db: 3,
        ..server.target()
    });
    assert_eq!(
        with_password
            .command(&[b"SET", b"k", b"in-3"])
            .await
            .unwrap(),
        Reply::Status("OK".into())
    );
    let with_user = Redis::new(RedisTarget {
        username: Some("default".into()),
        password: Some("secret".into()),
        db: 3,
        ..server.target()
    });
    assert_eq!(
        with_user.command(&[b"GET", b"k"]).await.unwrap(),
        bulk("in-3")
    );
    let in_db_0 = Redis::new(RedisTarget {
        password: Some("secret".into()),
        ..server.target()
    });
    assert_eq!(in_db_0.command(&[b"GET", b"k"]).await.unwrap(), Reply::Nil);

    let without = Redis::new(server.target());
    let error = without.eval("return 1", &[], &[]).await.unwrap_err();
    assert!(
        matches!(error, RedisError::Server(ref m) if m.starts_with("NOAUTH")),
        "{error:?}"
    );
    let wrong = Redis::new(RedisTarget {
        password: Some("not-the-secret".into()),
        ..server.target()
    });
    let error = wrong.command(&[b"PING"]).await.unwrap_err();
    assert!(
        matches!(error, RedisError::Server(ref m) if m.starts_with("WRONGPASS")),
        "{error:?}"
    );
    for shown in [
        error.to_string(),
        format!("{error:?}"),
        format!("{wrong:?}"),
    ] {
        assert!(!shown.contains("secret"), "{shown}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_evals_all_count() {
    let Some(server) = Server::start(&[]) else {
        return;
    };
    let redis = Arc::new(Redis::new(server.target()));
    let keys = Arc::new(vec!["hits".to_string()]);
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let redis = Arc::clone(&redis);
            let keys = Arc::clone(&keys);
            tokio::spawn(async move {
                redis
                    .eval("return redis.call('INCR', KEYS[1])", &keys, &[])
                    .await
            })
        })
        .collect();
    let mut seen = Vec::new();
    for task in tasks {
        seen.push(task.await.unwrap().unwrap().as_i64().unwrap());
    }
    seen.sort_unstable();
    assert_eq!(seen, (1..=50).collect::<Vec<_>>());
    assert_eq!(
        redis.command(&[b"GET", b"hits"]).await.unwrap().as_i64(),
        Some(50)
    );
}

#[tokio::test]
async fn a_connection_redis_closed_is_not_reused() {
    let Some(server) = Server::start(&[]) else {
        return;
    };
    let redis = Redis::new(server.target());
    redis.command(&[b"PING"]).await.unwrap();
    // Another client closes the pooled connection behind the pool's back.
    let other = Redis::new(server.target());
    let killed = other
        .command(&[b"CLIENT", b"KILL", b"TYPE", b"normal", b"SKIPME", b"yes"])
        .await
        .unwrap();
    assert_eq!(killed, Reply::Int(1));
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        redis.command(&[b"PING"]).await.unwrap(),
        Reply::Status("PONG".into())
    );
}

#[tokio::test]
async fn an_unreachable_redis_fails_fast() {
    let started = Instant::now();
    let redis = Redis::new(RedisTarget {
        host: "127.0.0.1".into(),
        port: free_port(),
        username: None,
        password: None,
        db: 0,
    });
    let error = redis.command(&[b"PING"]).await.unwrap_err();
    assert!(matches!(error, RedisError::Io(_)), "{error:?}");
    assert!(started.elapsed() < Duration::from_millis(500));
}

#[tokio::test]
async fn a_redis_that_never_answers_times_out() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    // Accepts and holds connections, reading nothing and answering nothing.
    let held = tokio::spawn(async move {
        let mut connections = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            connections.push(stream);
        }
    });
    let redis = Redis::new(RedisTarget {
        host: "127.0.0.1".into(),
        port,
        username: None,
        password: None,
        db: 0,
    });
    let started = Instant::now();
    let error = redis.command(&[b"PING"]).await.unwrap_err();
    assert!(matches!(error, RedisError::Timeout), "{error:?}");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    held.abort();
}
