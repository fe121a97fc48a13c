//! A store that came back older (docs/design.md §8.2): the stream's Redis,
//! a redis-server of the test's own, is snapshotted (`SAVE`) after a first
//! run, a second run is decided and committed, and the server is killed and
//! started again from the first snapshot while the gateway runs: a crash
//! between two RDB snapshots, or a restore from a backup. On a Redis
//! Cluster of the test's own one node alone is set back so. On PostgreSQL
//! the test's schema is dumped, and restored from the dump over the live
//! one. The identity is
//! in the snapshot; the second run's claims are not. Late copies of both
//! runs' events follow.
//!
//! The guarantee: no late copy is decided on the older store (without the
//! progress marks, the second run's copies passed as novel, a second time
//! in clean, silently); the fail-closed stream stops within seconds and
//! says so (the ERROR line naming the cause, the metric, `/readyz`),
//! commits nothing past what it decided, and is refused at its next start;
//! after `idemgate rebuild`, every event is in clean exactly once and
//! every input has one output. Under exactly once too.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use idemgate_testkit::check::{check, Expect};
use idemgate_testkit::kafka::{committed_offsets, read_inputs_as_delivered, Producer, Topics};
use idemgate_testkit::postgres::{dump_schema, restore_schema};
use idemgate_testkit::servers::{free_port, RedisCluster, RedisServer, ServerOptions};
use idemgate_testkit::workload::{Bank, Planned};
use idemgate_testkit::{kafka_brokers, say, unique, BOUND};

use super::group::{ends, idemgate_rebuild, process, wait_committed};
use super::lost_store::decided_after;
use super::monitoring::http_get;
use super::process::{Gate, GateConfig};

/// How soon the stop must show after the restart.
const STOPPED_WITHIN: Duration = Duration::from_secs(20);

/// Where the stream's store lives, and how it is set back.
enum Store {
    /// A redis-server of the test's own: `SAVE`, then killed and started
    /// from that dump.
    Redis(RedisServer),
    /// A Redis Cluster of the test's own (three masters): its first node
    /// alone snapshotted, and killed and started from that dump.
    Cluster(RedisCluster),
    /// The test's own schema on the test services' PostgreSQL: `pg_dump`,
    /// then the schema dropped and restored from the dump under the
    /// running gateway (a backup restored).
    Postgres,
}

