//! A producer lane: the producer outputs go through, and how to build it
//! again (docs/design.md §7). Under exactly once a transactional call
//! whose outcome is unknown (it timed out) leaves the producer in a state
//! only a new one with the same `transactional.id` resolves: its
//! `init_transactions` bumps the epoch, which fences the old producer's
//! requests still in flight and ends the old transaction (the coordinator
//! finishes a commit already prepared, and aborts one still open).

use std::sync::{Arc, RwLock};
use std::time::Duration;

use rdkafka::error::KafkaError;
use rdkafka::producer::{Producer, PurgeConfig};
use rdkafka::ClientConfig;
use tracing::warn;

use crate::config::Guarantee;

use super::client_logs::ClientLogs;
use super::output::{OutputContext, OutputProducer, Reports};

/// The second lane's transactional id is the first's with this suffix
/// (docs/configuration.md, "Top level").
pub(crate) const SECOND_LANE: &str = "~2";

/// How many `init_transactions` calls a producer gets, each for the call
/// timeout, while they fail with an error that may pass: at a replica's
/// start, or when a lane's producer is built again, the brokers may still
/// be away or the coordinator still loading.
const INIT_ATTEMPTS: u32 = 4;

/// The producers' configurations: one under at least once; under exactly
/// once two, the second with its own transactional id (a restart of this
/// replica fences both of its zombie's).
pub(super) fn lanes(guarantee: Guarantee, producer: &ClientConfig) -> Vec<ClientConfig> {
    match (guarantee, producer.get("transactional.id")) {
        (Guarantee::ExactlyOnce, Some(id)) => {
            let mut second = producer.clone();
            second.set("transactional.id", format!("{id}{SECOND_LANE}"));
            vec![producer.clone(), second]
        }
        _ => vec![producer.clone()],
    }
}

/// Waits (on a blocking thread) until every output of the lane's
/// transaction has its delivery report, for `patience` at most (the call
/// timeout; counted in looks, so a test's manual clock cannot hold it). rdkafka's
/// `commit_transaction` flushes first, and its flush, when anything is
/// still outstanding, polls for a whole 100 ms slice before it looks
/// again: measured, one commit in three took 100 to 120 ms where the
/// others took 1 to 10. The producer's own polling thread serves the
/// reports meanwhile; this looks every millisecond, so the flush inside
/// the commit finds nothing left. (Sleeps: the count has no wake-up to
/// wait on through rdkafka's API.)
pub(super) fn reports_in(producer: &OutputProducer, patience: Duration) {
    const LOOK: Duration = Duration::from_millis(1);
    for _ in 0..patience.as_millis() / LOOK.as_millis() {
        if producer.in_flight_count() == 0 {
            return;
        }
        std::thread::sleep(LOOK);
    }
}

/// One producer and its configuration; the producer can be swapped for a
/// new one while the loop holds the lane.
pub(crate) struct Lane {
    config: ClientConfig,
    reports: Arc<Reports>,
    producer: RwLock<Arc<OutputProducer>>,
}

impl Lane {
    /// A lane whose delivery reports go to `reports`.
    pub(crate) fn new(config: ClientConfig, reports: Arc<Reports>) -> Result<Lane, KafkaError> {
        let producer = Arc::new(create(&config, &reports)?);
        Ok(Lane {
            config,
            reports,
            producer: RwLock::new(producer),
        })
    }

    /// The lane's producer now.
    pub(crate) fn producer(&self) -> Arc<OutputProducer> {
        self.producer
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Blocking: a new producer with the same configuration registers
    /// (`init`: each call bounded by `timeout`, made again while it may pass),
    /// fencing the old one and ending its transaction; it takes the old
    /// one's place, and the old one's outputs still queued or in flight
    /// are purged (each reported as a failure, to be produced again: what
    /// the brokers took of them belongs to the ended transaction).
    pub(crate) fn rebuild(&self, timeout: Duration) -> Result<(), KafkaError> {
        let fresh = create(&self.config, &self.reports)?;
        init(&fresh, timeout)?;
        let old = std::mem::replace(
            &mut *self.producer.write().unwrap_or_else(|e| e.into_inner()),
            Arc::new(fresh),
        );
        old.purge(PurgeConfig::default().queue().inflight());
        // The purged outputs' reports, handed over by the old producer's
        // thread before it goes (looked at every millisecond, for a second
        // at most: the count has no wake-up to wait on).
        for _ in 0..1000 {
            if old.in_flight_count() == 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }
}

/// Blocking: registers `producer`'s transactional id with the brokers
/// (`init_transactions`, each call bounded by `timeout`). A call that
/// fails with an error librdkafka calls retriable (it timed out: the
/// brokers away, or the coordinator still loading its transaction state,
/// as after a broker's restart) is made again, [`INIT_ATTEMPTS`] calls
/// in all; any other error, or the last, is returned.
pub(super) fn init(producer: &OutputProducer, timeout: Duration) -> Result<(), KafkaError> {
    let mut tried = 0;
    loop {
        tried += 1;
        match producer.init_transactions(timeout) {
            Ok(()) => return Ok(()),
            Err(error) if tried < INIT_ATTEMPTS && retriable(&error) => {
                warn!(%error, tried, attempts = INIT_ATTEMPTS, "init_transactions failed and may pass: trying again");
            }
            Err(error) => return Err(error),
        }
    }
}

/// Pure: whether librdkafka says a failed transactional call may pass if
/// made again.
fn retriable(error: &KafkaError) -> bool {
    matches!(error, KafkaError::Transaction(e) if e.is_retriable())
}

fn create(config: &ClientConfig, reports: &Arc<Reports>) -> Result<OutputProducer, KafkaError> {
    config.create_with_context(OutputContext {
        logs: ClientLogs::default(),
        reports: reports.clone(),
    })
}
