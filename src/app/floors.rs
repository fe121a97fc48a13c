//! Floors from every partition's commits, on a timer (docs/design.md
//! §8.2): a replica raises its progress-mark floors from its own bumps and
//! from the partitions it is assigned, but another replica's last commit on
//! the partitions it does not own may record higher marks, on tags this
//! one has not bumped since. At start and every `[store]
//! identity_check_interval` after, this task reads every input partition's
//! committed metadata (without waiting for open transactions,
//! `group::client_reading_pending`) and raises the store's floors; where one rose, the next round checks the
//! marks before it claims, and the timed identity check compares them.
//! One offset fetch a stream and interval.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use rdkafka::consumer::BaseConsumer;
use tokio::sync::watch;
use tracing::warn;

use crate::config::Config;
use crate::logging::QuietContext;
use crate::logging::RateLimit;
use crate::ops::group::{self, GroupError};
use crate::store::{ClaimStore, StreamId};

static UNREAD: LazyLock<RateLimit> = LazyLock::new(|| RateLimit::new(Duration::from_secs(60)));

/// The highest marks the commits of the stream `index` recorded, place by
/// place, over every partition of its inputs.
pub(crate) fn recorded(
    consumer: &BaseConsumer<QuietContext>,
    config: &Config,
    index: usize,
) -> Result<Vec<u64>, GroupError> {
    let stream = &config.streams[index];
    let partitions = group::partitions(consumer, &stream.inputs)?;
    let committed = group::committed(consumer, &partitions)?;
    Ok(group::highest_marks(&stream.spec.key_id, &committed))
}

/// Raises the store's floors from every partition's commits until `stop`.
pub async fn raise_from_commits(
    config: Config,
    store: Arc<dyn ClaimStore>,
    mut stop: watch::Receiver<bool>,
) {
    let every = config.identity_check_interval;
    let config = Arc::new(config);
    let mut consumer: Option<Arc<BaseConsumer<QuietContext>>> = None;
    let mut first = true;
    loop {
        // The first at once: a start that could not read the commits
        // (`app/identity.rs`) has its floors from them soon after.
        if !std::mem::take(&mut first) {
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = stop.changed() => break,
            }
        }
        let client = match &consumer {
            Some(client) => client.clone(),
            None => match group::client_reading_pending(&config) {
                Ok(client) => consumer.insert(Arc::new(client)).clone(),
                Err(error) => {
                    if let Some(held_back) = UNREAD.allow() {
                        warn!(%error, held_back, "cannot create the client that reads every partition's commits: progress-mark floors come from this replica's own commits and assignments meanwhile");
                    }
                    continue;
                }
            },
        };
        let read = {
            let config = config.clone();
            tokio::task::spawn_blocking(move || {
                (0..config.streams.len())
                    .map(|index| recorded(&client, &config, index))
                    .collect::<Vec<_>>()
            })
            .await
        };
        let Ok(read) = read else { continue };
        for (index, marks) in read.into_iter().enumerate() {
            match marks {
                Ok(marks) => store.raise_floors(StreamId(index), &marks),
                Err(error) => {
                    if let Some(held_back) = UNREAD.allow() {
                        warn!(stream = %config.streams[index].spec.name, %error, held_back,
                            "cannot read every partition's commits: progress-mark floors come from this replica's own commits and assignments meanwhile");
                    }
                }
            }
        }
    }
}
