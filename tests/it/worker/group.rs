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

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::support::{
    bank_workload, check_exactly_once, logs, produce, wait_committed, wait_until, Flow, Options,
    Replica, Setup,
};

const CHUNK: usize = 30;
const PAUSE: Duration = Duration::from_millis(150);
/// Faster rebalances: the mock waits session.timeout.ms - 1 s for members
/// to join.
const QUICK_GROUP: &[(&str, &str)] = &[("session.timeout.ms", "3000")];

/// One replica reads half the workload; a second joins (a rebalance: the
/// partitions are split); the rest flows in and, part way through it, the
/// first replica stops gracefully (a second rebalance: the survivor takes
/// every partition, its own ones fetched again from the committed offsets).
/// Every record has exactly one output.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_with_a_rebalance_mid_stream_lose_and_double_nothing() {
    logs();
    let started = Instant::now();
    let setup = Setup::new("rebalance", 4);
    let config = setup.config(&Options {
        kafka: QUICK_GROUP,
        max_records: 40,
        ..Options::default()
    });
    let store = setup.store(&config);
    let workload = bank_workload(500, 33);
    let (first_half, rest) = workload.split_at(workload.len() / 2);

    let first = Replica::start(&config, store.clone()).await;
    first
        .wait_assigned("the first replica gets partitions")
        .await;
    let mut sent = Flow::start(&setup, first_half, CHUNK, PAUSE).finish().await;
    // Decided and committed before the join (see the module comment).
    wait_committed(&setup, &sent).await;

    let second = Replica::start(&config, store.clone()).await;
    wait_until(
        "the group splits the partitions between two replicas",
        || {
            first.group.revocations.load(Ordering::SeqCst) > 0
                && first.assigned()
                && second.assigned()
        },
    )
    .await;

    let flow = Flow::start(&setup, rest, CHUNK, PAUSE);
    flow.wait_sent(flow.chunks / 3).await;
    let revoked = second.group.revocations.load(Ordering::SeqCst);
    first.stop().await;
    sent.extend(flow.finish().await);

    let outputs = setup.read(sent.len()).await;
    wait_until("the survivor takes every partition", || {
        second.group.revocations.load(Ordering::SeqCst) > revoked && second.assigned()
    })
    .await;
    second.stop().await;
    let counts = check_exactly_once(&setup.topics, &sent, &outputs);
    assert_eq!(counts.events, 500);
    assert_eq!(
        counts.novel + counts.duplicate + counts.conflict,
        sent.len()
    );
    eprintln!("{counts:?}, took {:?}", started.elapsed());
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
async fn a_replica_joining_while_records_flow_never_doubles_a_clean_event() {
    logs();
    let started = Instant::now();
    let setup = Setup::new("join-busy", 4);
    let config = setup.config(&Options {
        kafka: QUICK_GROUP,
        max_records: 40,
        ..Options::default()
    });
    let store = setup.store(&config);
    let workload = bank_workload(500, 55);

    let (early, late) = workload.split_at(workload.len() * 3 / 5);

    let first = Replica::start(&config, store.clone()).await;
    first
        .wait_assigned("the first replica gets partitions")
        .await;
    let flow = Flow::start(&setup, early, CHUNK, PAUSE);
    flow.wait_sent(flow.chunks / 4).await;
    let second = Replica::start(&config, store.clone()).await;
    wait_until(
        "the group splits the partitions between two replicas",
        || {
            first.group.revocations.load(Ordering::SeqCst) > 0
                && first.assigned()
                && second.assigned()
        },
    )
    .await;
    let mut sent = flow.finish().await;

    let flow = Flow::start(&setup, late, CHUNK, PAUSE);
    flow.wait_sent(flow.chunks / 3).await;
    let revoked = first.group.revocations.load(Ordering::SeqCst);
    second.stop().await;
    sent.extend(flow.finish().await);

    // Repeats may come on top of one output per input.
    let outputs = setup.read(sent.len()).await;
    wait_until("the first replica takes every partition back", || {
        first.group.revocations.load(Ordering::SeqCst) > revoked && first.assigned()
    })
    .await;
    first.stop().await;

    // One output per input once repeats are set aside; repeats identical.
    let mut by_seq: HashMap<usize, Vec<_>> = HashMap::new();
    for output in &outputs {
        by_seq.entry(output.seq()).or_default().push(output);
    }
    let mut firsts = Vec::new();
    let mut repeats = 0;
    for (seq, outs) in &by_seq {
        let one = outs[0];
        for other in &outs[1..] {
            repeats += 1;
            assert_eq!(
                other.topic, setup.topics.audit,
                "input {seq} repeated in clean"
            );
            assert_eq!(
                (other.decision(), other.header("idemgate-first-seen")),
                (one.decision(), one.header("idemgate-first-seen")),
                "input {seq} decided twice, differently"
            );
        }
        firsts.push(one.clone());
    }
    let counts = check_exactly_once(&setup.topics, &sent, &firsts);
    assert_eq!(counts.events, 500);
    eprintln!(
        "{counts:?}, {repeats} audit outputs repeated, took {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restart_resumes_from_committed_offsets() {
    logs();
    let started = Instant::now();
    let setup = Setup::new("restart", 3);
    let config = setup.config(&Options {
        max_records: 50,
        ..Options::default()
    });
    // One store across the restart, as a shared Redis would be.
    let store = setup.store(&config);
    let workload = bank_workload(300, 44);
    let (part, rest) = workload.split_at(workload.len() / 2);

    let before = Replica::start(&config, store.clone()).await;
    let mut sent = produce(&setup.brokers, &setup.topics.raw, part, &[]).await;
    setup.read(sent.len()).await;
    before.stop().await;

    // The graceful stop committed every finished record: each partition's
    // committed offset is the end of what was produced to it.
    let committed = setup.committed(&setup.topics.raw).await;
    for partition in 0..setup.partitions {
        let end = sent
            .iter()
            .filter(|s| s.partition == partition)
            .map(|s| s.offset + 1)
            .max();
        assert_eq!(
            committed[partition as usize], end,
            "committed offset of partition {partition}"
        );
    }
    store.take_holders();

    sent.extend(produce(&setup.brokers, &setup.topics.raw, rest, &[]).await);
    let after = Replica::start(&config, store.clone()).await;
    let outputs = setup.read(sent.len()).await;
    after.stop().await;

    let counts = check_exactly_once(&setup.topics, &sent, &outputs);
    assert_eq!(counts.events, 300);
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
    eprintln!("{counts:?}, took {:?}", started.elapsed());
}
