//! [`LinkProxy`]: a TCP proxy on loopback for the link between two
//! regions, which a test can slow down (WAN latency), blackhole (keep the
//! sockets, drop the bytes) and reset (close every connection).
//!
//! It keeps the first [`TRANSCRIPT_CAP`] bytes it forwarded, both ways, so
//! a test can tell whether the link carried something in the clear
//! ([`LinkProxy::carried`]).
//!
//! It runs on its own thread with its own tokio runtime, so a test that
//! blocks its runtime (starting a nats-server blocks) does not stall the
//! link, and dropping it stops the thread and closes every socket.

use anyhow::{Context, Result};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// What the proxy does with the bytes it reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkMode {
    /// Forwards them as they come.
    Pass,
    /// Forwards each after this delay (one way), in order.
    Delay(Duration),
    /// Reads and drops them; the sockets stay open.
    Blackhole,
}

#[derive(Debug)]
struct Shared {
    mode: LinkMode,
    /// Every connection's pumps, to close them all at once.
    connections: Vec<tokio::task::AbortHandle>,
    /// Connections accepted so far.
    accepted: u64,
    /// The bytes forwarded so far, both ways, up to [`TRANSCRIPT_CAP`].
    transcript: Vec<u8>,
}

/// How many of the forwarded bytes the proxy keeps for [`LinkProxy::carried`].
pub const TRANSCRIPT_CAP: usize = 16 << 20;

/// A TCP proxy from its own loopback port to `upstream`; see the module docs.
#[derive(Debug)]
pub struct LinkProxy {
    addr: SocketAddr,
    shared: Arc<Mutex<Shared>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl LinkProxy {
    /// Listens on `127.0.0.1:<free port>` and forwards every connection to
    /// `upstream`.
    pub fn start(upstream: SocketAddr) -> Result<LinkProxy> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").context("binding the proxy")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Mutex::new(Shared {
            mode: LinkMode::Pass,
            connections: Vec::new(),
            accepted: 0,
            transcript: Vec::new(),
        }));
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("link-proxy".into())
            .spawn({
                let shared = shared.clone();
                move || {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .expect("the proxy's runtime");
                    rt.block_on(async move {
                        let listener = TcpListener::from_std(listener).expect("the proxy listener");
                        tokio::select! {
                            _ = accept_loop(listener, upstream, shared) => {}
                            _ = stopped => {}
                        }
                    });
                }
            })?;
        Ok(LinkProxy {
            addr,
            shared,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// `127.0.0.1:PORT`, where the proxy listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn set_mode(&self, mode: LinkMode) {
        self.lock().mode = mode;
    }

    /// Closes every open connection (new ones are accepted).
    pub fn reset(&self) {
        for c in self.lock().connections.drain(..) {
            c.abort();
        }
    }

    /// Connections accepted since the start.
    pub fn accepted(&self) -> u64 {
        self.lock().accepted
    }

    /// Whether `needle` appeared in the bytes forwarded so far (within
    /// the first [`TRANSCRIPT_CAP`]), as they went over the wire.
    pub fn carried(&self, needle: &[u8]) -> bool {
        self.lock()
            .transcript
            .windows(needle.len())
            .any(|w| w == needle)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for LinkProxy {
    fn drop(&mut self) {
        self.reset();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn accept_loop(listener: TcpListener, upstream: SocketAddr, shared: Arc<Mutex<Shared>>) {
    while let Ok((inbound, _)) = listener.accept().await {
        let shared2 = shared.clone();
        let task = tokio::spawn(async move {
            let Ok(outbound) = TcpStream::connect(upstream).await else {
                return;
            };
            let (in_read, in_write) = inbound.into_split();
            let (out_read, out_write) = outbound.into_split();
            tokio::select! {
                _ = pump(in_read, out_write, shared2.clone()) => {}
                _ = pump(out_read, in_write, shared2) => {}
            }
        });
        let mut s = shared.lock().unwrap_or_else(|e| e.into_inner());
        s.accepted += 1;
        s.connections.retain(|c| !c.is_finished());
        s.connections.push(task.abort_handle());
    }
}

/// Copies one direction, as the mode in force when each chunk is read
/// says: a delayed chunk is written when due, after those before it.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    shared: Arc<Mutex<Shared>>,
) {
    let (due_tx, mut due_rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let writer = async move {
        while let Some((due, chunk)) = due_rx.recv().await {
            tokio::time::sleep_until(due.into()).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
    };
    let reader = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let mode = {
                let mut s = shared.lock().unwrap_or_else(|e| e.into_inner());
                let room = TRANSCRIPT_CAP.saturating_sub(s.transcript.len());
                s.transcript.extend_from_slice(&buf[..n.min(room)]);
                s.mode
            };
            let due = match mode {
                LinkMode::Pass => Instant::now(),
                LinkMode::Delay(d) => Instant::now() + d,
                LinkMode::Blackhole => continue,
            };
            if due_tx.send((due, buf[..n].to_vec())).is_err() {
                return;
            }
        }
    };
    tokio::select! {
        _ = writer => {}
        _ = reader => {}
    }
}