fn a_store_that_came_back_older_stops_the_stream(test: &str, exactly_once: bool, kind: &str) {
    let began = Instant::now();
    let topics = Topics::create(&kafka_brokers(), test, 3, 2);
    let mut bank = Bank::new(test, 24);
    let (mut store, mut config) = match kind {
        "postgres" => {
            let config = GateConfig::new(test, &topics, String::new()).on_postgres();
            (Store::Postgres, config)
        }
        "cluster" => {
            let cluster = RedisCluster::start(test);
            let config = GateConfig::new(test, &topics, String::new()).on_cluster(cluster.urls());
            (Store::Cluster(cluster), config)
        }
        _ => {
            let redis = RedisServer::start(test, ServerOptions::default());
            let config = GateConfig::new(test, &topics, redis.url());
            (Store::Redis(redis), config)
        }
    };
    if exactly_once {
        config = config.exactly_once(&unique(&format!("{test}-txn")));
    }
    let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    config.metrics_listen = metrics.to_string();
    let mut gate = Gate::start(test, &config);
    gate.wait_assigned(Duration::from_secs(30));

    let first_plan = bank.phase(200, 0, 4);
    let first = process(test, &config, &topics, &first_plan, &mut [&mut gate]);
    let snapshot = std::env::temp_dir().join(format!("{}.dump", unique(test)));
    match &store {
        Store::Redis(redis) => redis.snapshot(&snapshot),
        Store::Cluster(cluster) => cluster.nodes[0].snapshot(&snapshot),
        Store::Postgres => dump_schema(&config.postgres_url, schema(&config), &snapshot),
    }
    // The second run, on the same topics: decided and committed.
    let second_plan = bank.phase(150, 40, 2);
    let second_delivered =
        Producer::new(&kafka_brokers()).send(&topics.input, &second_plan, 100, Duration::ZERO);
    let mut reader = first.reader;
    let both = first_plan.len() + second_plan.len();
    reader.read_every_input(both, BOUND, "of the second run", || gate.assert_alive());
    let mut delivered = first.landed.clone();
    delivered.extend(second_delivered);
    let landed = read_inputs_as_delivered(&kafka_brokers(), &topics, &delivered);
    let two: Vec<Planned> = first_plan.iter().chain(&second_plan).cloned().collect();
    say(
        test,
        format!(
            "second run: {}",
            check(&two, &landed, &topics, &reader.records, Expect::Exact)
        ),
    );
    let ends = ends(&landed, topics.input_partitions);
    wait_committed(&config, &topics, &ends, &mut [&mut gate]);
    say(test, format!("two runs committed at {:?}", began.elapsed()));

    match &mut store {
        Store::Redis(redis) => redis.restart_from(&snapshot),
        Store::Cluster(cluster) => {
            cluster.nodes[0].restart_from(&snapshot);
            cluster.wait_ok();
        }
        Store::Postgres => restore_schema(&config.postgres_url, schema(&config), &snapshot),
    }
    let restarted = Instant::now();
    say(test, "the store set back to the first run's snapshot");
    let late = bank.phase(30, 200, 0);
    let late_delivered =
        Producer::new(&kafka_brokers()).send(&topics.input, &late, 100, Duration::ZERO);

    let line = gate.wait_line(
        "lost this stream's state",
        restarted + STOPPED_WITHIN,
        &format!("no ERROR line for the store gone back within {STOPPED_WITHIN:?}"),
        || std::thread::sleep(Duration::from_millis(100)),
    );
    let took = restarted.elapsed();
    assert!(
        line.contains("ERROR")
            && line.contains("stream=bank")
            && line.contains("came back older")
            && line.contains("idemgate rebuild"),
        "{line}"
    );
    say(test, format!("stopped {took:?} after the restart: {line}"));
    if !exactly_once {
        // At least once the replica stays up and says so; exactly once it
        // aborts its open transaction and ends (`StoreWentBack`) when its
        // commit's bump is refused before a round saw it.
        let (status, readyz) = http_get(metrics, "/readyz").unwrap_or((0, String::new()));
        if status != 0 {
            assert_eq!(status, 503, "/readyz: {readyz}");
        }
    }

    // Nothing late is decided on the older store, and the offsets stay
    // where the second run left them.
    let decided = decided_after(&mut reader, &late);
    if let Store::Cluster(_) = store {
        // Only one node went back: rounds before the stop judged the
        // claims on the others, intact, rightly (and committed them). None
        // may let a copy of an event already in clean through again.
        let event_of: std::collections::HashMap<&str, usize> = late
            .iter()
            .filter_map(|p| Some((p.id.as_str(), p.event?)))
            .collect();
        let before: std::collections::HashSet<usize> = first_plan
            .iter()
            .chain(&second_plan)
            .filter_map(|p| p.event)
            .collect();
        let again: Vec<&str> = reader
            .records
            .iter()
            .filter(|out| out.decision() == "novel")
            .filter(|out| {
                event_of
                    .get(out.test_id())
                    .is_some_and(|e| before.contains(e))
            })
            .map(|out| out.test_id())
            .collect();
        assert!(again.is_empty(), "copies let through again: {again:?}");
        say(
            test,
            format!(
                "{} late records decided before the stop, on intact nodes",
                decided.len()
            ),
        );
    } else {
        assert!(
            decided.is_empty(),
            "decided on the older store: {decided:?}"
        );
        let partitions: Vec<i32> = ends.iter().map(|(p, _)| *p).collect();
        let committed =
            committed_offsets(&kafka_brokers(), &config.group, &topics.input, &partitions);
        let ends: Vec<Option<i64>> = ends.iter().map(|(_, o)| Some(*o)).collect();
        assert_eq!(committed, ends, "committed past what was decided");
    }

    // Stopped (or ended), the replica's next start is refused.
    match gate.exited() {
        Some(status) => {
            assert!(exactly_once, "the replica ended at least once: {status}");
            say(test, format!("the replica ended: {status}"));
        }
        None => {
            let status = gate.terminate(Duration::from_secs(30));
            assert!(status.success(), "idemgate exited with {status} on SIGTERM");
        }
    }
    let mut again = Gate::start(&format!("{test}-again"), &config);
    assert!(
        !again.wait_exit(Duration::from_secs(60)).success(),
        "a start on the older store was not refused"
    );
    let log = again.log_text();
    assert!(
        log.contains("stream bank")
            && log.contains("came back older")
            && log.contains("idemgate rebuild"),
        "the refusal names the stream, the cause and the way out:\n{}",
        again.tail(10)
    );

    // A replica that ended on the error left its session to time out:
    // the broker's group coordinator drops it on its own time.
    let until = Instant::now() + BOUND;
    let run = loop {
        let run = idemgate_rebuild(&config, &[]);
        if run.ok || !run.stderr.contains("active member") || Instant::now() > until {
            break run;
        }
        std::thread::sleep(Duration::from_secs(1));
    };
    assert!(run.ok, "rebuild failed: {}", run.stderr);
    let mut gate = Gate::start(&format!("{test}-rebuilt"), &config);
    let plan: Vec<Planned> = first_plan
        .iter()
        .chain(&second_plan)
        .chain(&late)
        .cloned()
        .collect();
    reader.read_every_input(plan.len(), BOUND, "after the rebuild", || {
        gate.assert_alive()
    });
    delivered.extend(late_delivered);
    let landed = read_inputs_as_delivered(&kafka_brokers(), &topics, &delivered);
    let summary = check(&plan, &landed, &topics, &reader.records, Expect::Exact);
    say(test, &summary);
    let status = gate.terminate(Duration::from_secs(30));
    assert!(status.success(), "idemgate exited with {status} on SIGTERM");
    let _ = std::fs::remove_file(&snapshot);
    say(test, format!("took {:?}", began.elapsed()));
}

