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
    let lane = Lane::new(App { socket }, _native::runtime::engine().unwrap());
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
    let lane = Lane::new(App { socket: missing }, _native::runtime::engine().unwrap());
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
