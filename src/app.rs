//! The one place a worker replica is wired: its claim store, the worker
//! loop, the /metrics listener and the store watcher, started together and
//! stopped together. `idemgate run`, the demo, the tests and the bench all
//! start replicas through here, so what they run is what operators run.

pub mod floors;
mod identity;

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use anyhow::{Context, Result};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::info;

use crate::clock::{Clock, SystemClock};
use crate::config::{Config, StoreConfig};
use crate::store::memory::MemoryStore;
use crate::store::postgres::PostgresStore;
use crate::store::redis::RedisStore;
use crate::store::{ClaimStore, StoreError, StreamSpec};
use crate::worker::{Group, Worker};

/// Runs one replica with the store its config names until `shutdown`
/// resolves (or the worker fails), then commits what is finished and leaves
/// the group.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<()> {
    refuse_what_the_brokers_rule_out(&config).await?;
    let store = open_store(&config).await?;
    run_with_store(&config, store, shutdown).await
}

/// Builds the store a config names, with its streams: the one place the
/// config's store table becomes a `ClaimStore` (`run`, `reset`,
/// `rebuild`, the bench).
pub async fn open_store(config: &Config) -> Result<Arc<dyn ClaimStore>, StoreError> {
    let streams: Vec<StreamSpec> = config.streams.iter().map(|s| s.spec.clone()).collect();
    Ok(match &config.store {
        StoreConfig::Memory { event_time: false } => Arc::new(MemoryStore::new(streams)),
        StoreConfig::Memory { event_time: true } => Arc::new(MemoryStore::on_event_time(streams)),
        StoreConfig::Redis(options) => Arc::new(RedisStore::connect(options, streams).await?),
        StoreConfig::Postgres(options) => Arc::new(PostgresStore::connect(options, streams).await?),
    })
}

/// Asks the brokers what `check` asks them, and refuses to start with an
/// input topic they do not have (nothing would ever read that stream) or
/// an output topic too small for the records the stream lets through
/// (docs/design.md §10), each naming its field. Brokers that do not
/// answer refuse nothing: the replica starts and keeps trying.
async fn refuse_what_the_brokers_rule_out(config: &Config) -> Result<()> {
    let probe = config.clone();
    let findings =
        tokio::task::spawn_blocking(move || crate::ops::check::kafka::probe(&probe)).await?;
    let refused = crate::ops::check::kafka::refusals(&findings);
    if !refused.is_empty() {
        let named: Vec<String> = refused
            .iter()
            .map(|f| {
                // `streams[i].field` names the stream too.
                let stream = config.streams.iter().enumerate().find_map(|(i, s)| {
                    f.subject
                        .starts_with(&format!("streams[{i}]."))
                        .then_some(s.spec.name.as_str())
                });
                match stream {
                    Some(name) => format!("stream {name:?}, {}: {}", f.subject, f.detail),
                    None => format!("{}: {}", f.subject, f.detail),
                }
            })
            .collect();
        anyhow::bail!(
            "refused on the brokers' answers (`idemgate check {}` lists every finding): {}",
            config.config_flag(),
            named.join("; ")
        );
    }
    for finding in findings
        .iter()
        .filter(|f| f.status != crate::ops::check::Status::Ok)
    {
        tracing::warn!(subject = %finding.subject, detail = %finding.detail, "start-up check");
    }
    Ok(())
}

/// As [`run`], on a store the caller built (a decorated or shared one).
pub async fn run_with_store(
    config: &Config,
    store: Arc<dyn ClaimStore>,
    shutdown: impl Future<Output = ()>,
) -> Result<()> {
    let mut replica = Replica::start(config, store).await?;
    tokio::select! {
        _ = shutdown => {
            info!("shutdown requested: finishing the batch in flight");
            replica.stop().await
        }
        ended = &mut replica.worker => {
            stop_serving(&replica.stop, replica.serving).await;
            Ok(ended.context("worker task")??)
        }
    }
}