fn schema(config: &GateConfig) -> &str {
    config.postgres_schema.as_deref().expect("a schema")
}

#[test]
fn a_redis_back_from_an_older_snapshot_stops_the_stream_until_rebuilt() {
    a_store_that_came_back_older_stops_the_stream("went-back", false, "redis");
}

#[test]
fn exactly_once_a_redis_back_from_an_older_snapshot_stops_the_stream_until_rebuilt() {
    a_store_that_came_back_older_stops_the_stream("went-back-eos", true, "redis");
}

#[test]
fn a_postgres_restored_from_an_older_dump_stops_the_stream_until_rebuilt() {
    a_store_that_came_back_older_stops_the_stream("went-back-pg", false, "postgres");
}

#[test]
fn one_cluster_node_back_from_an_older_snapshot_stops_the_stream_until_rebuilt() {
    a_store_that_came_back_older_stops_the_stream("went-back-node", false, "cluster");
}

/// Floors from commits of partitions a replica does not own, on the
/// timer (`app::floors`): another replica's commit records marks the
/// store no longer holds (here the store never held them: the same as one
/// restored to before them). A replica that owns no partition and made no
/// commit learns them within a few timer intervals, and its store then
/// answers the stream behind and marks the identity gone back, so every
/// replica stops at its next round. (That a commit without idemgate's
/// metadata raises nothing is `ops::group`'s unit test.)
#[tokio::test(flavor = "multi_thread")]
async fn another_replicas_commits_raise_the_floors_on_a_timer() {
    use idemgate::config::Config;
    use idemgate::store::redis::{RedisOptions, RedisStore, RedisTarget};
    use idemgate::store::{
        at_start, AtStart, ClaimStore, Marked, Refusal, StoreIdentity, StreamId,
    };
    use idemgate_testkit::kafka::commit_offsets_with;

    const TEST: &str = "floors-timer";
    let topics = Topics::create(&kafka_brokers(), TEST, 2, 1);
    let redis = RedisServer::start(TEST, ServerOptions::default());
    let mut gate = GateConfig::new(TEST, &topics, redis.url());
    gate.store = "identity_check_interval = \"200ms\"\n".into();
    let config = Config::parse(&gate.toml()).expect("config");
    let specs: Vec<_> = config.streams.iter().map(|s| s.spec.clone()).collect();
    let key_id = specs[0].key_id.clone();
    let options = RedisOptions::new(
        RedisTarget::Standalone(redis.url()),
        gate.key_prefix.clone(),
    );
    let store: std::sync::Arc<dyn ClaimStore> =
        std::sync::Arc::new(RedisStore::connect(&options, specs).await.expect("store"));
    let found = store
        .write_identity(StreamId(0), StoreIdentity::random(), false)
        .await
        .unwrap();
    let AtStart::Adopt(identity) = at_start(&found) else {
        panic!("{found:?}")
    };
    store.adopt_identity(StreamId(0), identity);
    assert!(matches!(
        store.check_marks(StreamId(0)).await.unwrap(),
        Marked::At(_)
    ));

    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(idemgate::app::floors::raise_from_commits(
        config,
        store.clone(),
        stop_rx,
    ));
    // Another replica's commit of partition 1, marks 10 on every tag.
    let marks = vec!["a"; 64].join(",");
    let metadata = format!("idemgate/3 {key_id} gap-free m={marks}");
    commit_offsets_with(
        &kafka_brokers(),
        &gate.group,
        &topics.input,
        &[(1, 5)],
        &metadata,
    );
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        if store.check_marks(StreamId(0)).await.unwrap() == Marked::Behind {
            break;
        }
        assert!(
            Instant::now() < until,
            "the floors did not rise within 10 s"
        );
        // The task reads the commits on its own timer (every 200 ms here).
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let found = store.find_identity(StreamId(0)).await.unwrap();
    assert_eq!(at_start(&found), AtStart::Refuse(Refusal::WentBack));
    stop.send(true).unwrap();
    task.await.unwrap();
}
