//! Handing partitions over (a revoke, a stop) and committing: what the
//! next owner of a partition finds is every finished prefix committed, with
//! the metadata that lets it raise the watermark and skip what is done
//! (docs/design.md §4.6, §7).

use std::sync::LazyLock;
use std::time::{Duration, Instant};

use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use tracing::{error, warn};

use super::flight::Commit;
use super::flight::Tp;
use super::metadata;
use super::pipeline::{answer, Pipeline, FLUSH_PATIENCE};
use super::poller;
use super::Worker;

static RANGES_DROPPED: LazyLock<crate::logging::RateLimit> =
    LazyLock::new(|| crate::logging::RateLimit::new(Duration::from_secs(30)));
static COMMIT_STUCK: LazyLock<crate::logging::RateLimit> =
    LazyLock::new(|| crate::logging::RateLimit::new(Duration::from_secs(30)));

impl Worker {
    /// A commit's metadata for `tp` of `stream`; finished ranges that do
    /// not fit are counted and said (docs/design.md §7): the next owner
    /// decides their records again.
    pub(super) fn metadata_text(&self, stream: usize, tp: &Tp, c: &Commit) -> String {
        let name = &self.streams[stream].config.spec.name;
        let key_id = &self.streams[stream].config.spec.key_id;
        // The longest prefix of the runs that fits.
        let (mut fits, mut over) = (0, c.done.len() + 1);
        while fits + 1 < over {
            let mid = (fits + over) / 2;
            if metadata::inline(key_id, c.gap_free, &c.done[..mid]).is_some() {
                fits = mid;
            } else {
                over = mid;
            }
        }
        let text = metadata::inline(key_id, c.gap_free, &c.done[..fits]).unwrap_or_default();
        let dropped = c.done.len() - fits;
        if dropped > 0 {
            crate::metrics::ranges_dropped(name, dropped);
            if let Some(through) = RANGES_DROPPED.allow_counting(dropped as u64) {
                // `dropped` is every range dropped since the last such
                // line (`held_back` lines ago, any partition), this
                // partition's commit included.
                warn!(stream = %name, topic = %tp.0, partition = tp.1, dropped = through.total, held_back = through.held_back,
                    "finished ranges above committed offsets did not fit in the commits' metadata: the next owner decides their records again (under exactly once, a second output each); dropped counts every range since the last such line, this partition's included");
            }
        }
        text
    }

