//! Consumer-group life: replicas joining and leaving mid-stream, and a
//! restart picking up from the committed offsets.
//!
//! librdkafka's mock coordinator refuses OffsetCommit while a group is
//! JOINING (real Kafka accepts commits from current members during
//! PreparingRebalance), so on the mock a replica cannot hand over what it
//! finished while a join is under way. The first test lets the second
//! replica join while the group is idle and stops a replica while records
//! flow; the second joins and leaves while records flow and asserts what
//! must hold even then.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use idemgate::app::Replica;
use idemgate::config::Config;
use idemgate_testkit::check::{check, Expect};
use idemgate_testkit::counting::CountingStore;
use idemgate_testkit::faulty::Fault;
use idemgate_testkit::say;
use idemgate_testkit::workload::Planned;

use super::support::{
    bank, count, ends, start_assigned, stop, wait_committed, wait_until, Options, Setup,
};

const CHUNK: usize = 30;
const PAUSE: Duration = Duration::from_millis(150);
/// Faster rebalances: the mock waits session.timeout.ms - 1 s for members
/// to join.
const QUICK_GROUP: &[(&str, &str)] = &[("session.timeout.ms", "3000")];

/// Four partitions, small batches, quick rebalances.
fn busy_group(test: &str) -> (Setup, Config, Arc<CountingStore>) {
    let setup = Setup::new(test, 4);
    let config = setup.config(&Options {
        kafka: QUICK_GROUP,
        max_records: 40,
        ..Options::default()
    });
    let store = setup.store(&config);
    (setup, config, store)
}

fn revocations(replica: &Replica) -> u64 {
    replica.group().revocations.load(Ordering::SeqCst)
}

/// Waits until `second` joined `first` and the group split the
/// partitions between them.
async fn wait_split(first: &Replica, second: &Replica) {
    wait_until(
        "the group splits the partitions between two replicas",
        || revocations(first) > 0 && first.assigned() && second.assigned(),
    )
    .await;
}

/// Waits until `survivor`, after revocation number `revoked`, holds
/// partitions again: it took every partition of the replica that left.
async fn wait_takes_all(survivor: &Replica, revoked: u64) {
    wait_until("the survivor takes every partition", || {
        revocations(survivor) > revoked && survivor.assigned()
    })
    .await;
}

/// One replica reads half the workload; a second joins (a rebalance: the
/// partitions are split); the rest flows in and, part way through it, the
/// first replica stops gracefully (a second rebalance: the survivor takes
/// every partition, its own ones fetched again from the committed offsets).
/// Every record has exactly one output.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_with_a_rebalance_mid_stream_lose_and_double_nothing() -> anyhow::Result<()> {
    const TEST: &str = "rebalance";
    let started = Instant::now();
    let (setup, config, store) = busy_group(TEST);
    let input = &setup.topics.input;
    let mut bank = bank(TEST);
    // The second half also redelivers events of the first.
    let first_half = bank.phase(250, 0, 0);
    let rest = bank.phase(250, 100, 0);

    let first = start_assigned(&config, &store).await?;
    let mut landed = setup.produce(input, &first_half, CHUNK, PAUSE).await?;
    // Decided and committed before the join (see the module comment).
    wait_committed(&setup, &landed).await?;

    let second = Replica::start(&config, store.clone()).await?;
    wait_split(&first, &second).await;

    // A third of the rest, then the first replica stops while the others
    // still flow.
    let (early, late) = rest.split_at(rest.len() / 3);
    landed.extend(setup.produce(input, early, CHUNK, PAUSE).await?);
    let flowing = setup.produce(input, late, CHUNK, PAUSE);
    let revoked = revocations(&second);
    stop(first).await?;
    landed.extend(flowing.await?);
    let plan: Vec<Planned> = first_half.into_iter().chain(rest).collect();

    let outputs = setup.read(&setup.topics, plan.len()).await?;
    wait_takes_all(&second, revoked).await;
    stop(second).await?;
    let summary = check(&plan, &landed, &setup.topics, &outputs, Expect::Exact);
    assert_eq!(summary.events, 500);
    assert_eq!(
        count(&summary, &["novel", "duplicate", "conflict"]),
        plan.len()
    );
    say(TEST, format!("{summary}, took {:?}", started.elapsed()));
    Ok(())
}

