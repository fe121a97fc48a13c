//! A store that lost its state (docs/design.md §8.2): the stream's Redis,
//! a redis-server of the test's own without persistence, is killed and
//! started again empty while a gateway runs. Without the store identity
//! every late copy of an event delivered before would pass as `novel`
//! again; with it, the fail-closed stream stops deciding, says so (ERROR
//! line, metric, `/readyz`), commits nothing past what it decided, and its
//! next start is refused until `idemgate rebuild` wrote the store back;
//! after the rebuild the late copies are duplicates of what was delivered.

use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use idemgate_testkit::check::{check, Expect};
use idemgate_testkit::kafka::{
    committed_offsets, read_inputs_as_delivered, Producer, Reader, Topics,
};
use idemgate_testkit::servers::{
    claim_ttls, free_port, is_identity_key, scan, unsettled_claims, RedisServer, ServerOptions,
};
use idemgate_testkit::workload::{Bank, Planned};
use idemgate_testkit::{kafka_brokers, say, BOUND, SETTLE};

use super::group::{idemgate_rebuild, process, Processed};
use super::monitoring::http_get;
use super::process::{Gate, GateConfig};

/// What the loss left for a test to go on with.
pub struct Lost {
    pub topics: Topics,
    pub config: GateConfig,
    pub redis: RedisServer,
    pub bank: Bank,
    /// The first run: every input decided, the group committed at its ends.
    pub first: Processed,
    pub before: Vec<Planned>,
    /// Late copies of the first run's events and new events, sent after
    /// the loss.
    pub late: Vec<Planned>,
    pub late_delivered: std::collections::HashMap<String, idemgate_testkit::kafka::Landed>,
}

/// Runs a first workload to its end, empties Redis under the running
/// gateway, sends late copies and new events, and holds the gateway to the
/// loss: nothing of them decided, the loss said, the offsets where they
/// were. Returns with the gateway still running.
pub fn lose_the_store(test: &str) -> (Lost, Gate) {
    lose_the_store_stamped(test, None)
}

