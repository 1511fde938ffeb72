//! A minimal Redis client (RESP2 over plain TCP) for the lane's rate limits.
//!
//! The lane runs LiteLLM's own rate-limiter Lua scripts against LiteLLM's coordination Redis, so
//! the counters stay shared with the proxy's Python path. It needs a handful of commands from
//! the I/O threads with tight timeouts, not a full client: a failed or slow call only sends the
//! request to the proxy, which decides as LiteLLM alone would.

use std::fmt;
use std::io;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::time::timeout;

/// Idle connections kept for reuse; more are dialled under load and closed after.
pub const MAX_IDLE: usize = 8;
/// Dialling, AUTH and SELECT together: a Redis that slow is no use to a request in flight.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// One command, written and answered.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(1);
/// Redis's own `proto-max-bulk-len` default: a longer length is garbage, not a reply.
const MAX_BULK_LEN: usize = 512 * 1024 * 1024;
/// Rate-limiter replies are a few elements; this only stops garbage lengths.
const MAX_ARRAY_LEN: usize = 1 << 20;
/// Elements reserved up front, whatever length a reply announces: the rest grows as they arrive.
const ARRAY_PREALLOCATION: usize = 64;
/// Lua tables convert to nested arrays; deeper than this is garbage.
const MAX_NESTING: usize = 64;
/// Status, error and length lines; Redis's are far shorter.
const MAX_LINE_LEN: u64 = 64 * 1024;
/// Bulk bytes reserved up front, for the same reason as `ARRAY_PREALLOCATION`.
const BULK_PREALLOCATION: usize = 64 * 1024;

/// Where LiteLLM's coordination Redis is (plain TCP; TLS/cluster/sentinel are not supported by the lane).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedisTarget {
    pub host: String,
    pub port: u16,
    pub username: Option<String>,
    pub password: Option<String>,
    pub db: i64,
}

/// One RESP2 reply. Error replies are not values: they come back as `RedisError::Server`.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    Nil,
    Int(i64),
    Bulk(Vec<u8>),
    Status(String),
    Array(Vec<Reply>),
}

impl Reply {
    /// The reply as an integer: Lua numbers come back as integers, but scripts and commands
    /// also return counters as strings.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Reply::Int(value) => Some(*value),
            Reply::Bulk(bytes) => std::str::from_utf8(bytes).ok()?.parse().ok(),
            Reply::Status(text) => text.parse().ok(),
            Reply::Nil | Reply::Array(_) => None,
        }
    }
}

