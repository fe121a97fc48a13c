//! Counting Redis round trips on the wire.
//!
//! `RedisStore` owns its connection, so the honest place to count is the
//! socket: a loopback TCP proxy between the replicas and the bench's own
//! redis-server that parses RESP both ways. Per connection it counts a
//! *round trip* each time the client starts sending while every request it
//! sent before has been answered: a pipelined batch is one such burst however
//! many commands it carries, and a follow-up that needs the answers of the
//! first (a NOSCRIPT retry, the filter inserts after the tier-1 scripts) is
//! another. The first command of a burst names what the round trip was for.
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

/// What a round trip was for, told by its first command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Purpose {
    /// `SET ... NX PX ... GET` first: a claim (both tiers in one pipeline).
    Claim,
    /// A script with three arguments per key (holder, done value, TTL):
    /// tier-1 finalize, one call per hash tag (or the rare one-key
    /// take-over, which has the same shape).
    Tier1Settle,
    /// A script with one argument per key (holder): release.
    Release,
    /// `BF.INSERT`, `BITFIELD`, `INCRBY`, `PEXPIRE`: tier-2 inserts.
    Tier2Insert,
    /// Anything else: connection set-up, `INFO`, `GET` of the insert
    /// counter (the stats watcher), `CONFIG`, `MODULE`.
    Other,
}

const PURPOSES: usize = 5;

/// `numkeys` is the third element, for scripts (`EVALSHA sha numkeys
/// keys... args...`; `argc` counts every element).
fn purpose(name: &[u8], argc: usize, numkeys: Option<usize>) -> Purpose {
    let upper = name.to_ascii_uppercase();
    match upper.as_slice() {
        b"SET" => Purpose::Claim,
        b"EVALSHA" | b"EVAL" => match numkeys {
            Some(keys) if keys > 0 => match argc.saturating_sub(3 + keys) {
                args if args == 3 * keys => Purpose::Tier1Settle,
                args if args == keys => Purpose::Release,
                _ => Purpose::Other,
            },
            _ => Purpose::Other,
        },
        b"BF.INSERT" | b"BITFIELD" | b"INCRBY" | b"PEXPIRE" => Purpose::Tier2Insert,
        _ => Purpose::Other,
    }
}

#[derive(Default)]
pub struct Counts {
    round_trips: [AtomicU64; PURPOSES],
    commands: AtomicU64,
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
}

/// Round trips by purpose, commands and bytes, over a window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Snapshot {
    pub claim: u64,
    pub tier1_settle: u64,
    pub release: u64,
    pub tier2_insert: u64,
    pub other: u64,
    pub commands: u64,
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
        self.claim + self.tier1_settle + self.release + self.tier2_insert
    }
}

impl Counts {
    pub fn snapshot(&self) -> Snapshot {
        let rt = |p: Purpose| self.round_trips[p as usize].load(Ordering::SeqCst);
        Snapshot {
            claim: rt(Purpose::Claim),
            tier1_settle: rt(Purpose::Tier1Settle),
            release: rt(Purpose::Release),
            tier2_insert: rt(Purpose::Tier2Insert),
            other: rt(Purpose::Other),
            commands: self.commands.load(Ordering::SeqCst),
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
            tier1_settle: self.tier1_settle + other.tier1_settle,
            release: self.release + other.release,
            tier2_insert: self.tier2_insert + other.tier2_insert,
            other: self.other + other.other,
            commands: self.commands + other.commands,
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
            tier1_settle: self.tier1_settle - earlier.tier1_settle,
            release: self.release - earlier.release,
            tier2_insert: self.tier2_insert - earlier.tier2_insert,
            other: self.other - earlier.other,
            commands: self.commands - earlier.commands,
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
/// value at the end of each direction, and whether the next complete
/// request opens a round trip (and so names its purpose).
#[derive(Default)]
struct Wire {
    outstanding: u64,
    requests: Resp,
    replies: Resp,
    classify_next: bool,
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
                    w.classify_next = true;
                }
                let classify = &mut w.classify_next;
                let complete = w.requests.feed(&buf[..n], |name, argc, numkeys| {
                    if std::mem::take(classify) {
                        up_counts.round_trips[purpose(name, argc, numkeys) as usize]
                            .fetch_add(1, Ordering::SeqCst);
                    }
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
                let complete = w.replies.feed(&buf[..n], |_, _, _| {});
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
    /// `each` the first element, the element count and the third element
    /// read as a number (a script's key count) of every complete array.
    fn feed(&mut self, bytes: &[u8], mut each: impl FnMut(&[u8], usize, Option<usize>)) -> u64 {
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
            if let Some((name, argc, third)) = head(buf, at) {
                each(name, argc, third);
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

/// First element, element count and third element (as a number, if it is
/// one) of a complete array of bulk strings starting at `at`: how clients
/// send commands.
fn head(buf: &[u8], at: usize) -> Option<(&[u8], usize, Option<usize>)> {
    if *buf.get(at)? != b'*' {
        return None;
    }
    let (after, text) = line(buf, at + 1)?;
    let argc = usize::try_from(number(text)?).ok()?;
    let (name, next) = bulk(buf, after)?;
    let third = bulk(buf, next)
        .and_then(|(_, next)| bulk(buf, next))
        .and_then(|(text, _)| number(text))
        .and_then(|n| usize::try_from(n).ok());
    Some((name, argc, third))
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
        let mut note = |n: &[u8], c, t| seen.push((n.to_vec(), c, t));
        assert_eq!(resp.feed(&set[..10], &mut note), 0);
        assert!(!resp.is_idle());
        assert_eq!(resp.feed(&set[10..], &mut note), 1);
        assert!(resp.is_idle());
        assert_eq!(seen, vec![(b"SET".to_vec(), 7, None)]);
        let script = b"*7\r\n$7\r\nEVALSHA\r\n$2\r\nab\r\n$1\r\n2\r\n$2\r\nk1\r\n$2\r\nk2\r\n$1\r\nh\r\n$1\r\nh\r\n";
        let mut heads = Vec::new();
        resp.feed(script, |n, c, t| heads.push((n.to_vec(), c, t)));
        assert_eq!(heads, vec![(b"EVALSHA".to_vec(), 7, Some(2))]);
        assert_eq!(purpose(b"set", 7, None), Purpose::Claim);
        // Two keys: three arguments each is a finalize, one each a release.
        assert_eq!(
            purpose(b"EVALSHA", 3 + 2 + 6, Some(2)),
            Purpose::Tier1Settle
        );
        assert_eq!(purpose(b"EVALSHA", 3 + 2 + 2, Some(2)), Purpose::Release);
        assert_eq!(purpose(b"EVALSHA", 3 + 1 + 1, Some(1)), Purpose::Release);
        assert_eq!(purpose(b"BITFIELD", 9, None), Purpose::Tier2Insert);
    }

    #[test]
    fn replies_of_every_shape_are_counted() {
        let mut resp = Resp::default();
        let replies = b"$-1\r\n$3\r\nabc\r\n*2\r\n:1\r\n:0\r\n-NOSCRIPT no\r\n*0\r\n+OK\r\n";
        assert_eq!(resp.feed(replies, |_, _, _| {}), 6);
        assert!(resp.is_idle());
    }
}
