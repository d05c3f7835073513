//! A TCP proxy the test can switch off and on, to make a real database
//! "go away" for one gateway without stopping it for every other test.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub struct ToggleProxy {
    pub addr: SocketAddr,
    up: watch::Sender<bool>,
    connections: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accept: JoinHandle<()>,
}

impl ToggleProxy {
    pub async fn start(target: String) -> ToggleProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (up, up_rx) = watch::channel(true);
        let connections: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let conns = connections.clone();
        let accept = tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else { return };
                if !*up_rx.borrow() {
                    drop(inbound); // "the database is gone": the connection dies at once
                    continue;
                }
                let target = target.clone();
                let task = tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                conns.lock().unwrap().push(task);
            }
        });
        ToggleProxy { addr, up, connections, accept }
    }

    /// Down: kills every open connection and refuses new ones.
    pub fn set_up(&self, up: bool) {
        self.up.send_replace(up);
        if !up {
            for task in self.connections.lock().unwrap().drain(..) {
                task.abort();
            }
        }
    }
}

impl Drop for ToggleProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.set_up(false);
    }
}
