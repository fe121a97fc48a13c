//! The outputs' transactions, watched (docs/design.md §11): a transaction
//! the broker left without its markers stops every read_committed reader
//! of its partition for good while the worker itself looks healthy. Every
//! replica looks at every partition of every stream's clean and audit
//! topics: two ListOffsets requests per broker each look (a
//! read_committed client's latest offset is the last stable offset, a
//! read_uncommitted one's the high watermark), on a task of its own, off
//! the loop. `decide` judges the samples; this module asks, says what
//! changed (WARN naming topic, partition and both offsets; INFO when it
//! moves again) and sets `idemgate_output_partitions_stalled`. Not a
//! readiness cause: a new pod would not end the transaction.

mod decide;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::clock::Clock;
use crate::config::Config;
use crate::logging::QuietContext;
use decide::{Change, Offsets, OutputPartition, Stalls};

/// How often the output topics' partitions are listed again.
const METADATA_EVERY: Duration = Duration::from_secs(30);
/// How long a metadata or offsets request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest time between two looks: a few per bound at the least.
const MOST_EVERY: Duration = Duration::from_secs(5);

/// How often the offsets are asked: three looks per bound, at most every
/// 5 s, at least every 100 ms.
fn look_every(bound: Duration) -> Duration {
    (bound / 3).clamp(Duration::from_millis(100), MOST_EVERY)
}

/// A stream's output, as the gauge's labels name it.
struct Output {
    stream: String,
    output: &'static str,
    topic: Arc<str>,
}

/// The two clients that ask: read_committed (the last stable offset) and
/// read_uncommitted (the high watermark). Neither joins a group.
struct Clients {
    committed: BaseConsumer<QuietContext>,
    uncommitted: BaseConsumer<QuietContext>,
}

impl Clients {
    fn new(config: &Config) -> Result<Clients, rdkafka::error::KafkaError> {
        let (mut consumer, _) = crate::worker::client_configs(config);
        // No statistics: nothing reads them here.
        consumer.set("statistics.interval.ms", "0");
        let mut with = |level: &str| {
            consumer
                .set("isolation.level", level)
                .create_with_context(QuietContext)
        };
        Ok(Clients {
            committed: with("read_committed")?,
            uncommitted: with("read_uncommitted")?,
        })
    }

    /// The partitions of `topics` as the brokers list them; None when a
    /// topic's metadata does not come (the last list stands).
    fn partitions(&self, topics: &[Arc<str>]) -> Option<BTreeSet<OutputPartition>> {
        let mut all = BTreeSet::new();
        for topic in topics {
            let metadata = self
                .uncommitted
                .fetch_metadata(Some(topic), REQUEST_TIMEOUT)
                .ok()?;
            for found in metadata.topics().iter().filter(|t| t.error().is_none()) {
                all.extend(found.partitions().iter().map(|p| OutputPartition {
                    topic: topic.clone(),
                    partition: p.id(),
                }));
            }
        }
        Some(all)
    }

    /// Each partition's last stable offset and high watermark; those
    /// either request leaves without an answer are left out. The LSO is
    /// asked first: the HW asked after it is at least the HW it was
    /// below.
    fn offsets(&self, partitions: &BTreeSet<OutputPartition>) -> Vec<(OutputPartition, Offsets)> {
        let committed = latest(&self.committed, partitions);
        let uncommitted = latest(&self.uncommitted, partitions);
        // Serves librdkafka's callbacks (logs, errors) queued for either.
        let _ = self.committed.poll(Duration::ZERO);
        let _ = self.uncommitted.poll(Duration::ZERO);
        committed
            .into_iter()
            .filter_map(|(partition, last_stable)| {
                let high = *uncommitted.get(&partition)?;
                Some((partition, Offsets { last_stable, high }))
            })
            .collect()
    }
}