/// A second replica joins while records flow and leaves again while they
/// flow. On the mock the first replica's commits are refused while the
/// group is JOINING, so the new owner of its partitions reads some records
/// it finished again, and their (suppressed) decisions repeat in audit.
/// What must hold anyway: every event is in clean exactly once (a novel
/// record read again meets its own done claim), nothing is lost, nothing
/// repeats in clean, and a repeated output is the same decision naming the
/// same original.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_joining_while_records_flow_never_doubles_a_clean_event() -> anyhow::Result<()> {
    const TEST: &str = "join-busy";
    let started = Instant::now();
    let (setup, config, store) = busy_group(TEST);
    let input = &setup.topics.input;
    let mut bank = bank(TEST);
    let early = bank.phase(300, 0, 0);
    let late = bank.phase(200, 80, 0);

    let first = start_assigned(&config, &store).await?;
    // A quarter of the early records, then the second replica joins while
    // the others flow.
    let (before, during) = early.split_at(early.len() / 4);
    let mut landed = setup.produce(input, before, CHUNK, PAUSE).await?;
    let flowing = setup.produce(input, during, CHUNK, PAUSE);
    let second = Replica::start(&config, store.clone()).await?;
    wait_split(&first, &second).await;
    landed.extend(flowing.await?);

    // A third of the late records, then the second replica leaves while
    // the others flow.
    let (before, during) = late.split_at(late.len() / 3);
    landed.extend(setup.produce(input, before, CHUNK, PAUSE).await?);
    let flowing = setup.produce(input, during, CHUNK, PAUSE);
    let revoked = revocations(&first);
    stop(second).await?;
    landed.extend(flowing.await?);
    let plan: Vec<Planned> = early.into_iter().chain(late).collect();

    // Repeats may come on top of one output per input.
    let outputs = setup.read(&setup.topics, plan.len()).await?;
    wait_takes_all(&first, revoked).await;
    stop(first).await?;

    // Replays: an input may have more than one output, all the same
    // decision naming the same original; every event reaches clean through
    // one input.
    let summary = check(&plan, &landed, &setup.topics, &outputs, Expect::Replays);
    assert_eq!(
        summary.extra_clean, 0,
        "an input repeated in clean: {summary}"
    );
    assert_eq!(summary.events, 500);
    say(
        TEST,
        format!(
            "{summary}; {} audit outputs repeated, took {:?}",
            outputs.len() - plan.len(),
            started.elapsed()
        ),
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restart_resumes_from_committed_offsets() -> anyhow::Result<()> {
    const TEST: &str = "restart";
    let started = Instant::now();
    let setup = Setup::new(TEST, 3);
    let input = &setup.topics.input;
    let config = setup.config(&Options {
        max_records: 50,
        ..Options::default()
    });
    // One store across the restart, as a shared Redis would be.
    let store = setup.store(&config);
    let mut bank = bank(TEST);
    let part = bank.phase(150, 0, 0);
    let rest = bank.phase(150, 60, 0);

    let before = Replica::start(&config, store.clone()).await?;
    let mut landed = setup
        .produce(input, &part, part.len(), Duration::ZERO)
        .await?;
    setup.read(&setup.topics, part.len()).await?;
    stop(before).await?;

    // The graceful stop committed every finished record: each partition's
    // committed offset is the end of what was produced to it.
    let committed = setup.committed(&setup.topics).await?;
    assert_eq!(
        committed,
        ends(&landed, setup.topics.input_partitions),
        "committed offsets per partition"
    );
    store.take_holders();

    landed.extend(
        setup
            .produce(input, &rest, rest.len(), Duration::ZERO)
            .await?,
    );
    let plan: Vec<Planned> = part.into_iter().chain(rest).collect();
    let after = Replica::start(&config, store.clone()).await?;
    let outputs = setup.read(&setup.topics, plan.len()).await?;
    stop(after).await?;

    let summary = check(&plan, &landed, &setup.topics, &outputs, Expect::Exact);
    assert_eq!(summary.events, 300);
    // The new worker started at the committed offsets: it never asked for
    // a claim on a record before them.
    let claimed = store.take_holders();
    assert!(!claimed.is_empty(), "the restarted worker claimed nothing");
    let reread: Vec<(i32, i64)> = claimed
        .into_iter()
        .filter(|(partition, offset)| committed[*partition as usize].is_some_and(|c| *offset < c))
        .collect();
    assert!(
        reread.is_empty(),
        "the restarted worker re-read committed records: {reread:?}"
    );
    say(TEST, format!("{summary}, took {:?}", started.elapsed()));
    Ok(())
}

/// A replica's paused partitions on its `/metrics` (the gauge of
/// this test's stream only: the recorder is the process's).
fn paused(replica: &Replica, config: &Config) -> f64 {
    let series = format!(
        "idemgate_partitions_paused{{stream=\"{}\"}}",
        config.streams[0].spec.name
    );
    idemgate_testkit::process::scrape_metric(&replica.metrics_address().to_string(), &series)
}

/// A partition paused at the in-flight bounds when the group rebalances is
/// read again after it. librdkafka keeps an application's pause across a
/// revoke and a re-assignment, and the classic eager protocol revokes
/// every partition and hands some back to the same replica. The store is
/// down while the first replica reads past its bounds, so it pauses every
/// partition; a second replica joins (the group splits the partitions);
/// the store comes back and more records flow to every partition.
/// Guarantee: every record has exactly one output, nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_partition_paused_when_the_group_rebalances_is_read_again() -> anyhow::Result<()> {
    const TEST: &str = "paused-rebalance";
    let started = Instant::now();
    let setup = Setup::new(TEST, 4);
    let config = setup.config(&Options {
        kafka: QUICK_GROUP,
        max_records: 20,
        batch: "max_in_flight_records = 40",
        ..Options::default()
    });
    let faulty = setup.faulty_store(&config);
    let store = Arc::new(CountingStore::new(faulty.clone()));
    let input = &setup.topics.input;
    let mut bank = bank(TEST);
    let before = bank.phase(200, 0, 0);
    let after = bank.phase(200, 60, 0);

    faulty.set(Fault::Down);
    let first = start_assigned(&config, &store).await?;
    let mut landed = setup
        .produce(input, &before, before.len(), Duration::ZERO)
        .await?;
    wait_until(
        "the first replica pauses every partition at its bounds",
        || paused(&first, &config) == 4.0,
    )
    .await;

    let second = Replica::start(&config, store.clone()).await?;
    wait_split(&first, &second).await;
    faulty.set(Fault::None);
    landed.extend(setup.produce(input, &after, CHUNK, PAUSE).await?);
    let plan: Vec<Planned> = before.into_iter().chain(after).collect();

    let outputs = setup.read(&setup.topics, plan.len()).await?;
    stop(second).await?;
    stop(first).await?;
    let summary = check(&plan, &landed, &setup.topics, &outputs, Expect::Exact);
    assert_eq!(summary.events, 400);
    assert_eq!(
        count(&summary, &["novel", "duplicate", "conflict"]),
        plan.len()
    );
    say(TEST, format!("{summary}, took {:?}", started.elapsed()));
    Ok(())
}
