//! The gateway's accept loop, instead of `axum::serve`, which offers no
//! header-read timer and no connection cap: a client that sends half a
//! request line, or a thousand that open sockets and stay silent, would hold
//! connections (file descriptors, memory) forever.
//!
//! - **Header-read timeout** (hyper's): from when a connection starts waiting
//!   for a request's headers until they are complete. hyper starts this
//!   timer as soon as a connection waits for its next request, so it is
//!   also the idle keep-alive timeout: an idle connection is closed after
//!   `header_read_timeout`. (hyper 1's HTTP/1 has no separate idle timer.)
//! - **Body-read timeout**: `crate::api` bounds the time a body may take
//!   (408), since hyper only times headers.
//! - **Write-stall timeout** ([`StallGuard`]): a connection whose writes
//!   make no progress for `write_stall_timeout` is closed. A client that
//!   pipelines requests and never reads its answers would otherwise hold a
//!   slot forever (hyper reads the next request only once the previous
//!   answer is written, so the stall also bounds pipelining).
//! - **Per-peer cap** (`peers.rs`): one address holds at most
//!   `max_connections_per_peer` of the slots; a connection past it is closed
//!   at once, so no single client can take them all.
//! - **Connection cap**: at `max_connections` the loop stops accepting; new
//!   connections wait in the kernel's accept queue and are served as soon as
//!   one closes. Waiting rather than refusing: accepting only to close again
//!   costs as much as serving a request and hands a burst of honest clients
//!   resets, while the queue turns a burst into latency; and with the
//!   timeouts above a slot held by a silent client frees itself.
//!
//! Connection tasks are spawned through a [`TaskTracker`] owned by this loop
//! (it calls `tokio::spawn` for us, clippy's `disallowed_methods` does not
//! object): on shutdown the loop stops accepting, asks every connection to
//! finish its in-flight request and close, and waits for them all.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::ServerConfig;

mod peers;
mod stall;
use peers::Peers;
use stall::StallGuard;

/// What bounds a connection.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    pub header_read_timeout: Duration,
    pub write_stall_timeout: Duration,
    pub max_connections: usize,
    pub max_connections_per_peer: usize,
}

impl ConnectionLimits {
    pub fn from_config(config: &ServerConfig) -> Self {
        ConnectionLimits {
            header_read_timeout: config.header_read_timeout.into(),
            write_stall_timeout: config.write_stall_timeout.into(),
            max_connections: config.max_connections.max(1),
            max_connections_per_peer: config.connections_per_peer(),
        }
    }
}

/// Serves `app` on `listener` until `shutdown` resolves, then lets every
/// connection finish its in-flight request and returns once all closed.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let connections = TaskTracker::new();
    let closing = CancellationToken::new();
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let peers = Peers::new(limits.max_connections_per_peer);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        // A slot first: at the cap, connections wait in the accept queue.
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot.map_err(std::io::Error::other)?,
            () = &mut shutdown => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    // Out of file descriptors and the like: back off, keep serving.
                    tracing::warn!(error = %err, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Some(share) = peers.admit(peer.ip()) else {
            // Closed at once: this peer holds its share of the slots.
            metrics::counter!(crate::telemetry::CONNECTIONS_REFUSED).increment(1);
            tracing::debug!(%peer, "connection closed: its address holds max_connections_per_peer");
            continue;
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(app.clone());
        let closing = closing.clone();
        connections.spawn(async move {
            let _held = (slot, share);
            let connection = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_read_timeout)
                .serve_connection(TokioIo::new(StallGuard::new(stream, limits.write_stall_timeout)), service);
            let mut connection = std::pin::pin!(connection);
            let served = tokio::select! {
                served = connection.as_mut() => served,
                () = closing.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(err) = served {
                tracing::debug!(error = %err, "connection closed with an error");
            }
        });
    }
    drop(listener);
    closing.cancel();
    connections.close();
    connections.wait().await;
    Ok(())
}
