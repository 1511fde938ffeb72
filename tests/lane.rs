//! The fast lane's listener forwards every request it does not take to the app behind it, as
//! it came, and the app's answer back, as it comes.

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

use _native::lane::{App, Lane, serve};

fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

/// An app on a Unix socket that answers with what it received.
async fn echo_app(path: std::path::PathBuf) {
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    loop {
        let (stream, _) = listener.accept().await.unwrap();
        tokio::spawn(async move {
            let service =
                hyper::service::service_fn(|request: Request<hyper::body::Incoming>| async move {
                    let (parts, body) = request.into_parts();
                    let body = body.collect().await.unwrap().to_bytes();
                    let header = parts
                        .headers
                        .get("x-test")
                        .map(|v| v.to_str().unwrap().to_string())
                        .unwrap_or_default();
                    let answer =
                        format!("{} {} {} {}", parts.method, parts.uri, header, body.len());
                    Ok::<_, Infallible>(
                        Response::builder()
                            .header("x-app", "yes")
                            .body(Full::new(Bytes::from(answer)))
                            .unwrap(),
                    )
                });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_the_lane_does_not_take_reach_the_app_unchanged() {
    let dir = std::env::temp_dir().join(format!("lane-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("app.sock");
    let _ = std::fs::remove_file(&socket);
    tokio::spawn(echo_app(socket.clone()));
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let lane = Lane::new(
        App { socket },
        _native::runtime::engine().unwrap(),
        false,
        None,
    );
    tokio::spawn(serve(listener, lane));

    let client = client();
    let base = format!("http://127.0.0.1:{port}");
    // Keep-alive: several requests on one connection, in order.
    for i in 0..5 {
        let answer = client
            .get(format!("{base}/health/liveliness?i={i}"))
            .header("x-test", format!("t{i}"))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.headers()["x-app"], "yes");
        assert_eq!(
            answer.text().await.unwrap(),
            format!("GET /health/liveliness?i={i} t{i} 0")
        );
    }
    // A large body, streamed through.
    let big = vec![b'x'; 3 * 1024 * 1024 + 7];
    let answer = client
        .post(format!("{base}/chat/completions"))
        .body(big.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(
        answer.text().await.unwrap(),
        format!("POST /chat/completions  {}", big.len())
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn an_unreachable_app_is_a_502_saying_so() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let missing = std::env::temp_dir().join("lane-test-no-such.sock");
    let lane = Lane::new(
        App { socket: missing },
        _native::runtime::engine().unwrap(),
        false,
        None,
    );
    tokio::spawn(serve(listener, lane));
    let answer = client()
        .get(format!("http://127.0.0.1:{port}/"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 502);
    assert_eq!(
        answer.text().await.unwrap(),
        "the proxy behind the fast lane is unreachable"
    );
}

/// The I/O threads ask for a short scheduling slice (`runtime::shorten_slice`): on a kernel with
/// EEVDF custom slices (6.12+) a worker thread reports 100 µs; older kernels report none.
#[cfg(target_os = "linux")]
#[test]
fn io_threads_run_with_a_short_slice() {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let mut version = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|n| n.parse::<u32>());
    let (major, minor) = (
        version.next().unwrap().unwrap(),
        version.next().unwrap().unwrap(),
    );
    let slice_ns = _native::runtime::engine()
        .unwrap()
        .runtime
        .block_on(async { tokio::spawn(async { current_slice_ns() }).await.unwrap() });
    if (major, minor) >= (6, 12) {
        assert_eq!(slice_ns, 100_000);
    } else {
        assert_eq!(slice_ns, 0);
    }
}

/// `sched_runtime` of the calling thread, from `sched_getattr`.
#[cfg(target_os = "linux")]
fn current_slice_ns() -> u64 {
    let mut attr = [0u64; 7]; // struct sched_attr, VER0 (48 bytes), as u64 words
    // SAFETY: `attr` is 56 writable bytes; the size passed is the VER0 size, pid 0 is this thread.
    let rc = unsafe { libc::syscall(libc::SYS_sched_getattr, 0, attr.as_mut_ptr(), 48u32, 0u32) };
    assert_eq!(rc, 0, "sched_getattr failed");
    attr[3] // size u32 + policy u32 | flags u64 | nice i32 + priority u32 | runtime u64
}
