//! Counting Redis round trips on the wire.
//!
//! `RedisStore` owns its connection, so the honest place to count is the
//! socket: a loopback TCP proxy between the replicas and the bench's own
//! redis-server that parses RESP both ways. Per connection it counts a
//! *round trip* each time the client starts sending while every request it
//! sent before has been answered: a pipelined round is one such burst however
//! many commands it carries, and a follow-up that needs the answers of the
//! first (a NOSCRIPT retry, a re-stamp after `SET NX GET` answered) is
//! another. The commands of a burst name what the round trip was for: it
//! carries claims if any of them claims or probes (a store round's publish
//! rides with its claims, docs/design.md §4.3), else a publish if any of them
//! writes, else something else.
//!
//! It can overcount only if one pipeline reaches the proxy in two reads
//! split at a command boundary and Redis answers all of the first part
//! before the second is read; reads are 1 MiB, so a batch normally arrives
//! whole (a figure that is not a whole number per batch would show it). It
//! never undercounts: a client cannot send what depends on a reply before
//! the proxy has forwarded that reply.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const READ_BUFFER: usize = 1 << 20;

/// What a round trip was for, told by the highest-ranked command in its
/// burst (the variants in rising rank).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Purpose {
    /// Anything else: connection set-up, `INFO`, `GET` of the insert
    /// counter (the stats watcher), `CONFIG`, `MODULE`.
    Other,
    /// A write without claims: a script (watermark raise, done flag,
    /// release, re-stamp), `BF.INSERT`, `BITFIELD`, `INCRBY`, `PEXPIRE`
    /// (tier-2 inserts). A publish-only round, or a round's follow-up.
    Publish,
    /// `SET` (`NX PX GET`: a claim) or a tier-2 probe (`BF.MEXISTS`,
    /// `BITFIELD_RO`): a round with claims, with or without a publish.
    Claim,
}

const PURPOSES: usize = 3;

fn purpose(name: &[u8]) -> Purpose {
    let upper = name.to_ascii_uppercase();
    match upper.as_slice() {
        b"SET" | b"BF.MEXISTS" | b"BF.EXISTS" | b"BITFIELD_RO" => Purpose::Claim,
        b"EVALSHA" | b"EVAL" | b"FCALL" | b"BF.INSERT" | b"BF.MADD" | b"BF.ADD" | b"BITFIELD"
        | b"INCRBY" | b"PEXPIRE" => Purpose::Publish,
        _ => Purpose::Other,
    }
}

#[derive(Default)]
pub struct Counts {
    round_trips: [AtomicU64; PURPOSES],
    commands: AtomicU64,
    protocol_commands: AtomicU64,
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
}

impl Counts {
    /// Names the current burst `now` (counted once), or moves it from
    /// `before` to a higher-ranked `now`.
    fn name(&self, before: Option<Purpose>, now: Purpose) -> Purpose {
        match before {
            None => {
                self.round_trips[now as usize].fetch_add(1, Ordering::SeqCst);
                now
            }
            Some(before) if now > before => {
                self.round_trips[before as usize].fetch_sub(1, Ordering::SeqCst);
                self.round_trips[now as usize].fetch_add(1, Ordering::SeqCst);
                now
            }
            Some(before) => before,
        }
    }
}

/// Round trips by purpose, commands and bytes, over a window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Snapshot {
    /// Round trips that carried claims (and any publish riding with them).
    pub claim: u64,
    /// Round trips of writes without claims.
    pub publish: u64,
    pub other: u64,
    /// Every complete request, whatever it was for.
    pub commands: u64,
    /// Requests of the claim protocol (a claim, a probe or a write; not
    /// set-up or `INFO`): a pipeline of N of them is one round trip and N
    /// commands.
    pub protocol_commands: u64,
    pub bytes_up: u64,
    pub bytes_down: u64,
}

impl Snapshot {
    /// Every round trip, whatever it was for.
    pub fn round_trips(&self) -> u64 {
        self.protocol_round_trips() + self.other
    }

    /// Round trips the claim protocol made (set-up and stats excluded).
    pub fn protocol_round_trips(&self) -> u64 {
        self.claim + self.publish
    }
}

