//! The simulator's accept loop. It serves each connection itself (rather
//! than through `axum::serve`) so a handler can drop *its own* connection:
//! that is how `reset-*` and `stream-cut` close a socket mid-request, the way
//! a crashing provider or a flaky load balancer would.

use std::sync::Arc;
use std::time::Duration;

use axum::Extension;
use axum::response::Response;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Notify;

use super::{Simulator, router};

/// Drops the connection the request arrived on, without a response.
#[derive(Clone, Default)]
pub(crate) struct KillSwitch(Arc<Notify>);

impl KillSwitch {
    /// Pulls the switch and never returns: the connection task drops this
    /// handler together with the connection.
    pub(crate) async fn drop_connection(&self) -> Response {
        self.pull();
        std::future::pending().await
    }

    pub(crate) fn pull(&self) {
        self.0.notify_one();
    }
}

/// Serves the simulator on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, sim: Simulator) {
    let app = router(sim);
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(err) => {
                // Out of file descriptors and the like: back off, keep serving.
                tracing::warn!(error = %err, "simulator accept failed");
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let kill = KillSwitch::default();
        let service = TowerToHyperService::new(app.clone().layer(Extension(kill.clone())));
        tokio::spawn(async move {
            let connection = http1::Builder::new()
                .timer(TokioTimer::new())
                .serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = connection => {}
                () = kill.0.notified() => {} // dropping the connection closes the socket
            }
        });
    }
}
