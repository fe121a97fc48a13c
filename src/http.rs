//! /metrics (Prometheus text), /healthz (the process serves) and /readyz
//! (partitions assigned, the store answering, and no stream's store lost
//! its state; each stream that is not ready named with why:
//! `crate::readiness`), on one small listener: hyper parses HTTP/1 (a
//! head in pieces, keep-alive, HEAD); GET and HEAD are answered, another
//! method is a 405 with `Allow`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, ALLOW as ALLOW_HEADER, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use std::convert::Infallible;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use crate::readiness;
use crate::store::ClaimStore;
use crate::worker::Group;

/// What readiness is judged from (`crate::readiness`).
#[derive(Clone)]
pub(crate) struct Health {
    group: Arc<Group>,
    store_ok: Arc<AtomicBool>,
    /// The streams' names, in stream order.
    streams: Arc<[String]>,
    /// Per stream, in stream order: set by the worker once the stream's
    /// store lost its state (docs/design.md §8.2); not ready until a
    /// restart after the rebuild.
    store_lost: Arc<[AtomicBool]>,
}

impl Health {
    pub(crate) fn new(
        group: Arc<Group>,
        streams: Vec<String>,
        store_lost: Arc<[AtomicBool]>,
    ) -> Health {
        Health {
            group,
            store_ok: Arc::new(AtomicBool::new(true)),
            streams: streams.into(),
            store_lost,
        }
    }

    /// Judges every stream now, sets `idemgate_not_ready` to match, and
    /// says whether all are ready with the `/readyz` body.
    pub(crate) fn judge(&self) -> (bool, String) {
        let lost: Vec<bool> = self
            .store_lost
            .iter()
            .map(|l| l.load(Ordering::SeqCst))
            .collect();
        let observed = readiness::Observed {
            assigned: self.group.assigned.load(Ordering::SeqCst),
            store_answers: self.store_ok.load(Ordering::SeqCst),
            identity_lost: &lost,
        };
        let judged = readiness::judge(&self.streams, &observed);
        crate::metrics::not_ready(&judged);
        let not_ready = readiness::not_ready(&judged);
        (not_ready.is_empty(), readiness::body(&not_ready))
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

/// How long a client may take to send a request's head before the
/// connection is closed, so a client that opens and stalls holds nothing.
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);

/// How long stopping waits for answers already being written; idle
/// keep-alive connections close at once.
const DRAIN: Duration = Duration::from_secs(1);

/// The methods every path here answers; anything else is a 405 naming them.
const ALLOW: &str = "GET, HEAD";

/// Why /metrics is not served; `run` stops on it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ServeError {
    #[error("metrics.listen: cannot listen on {listen}")]
    Listen {
        listen: String,
        #[source]
        error: std::io::Error,
    },
}

/// Binds `listen` and answers until `stop` changes.
pub(crate) async fn serve(
    listen: &str,
    health: Health,
    stop: watch::Receiver<bool>,
) -> Result<(JoinHandle<()>, std::net::SocketAddr), ServeError> {
    // Installed before `serve` returns: the caller registers every series
    // at zero next, which needs the recorder in place.
    prometheus();
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|error| ServeError::Listen {
            listen: listen.to_string(),
            error,
        })?;
    let address = listener.local_addr().map_err(|error| ServeError::Listen {
        listen: listen.to_string(),
        error,
    })?;
    info!(%address, "serving /metrics, /healthz, /readyz");
    Ok((tokio::spawn(serve_on(listener, health, stop)), address))
}

/// HTTP/1 through hyper (request parsing, HEAD, keep-alive, status lines);
/// the routing is [`answer`].
async fn serve_on(listener: TcpListener, health: Health, mut stop: watch::Receiver<bool>) {
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT);
    let graceful = GracefulShutdown::new();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stop.changed() => break,
        };
        let socket = match accepted {
            Ok((socket, _)) => socket,
            Err(error) => {
                debug!(%error, "metrics listener could not accept");
                continue;
            }
        };
        let health = health.clone();
        let service = service_fn(move |request: Request<Incoming>| {
            let response = answer(request.method(), request.uri().path(), &health);
            async move { Ok::<_, Infallible>(response) }
        });
        let connection = graceful.watch(http.serve_connection(TokioIo::new(socket), service));
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                debug!(%error, "metrics client went away");
            }
        });
    }
    if tokio::time::timeout(DRAIN, graceful.shutdown())
        .await
        .is_err()
    {
        debug!("metrics clients still connected at stop: left to close with the runtime");
    }
}

