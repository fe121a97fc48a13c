//! /metrics (Prometheus text), /healthz (the process serves) and /readyz
//! (partitions assigned, the store answering, and no stream's store lost
//! its state), on one small listener.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::{Context, Result};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use crate::store::ClaimStore;
use crate::worker::Group;

/// What readiness is judged from.
#[derive(Clone)]
pub(crate) struct Health {
    group: Arc<Group>,
    store_ok: Arc<AtomicBool>,
    /// Set by the worker once a stream's store lost its state
    /// (docs/design.md §8.2): not ready until a restart after the rebuild.
    store_lost: Arc<AtomicBool>,
}

impl Health {
    pub(crate) fn new(group: Arc<Group>, store_lost: Arc<AtomicBool>) -> Health {
        Health {
            group,
            store_ok: Arc::new(AtomicBool::new(true)),
            store_lost,
        }
    }

    pub(crate) fn ready(&self) -> bool {
        self.group.assigned.load(Ordering::SeqCst)
            && self.store_ok.load(Ordering::SeqCst)
            && !self.store_lost.load(Ordering::SeqCst)
    }
}

/// The process-wide Prometheus recorder, installed once (the demo runs two
/// replicas in one process).
pub(crate) fn prometheus() -> Option<&'static PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            // Real histograms (buckets), so they aggregate across replicas.
            let handle = crate::metrics::with_buckets(PrometheusBuilder::new())
                .ok()?
                .install_recorder()
                .ok()?;
            crate::metrics::describe();
            Some(handle)
        })
        .as_ref()
}

pub(crate) async fn serve(
    listen: &str,
    health: Health,
    mut stop: watch::Receiver<bool>,
) -> Result<JoinHandle<()>> {
    let handle = prometheus();
    let listener = TcpListener::bind(listen)
        .await
        .with_context(|| format!("metrics.listen: cannot listen on {listen}"))?;
    info!(address = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(), "serving /metrics, /healthz, /readyz");
    Ok(tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                _ = stop.changed() => break,
            };
            let Ok((mut socket, _)) = accepted else {
                continue;
            };
            let health = health.clone();
            tokio::spawn(async move {
                let Ok(Some(head)) =
                    tokio::time::timeout(Duration::from_secs(5), read_head(&mut socket)).await
                else {
                    return;
                };
                let request = String::from_utf8_lossy(&head);
                let path = request.split_whitespace().nth(1).unwrap_or("/");
                let (status, body) = match path {
                    "/metrics" => {
                        crate::metrics::process();
                        let mut body = handle.map(|h| h.render()).unwrap_or_default();
                        crate::metrics::render_lags(&mut body);
                        ("200 OK", body)
                    }
                    "/healthz" => ("200 OK", "ok\n".to_string()),
                    "/readyz" if health.ready() => ("200 OK", "ready\n".to_string()),
                    "/readyz" => ("503 Service Unavailable", "not ready\n".to_string()),
                    _ => ("404 Not Found", "not found\n".to_string()),
                };
                let response = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                if let Err(error) = socket.write_all(response.as_bytes()).await {
                    debug!(%error, "metrics client went away");
                }
            });
        }
    }))
}

/// The request line and headers, however many reads they take (a client
/// may write them in pieces); `None` when the client goes away first or
/// sends more than 8 KiB without ending them. Answering after a first
/// partial read would close the connection while the client still writes:
/// it would see a broken pipe.
async fn read_head(socket: &mut tokio::net::TcpStream) -> Option<Vec<u8>> {
    let mut head = Vec::with_capacity(512);
    let mut buffer = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let read = socket.read(&mut buffer).await.ok()?;
        if read == 0 || head.len() + read > 8192 {
            return None;
        }
        head.extend_from_slice(&buffer[..read]);
    }
    Some(head)
}

/// Reads the store's figures every few seconds: evicted keys, filter fill
/// (with an alarm as a generation nears capacity), reachability.
pub(crate) async fn watch_store(
    store: Arc<dyn ClaimStore>,
    health: Health,
    mut stop: watch::Receiver<bool>,
) {
    let mut evicted_warned = 0;
    loop {
        match tokio::time::timeout(
            Duration::from_secs(5),
            store.stats(crate::worker::wall_ms()),
        )
        .await
        {
            Ok(Ok(stats)) => {
                health.store_ok.store(true, Ordering::SeqCst);
                crate::metrics::store_stats(&stats);
                if stats.evicted_keys > evicted_warned {
                    warn!(
                        evicted_keys = stats.evicted_keys,
                        "the store evicted keys: every eviction shortens a ttl"
                    );
                    evicted_warned = stats.evicted_keys;
                }
                for fill in &stats.filters {
                    if fill.inserts * 10 >= fill.capacity * 8 {
                        warn!(stream = %fill.stream, inserts = fill.inserts, capacity = fill.capacity,
                            "filter generation above 80% of capacity: raise peak_rate before it saturates");
                    }
                }
            }
            _ => health.store_ok.store(false, Ordering::SeqCst),
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(5)) => {}
            _ = stop.changed() => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test]
    async fn a_request_written_in_pieces_is_read_whole() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let client = tokio::spawn(async move {
            let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
            stream
                .write_all(b"GET /metrics HTTP/1.1\r\n")
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
            stream.write_all(b"Host: x\r\n\r\n").await.unwrap();
            stream
        });
        let (mut socket, _) = listener.accept().await.unwrap();
        let head = read_head(&mut socket).await.expect("the whole head");
        assert!(head.ends_with(b"Host: x\r\n\r\n"), "{head:?}");
        drop(client.await.unwrap());
        assert_eq!(read_head(&mut socket).await, None, "a closed client");
    }
}
