//! A network link a test can cut: a loopback TCP forwarder between a
//! replica and a server (Redis), whose `cut` drops the traffic both ways
//! as a broken network does. Both sockets stay open and nothing is read
//! while cut, so the client sees silence, not a refusal or a reset: its
//! requests wait in the kernel's buffers, its timeouts are what it has.
//! `restore` lets the traffic through again, what waited first.
//!
//! Connections made while cut are accepted by the kernel (the listening
//! socket's backlog) and wait, silent, like the others.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// How often a waiting pump looks at the link again.
const POLL: Duration = Duration::from_millis(5);

#[derive(Default)]
struct State {
    cut: AtomicBool,
    closed: AtomicBool,
    /// Every socket of the link, shut down when it is dropped.
    sockets: Mutex<Vec<TcpStream>>,
}

/// A forwarder on `127.0.0.1:<port>` to one upstream `host:port`, until
/// dropped.
pub struct Link {
    /// `127.0.0.1:<port>`: where clients connect instead of the upstream.
    pub addr: String,
    state: Arc<State>,
}

impl Link {
    /// Starts forwarding connections to `upstream` (`host:port`).
    pub fn to(upstream: &str) -> Link {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local address").to_string();
        let state = Arc::new(State::default());
        let accepting = state.clone();
        let upstream = upstream.to_string();
        thread::spawn(move || {
            for client in listener.incoming() {
                if accepting.closed.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                let state = accepting.clone();
                let upstream = upstream.clone();
                thread::spawn(move || connect(client, &upstream, &state));
            }
        });
        Link { addr, state }
    }

    /// `url` (`redis://[user:pass@]host:port[/db]`) with its host and port
    /// replaced by a new link's to them: the link, and the URL through it.
    pub fn for_url(url: &str) -> (Link, String) {
        let (scheme, rest) = url.split_once("://").expect("a URL with a scheme");
        let (authority, path) = rest.split_once('/').map_or((rest, ""), |(a, p)| (a, p));
        let (credentials, host_port) = authority
            .rsplit_once('@')
            .map_or(("", authority), |(c, h)| (c, h));
        let link = Link::to(host_port);
        let at = if credentials.is_empty() { "" } else { "@" };
        let slash = if path.is_empty() { "" } else { "/" };
        let through = format!("{scheme}://{credentials}{at}{}{slash}{path}", link.addr);
        (link, through)
    }

    /// Drops the traffic both ways from now on: nothing is read from
    /// either side, nothing closed.
    pub fn cut(&self) {
        self.state.cut.store(true, Ordering::SeqCst);
    }

    /// Lets the traffic through again.
    pub fn restore(&self) {
        self.state.cut.store(false, Ordering::SeqCst);
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.state.closed.store(true, Ordering::SeqCst);
        // Wakes the accepting thread, which then sees `closed`.
        let _ = TcpStream::connect(&self.addr);
        for socket in self.state.sockets.lock().expect("sockets").drain(..) {
            let _ = socket.shutdown(Shutdown::Both);
        }
    }
}

/// One client's connection: upstream once the link is up, then a pump
/// each way.
fn connect(client: TcpStream, upstream: &str, state: &Arc<State>) {
    if !wait_open(state) {
        return;
    }
    let Ok(server) = TcpStream::connect(upstream) else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    let sockets = [&client, &server].map(|s| s.try_clone().expect("clone socket"));
    state.sockets.lock().expect("sockets").extend(sockets);
    let (client_in, server_out) = (
        client.try_clone().expect("clone"),
        server.try_clone().expect("clone"),
    );
    let up = state.clone();
    thread::spawn(move || pump(client_in, server_out, &up));
    pump(server, client, state);
}

/// Waits while the link is cut; false once it is closed.
fn wait_open(state: &State) -> bool {
    while state.cut.load(Ordering::SeqCst) {
        if state.closed.load(Ordering::SeqCst) {
            return false;
        }
        thread::sleep(POLL);
    }
    !state.closed.load(Ordering::SeqCst)
}

/// Copies `from` to `to` while the link is up; reads nothing while it is
/// cut, and holds what a read in progress got. Ends when either side
/// closes.
fn pump(mut from: TcpStream, mut to: TcpStream, state: &State) {
    from.set_read_timeout(Some(POLL)).expect("read timeout");
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        if !wait_open(state) {
            return;
        }
        match from.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => {
                // Read as the link was cut: held until it is restored, as
                // if it had waited in the kernel's buffer.
                if !wait_open(state) || to.write_all(&buffer[..n]).is_err() {
                    break;
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An upstream that answers each read with what it read.
    fn echo() -> String {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                thread::spawn(move || {
                    let mut stream = stream;
                    let mut buffer = [0u8; 1024];
                    while let Ok(n) = stream.read(&mut buffer) {
                        if n == 0 || stream.write_all(&buffer[..n]).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    fn ask(stream: &mut TcpStream, text: &[u8]) -> std::io::Result<Vec<u8>> {
        stream.write_all(text)?;
        let mut answer = vec![0u8; text.len()];
        stream.read_exact(&mut answer)?;
        Ok(answer)
    }

    #[test]
    fn a_cut_link_is_silent_and_a_restored_one_delivers_what_waited() {
        let link = Link::to(&echo());
        let mut stream = TcpStream::connect(&link.addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_millis(300)))
            .expect("timeout");
        assert_eq!(ask(&mut stream, b"one").expect("through"), b"one");
        link.cut();
        let silent = ask(&mut stream, b"two").expect_err("an answer through a cut link");
        assert!(
            matches!(silent.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
            "a cut link refused instead of staying silent: {silent}"
        );
        // A connection made while cut waits too.
        let mut late = TcpStream::connect(&link.addr).expect("connect while cut");
        late.set_read_timeout(Some(Duration::from_millis(300)))
            .expect("timeout");
        assert!(ask(&mut late, b"three").is_err(), "answered while cut");
        link.restore();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let mut waited = [0u8; 3];
        stream.read_exact(&mut waited).expect("what waited");
        assert_eq!(&waited, b"two");
        late.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let mut waited = [0u8; 5];
        late.read_exact(&mut waited).expect("what waited");
        assert_eq!(&waited, b"three");
    }
}