/// The answer to `method` on `path`: GET or HEAD of a known path, 404 for
/// an unknown one, 405 with `Allow` for any other method on a known one.
fn answer(method: &Method, path: &str, health: &Health) -> Response<Full<Bytes>> {
    let known = matches!(path, "/metrics" | "/healthz" | "/readyz");
    let (status, body) = match path {
        _ if !known => (StatusCode::NOT_FOUND, "not found\n".to_string()),
        _ if method != Method::GET && method != Method::HEAD => (
            StatusCode::METHOD_NOT_ALLOWED,
            "method not allowed\n".to_string(),
        ),
        "/metrics" => (StatusCode::OK, render_metrics(health)),
        "/healthz" => (StatusCode::OK, "ok\n".to_string()),
        _ => match health.judge() {
            (true, body) => (StatusCode::OK, body),
            (false, body) => (StatusCode::SERVICE_UNAVAILABLE, body),
        },
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    if status == StatusCode::METHOD_NOT_ALLOWED {
        headers.insert(ALLOW_HEADER, HeaderValue::from_static(ALLOW));
    }
    response
}

/// The body of `/metrics`: the recorder's series (the readiness gauges
/// judged afresh), then the consumer lag gauges the worker keeps itself.
fn render_metrics(health: &Health) -> String {
    crate::metrics::process();
    health.judge();
    let mut body = prometheus().map(|h| h.render()).unwrap_or_default();
    crate::metrics::render_lags(&mut body);
    body
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
    use std::net::SocketAddr;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    struct Server {
        address: SocketAddr,
        health: Health,
        stop: watch::Sender<bool>,
        task: JoinHandle<()>,
    }

    async fn start() -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let health = Health::new(
            Arc::default(),
            vec!["bank".into(), "telemetry".into()],
            [false, false].map(AtomicBool::new).into(),
        );
        let (stop, stop_rx) = watch::channel(false);
        let task = tokio::spawn(serve_on(listener, health.clone(), stop_rx));
        Server {
            address,
            health,
            stop,
            task,
        }
    }

    /// Writes `pieces` one after another, a pause between them, and reads
    /// the answer to the end (each request here closes the connection).
    async fn ask(address: SocketAddr, pieces: &[impl AsRef<str>]) -> String {
        let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
        for (index, piece) in pieces.iter().enumerate() {
            if index > 0 {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            stream.write_all(piece.as_ref().as_bytes()).await.unwrap();
        }
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        answer
    }

    fn get(path: &str) -> String {
        format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    }

    fn status(answer: &str) -> &str {
        answer.lines().next().unwrap_or_default()
    }

    #[tokio::test]
    async fn a_request_written_in_pieces_is_answered_whole() {
        let server = start().await;
        let answer = ask(
            server.address,
            &[
                "GET /healthz HTTP/1.1\r\n",
                "Host: x\r\nConnection: close\r\n\r\n",
            ],
        )
        .await;
        assert_eq!(status(&answer), "HTTP/1.1 200 OK", "{answer}");
        assert!(answer.ends_with("\r\n\r\nok\n"), "{answer}");
    }

    #[tokio::test]
    async fn metrics_are_served_to_get_with_the_prometheus_text_type() {
        let server = start().await;
        let answer = ask(server.address, &[&get("/metrics")]).await;
        assert_eq!(status(&answer), "HTTP/1.1 200 OK", "{answer}");
        assert!(
            answer.contains("content-type: text/plain; version=0.0.4"),
            "{answer}"
        );
        // The worker's own lag gauge is rendered after the recorder's.
        assert!(
            answer.contains(&format!("# TYPE {} gauge", crate::metrics::LAG.name)),
            "{answer}"
        );
    }

    #[tokio::test]
    async fn a_post_is_refused_with_405_naming_the_allowed_methods() {
        let server = start().await;
        for path in ["/metrics", "/healthz", "/readyz"] {
            let answer = ask(
                server.address,
                &[&format!(
                    "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
                )],
            )
            .await;
            assert_eq!(
                status(&answer),
                "HTTP/1.1 405 Method Not Allowed",
                "{path}: {answer}"
            );
            assert!(answer.contains("allow: GET, HEAD\r\n"), "{path}: {answer}");
        }
    }

    #[tokio::test]
    async fn head_answers_the_headers_without_a_body() {
        let server = start().await;
        let answer = ask(
            server.address,
            &["HEAD /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"],
        )
        .await;
        assert_eq!(status(&answer), "HTTP/1.1 200 OK", "{answer}");
        assert!(answer.contains("content-length: 3\r\n"), "{answer}");
        assert!(answer.ends_with("\r\n\r\n"), "{answer}");
    }

    #[tokio::test]
    async fn an_unknown_path_is_404_whatever_the_method() {
        let server = start().await;
        let answer = ask(server.address, &[&get("/nope")]).await;
        assert_eq!(status(&answer), "HTTP/1.1 404 Not Found", "{answer}");
        let answer = ask(
            server.address,
            &["DELETE /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"],
        )
        .await;
        assert_eq!(status(&answer), "HTTP/1.1 404 Not Found", "{answer}");
    }

    #[tokio::test]
    async fn readiness_needs_an_assignment_a_store_answering_and_no_lost_state() {
        let server = start().await;
        let request = get("/readyz");
        let readyz = || ask(server.address, std::slice::from_ref(&request));
        let answer = readyz().await;
        assert_eq!(
            status(&answer),
            "HTTP/1.1 503 Service Unavailable",
            "{answer}"
        );
        assert!(
            answer.ends_with(
                "\r\n\r\nnot ready: stream=bank cause=not-assigned\n\
                 not ready: stream=telemetry cause=not-assigned\n"
            ),
            "nothing assigned yet: {answer}"
        );
        server.health.group.assigned.store(true, Ordering::SeqCst);
        let answer = readyz().await;
        assert_eq!(status(&answer), "HTTP/1.1 200 OK", "{answer}");
        assert!(answer.ends_with("\r\n\r\nready\n"), "{answer}");
        server.health.store_ok.store(false, Ordering::SeqCst);
        let answer = readyz().await;
        assert_eq!(
            status(&answer),
            "HTTP/1.1 503 Service Unavailable",
            "{answer}"
        );
        assert!(
            answer.contains("not ready: stream=telemetry cause=store-unreachable\n"),
            "store not answering: {answer}"
        );
        server.health.store_ok.store(true, Ordering::SeqCst);
        server.health.store_lost[1].store(true, Ordering::SeqCst);
        let answer = readyz().await;
        assert_eq!(
            status(&answer),
            "HTTP/1.1 503 Service Unavailable",
            "{answer}"
        );
        assert!(
            answer.ends_with("\r\n\r\nnot ready: stream=telemetry cause=store-identity-lost\n"),
            "only the stream whose store lost its state: {answer}"
        );
    }

    #[tokio::test]
    async fn http_1_0_gets_a_whole_answer_and_the_connection_closed() {
        // What the test kit's scraper and Prometheus probes send.
        let server = start().await;
        let answer = ask(
            server.address,
            &["GET /healthz HTTP/1.0\r\nHost: x\r\n\r\n"],
        )
        .await;
        assert!(answer.starts_with("HTTP/1.0 200 OK\r\n"), "{answer}");
        assert!(!answer.contains("chunked"), "{answer}");
        assert!(answer.ends_with("ok\n"), "{answer}");
    }

    #[tokio::test]
    async fn stop_ends_the_server_and_its_idle_keep_alive_connections() {
        let server = start().await;
        let mut idle = tokio::net::TcpStream::connect(server.address)
            .await
            .unwrap();
        idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut first = [0u8; 512];
        let read = idle.read(&mut first).await.unwrap();
        assert!(first[..read].starts_with(b"HTTP/1.1 200 OK"));
        server.stop.send(true).unwrap();
        tokio::time::timeout(DRAIN, server.task)
            .await
            .expect("the server ends within its drain bound")
            .unwrap();
        let mut rest = Vec::new();
        let closed = tokio::time::timeout(DRAIN, idle.read_to_end(&mut rest)).await;
        assert!(
            matches!(closed, Ok(Ok(0))),
            "the idle connection is closed: {closed:?} {rest:?}"
        );
    }
}