/// [`lose_the_store`], every input stamped `stamp` (a millisecond a
/// record later than the one before) where given.
pub fn lose_the_store_stamped(test: &str, stamp: Option<i64>) -> (Lost, Gate) {
    let stamped = |plan: Vec<Planned>, from: usize| -> Vec<Planned> {
        match stamp {
            None => plan,
            Some(at) => plan
                .into_iter()
                .enumerate()
                .map(|(n, p)| p.stamped(at + (from + n) as i64))
                .collect(),
        }
    };
    let began = Instant::now();
    let topics = Topics::create(&kafka_brokers(), test, 3, 2);
    let mut redis = RedisServer::start(test, ServerOptions::default());
    let mut bank = Bank::new(test, 24);
    let before = stamped(bank.phase(300, 0, 6), 0);
    let mut config = GateConfig::new(test, &topics, redis.url());
    let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    config.metrics_listen = metrics.to_string();
    let mut gate = Gate::start(test, &config);
    gate.wait_assigned(Duration::from_secs(30));
    let first = process(test, &config, &topics, &before, &mut [&mut gate]);
    assert_eq!(http_get(metrics, "/readyz").unwrap().0, 200, "ready before");
    say(
        test,
        format!("first run committed at {:?}", began.elapsed()),
    );

    redis.restart_empty();
    say(test, "redis killed and started again, empty");
    let late = stamped(bank.phase(40, 150, 0), before.len());
    let late_delivered =
        Producer::new(&kafka_brokers()).send(&topics.input, &late, 100, Duration::ZERO);

    // The first round with a claim finds the identity gone.
    gate.wait_line(
        "lost this stream's state",
        Instant::now() + BOUND,
        &format!("no ERROR line for the lost store within {BOUND:?}"),
        // The gateway's log, read again: its next round logs the loss.
        || std::thread::sleep(Duration::from_millis(100)),
    );
    let line = gate.store_loss_line();
    assert!(
        line.contains("ERROR") && line.contains("stream=bank") && line.contains("idemgate rebuild"),
        "{line}"
    );
    // An empty store is named so, not as one that came back older, though
    // its progress marks are gone with it.
    assert!(line.contains("how=\"missing\""), "{line}");
    let (status, readyz) = http_get(metrics, "/readyz").unwrap();
    assert_eq!(status, 503, "/readyz must say the store lost its state");
    assert!(
        readyz.starts_with("not ready: stream=bank cause=")
            && readyz.contains("store-identity-lost"),
        "/readyz names the stream and why: {readyz:?}"
    );
    // Reachability is the store watcher's own look, every 5 s: right after
    // the restart its last look may still be the outage's while a round
    // or the timed identity check already found the loss. Once it looks
    // again, the loss alone remains.
    let until = Instant::now() + BOUND;
    let mut readyz = readyz;
    while readyz != "not ready: stream=bank cause=store-identity-lost\n" && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(200));
        readyz = http_get(metrics, "/readyz").unwrap().1;
    }
    assert_eq!(
        readyz, "not ready: stream=bank cause=store-identity-lost\n",
        "/readyz names the stream and why, once the store answers again"
    );
    let (_, body) = http_get(metrics, "/metrics").unwrap();
    assert!(
        body.lines().any(|l| l
            .starts_with("idemgate_not_ready{stream=\"bank\",cause=\"store-identity-lost\"} 1")),
        "{}",
        body.lines()
            .filter(|l| l.contains("not_ready"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        body.lines()
            .any(|l| l.starts_with("idemgate_store_identity_lost{stream=\"bank\"} 1")),
        "{}",
        body.lines()
            .filter(|l| l.contains("identity"))
            .collect::<Vec<_>>()
            .join("\n")
    );

    // Nothing sent after the loss is decided: no output, and the group's
    // offsets stay where the first run left them. The reader keeps reading
    // for a while: an output decided on the empty store arrives then.
    let mut reader = first.reader;
    let decided = decided_after(&mut reader, &late);
    assert!(
        decided.is_empty(),
        "records decided on the empty store: {decided:?}"
    );
    let partitions: Vec<i32> = first.ends.iter().map(|(p, _)| *p).collect();
    let committed = committed_offsets(&kafka_brokers(), &config.group, &topics.input, &partitions);
    let ends: Vec<Option<i64>> = first.ends.iter().map(|(_, o)| Some(*o)).collect();
    assert_eq!(committed, ends, "committed past what was decided");
    say(test, format!("loss seen and held at {:?}", began.elapsed()));
    let lost = Lost {
        topics,
        config,
        redis,
        bank,
        first: Processed { reader, ..first },
        before,
        late,
        late_delivered,
    };
    (lost, gate)
}

/// Reads on for `SETTLE`, then names the outputs of `late` read so far,
/// each with its decision: what a stopped stream must not have decided.
pub fn decided_after(reader: &mut Reader, late: &[Planned]) -> Vec<String> {
    reader.read_for(SETTLE);
    let late_ids: std::collections::HashSet<&str> = late.iter().map(|p| p.id.as_str()).collect();
    reader
        .records
        .iter()
        .filter(|out| late_ids.contains(out.test_id()))
        .map(|out| format!("{} {}", out.test_id(), out.decision()))
        .collect()
}

/// Stops the gateway (SIGTERM, exit 0) and sees its restart refused before
/// it joins the group, naming the stream and `idemgate rebuild`.
pub fn stop_and_see_the_restart_refused(test: &str, lost: &Lost, mut gate: Gate) {
    let status = gate.terminate(Duration::from_secs(30));
    assert!(status.success(), "idemgate exited with {status} on SIGTERM");
    let mut again = Gate::start(&format!("{test}-again"), &lost.config);
    let status = again.wait_exit(Duration::from_secs(60));
    assert!(
        !status.success(),
        "a start on the lost store was not refused"
    );
    let log = again.log_text();
    assert!(
        log.contains("stream bank") && log.contains("idemgate rebuild"),
        "the refusal names the stream and the way out:\n{}",
        again.tail(10)
    );
}

#[test]
fn a_redis_restarted_empty_stops_a_fail_closed_stream_and_refuses_its_restart() {
    const TEST: &str = "lost-store";
    let began = Instant::now();
    let (lost, gate) = lose_the_store(TEST);
    stop_and_see_the_restart_refused(TEST, &lost, gate);
    say(TEST, format!("took {:?}", began.elapsed()));
}

/// `idemgate rebuild` (docs/design.md §8.3) after the loss: refused while
/// the gateway runs; with it stopped, it writes the first run's claims back
/// from the clean topic and the watermarks from the group's commits, then
/// the identity. The gateway started again decides the late copies as
/// duplicates of the first run's outputs, the new events as novel: every
/// event once in clean, every input one output.
#[test]
fn rebuild_restores_a_lost_store_and_late_copies_stay_duplicates() {
    rebuild_and_send_late_copies("rebuild", None);
}

/// The same with inputs whose timestamps are 30 days old (a batch re-sent
/// from a file keeps its CreateTime), far beyond the 1 h TTL: their
/// outputs keep those timestamps, but their claims were made when they
/// were decided, minutes ago, and the rebuild finds and restores every one
/// (docs/design.md §8.3).
#[test]
fn rebuild_restores_the_claims_of_inputs_with_old_timestamps() {
    let month_ago = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64
        - 30 * 24 * 3_600_000;
    rebuild_and_send_late_copies("rebuild-old-times", Some(month_ago));
}

fn rebuild_and_send_late_copies(test: &str, stamp: Option<i64>) {
    let began = Instant::now();
    let (lost, gate) = lose_the_store_stamped(test, stamp);
    let refused = idemgate_rebuild(&lost.config, &[]);
    assert!(
        !refused.ok && refused.stderr.contains("active member"),
        "a rebuild while the gateway runs: {}",
        refused.stderr
    );
    stop_and_see_the_restart_refused(test, &lost, gate);

    let run = idemgate_rebuild(&lost.config, &[]);
    assert!(run.ok, "rebuild failed: {}", run.stderr);
    let novel = lost
        .first
        .reader
        .records
        .iter()
        .filter(|out| out.decision() == "novel")
        .count();
    assert!(
        run.stdout
            .contains(&format!("wrote {novel} settled tier-1 claim(s)")),
        "{}",
        run.stdout
    );
    for (partition, end) in &lost.first.ends {
        let row = format!(
            "{}/{partition}: committed {end} (gap-free): watermark raised to {end}",
            lost.topics.input
        );
        assert!(run.stdout.contains(&row), "no {row:?} in\n{}", run.stdout);
    }
    assert!(run.stdout.contains("store identity"), "{}", run.stdout);
    say(test, format!("rebuilt at {:?}", began.elapsed()));

    let mut gate = Gate::start(&format!("{test}-rebuilt"), &lost.config);
    let plan: Vec<Planned> = lost.before.iter().chain(&lost.late).cloned().collect();
    let mut reader = lost.first.reader;
    reader.read_every_input(plan.len(), BOUND, "after the rebuild", || {
        gate.assert_alive()
    });
    let mut delivered = lost.first.landed.clone();
    delivered.extend(lost.late_delivered.clone());
    let landed = read_inputs_as_delivered(&kafka_brokers(), &lost.topics, &delivered);
    // Exact: a late copy of a first-run event passing as novel again, or an
    // input decided twice, fails it.
    let summary = check(&plan, &landed, &lost.topics, &reader.records, Expect::Exact);
    say(test, &summary);
    let claims = claim_ttls(&lost.redis.url(), &lost.config.key_prefix);
    assert_eq!(
        claims.len(),
        lost.bank.events(),
        "claim keys, one per event"
    );
    let unsettled = unsettled_claims(&lost.redis.url(), &lost.config.key_prefix);
    assert!(unsettled.is_empty(), "claims left unsettled: {unsettled:?}");
    let status = gate.terminate(Duration::from_secs(30));
    assert!(status.success(), "idemgate exited with {status} on SIGTERM");
    say(test, format!("took {:?}", began.elapsed()));
}

/// The first start after upgrading from a version without store identities
/// (docs/design.md §8.3): the store kept its claims but holds no identity,
/// and the group has idemgate's commits, so the start is refused;
/// `idemgate rebuild --adopt` writes the identity alone, and the claims the
/// store kept go on making late copies duplicates.
#[test]
fn an_upgraded_store_that_kept_its_claims_is_adopted() {
    const TEST: &str = "adopt";
    let began = Instant::now();
    let topics = Topics::create(&kafka_brokers(), TEST, 3, 2);
    let redis = RedisServer::start(TEST, ServerOptions::default());
    let mut bank = Bank::new(TEST, 24);
    let before = bank.phase(200, 0, 4);
    let config = GateConfig::new(TEST, &topics, redis.url());
    let mut gate = Gate::start(TEST, &config);
    gate.wait_assigned(Duration::from_secs(30));
    let first = process(TEST, &config, &topics, &before, &mut [&mut gate]);
    let status = gate.terminate(Duration::from_secs(30));
    assert!(status.success(), "idemgate exited with {status} on SIGTERM");

    // What an earlier version left: everything but the identities.
    let mut connection = redis.connection().expect("redis connection");
    let identities: Vec<Vec<u8>> = scan(&mut connection, &format!("{}*", config.key_prefix))
        .into_iter()
        .filter(|key| is_identity_key(&key[config.key_prefix.len()..]))
        .collect();
    assert_eq!(identities.len(), 64, "one identity key per hash tag");
    for key in &identities {
        let _: i64 = redis::cmd("DEL")
            .arg(key)
            .query(&mut connection)
            .expect("DEL");
    }
    let mut refused = Gate::start(&format!("{TEST}-refused"), &config);
    assert!(!refused.wait_exit(Duration::from_secs(60)).success());
    assert!(refused.log_text().contains("idemgate rebuild"));

    let run = idemgate_rebuild(&config, &["--adopt"]);
    assert!(
        run.ok && run.stdout.contains("store identity") && run.stdout.contains("written"),
        "{}{}",
        run.stdout,
        run.stderr
    );
    let again = idemgate_rebuild(&config, &["--adopt"]);
    assert!(
        again.ok && again.stdout.contains("nothing written"),
        "{}",
        again.stdout
    );

    let late = bank.phase(20, 100, 0);
    let mut gate = Gate::start(&format!("{TEST}-adopted"), &config);
    let late_delivered =
        Producer::new(&kafka_brokers()).send(&topics.input, &late, 100, Duration::ZERO);
    let plan: Vec<Planned> = before.into_iter().chain(late).collect();
    let mut reader = first.reader;
    reader.read_every_input(plan.len(), BOUND, "after the adoption", || {
        gate.assert_alive()
    });
    let mut delivered = first.landed;
    delivered.extend(late_delivered);
    let landed = read_inputs_as_delivered(&kafka_brokers(), &topics, &delivered);
    let summary = check(&plan, &landed, &topics, &reader.records, Expect::Exact);
    say(TEST, &summary);
    let status = gate.terminate(Duration::from_secs(30));
    assert!(status.success(), "idemgate exited with {status} on SIGTERM");
    say(TEST, format!("took {:?}", began.elapsed()));
}
