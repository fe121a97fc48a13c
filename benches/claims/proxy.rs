//! Counting round trips from outside the store.
//!
//! `RedisStore` owns its connection, so the only honest place to count is
//! the wire: a loopback TCP proxy in front of a standalone server that
//! parses RESP in both directions. It counts every request and every reply,
//! and counts a *round trip* each time the client starts sending while no
//! request is awaiting its reply (and no request is half-read). A pipelined
//! batch is one such burst however many commands it carries; a follow-up
//! that needs the answers of the first (a NOSCRIPT retry, the filter
//! inserts after the tier-1 scripts) is another.
//!
//! The one way this can overcount: a pipeline that reaches the proxy in two
//! reads, split exactly at a command boundary, with the server answering
//! all of the first part before the proxy reads the second. Reads are 1 MiB
//! so a whole batch normally arrives at once; a figure that is not a whole
//! number per batch would show it happening. It never undercounts: a client
//! cannot send what depends on a reply before the proxy has seen the reply.
//!
//! A Redis Cluster advertises its nodes' own addresses in `CLUSTER SLOTS`,
//! so the client would bypass a proxy: cluster round trips are not counted.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const READ_BUFFER: usize = 1 << 20;

#[derive(Default)]
pub struct Counts {
    round_trips: AtomicU64,
    commands: AtomicU64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Snapshot {
    pub round_trips: u64,
    pub commands: u64,
}

impl Counts {
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            round_trips: self.round_trips.load(Ordering::SeqCst),
            commands: self.commands.load(Ordering::SeqCst),
        }
    }
}

impl std::ops::Sub for Snapshot {
    type Output = Snapshot;
    fn sub(self, earlier: Snapshot) -> Snapshot {
        Snapshot {
            round_trips: self.round_trips - earlier.round_trips,
            commands: self.commands - earlier.commands,
        }
    }
}

/// Listens on a free loopback port and forwards every connection to
/// `upstream`. The listener task lives as long as the runtime.
pub async fn start(upstream: SocketAddr) -> anyhow::Result<(SocketAddr, Arc<Counts>)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let counts = Arc::new(Counts::default());
    let shared = counts.clone();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let counts = shared.clone();
            tokio::spawn(async move {
                if let Ok(server) = TcpStream::connect(upstream).await {
                    relay(client, server, counts).await;
                }
            });
        }
    });
    Ok((address, counts))
}

/// Per connection: requests read from the client minus replies read from
/// the server, and the bytes of a value not yet complete in each direction.
#[derive(Default)]
struct Wire {
    outstanding: u64,
    requests: Resp,
    replies: Resp,
}

async fn relay(client: TcpStream, server: TcpStream, counts: Arc<Counts>) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_rx, mut client_tx) = client.into_split();
    let (mut server_rx, mut server_tx) = server.into_split();
    let wire = Arc::new(Mutex::new(Wire::default()));

    let up_wire = wire.clone();
    let up = async move {
        let mut buf = vec![0u8; READ_BUFFER];
        loop {
            let n = match client_rx.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            {
                // Counted before forwarding, so a reply can never be seen
                // before the request it answers.
                let mut w = up_wire.lock().expect("wire lock");
                if w.outstanding == 0 && w.requests.is_idle() {
                    counts.round_trips.fetch_add(1, Ordering::SeqCst);
                }
                let complete = w.requests.feed(&buf[..n]);
                w.outstanding += complete;
                counts.commands.fetch_add(complete, Ordering::SeqCst);
            }
            if server_tx.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
    };
    let down = async move {
        let mut buf = vec![0u8; READ_BUFFER];
        loop {
            let n = match server_rx.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            {
                let mut w = wire.lock().expect("wire lock");
                let complete = w.replies.feed(&buf[..n]);
                w.outstanding = w.outstanding.saturating_sub(complete);
            }
            if client_tx.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
    };
    tokio::join!(up, down);
}

/// Counts complete top-level RESP values in a byte stream.
#[derive(Default)]
struct Resp {
    pending: Vec<u8>,
}

impl Resp {
    fn is_idle(&self) -> bool {
        self.pending.is_empty()
    }

    /// Appends bytes; returns how many values they completed.
    fn feed(&mut self, bytes: &[u8]) -> u64 {
        self.pending.extend_from_slice(bytes);
        let mut at = 0;
        let mut complete = 0;
        while let Some(end) = value_end(&self.pending, at) {
            at = end;
            complete += 1;
        }
        self.pending.drain(..at);
        complete
    }
}

/// End of the line starting at `from` (just past its CRLF) and its text.
fn line(buf: &[u8], from: usize) -> Option<(usize, &[u8])> {
    let rest = buf.get(from..)?;
    let cr = rest.windows(2).position(|w| w == b"\r\n")?;
    Some((from + cr + 2, &rest[..cr]))
}

fn number(text: &[u8]) -> Option<i64> {
    std::str::from_utf8(text).ok()?.parse().ok()
}

/// Where the RESP2/RESP3 value starting at `at` ends, if it is complete.
fn value_end(buf: &[u8], at: usize) -> Option<usize> {
    let kind = *buf.get(at)?;
    let (after, text) = line(buf, at + 1)?;
    match kind {
        b'+' | b'-' | b':' | b',' | b'#' | b'_' | b'(' => Some(after),
        b'$' | b'!' | b'=' => {
            let len = number(text)?;
            if len < 0 {
                return Some(after);
            }
            let end = after + usize::try_from(len).ok()? + 2;
            (buf.len() >= end).then_some(end)
        }
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let count = number(text)?;
            let items = if matches!(kind, b'%' | b'|') {
                count * 2
            } else {
                count
            };
            let mut end = after;
            for _ in 0..items.max(0) {
                end = value_end(buf, end)?;
            }
            Some(end)
        }
        // Inline commands (plain text lines): the client here never sends
        // them, but a line is a complete command if it does.
        _ => Some(after),
    }
}

/// Checks the parser on the shapes the store's traffic has; run in smoke
/// mode too, since a miscounting parser would make the figure a lie.
pub fn self_check() -> anyhow::Result<()> {
    let mut resp = Resp::default();
    let set = b"*7\r\n$3\r\nSET\r\n$2\r\nk1\r\n$3\r\nabc\r\n$2\r\nNX\r\n$2\r\nPX\r\n$2\r\n10\r\n$3\r\nGET\r\n";
    anyhow::ensure!(
        resp.feed(&set[..10]) == 0 && !resp.is_idle(),
        "partial request"
    );
    anyhow::ensure!(
        resp.feed(&set[10..]) == 1 && resp.is_idle(),
        "whole request"
    );
    let replies = b"$-1\r\n$3\r\nabc\r\n*2\r\n:1\r\n:0\r\n-NOSCRIPT no\r\n*0\r\n+OK\r\n";
    anyhow::ensure!(resp.feed(replies) == 6 && resp.is_idle(), "replies");
    Ok(())
}
