//! A TCP proxy the test can switch off and on, to make a real database
//! "go away" for one gateway without stopping it for every other test; and
//! arm once to lose a reply whose request the server did execute (the
//! ambiguous commit: the client cannot know whether its write landed).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub struct ToggleProxy {
    pub addr: SocketAddr,
    up: watch::Sender<bool>,
    connections: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accept: JoinHandle<()>,
    cut: Cut,
}

/// The armed pattern (one shot), whether it was seen, and whether the cut
/// fired.
#[derive(Clone, Default)]
struct Cut {
    pattern: Arc<Mutex<Option<Vec<u8>>>>,
    seen: Arc<AtomicBool>,
    fired: Arc<AtomicBool>,
}

impl Cut {
    /// Whether `chunk` (client → server) fires the armed cut. A statement
    /// is sent twice: prepared (its text: `Parse`, `Describe`, `Sync`), then
    /// run (`Bind`, `Execute`, `Sync`) in the client's next write; the cut
    /// fires on that one, whose reply comes after the server committed.
    fn fires_on(&self, chunk: &[u8]) -> bool {
        let mut pattern = self.pattern.lock().unwrap();
        if pattern.is_none() {
            return false;
        }
        if self.seen.load(Ordering::SeqCst) {
            *pattern = None;
            self.fired.store(true, Ordering::SeqCst);
            return true;
        }
        if pattern.as_ref().is_some_and(|p| chunk.windows(p.len()).any(|w| w == p.as_slice())) {
            self.seen.store(true, Ordering::SeqCst);
        }
        false
    }
}

impl ToggleProxy {
    pub async fn start(target: String) -> ToggleProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (up, up_rx) = watch::channel(true);
        let connections: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let conns = connections.clone();
        let cut = Cut::default();
        let cuts = cut.clone();
        let accept = tokio::spawn(async move {
            loop {
                let Ok((inbound, _)) = listener.accept().await else { return };
                if !*up_rx.borrow() {
                    drop(inbound); // "the database is gone": the connection dies at once
                    continue;
                }
                let (target, cut) = (target.clone(), cuts.clone());
                let task = tokio::spawn(async move {
                    if let Ok(outbound) = TcpStream::connect(&target).await {
                        relay(inbound, outbound, cut).await;
                    }
                });
                conns.lock().unwrap().push(task);
            }
        });
        ToggleProxy { addr, up, connections, accept, cut }
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

    /// Once: after the first client write containing `pattern` (the
    /// statement prepared), the next write (the statement run) reaches the
    /// server, the proxy waits for the server's reply (so the server has
    /// executed and committed it), throws the reply away and closes that
    /// connection. The client sees its connection reset, its write committed.
    pub fn cut_reply_after(&self, pattern: &str) {
        *self.cut.pattern.lock().unwrap() = Some(pattern.as_bytes().to_vec());
    }

    /// Whether an armed cut has fired.
    pub fn cut_fired(&self) -> bool {
        self.cut.fired.load(Ordering::SeqCst)
    }
}

/// Copies both ways until either side closes, or until the cut fires.
async fn relay(inbound: TcpStream, outbound: TcpStream, cut: Cut) {
    let (mut client_read, mut client_write) = inbound.into_split();
    let (mut server_read, mut server_write) = outbound.into_split();
    let cutting = Arc::new(AtomicBool::new(false));
    let to_client = {
        let cutting = cutting.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                let Ok(n) = server_read.read(&mut buf).await else { return };
                // The reply to the cut request is read (the server executed
                // it) and dropped; closing here resets the client.
                if n == 0 || cutting.load(Ordering::SeqCst) {
                    return;
                }
                if client_write.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        })
    };
    let mut buf = vec![0u8; 16 * 1024];
    while let Ok(n) = client_read.read(&mut buf).await {
        if n == 0 {
            break;
        }
        if cut.fires_on(&buf[..n]) {
            cutting.store(true, Ordering::SeqCst);
        }
        if server_write.write_all(&buf[..n]).await.is_err() {
            break;
        }
        if cutting.load(Ordering::SeqCst) {
            // Wait for the reply to be swallowed, then drop everything.
            let _ = to_client.await;
            return;
        }
    }
    to_client.abort();
}

impl Drop for ToggleProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.set_up(false);
    }
}