/// The latest offset of each partition, as `consumer`'s isolation level
/// sees it: one ListOffsets request per leader for them all.
fn latest(
    consumer: &BaseConsumer<QuietContext>,
    partitions: &BTreeSet<OutputPartition>,
) -> BTreeMap<OutputPartition, i64> {
    let mut list = TopicPartitionList::new();
    for p in partitions {
        if list
            .add_partition_offset(&p.topic, p.partition, Offset::End)
            .is_err()
        {
            return BTreeMap::new();
        }
    }
    let answered = match consumer.offsets_for_times(list, REQUEST_TIMEOUT) {
        Ok(answered) => answered,
        Err(error) => {
            // The brokers do not answer: their other signals say so.
            debug!(%error, "output offsets not answered");
            return BTreeMap::new();
        }
    };
    answered
        .elements()
        .iter()
        .filter(|e| e.error().is_ok())
        .filter_map(|e| match e.offset() {
            Offset::Offset(offset) => Some((
                OutputPartition {
                    topic: Arc::from(e.topic()),
                    partition: e.partition(),
                },
                offset,
            )),
            _ => None,
        })
        .collect()
}

/// Watches the outputs of `config`'s streams until `stop`, judging on
/// `clock`'s time.
pub(crate) async fn watch_outputs(
    config: &Config,
    clock: Arc<dyn Clock>,
    mut stop: watch::Receiver<bool>,
) {
    let bound = config.output_stall_after;
    let every = look_every(bound);
    let outputs: Vec<Output> = config
        .streams
        .iter()
        .flat_map(|s| {
            // The `output` label's values, in the catalog's order.
            let topics = [&s.clean, &s.audit];
            crate::metrics::OUTPUTS
                .into_iter()
                .zip(topics)
                .map(|(output, topic)| Output {
                    stream: s.spec.name.clone(),
                    output,
                    topic: Arc::from(topic.as_str()),
                })
        })
        .collect();
    let mut topics: Vec<Arc<str>> = outputs.iter().map(|o| o.topic.clone()).collect();
    topics.sort();
    topics.dedup();
    let clients = match Clients::new(config) {
        Ok(clients) => Arc::new(clients),
        Err(error) => {
            warn!(%error, "cannot create the clients that watch the outputs' last stable offsets: stalled output transactions go unseen");
            return;
        }
    };
    info!(
        topics = %topics.join(","),
        bound_s = bound.as_secs_f64(),
        every_ms = every.as_millis() as u64,
        "watching the outputs' last stable offsets"
    );
    let mut stalls = Stalls::new(bound);
    let mut partitions = BTreeSet::new();
    let mut next_list = clock.now();
    loop {
        let list_now = clock.now() >= next_list;
        let (asking, topics_now, known) = (clients.clone(), topics.clone(), partitions.clone());
        let look = tokio::task::spawn_blocking(move || {
            let listed = list_now.then(|| asking.partitions(&topics_now)).flatten();
            let offsets = asking.offsets(listed.as_ref().unwrap_or(&known));
            (listed, offsets)
        });
        // A stop does not wait for brokers that do not answer.
        let looked = tokio::select! {
            looked = look => looked,
            _ = stop.changed() => break,
        };
        if let Ok((listed, offsets)) = looked {
            let now = clock.now();
            let mut changes = Vec::new();
            // Listed again in 30 s; a list that did not come is asked
            // for again at the next look.
            if let Some(listed) = listed {
                next_list = now + METADATA_EVERY;
                changes.extend(stalls.retain(&listed, now));
                partitions = listed;
            }
            for (partition, sample) in offsets {
                changes.extend(stalls.observe(&partition, sample, now));
            }
            changes.iter().for_each(say);
            for output in &outputs {
                crate::metrics::output_partitions_stalled(
                    &output.stream,
                    output.output,
                    stalls.stalled_in(&output.topic),
                );
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.changed() => break,
        }
    }
}

fn say(change: &Change) {
    match change {
        Change::Stalled {
            partition,
            offsets,
            for_,
        } => warn!(
            topic = %partition.topic,
            partition = partition.partition,
            last_stable_offset = offsets.last_stable,
            high_watermark = offsets.high,
            stalled_s = for_.as_secs(),
            "an open transaction holds this output partition's last stable offset below its high watermark past the bound: every read_committed reader of the partition is stopped there; abort it with kafka-transactions (docs/operating.md), its start offset is the last stable offset"
        ),
        Change::Recovered {
            partition,
            offsets,
            for_,
        } => info!(
            topic = %partition.topic,
            partition = partition.partition,
            last_stable_offset = offsets.map(|o| o.last_stable),
            high_watermark = offsets.map(|o| o.high),
            stalled_s = for_.as_secs(),
            "a stalled output partition's last stable offset moves again (or the partition is gone)"
        ),
    }
}