impl Counts {
    pub fn snapshot(&self) -> Snapshot {
        let rt = |p: Purpose| self.round_trips[p as usize].load(Ordering::SeqCst);
        Snapshot {
            claim: rt(Purpose::Claim),
            publish: rt(Purpose::Publish),
            other: rt(Purpose::Other),
            commands: self.commands.load(Ordering::SeqCst),
            protocol_commands: self.protocol_commands.load(Ordering::SeqCst),
            bytes_up: self.bytes_up.load(Ordering::SeqCst),
            bytes_down: self.bytes_down.load(Ordering::SeqCst),
        }
    }
}

impl std::ops::Add for Snapshot {
    type Output = Snapshot;
    fn add(self, other: Snapshot) -> Snapshot {
        Snapshot {
            claim: self.claim + other.claim,
            publish: self.publish + other.publish,
            other: self.other + other.other,
            commands: self.commands + other.commands,
            protocol_commands: self.protocol_commands + other.protocol_commands,
            bytes_up: self.bytes_up + other.bytes_up,
            bytes_down: self.bytes_down + other.bytes_down,
        }
    }
}

impl std::ops::Sub for Snapshot {
    type Output = Snapshot;
    fn sub(self, earlier: Snapshot) -> Snapshot {
        Snapshot {
            claim: self.claim - earlier.claim,
            publish: self.publish - earlier.publish,
            other: self.other - earlier.other,
            commands: self.commands - earlier.commands,
            protocol_commands: self.protocol_commands - earlier.protocol_commands,
            bytes_up: self.bytes_up - earlier.bytes_up,
            bytes_down: self.bytes_down - earlier.bytes_down,
        }
    }
}

/// A proxy on a free loopback port in front of `upstream`; it lives as long
/// as the runtime (the bench's whole run).
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

/// Per connection: requests forwarded and not yet answered, the partial
/// value at the end of each direction, and the purpose of the burst being
/// sent (`None` until its first complete request).
#[derive(Default)]
struct Wire {
    outstanding: u64,
    requests: Resp,
    replies: Resp,
    burst: Option<Purpose>,
}