    /// Waits for the round in flight and the deliveries of `partitions`,
    /// publishes what is delivered (retried until acknowledged or out of
    /// patience) and commits their finished prefixes synchronously. What
    /// is left unfinished keeps its claims for the next owner
    /// (docs/design.md §4.6).
    /// Exactly once, the open transaction commits first, whatever
    /// partitions go: it holds every partition's outputs.
    pub(super) async fn flush(
        &self,
        p: &mut Pipeline,
        partitions: &[Tp],
    ) -> Result<(), super::WorkerError> {
        self.before_handover(p).await?;
        let deadline = self.clock.now() + FLUSH_PATIENCE;
        while p.round.is_some() || partitions.iter().any(|tp| p.flight.sending(tp)) {
            tokio::select! {
                result = answer(&mut p.round) => self.on_answer(p, result),
                _ = self.reports.ready() => self.on_reports(p),
                _ = tokio::time::sleep_until(self.clock.deadline(deadline)) => break,
            }
        }
        self.after_deliveries(p).await?;
        let mut backoff = Duration::from_millis(20);
        // Until acknowledged, out of patience, or the breaker says the
        // store is down (the next owner settles what is left).
        while self.clock.now() < deadline && p.breaker.allows(self.clock.now()) {
            let Some(round) = p.flight.take_last_round(self.clock.now(), self.token) else {
                break;
            };
            if round.publish.is_empty() {
                p.flight.failed(round, |_| false);
                break;
            }
            let now = self.clock.now();
            self.start_round(p, round, now);
            let result = answer(&mut p.round).await;
            let failed = result.is_err();
            self.on_answer(p, result);
            if failed {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
        }
        self.commit_handover(p, partitions, deadline).await;
        Ok(())
    }

    /// At least once, a handover's commit of `partitions`: the last word
    /// on them. What it fails to say (a done range above a waiting
    /// record), the next owner decides again. It goes after the periodic
    /// one still in flight, if any (an older commit landing after it would
    /// put older offsets and done ranges back), and is retried while time
    /// is left.
    pub(super) async fn commit_partitions(
        &self,
        p: &mut Pipeline,
        partitions: &[Tp],
        deadline: Instant,
    ) {
        if let Some((_, earlier)) = p.commit_in_flight.take() {
            let left = deadline.saturating_duration_since(self.clock.now());
            if tokio::time::timeout(left, earlier).await.is_err() {
                error!("a periodic commit did not finish before the handover's deadline: committing over it");
            }
        }
        let list = self.commit_list(p, Some(partitions));
        let mut backoff = Duration::from_millis(50);
        loop {
            let left = deadline.saturating_duration_since(self.clock.now());
            let result = match tokio::time::timeout(left, self.commit_off_loop(list.clone())).await
            {
                Ok(result) => result,
                Err(_) => {
                    error!("handover commit unanswered at the deadline: the next owner decides the finished records above the last commit again");
                    break;
                }
            };
            match result {
                Ok(()) => break,
                Err(error) if self.clock.now() + backoff < deadline => {
                    warn!(%error, "handover commit failed: retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
                Err(error) => {
                    error!(%error, "handover commit failed: the next owner decides the finished records above the last commit again");
                    break;
                }
            }
        }
    }

    /// Commits each partition's finished prefix, with idemgate's metadata,
    /// off the loop: a synchronous commit (one round trip per commit
    /// interval; an asynchronous one could land after the handover's final
    /// commit and put older offsets and done ranges back) waits on the
    /// group coordinator, which can take as long as the brokers are gone,
    /// and the loop must go on (store rounds, deliveries, stop). One at a
    /// time: while one is in flight the next interval's commit waits.
    pub(super) fn commit_periodic(&self, p: &mut Pipeline) {
        if let Some((since, earlier)) = &p.commit_in_flight {
            if !earlier.is_finished() {
                let waited = self.clock.now().duration_since(*since);
                if waited >= FLUSH_PATIENCE && COMMIT_STUCK.allow().is_some() {
                    warn!(
                        waited_s = waited.as_secs(),
                        "a commit is still waiting for the group coordinator: nothing newer is committed meanwhile"
                    );
                }
                return;
            }
        }
        let list = self.commit_list(p, None);
        if list.count() == 0 {
            p.commit_in_flight = None;
            return;
        }
        let committing = self.commit_off_loop(list);
        p.commit_in_flight = Some((
            self.clock.now(),
            tokio::spawn(async move {
                if let Err(error) = committing.await {
                    warn!(%error, "commit failed");
                }
            }),
        ));
    }

    /// Commits `list` synchronously on a blocking thread; counts what the
    /// broker took.
    fn commit_off_loop(
        &self,
        list: TopicPartitionList,
    ) -> impl std::future::Future<Output = Result<(), rdkafka::error::KafkaError>> {
        let consumer = self.consumer.clone();
        async move {
            if list.count() == 0 {
                return Ok(());
            }
            let committed =
                tokio::task::spawn_blocking(move || consumer.commit(&list, CommitMode::Sync))
                    .await
                    .unwrap_or(Ok(()));
            match committed {
                Ok(()) => {
                    crate::metrics::committed();
                    Ok(())
                }
                Err(error) if poller::is_nothing_to_commit(&error) => Ok(()),
                Err(error) => Err(error),
            }
        }
    }

    /// Each partition's finished prefix to commit, with idemgate's
    /// metadata.
    fn commit_list(&self, p: &mut Pipeline, only: Option<&[Tp]>) -> TopicPartitionList {
        let commits = match only {
            None => p.flight.commits(None),
            Some(list) => list
                .iter()
                .flat_map(|tp| p.flight.commits(Some(tp)))
                .collect(),
        };
        let mut list = TopicPartitionList::new();
        for c in &commits {
            let Some(&stream) = self.by_topic.get(&*c.tp.0) else {
                continue;
            };
            if list
                .add_partition_offset(&c.tp.0, c.tp.1, Offset::Offset(c.offset))
                .is_err()
            {
                continue;
            }
            if let Some(mut element) = list.find_partition(&c.tp.0, c.tp.1) {
                element.set_metadata(self.metadata_text(stream, &c.tp, c));
            }
        }
        list
    }
}
