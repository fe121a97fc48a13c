//! A store that lost a quiet stream's state (docs/design.md §8.2, the
//! timed check): a stream decides a first run, then nothing more is sent;
//! the test empties the stream's part of the store under the running
//! gateway (on the shared Redis, every key under the stream's own prefix,
//! never a `FLUSHALL` of a server other tests use; on PostgreSQL, every
//! table of the test's own schema). No round follows, since no record
//! comes: only the timed check can see it, and within 15 s the metric says
//! so and `/readyz` stops answering 200.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use idemgate_testkit::kafka::{committed_offsets, Topics};
use idemgate_testkit::postgres::psql;
use idemgate_testkit::servers::{free_port, is_identity_key, scan};
use idemgate_testkit::workload::Bank;
use idemgate_testkit::{env, kafka_brokers, say};

use super::group::process;
use super::monitoring::http_get;
use super::process::{Gate, GateConfig};

/// How soon the loss must show: three checks at the default 5 s.
const SEEN_WITHIN: Duration = Duration::from_secs(15);

/// Runs a first workload to its end on `config`'s store, lets the stream
/// go quiet, calls `lose` and holds the gateway to it: within
/// `SEEN_WITHIN`, `idemgate_store_identity_lost{stream="bank"}` at 1, the
/// ERROR line, `/readyz` not 200, and the group's offsets where the first
/// run left them.
fn a_quiet_streams_loss_is_seen(
    test: &str,
    topics: &Topics,
    mut config: GateConfig,
    lose: impl FnOnce(&GateConfig),
) {
    let began = Instant::now();
    let mut bank = Bank::new(test, 24);
    let before = bank.phase(150, 0, 4);
    let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    config.metrics_listen = metrics.to_string();
    let mut gate = Gate::start(test, &config);
    gate.wait_assigned(Duration::from_secs(30));
    let first = process(test, &config, topics, &before, &mut [&mut gate]);
    let lost_metric = "idemgate_store_identity_lost{stream=\"bank\"} ";
    let gauge = || {
        let (_, body) = http_get(metrics, "/metrics").expect("/metrics");
        body.lines()
            .find_map(|l| l.strip_prefix(lost_metric).map(str::to_string))
            .unwrap_or_default()
    };
    // Ready once it holds its partitions: a broker slow enough to time
    // the group's session out (a loaded machine) has it rejoin first.
    let ready_by = Instant::now() + Duration::from_secs(30);
    loop {
        let (ready, _) = http_get(metrics, "/readyz").expect("/readyz");
        if ready == 200 {
            break;
        }
        assert!(
            Instant::now() < ready_by,
            "not ready before the loss: /readyz {ready}\n{}",
            gate.tail(20)
        );
        gate.assert_alive();
        // Polling the gateway's own answer, not waiting for time to pass.
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(gauge(), "0", "nothing lost before");
    say(
        test,
        format!("first run committed at {:?}", began.elapsed()),
    );

    // The first run is decided and committed: from here on nothing is
    // sent, so no round claims and only the timed check can see the loss
    // (a publish still landing writes watermarks, and reads no identity).
    lose(&config);
    let lost_at = Instant::now();
    say(test, "the stream's state deleted; nothing more is sent");
    let seen = loop {
        let (ready, _) = http_get(metrics, "/readyz").expect("/readyz");
        if gauge() == "1" && ready != 200 {
            break lost_at.elapsed();
        }
        assert!(
            lost_at.elapsed() < SEEN_WITHIN,
            "after {SEEN_WITHIN:?} of quiet on a store that lost the stream: \
             idemgate_store_identity_lost {:?}, /readyz {ready}\n{}",
            gauge(),
            gate.tail(20)
        );
        gate.assert_alive();
        // Polling a server's answers, not waiting for time to pass.
        std::thread::sleep(Duration::from_millis(200));
    };
    say(test, format!("loss seen after {seen:?} of quiet"));
    let line = gate.store_loss_line();
    assert!(
        line.contains("ERROR") && line.contains("stream=bank") && line.contains("idemgate rebuild"),
        "{line}"
    );
    let partitions: Vec<i32> = first.ends.iter().map(|(p, _)| *p).collect();
    let committed = committed_offsets(&kafka_brokers(), &config.group, &topics.input, &partitions);
    let ends: Vec<Option<i64>> = first.ends.iter().map(|(_, o)| Some(*o)).collect();
    assert_eq!(
        committed, ends,
        "the group's offsets moved without a record"
    );
    let status = gate.terminate(Duration::from_secs(30));
    assert!(status.success(), "idemgate exited with {status} on SIGTERM");
    say(test, format!("took {:?}", began.elapsed()));
}

/// Redis: every key under the stream's prefix deleted (what a `FLUSHALL`
/// does to it), the 64 identity keys with the claims and watermarks.
#[test]
fn a_flush_on_a_quiet_redis_stream_is_seen_within_fifteen_seconds() {
    const TEST: &str = "quiet-flush";
    let topics = Topics::create(&kafka_brokers(), TEST, 3, 2);
    let config = GateConfig::new(TEST, &topics, env("IDEMGATE_TEST_REDIS_URL"));
    a_quiet_streams_loss_is_seen(TEST, &topics, config, |config| {
        let client = redis::Client::open(config.redis_url.as_str()).expect("redis url");
        let mut connection = client
            .get_connection_with_timeout(Duration::from_secs(5))
            .expect("redis connection");
        let keys = scan(&mut connection, &format!("{}*", config.key_prefix));
        assert!(keys.len() > 64, "the first run left {} keys", keys.len());
        for key in &keys {
            let _: i64 = redis::cmd("DEL")
                .arg(key)
                .query(&mut connection)
                .expect("DEL");
        }
    });
}

/// PostgreSQL: every table of the test's own schema emptied (a restore
/// of an empty dump), the identities row with the claims.
#[test]
fn a_truncate_on_a_quiet_postgres_stream_is_seen_within_fifteen_seconds() {
    const TEST: &str = "quiet-pg";
    let topics = Topics::create(&kafka_brokers(), TEST, 3, 2);
    let config = GateConfig::new(TEST, &topics, String::new()).on_postgres();
    a_quiet_streams_loss_is_seen(TEST, &topics, config, |config| {
        let schema = config.postgres_schema.as_deref().expect("a schema");
        let tables = psql(
            &config.postgres_url,
            &format!("SELECT format('%I.%I', schemaname, tablename) FROM pg_tables WHERE schemaname = '{schema}'"),
        );
        assert!(tables.len() >= 4, "tables of {schema}: {tables:?}");
        let names: Vec<&str> = tables.iter().map(|row| row[0].as_str()).collect();
        psql(
            &config.postgres_url,
            &format!("TRUNCATE {}", names.join(", ")),
        );
    });
}

/// A Redis Cluster where one master alone came back empty: every key
/// under the stream's prefix deleted on the first seed node only, so the
/// identity keys of the tags it serves go and those of the others stay.
#[test]
fn one_cluster_node_back_empty_under_a_quiet_stream_is_seen_within_fifteen_seconds() {
    const TEST: &str = "quiet-node";
    let nodes: Vec<String> = env("IDEMGATE_TEST_REDIS_CLUSTER")
        .split(',')
        .map(str::to_string)
        .collect();
    let topics = Topics::create(&kafka_brokers(), TEST, 3, 2);
    let config = GateConfig::new(TEST, &topics, String::new()).on_cluster(nodes.clone());
    a_quiet_streams_loss_is_seen(TEST, &topics, config, |config| {
        let client = redis::Client::open(nodes[0].as_str()).expect("node url");
        let mut connection = client
            .get_connection_with_timeout(Duration::from_secs(5))
            .expect("node connection");
        let keys = scan(&mut connection, &format!("{}*", config.key_prefix));
        let identities = keys
            .iter()
            .filter(|key| is_identity_key(&key[config.key_prefix.len()..]))
            .count();
        assert!(
            (1..64).contains(&identities),
            "one master holds some of the 64 identity keys, not {identities}"
        );
        for key in &keys {
            let _: i64 = redis::cmd("DEL")
                .arg(key)
                .query(&mut connection)
                .expect("DEL");
        }
    });
}