/// Why a command has no reply. None of them carries the target's credentials.
#[derive(Debug, thiserror::Error)]
pub enum RedisError {
    /// Connecting, reading or writing failed, or Redis closed the connection.
    #[error("redis i/o failed: {0}")]
    Io(#[from] io::Error),
    /// Redis did not connect or answer within its timeout.
    #[error("redis did not answer in time")]
    Timeout,
    /// Redis answered with an error reply (`-ERR ...`, `-NOAUTH ...`, a script's error).
    #[error("redis error: {0}")]
    Server(String),
    /// The bytes Redis sent are not a RESP2 reply.
    #[error("malformed redis reply: {0}")]
    Protocol(&'static str),
}

/// A small pool of connections to one Redis, each authenticated and on its database from the
/// moment it is dialled, so a command is one round trip.
pub struct Redis {
    target: RedisTarget,
    idle: Mutex<Vec<Conn>>,
}

impl fmt::Debug for Redis {
    /// The target without its credentials: a `Redis` may end up in logs.
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("Redis")
            .field("host", &self.target.host)
            .field("port", &self.target.port)
            .field("db", &self.target.db)
            .finish_non_exhaustive()
    }
}

impl Redis {
    pub fn new(target: RedisTarget) -> Self {
        Self {
            target,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// Runs `EVAL script numkeys keys... args...` and returns the reply. Takes an idle
    /// connection or dials one (connect timeout 1 s); the whole command has a 1 s timeout; a
    /// connection that errored or timed out is dropped, never returned to the pool.
    pub async fn eval(
        &self,
        script: &str,
        keys: &[String],
        args: &[String],
    ) -> Result<Reply, RedisError> {
        let key_count = keys.len().to_string();
        let mut command: Vec<&[u8]> = Vec::with_capacity(3 + keys.len() + args.len());
        command.push(b"EVAL");
        command.push(script.as_bytes());
        command.push(key_count.as_bytes());
        command.extend(keys.iter().map(|key| key.as_bytes()));
        command.extend(args.iter().map(|arg| arg.as_bytes()));
        self.command(&command).await
    }

    /// Any command (used by tests and for refunds), same pooling/timeouts.
    pub async fn command(&self, args: &[&[u8]]) -> Result<Reply, RedisError> {
        let mut conn = match self.take_idle() {
            Some(conn) => conn,
            None => timeout(CONNECT_TIMEOUT, Conn::open(&self.target))
                .await
                .map_err(|_| RedisError::Timeout)??,
        };
        match timeout(COMMAND_TIMEOUT, conn.round_trip(args)).await {
            // A timed-out command may still be answered later: the connection is out of step.
            Err(_) => Err(RedisError::Timeout),
            Ok(Ok(reply)) => {
                self.put_back(conn);
                Ok(reply)
            }
            // An error reply was read in full, so the connection is still in step.
            Ok(Err(error @ RedisError::Server(_))) => {
                self.put_back(conn);
                Err(error)
            }
            Ok(Err(error)) => Err(error),
        }
    }

    /// An idle connection Redis has not closed meanwhile (its `timeout`, a restart, a proxy in
    /// between): sending on one of those would fail a request that a fresh dial serves.
    fn take_idle(&self) -> Option<Conn> {
        loop {
            let conn = self.idle_list().pop()?;
            if conn.is_open() {
                return Some(conn);
            }
        }
    }

    fn put_back(&self, conn: Conn) {
        let mut idle = self.idle_list();
        if idle.len() < MAX_IDLE {
            idle.push(conn);
        }
    }

    /// The idle list; a panic elsewhere while it was locked leaves a list still worth using.
    fn idle_list(&self) -> MutexGuard<'_, Vec<Conn>> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One connection, ready for commands.
struct Conn {
    stream: BufReader<TcpStream>,
}

impl Conn {
    /// Dials the target, then authenticates and selects its database once for the
    /// connection's life.
    async fn open(target: &RedisTarget) -> Result<Self, RedisError> {
        let stream = TcpStream::connect((target.host.as_str(), target.port)).await?;
        // Commands are one small write each, waiting on their answer.
        stream.set_nodelay(true)?;
        let mut conn = Self {
            stream: BufReader::new(stream),
        };
        if let Some(password) = &target.password {
            let mut auth: Vec<&[u8]> = vec![b"AUTH"];
            if let Some(username) = &target.username {
                auth.push(username.as_bytes());
            }
            auth.push(password.as_bytes());
            conn.round_trip(&auth).await?;
        }
        if target.db != 0 {
            let db = target.db.to_string();
            conn.round_trip(&[b"SELECT", db.as_bytes()]).await?;
        }
        Ok(conn)
    }

    async fn round_trip(&mut self, args: &[&[u8]]) -> Result<Reply, RedisError> {
        self.stream.write_all(&encode_command(args)).await?;
        self.stream.flush().await?;
        read_reply(&mut self.stream).await
    }

    /// False once Redis closed the connection or sent something unasked (then it is out of
    /// step). Costs one non-blocking read at most.
    fn is_open(&self) -> bool {
        if !self.stream.buffer().is_empty() {
            return false;
        }
        let mut probe = [0_u8; 1];
        matches!(
            self.stream.get_ref().try_read(&mut probe),
            Err(error) if error.kind() == io::ErrorKind::WouldBlock
        )
    }
}

/// A command as Redis reads it from clients: an array of bulk strings.
fn encode_command(args: &[&[u8]]) -> Vec<u8> {
    let payload: usize = args.iter().map(|arg| arg.len() + 16).sum();
    let mut out = Vec::with_capacity(16 + payload);
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// One element of a reply as its first line announces it.
enum Item {
    Value(Reply),
    Error(String),
    ArrayOf(usize),
}

/// Reads one whole reply, nested arrays included. Arrays are assembled on an explicit stack
/// rather than by recursion, which an async fn cannot do without boxing every level.
///
/// An error reply nested in an array fails the whole reply, but only once the array is read
/// to its end, so the connection stays in step.
async fn read_reply<R: AsyncBufRead + Unpin>(reader: &mut R) -> Result<Reply, RedisError> {
    // Arrays still being filled, innermost last: the elements so far and the count announced.
    let mut open: Vec<(Vec<Reply>, usize)> = Vec::new();
    let mut first_error: Option<String> = None;
    let mut line = Vec::new();
    loop {
        let mut value = match read_item(reader, &mut line).await? {
            Item::Value(value) => value,
            Item::Error(message) => {
                first_error.get_or_insert(message);
                Reply::Nil
            }
            Item::ArrayOf(0) => Reply::Array(Vec::new()),
            Item::ArrayOf(len) => {
                if open.len() >= MAX_NESTING {
                    return Err(RedisError::Protocol("arrays nested too deep"));
                }
                open.push((Vec::with_capacity(len.min(ARRAY_PREALLOCATION)), len));
                continue;
            }
        };
        // Close every array this value completes.
        loop {
            let Some((mut elements, len)) = open.pop() else {
                return match first_error {
                    Some(message) => Err(RedisError::Server(message)),
                    None => Ok(value),
                };
            };
            elements.push(value);
            if elements.len() < len {
                open.push((elements, len));
                break;
            }
            value = Reply::Array(elements);
        }
    }
}

/// Reads one line and, for a bulk string, its bytes.
async fn read_item<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    line: &mut Vec<u8>,
) -> Result<Item, RedisError> {
    read_line(reader, line).await?;
    let (&kind, rest) = line
        .split_first()
        .ok_or(RedisError::Protocol("empty line"))?;
    Ok(match kind {
        b'+' => Item::Value(Reply::Status(String::from_utf8_lossy(rest).into_owned())),
        b'-' => Item::Error(String::from_utf8_lossy(rest).into_owned()),
        b':' => Item::Value(Reply::Int(parse_int(rest)?)),
        b'$' => match length(parse_int(rest)?, MAX_BULK_LEN, "bulk string too long")? {
            None => Item::Value(Reply::Nil),
            Some(len) => Item::Value(Reply::Bulk(read_bulk(reader, len).await?)),
        },
        b'*' => match length(parse_int(rest)?, MAX_ARRAY_LEN, "array too long")? {
            None => Item::Value(Reply::Nil),
            Some(len) => Item::ArrayOf(len),
        },
        _ => return Err(RedisError::Protocol("unknown reply type")),
    })
}

/// A line without its CRLF, refusing lines longer than any Redis sends.
async fn read_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    line: &mut Vec<u8>,
) -> Result<(), RedisError> {
    line.clear();
    (&mut *reader)
        .take(MAX_LINE_LEN)
        .read_until(b'\n', line)
        .await?;
    if line.last() != Some(&b'\n') {
        return Err(if line.len() as u64 >= MAX_LINE_LEN {
            RedisError::Protocol("line too long")
        } else {
            closed_mid_reply()
        });
    }
    line.pop();
    if line.pop() != Some(b'\r') {
        return Err(RedisError::Protocol("line not ended by CRLF"));
    }
    Ok(())
}

/// A bulk string's bytes and its CRLF. The buffer grows as bytes arrive, so a garbage length
/// does not allocate what it announces.
async fn read_bulk<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    len: usize,
) -> Result<Vec<u8>, RedisError> {
    let mut bytes = Vec::with_capacity(len.min(BULK_PREALLOCATION));
    (&mut *reader)
        .take(len as u64)
        .read_to_end(&mut bytes)
        .await?;
    if bytes.len() < len {
        return Err(closed_mid_reply());
    }
    let mut crlf = [0_u8; 2];
    reader.read_exact(&mut crlf).await.map_err(|error| {
        if error.kind() == io::ErrorKind::UnexpectedEof {
            closed_mid_reply()
        } else {
            RedisError::Io(error)
        }
    })?;
    if &crlf != b"\r\n" {
        return Err(RedisError::Protocol("bulk string not ended by CRLF"));
    }
    Ok(bytes)
}

fn parse_int(digits: &[u8]) -> Result<i64, RedisError> {
    std::str::from_utf8(digits)
        .ok()
        .and_then(|text| text.parse().ok())
        .ok_or(RedisError::Protocol("bad integer"))
}

/// A bulk or array length: `None` for RESP2's nil (-1).
fn length(value: i64, max: usize, too_long: &'static str) -> Result<Option<usize>, RedisError> {
    if value == -1 {
        return Ok(None);
    }
    let len = usize::try_from(value).map_err(|_| RedisError::Protocol("negative length"))?;
    if len > max {
        return Err(RedisError::Protocol(too_long));
    }
    Ok(Some(len))
}

fn closed_mid_reply() -> RedisError {
    RedisError::Io(io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "redis closed the connection",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn parse(mut bytes: &[u8]) -> Result<Reply, RedisError> {
        let reply = read_reply(&mut bytes).await;
        // A reply read in full leaves nothing behind: the next one starts in step.
        if reply.is_ok() {
            assert!(bytes.is_empty(), "left unread: {bytes:?}");
        }
        reply
    }

    fn bulk(text: &str) -> Reply {
        Reply::Bulk(text.as_bytes().to_vec())
    }

    #[tokio::test]
    async fn parses_scalars() {
        assert_eq!(parse(b"+OK\r\n").await.unwrap(), Reply::Status("OK".into()));
        assert_eq!(parse(b":-42\r\n").await.unwrap(), Reply::Int(-42));
        assert_eq!(parse(b"$5\r\nhello\r\n").await.unwrap(), bulk("hello"));
        assert_eq!(parse(b"$0\r\n\r\n").await.unwrap(), bulk(""));
        assert_eq!(parse(b"$-1\r\n").await.unwrap(), Reply::Nil);
        assert_eq!(parse(b"*-1\r\n").await.unwrap(), Reply::Nil);
        assert_eq!(parse(b"*0\r\n").await.unwrap(), Reply::Array(vec![]));
    }

    #[tokio::test]
    async fn bulk_strings_carry_any_bytes() {
        assert_eq!(
            parse(b"$4\r\n\r\n\0\xff\r\n").await.unwrap(),
            Reply::Bulk(b"\r\n\0\xff".to_vec())
        );
    }

    #[tokio::test]
    async fn parses_nested_arrays() {
        let reply = parse(b"*4\r\n:1\r\n*2\r\n$1\r\na\r\n*1\r\n$-1\r\n*0\r\n+x\r\n")
            .await
            .unwrap();
        assert_eq!(
            reply,
            Reply::Array(vec![
                Reply::Int(1),
                Reply::Array(vec![bulk("a"), Reply::Array(vec![Reply::Nil])]),
                Reply::Array(vec![]),
                Reply::Status("x".into()),
            ])
        );
    }

    #[tokio::test]
    async fn reads_one_reply_at_a_time() {
        let mut bytes: &[u8] = b"*1\r\n:1\r\n+second\r\n";
        assert_eq!(
            read_reply(&mut bytes).await.unwrap(),
            Reply::Array(vec![Reply::Int(1)])
        );
        assert_eq!(
            read_reply(&mut bytes).await.unwrap(),
            Reply::Status("second".into())
        );
    }

    #[tokio::test]
    async fn error_replies_are_server_errors() {
        let error = parse(b"-ERR unknown command 'NOPE'\r\n").await.unwrap_err();
        assert!(matches!(error, RedisError::Server(ref m) if m == "ERR unknown command 'NOPE'"));
    }

    #[tokio::test]
    async fn an_error_inside_an_array_fails_it_after_reading_it_whole() {
        let error = parse(b"*3\r\n:1\r\n-ERR first\r\n-ERR second\r\n")
            .await
            .unwrap_err();
        assert!(matches!(error, RedisError::Server(ref m) if m == "ERR first"));
    }

    #[tokio::test]
    async fn truncated_replies_are_errors() {
        for bytes in [
            &b""[..],
            b"+OK",
            b"+OK\r",
            b":12",
            b"$5\r\nhel",
            b"$5\r\nhello",
            b"$5\r\nhello\r",
            b"*2\r\n:1\r\n",
            b"*2\r\n*1\r\n",
        ] {
            let error = parse(bytes).await.unwrap_err();
            assert!(
                matches!(error, RedisError::Io(ref e) if e.kind() == io::ErrorKind::UnexpectedEof),
                "{bytes:?}: {error:?}"
            );
        }
    }

    #[tokio::test]
    async fn malformed_replies_are_protocol_errors() {
        for bytes in [
            &b"?what\r\n"[..],
            b"\r\n",
            b":12a\r\n",
            b"+OK\n",
            b"$-2\r\n",
            b"$3\r\nabcd\r\n",
            b"$536870913\r\n",
            b"*1048577\r\n",
            b"*-5\r\n",
        ] {
            let error = parse(bytes).await.unwrap_err();
            assert!(
                matches!(error, RedisError::Protocol(_)),
                "{bytes:?}: {error:?}"
            );
        }
    }

    #[tokio::test]
    async fn refuses_endless_lines_and_nesting() {
        let long = [b"+".as_slice(), &vec![b'a'; 70_000], b"\r\n"].concat();
        assert!(matches!(
            parse(&long).await.unwrap_err(),
            RedisError::Protocol("line too long")
        ));
        let deep = b"*1\r\n".repeat(MAX_NESTING + 1);
        assert!(matches!(
            parse(&deep).await.unwrap_err(),
            RedisError::Protocol("arrays nested too deep")
        ));
    }

    #[test]
    fn encodes_commands_as_bulk_arrays() {
        assert_eq!(
            encode_command(&[b"SET", b"k", b""]),
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n"
        );
    }

    #[test]
    fn reads_integers_from_any_scalar() {
        assert_eq!(Reply::Int(7).as_i64(), Some(7));
        assert_eq!(bulk("-12").as_i64(), Some(-12));
        assert_eq!(Reply::Status("3".into()).as_i64(), Some(3));
        assert_eq!(bulk("1.5").as_i64(), None);
        assert_eq!(Reply::Nil.as_i64(), None);
        assert_eq!(Reply::Array(vec![Reply::Int(1)]).as_i64(), None);
    }

    #[test]
    fn debug_leaves_out_credentials() {
        let redis = Redis::new(RedisTarget {
            host: "cache".into(),
            port: 6379,
            username: Some("lane".into()),
            password: Some("hunter2".into()),
            db: 0,
        });
        let shown = format!("{redis:?}");
        assert!(shown.contains("cache") && !shown.contains("hunter2") && !shown.contains("lane"));
    }
}