/// A running replica. Dropping it without [`Replica::stop`] leaves the
/// worker running until the runtime ends.
pub struct Replica {
    stop: watch::Sender<bool>,
    worker: JoinHandle<Result<(), crate::worker::WorkerError>>,
    /// The /metrics listener, the store watcher and the outputs' watch
    /// (`worker::stalls`): they end with `stop`.
    serving: Vec<JoinHandle<()>>,
    group: Arc<Group>,
    /// Where `/metrics` answers (`metrics.listen`, its port chosen when 0).
    metrics_address: std::net::SocketAddr,
}

impl Replica {
    /// Creates the worker (its consumer joins the group), binds the metrics
    /// listener of `metrics.listen` and starts watching the store.
    pub async fn start(config: &Config, store: Arc<dyn ClaimStore>) -> Result<Replica> {
        Replica::start_on(config, store, Arc::new(SystemClock)).await
    }

    /// As [`Replica::start`], on a clock of the caller's: a test's
    /// [`ManualClock`](crate::clock::ManualClock) says "nine hours later"
    /// by moving it.
    pub async fn start_on(
        config: &Config,
        store: Arc<dyn ClaimStore>,
        clock: Arc<dyn Clock>,
    ) -> Result<Replica> {
        // Before the consumer exists: a stream whose store lost its state
        // never joins the group (docs/design.md §8.2).
        identity::establish(config, &*store).await?;
        let (stop, stop_rx) = watch::channel(false);
        let clock_for_outputs = clock.clone();
        let worker = Worker::new(config, store.clone(), stop_rx.clone(), clock).await?;
        let group = worker.group();
        let names: Vec<&str> = config
            .streams
            .iter()
            .map(|s| s.spec.name.as_str())
            .collect();
        let health = crate::http::Health::new(
            group.clone(),
            names.iter().map(|n| n.to_string()).collect(),
            worker.store_lost(),
        );
        let (server, metrics_address) =
            crate::http::serve(&config.metrics_listen, health.clone(), stop_rx.clone()).await?;
        // After the listener installed the recorder: every series at zero.
        let tiered: Vec<&str> = config
            .streams
            .iter()
            .filter(|s| s.spec.filter.is_some())
            .map(|s| s.spec.name.as_str())
            .collect();
        crate::metrics::register(&names, &tiered);
        let floors = tokio::spawn(floors::raise_from_commits(
            config.clone(),
            store.clone(),
            stop_rx.clone(),
        ));
        let watcher = tokio::spawn(crate::http::watch_store(store, health, stop_rx.clone()));
        let outputs = {
            let config = config.clone();
            tokio::spawn(async move {
                crate::worker::watch_outputs(&config, clock_for_outputs, stop_rx).await
            })
        };
        Ok(Replica {
            stop,
            worker: tokio::spawn(worker.run()),
            serving: vec![server, watcher, outputs, floors],
            group,
            metrics_address,
        })
    }

    /// Membership and assignment, as the rebalance callbacks see them.
    pub fn group(&self) -> &Arc<Group> {
        &self.group
    }

    /// Whether the group gave this replica partitions (and has not taken
    /// them all back).
    pub fn assigned(&self) -> bool {
        self.group.assigned.load(Ordering::SeqCst)
    }

    /// Where this replica's `/metrics` answers.
    pub fn metrics_address(&self) -> std::net::SocketAddr {
        self.metrics_address
    }

    /// Whether the worker has ended on its own (an error: a stop ends it
    /// only through `stop`).
    pub fn finished(&self) -> bool {
        self.worker.is_finished()
    }

    /// Graceful stop: the batch in flight finishes, the finished work is
    /// committed, the replica leaves the group; the worker's error if it
    /// had one.
    pub async fn stop(self) -> Result<()> {
        let _ = self.stop.send(true);
        let result = self.worker.await.context("worker task")?;
        stop_serving(&self.stop, self.serving).await;
        Ok(result?)
    }
}

/// Tells the listener and the watchers to end, and waits for them.
async fn stop_serving(stop: &watch::Sender<bool>, serving: Vec<JoinHandle<()>>) {
    let _ = stop.send(true);
    for task in serving {
        let _ = task.await;
    }
}

/// Resolves on SIGTERM (what orchestrators send) or SIGINT (Ctrl-C).
pub async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut terminate) => {
                tokio::select! {
                    _ = interrupt => {}
                    _ = terminate.recv() => {}
                }
            }
            Err(_) => {
                let _ = interrupt.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
    }
}
