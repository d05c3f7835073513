//! Connections are bounded: a half-sent request line or header block is
//! closed after `header_read_timeout`, a short body gets 408 after
//! `body_read_timeout`, and past `max_connections` new connections wait.
//! Short timeouts; every wait is bounded and waits on the socket, not on a
//! sleep.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

store_matrix!(
    half_request_line_is_closed,
    half_headers_are_closed,
    short_body_gets_408,
    short_openai_body_gets_408,
    connections_past_the_cap_wait,
    clients_that_never_read_do_not_hold_the_slots,
    one_peer_cannot_take_every_slot
);

/// Clients that pipeline requests and never read the answers (a small
/// receive buffer, `GET /openapi.json` 300 times) hold every connection
/// slot only until `write_stall_timeout`: then they are closed, and a
/// client waiting in the accept queue is served.
async fn clients_that_never_read_do_not_hold_the_slots(store: TestStore) {
    let gw = TestGateway::start_tweaked(&store, |doc| {
        let server = doc.get_mut("server").unwrap().as_table_mut().unwrap();
        server.insert("max_connections".into(), 2.into());
        server.insert("write_stall_timeout".into(), "500ms".into());
    })
    .await;
    let pipelined = "GET /openapi.json HTTP/1.1\r\nHost: x\r\n\r\n".repeat(300);
    let mut hogs = Vec::new();
    for _ in 0..2 {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let mut stream = socket.connect(gw.gateway.addr).await.unwrap();
        // Written in the background: the server stops reading once its
        // answers back up, so the write itself would block.
        let bytes = pipelined.clone().into_bytes();
        hogs.push(tokio::spawn(async move {
            let _ = stream.write_all(&bytes).await;
            std::future::pending::<()>().await;
            drop(stream);
        }));
    }
    let started = Instant::now();
    let (answer, _) =
        send_and_read_to_close(&gw, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(started.elapsed() < Duration::from_secs(4), "served once the stalled slots were freed");
    for hog in hogs {
        hog.abort();
    }
}

async fn start(store: &TestStore, max_connections: i64, header_timeout: &str) -> TestGateway {
    let header_timeout = header_timeout.to_owned();
    TestGateway::start_tweaked(store, move |doc| {
        let server = doc.get_mut("server").unwrap().as_table_mut().unwrap();
        server.insert("header_read_timeout".into(), header_timeout.into());
        server.insert("body_read_timeout".into(), "200ms".into());
        server.insert("max_connections".into(), max_connections.into());
    })
    .await
}

/// Writes `sent`, then reads until the server closes; what it said, and
/// how long it took. Panics if the server keeps the socket 5 s.
async fn send_and_read_to_close(gw: &TestGateway, sent: &[u8]) -> (String, Duration) {
    let mut socket = TcpStream::connect(gw.gateway.addr).await.unwrap();
    let started = Instant::now();
    socket.write_all(sent).await.unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), async {
        let mut buf = [0u8; 4096];
        loop {
            match socket.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(read.is_ok(), "the server kept a stalled connection open for 5 s");
    (String::from_utf8_lossy(&answer).into_owned(), started.elapsed())
}

async fn half_request_line_is_closed(store: TestStore) {
    let gw = start(&store, 1024, "200ms").await;
    let (answer, took) = send_and_read_to_close(&gw, b"GET /heal").await;
    assert!(took >= Duration::from_millis(150), "closed after {took:?}");
    assert!(!answer.contains("200 OK"), "{answer}");
}

async fn half_headers_are_closed(store: TestStore) {
    let gw = start(&store, 1024, "200ms").await;
    let (answer, took) = send_and_read_to_close(&gw, b"GET /healthz HTTP/1.1\r\nHost: x\r\nAccept: */").await;
    assert!(took >= Duration::from_millis(150), "closed after {took:?}");
    assert!(!answer.contains("200 OK"), "{answer}");
}

fn short_body_request(path: &str, key: &str) -> Vec<u8> {
    format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ALICE}\r\nIdempotency-Key: {key}\r\n\
         Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"route\":"
    )
    .into_bytes()
}

async fn short_body_gets_408(store: TestStore) {
    let gw = start(&store, 1024, "10s").await;
    let (answer, took) = send_and_read_to_close(&gw, &short_body_request("/v1/jobs", "short")).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.to_ascii_lowercase().contains("content-type: application/problem+json"), "{answer}");
    assert!(answer.contains("body-timeout"), "{answer}");
    assert!(took >= Duration::from_millis(150), "answered after {took:?}");
    assert_eq!(gw.job_count().await, 0, "nothing stored");
}

async fn short_openai_body_gets_408(store: TestStore) {
    let gw = start(&store, 1024, "10s").await;
    let (answer, _) = send_and_read_to_close(&gw, &short_body_request("/v1/chat/completions", "short")).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
}

async fn connections_past_the_cap_wait(store: TestStore) {
    let gw = start(&store, 2, "10s").await;
    // Two silent connections take both slots.
    let first = TcpStream::connect(gw.gateway.addr).await.unwrap();
    let mut second = TcpStream::connect(gw.gateway.addr).await.unwrap();
    // Prove the second was accepted (served): a request on it is answered.
    second.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let mut buf = [0u8; 1024];
    let n = tokio::time::timeout(Duration::from_secs(5), second.read(&mut buf)).await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));

    // A third waits in the accept queue: no answer while both are held.
    let mut third = TcpStream::connect(gw.gateway.addr).await.unwrap();
    third.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.unwrap();
    let early = tokio::time::timeout(Duration::from_millis(300), third.read(&mut buf)).await;
    assert!(early.is_err(), "the third connection was served past the cap");

    // One closes: the third is served.
    drop(first);
    let n = tokio::time::timeout(Duration::from_secs(5), third.read(&mut buf)).await.unwrap().unwrap();
    assert!(
        String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&buf[..n])
    );
}

/// A slowloris from one address (40 sockets that send half a request line
/// and wait) against 8 slots, 4 per peer: it holds its 4, the rest are
/// closed at once, and `/healthz` from another address (127.0.0.2) is
/// answered within a second throughout.
async fn one_peer_cannot_take_every_slot(store: TestStore) {
    let gw = TestGateway::start_tweaked(&store, |doc| {
        let server = doc.get_mut("server").unwrap().as_table_mut().unwrap();
        server.insert("max_connections".into(), 8.into());
        server.insert("max_connections_per_peer".into(), 4.into());
    })
    .await;
    let mut held = Vec::new();
    let mut closed_at_once = 0;
    for _ in 0..40 {
        let mut stream = TcpStream::connect(gw.gateway.addr).await.unwrap();
        stream.write_all(b"GET /heal").await.unwrap();
        let mut buf = [0u8; 64];
        // A connection past the cap is closed at once (EOF or a reset);
        // one that is held stays silent.
        match tokio::time::timeout(Duration::from_millis(200), stream.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => closed_at_once += 1,
            Ok(Ok(n)) => panic!("a half request line was answered: {}", String::from_utf8_lossy(&buf[..n])),
            Err(_) => held.push(stream),
        }
    }
    assert_eq!((held.len(), closed_at_once), (4, 36), "the peer holds its share, no more");
    for _ in 0..3 {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
        let mut probe = socket.connect(gw.gateway.addr).await.unwrap();
        let started = Instant::now();
        probe.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.unwrap();
        let mut answer = String::new();
        tokio::time::timeout(Duration::from_secs(1), probe.read_to_string(&mut answer))
            .await
            .unwrap()
            .unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(started.elapsed() < Duration::from_secs(1), "another address is served at once");
    }
}