async fn relay(client: TcpStream, server: TcpStream, counts: Arc<Counts>) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_rx, mut client_tx) = client.into_split();
    let (mut server_rx, mut server_tx) = server.into_split();
    let wire = Arc::new(Mutex::new(Wire::default()));

    let up_wire = wire.clone();
    let up_counts = counts.clone();
    let up = async move {
        let mut buf = vec![0u8; READ_BUFFER];
        loop {
            let n = match client_rx.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            {
                // Counted before forwarding, so a reply is never seen
                // before the request it answers.
                let mut guard = up_wire.lock().unwrap_or_else(|e| e.into_inner());
                let w = &mut *guard;
                if w.outstanding == 0 && w.requests.is_idle() {
                    w.burst = None;
                }
                let burst = &mut w.burst;
                let complete = w.requests.feed(&buf[..n], |name| {
                    let purpose = purpose(name);
                    if purpose != Purpose::Other {
                        up_counts.protocol_commands.fetch_add(1, Ordering::SeqCst);
                    }
                    *burst = Some(up_counts.name(*burst, purpose));
                });
                w.outstanding += complete;
                up_counts.commands.fetch_add(complete, Ordering::SeqCst);
                up_counts.bytes_up.fetch_add(n as u64, Ordering::SeqCst);
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
                let mut w = wire.lock().unwrap_or_else(|e| e.into_inner());
                let complete = w.replies.feed(&buf[..n], |_| {});
                w.outstanding = w.outstanding.saturating_sub(complete);
                counts.bytes_down.fetch_add(n as u64, Ordering::SeqCst);
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

    /// Appends bytes; returns how many values they completed, telling
    /// `each` the first element (the command's name) of every complete
    /// array.
    fn feed(&mut self, bytes: &[u8], mut each: impl FnMut(&[u8])) -> u64 {
        let parse_from_scratch = self.pending.is_empty();
        let buf: &[u8] = if parse_from_scratch {
            bytes
        } else {
            self.pending.extend_from_slice(bytes);
            &self.pending
        };
        let mut at = 0;
        let mut complete = 0;
        while let Some(end) = value_end(buf, at) {
            if let Some(name) = head(buf, at) {
                each(name);
            }
            at = end;
            complete += 1;
        }
        if parse_from_scratch {
            self.pending.extend_from_slice(&bytes[at..]);
        } else {
            self.pending.drain(..at);
        }
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

/// One bulk string starting at `at`: its bytes and where it ends.
fn bulk(buf: &[u8], at: usize) -> Option<(&[u8], usize)> {
    if *buf.get(at)? != b'$' {
        return None;
    }
    let (start, len) = line(buf, at + 1)?;
    let len = usize::try_from(number(len)?).ok()?;
    Some((buf.get(start..start + len)?, start + len + 2))
}

/// First element of a complete array of bulk strings starting at `at`:
/// how clients send commands.
fn head(buf: &[u8], at: usize) -> Option<&[u8]> {
    if *buf.get(at)? != b'*' {
        return None;
    }
    let (after, _) = line(buf, at + 1)?;
    let (name, _) = bulk(buf, after)?;
    Some(name)
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
        // An inline command (a plain text line).
        _ => Some(after),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_counted_whole_and_named_by_their_first_element() {
        let mut resp = Resp::default();
        let set = b"*7\r\n$3\r\nSET\r\n$2\r\nk1\r\n$3\r\nabc\r\n$2\r\nNX\r\n$2\r\nPX\r\n$2\r\n10\r\n$3\r\nGET\r\n";
        let mut seen = Vec::new();
        let mut note = |n: &[u8]| seen.push(n.to_vec());
        assert_eq!(resp.feed(&set[..10], &mut note), 0);
        assert!(!resp.is_idle());
        assert_eq!(resp.feed(&set[10..], &mut note), 1);
        assert!(resp.is_idle());
        assert_eq!(seen, vec![b"SET".to_vec()]);
        let script = b"*7\r\n$7\r\nEVALSHA\r\n$2\r\nab\r\n$1\r\n2\r\n$2\r\nk1\r\n$2\r\nk2\r\n$1\r\nh\r\n$1\r\nh\r\n";
        let mut heads = Vec::new();
        resp.feed(script, |n| heads.push(n.to_vec()));
        assert_eq!(heads, vec![b"EVALSHA".to_vec()]);
        assert_eq!(purpose(b"set"), Purpose::Claim);
        assert_eq!(purpose(b"BITFIELD_RO"), Purpose::Claim);
        assert_eq!(purpose(b"EVALSHA"), Purpose::Publish);
        assert_eq!(purpose(b"BITFIELD"), Purpose::Publish);
        assert_eq!(purpose(b"INFO"), Purpose::Other);
    }

    #[test]
    fn a_burst_is_counted_once_under_its_highest_purpose() {
        let counts = Counts::default();
        // A round: its publish (inserts, a raise) first, then its claims.
        let mut burst = None;
        for name in [&b"BF.INSERT"[..], b"EVALSHA", b"SET", b"SET", b"EVALSHA"] {
            burst = Some(counts.name(burst, purpose(name)));
        }
        // A publish-only round, then the stats watcher.
        let mut publish = None;
        for name in [&b"PEXPIRE"[..], b"EVALSHA"] {
            publish = Some(counts.name(publish, purpose(name)));
        }
        counts.name(None, purpose(b"INFO"));
        let s = counts.snapshot();
        assert_eq!((s.claim, s.publish, s.other), (1, 1, 1));
        assert_eq!(s.protocol_round_trips(), 2);
    }

    #[test]
    fn replies_of_every_shape_are_counted() {
        let mut resp = Resp::default();
        let replies = b"$-1\r\n$3\r\nabc\r\n*2\r\n:1\r\n:0\r\n-NOSCRIPT no\r\n*0\r\n+OK\r\n";
        assert_eq!(resp.feed(replies, |_| {}), 6);
        assert!(resp.is_idle());
    }
}
