//! `--floor`: a proxy that does nothing, run where the gateway runs.
//!
//! HAProxy (one thread, HTTP mode, its connections to the simulator kept
//! alive) on the gateway's CPUs, in front of the simulator. A request
//! crosses between the cores exactly as through a gateway — client to
//! proxy, proxy to simulator, and back — and is otherwise only forwarded.
//! Its added latency and CPU per request are what this machine charges any
//! gateway before the gateway does any work: on a virtual machine, waking
//! an idle core costs tens of microseconds and, now and then, milliseconds.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The proxy's process, stopped on drop.
pub struct Proxy {
    child: Child,
    pub url: String,
}

impl Proxy {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn config(port: u16, sim: SocketAddr) -> String {
    format!(
        "global\n  nbthread 1\n  maxconn 4096\n\
         defaults\n  mode http\n  http-reuse always\n  timeout connect 5s\n  timeout client 60s\n  timeout server 60s\n\
         frontend floor\n  bind 127.0.0.1:{port}\n  default_backend sim\n\
         backend sim\n  server sim {sim}\n"
    )
}

/// Starts `haproxy` (as `command`, which may pin it) on `port`, in front of
/// `sim`, and waits until it accepts.
pub fn start(mut command: Command, dir: &Path, port: u16, sim: SocketAddr) -> Result<Proxy, String> {
    let path = dir.join("floor.haproxy.cfg");
    std::fs::write(&path, config(port, sim)).map_err(|e| e.to_string())?;
    let child = command
        .arg("-db")
        .arg("-f")
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting haproxy (is it installed?): {e}"))?;
    let mut proxy = Proxy { child, url: format!("http://127.0.0.1:{port}") };
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = proxy.child.try_wait() {
            let mut said = String::new();
            if let Some(mut stderr) = proxy.child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut stderr, &mut said);
            }
            return Err(format!("haproxy exited ({status}): {said}"));
        }
        if Instant::now() > deadline {
            return Err(format!("haproxy did not listen on {port} within 10 s"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(proxy)
}
