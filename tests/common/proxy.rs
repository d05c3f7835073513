//! A TCP proxy the test can switch off and on, to make a real database
//! "go away" for one gateway without stopping it for every other test;
//! stall, so the database is there but answers nothing for a while; and
//! arm once to lose a reply whose request the server did execute (the
//! ambiguous commit: the client cannot know whether its write landed).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub struct ToggleProxy {
    pub addr: SocketAddr,
    up: watch::Sender<bool>,
    stalled: watch::Sender<bool>,
    connections: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accept: JoinHandle<()>,
    cut: Cut,
}

/// Which write an armed cut loses the reply to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum CutAt {
    /// The connection's next write after the one holding the pattern: the
    /// pattern is a statement's text, sent when it is prepared, and the
    /// next write runs it.
    NextWrite,
    /// The write holding the pattern itself: a statement sent whole every
    /// time (`COMMIT` as a simple query, or the arguments of one).
    ThisWrite,
}

struct Armed {
    pattern: Vec<u8>,
    at: CutAt,
    /// Tells this arming from the next one, so a connection that saw an
    /// earlier pattern does not fire a later cut.
    generation: u64,
}

/// The armed pattern (one shot), and how many cuts fired so far.
#[derive(Clone)]
struct Cut {
    armed: Arc<Mutex<Option<Armed>>>,
    generation: Arc<Mutex<u64>>,
    fired: watch::Sender<u64>,
}

impl Cut {
    fn new() -> Cut {
        Cut { armed: Arc::default(), generation: Arc::default(), fired: watch::Sender::new(0) }
    }

    fn arm(&self, pattern: &str, at: CutAt) {
        let mut generation = self.generation.lock().unwrap();
        *generation += 1;
        let armed = Armed { pattern: pattern.as_bytes().to_vec(), at, generation: *generation };
        *self.armed.lock().unwrap() = Some(armed);
    }

    /// Whether `chunk` (client → server) fires the armed cut; `seen` is the
    /// generation whose pattern this connection sent last (a statement is
    /// prepared and run on one connection, in two writes: `Parse`,
    /// `Describe`, `Sync`, then `Bind`, `Execute`, `Sync`).
    fn fires_on(&self, chunk: &[u8], seen: &mut Option<u64>) -> bool {
        let mut armed = self.armed.lock().unwrap();
        let Some(current) = armed.as_ref() else { return false };
        let matches = chunk.windows(current.pattern.len()).any(|w| w == current.pattern.as_slice());
        let fires = match current.at {
            CutAt::NextWrite => *seen == Some(current.generation),
            CutAt::ThisWrite => matches,
        };
        if fires {
            *armed = None;
            self.fired.send_modify(|fired| *fired += 1);
            return true;
        }
        if matches {
            *seen = Some(current.generation);
        }
        false
    }
}

impl ToggleProxy {
    pub async fn start(target: String) -> ToggleProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (up, up_rx) = watch::channel(true);
        let stalled = watch::Sender::new(false);
        let connections: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let conns = connections.clone();
        let cut = Cut::new();
        let cuts = cut.clone();
        let stalls = stalled.clone();
        let accept = tokio::spawn(async move {
            loop {
                let Ok((inbound, _)) = listener.accept().await else { return };
                if !*up_rx.borrow() {
                    drop(inbound); // "the database is gone": the connection dies at once
                    continue;
                }
                let (target, cut, stall) = (target.clone(), cuts.clone(), stalls.subscribe());
                let task = tokio::spawn(async move {
                    // A stalled database does not even complete a new connection.
                    let mut waiting = stall.clone();
                    if waiting.wait_for(|stalled| !*stalled).await.is_err() {
                        return;
                    }
                    if let Ok(outbound) = TcpStream::connect(&target).await {
                        relay(inbound, outbound, cut, stall).await;
                    }
                });
                let mut conns = conns.lock().unwrap();
                conns.retain(|task| !task.is_finished());
                conns.push(task);
            }
        });
        ToggleProxy { addr, up, stalled, connections, accept, cut }
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

    /// Stalled: every connection stays open but nothing passes either way,
    /// and new connections are accepted but not made, until unstalled;
    /// then what waited goes on as it was.
    pub fn set_stalled(&self, stalled: bool) {
        self.stalled.send_replace(stalled);
    }

    /// Once: after the first client write containing `pattern` (the
    /// statement prepared), that connection's next write (the statement
    /// run) reaches the server, the proxy waits for the server's reply (so
    /// the server has executed and committed it), throws the reply away and
    /// closes that connection. The client sees its connection reset, its
    /// write committed.
    pub fn cut_reply_after(&self, pattern: &str) {
        self.cut.arm(pattern, CutAt::NextWrite);
    }

    /// Once: like [`ToggleProxy::cut_reply_after`], but the write that
    /// contains `pattern` is the one whose reply is lost: for a statement
    /// whose text travels with every run (`COMMIT`), or an argument only
    /// one kind of statement carries.
    pub fn cut_reply_to(&self, pattern: &str) {
        self.cut.arm(pattern, CutAt::ThisWrite);
    }

    /// Takes back an armed cut that has not fired; whether one was armed.
    pub fn disarm(&self) -> bool {
        self.cut.armed.lock().unwrap().take().is_some()
    }

    /// Whether an armed cut has fired.
    pub fn cut_fired(&self) -> bool {
        *self.cut.fired.borrow() > 0
    }

    /// How many cuts have fired so far, as it changes.
    pub fn cuts(&self) -> watch::Receiver<u64> {
        self.cut.fired.subscribe()
    }
}

/// Copies both ways until either side closes, or until the cut fires;
/// while `stall` says so, holds what it read.
async fn relay(inbound: TcpStream, outbound: TcpStream, cut: Cut, stall: watch::Receiver<bool>) {
    let (mut client_read, mut client_write) = inbound.into_split();
    let (mut server_read, mut server_write) = outbound.into_split();
    let (cutting, cut_now) = watch::channel(false);
    let to_client = {
        let mut stall = stall.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                let Ok(n) = server_read.read(&mut buf).await else { return };
                // The reply to the cut request is read (the server executed
                // it) and dropped; closing here resets the client.
                if n == 0 || *cut_now.borrow() {
                    return;
                }
                if stall.wait_for(|stalled| !*stalled).await.is_err() {
                    return;
                }
                if client_write.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        })
    };
    let mut stall = stall;
    let mut seen = None;
    let mut buf = vec![0u8; 16 * 1024];
    while let Ok(n) = client_read.read(&mut buf).await {
        if n == 0 {
            break;
        }
        if stall.wait_for(|stalled| !*stalled).await.is_err() {
            break;
        }
        let fires = cut.fires_on(&buf[..n], &mut seen);
        if fires {
            cutting.send_replace(true);
        }
        if server_write.write_all(&buf[..n]).await.is_err() {
            break;
        }
        if fires {
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
