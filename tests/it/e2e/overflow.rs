//! No finished run dropped from a commit (docs/design.md §7), on Apache
//! Kafka.
//!
//! One partition's records are 5,000 copies of an event whose original is
//! held elsewhere by a replica that is gone (its claim, written by the
//! test under a dead owner token, names offset 0 of the other, still
//! empty, partition), interleaved with 5,000 malformed records that finish
//! at once: 5,000 finished runs above the committed offset, far past what
//! a commit's metadata holds (about 800). Then the replica stops, by
//! SIGKILL or SIGTERM, and a restart takes its partitions over; only then
//! does the original arrive, its holder's claim settles, and the copies
//! are decided.
//!
//! The guarantee: a read_committed reader sees every input once, audit
//! included (`Expect::Exact`): the takeover skips every finished run,
//! none decided again. Where the record the commit names is lost from the
//! store, the next owner stops the stream instead of deciding the runs
//! again, and `idemgate rebuild` makes the record again from the outputs.
//! (Before the runs went to a record in the store, only the first 994
//! fitted in the metadata and each other malformed record reached audit
//! twice: CHANGELOG.md.)

use std::time::{Duration, Instant};

use idemgate::coordinates::{Coordinates, TopicTag};
use idemgate::fingerprint::{fingerprint, Profile, RecordView};
use idemgate::store::postgres::{PostgresOptions, PostgresStore};
use idemgate::store::redis::{RedisOptions, RedisStore, RedisTarget, TlsFiles};
use idemgate::store::{
    Claim, ClaimOutcome, ClaimStore, Mode, OwnerToken, RunsName, StreamId, StreamSpec,
};
use idemgate_testkit::check::{check, Expect};
use idemgate_testkit::kafka::{committed_now, read_inputs_as_delivered, Producer, Reader, Topics};
use idemgate_testkit::workload::{Bank, Planned};
use idemgate_testkit::{env, kafka_brokers, say, unique, BOUND};

use super::group::idemgate_rebuild;
use super::process::{Gate, GateConfig};

/// Finished runs above the waiting copy at the committed offset.
const RUNS: usize = 5000;

/// The holder's partition (empty until the original arrives) and the
/// waiting one.
const HOLDER: i32 = 0;
const WAITING: i32 = 1;

/// How the first replica stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    Kill,
    Term,
}

/// Where the claims and the records of runs live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Store {
    Redis,
    Postgres,
}

#[test]
fn exactly_once_5000_finished_runs_above_a_waiting_record_survive_a_sigkill_and_takeover() {
    overflow("eos-overflow-kill", true, Stop::Kill, Store::Redis);
}

#[test]
fn exactly_once_5000_finished_runs_above_a_waiting_record_survive_a_sigterm_handover() {
    overflow("eos-overflow-term", true, Stop::Term, Store::Redis);
}

#[test]
fn at_least_once_5000_finished_runs_above_a_waiting_record_survive_a_sigkill_and_takeover() {
    overflow("alo-overflow-kill", false, Stop::Kill, Store::Redis);
}

#[test]
fn at_least_once_5000_finished_runs_above_a_waiting_record_survive_a_sigterm_handover() {
    overflow("alo-overflow-term", false, Stop::Term, Store::Redis);
}

#[test]
fn exactly_once_on_postgres_5000_finished_runs_above_a_waiting_record_survive_a_sigkill_and_takeover(
) {
    overflow("eos-overflow-pg-kill", true, Stop::Kill, Store::Postgres);
}

#[test]
fn exactly_once_on_postgres_5000_finished_runs_above_a_waiting_record_survive_a_sigterm_handover() {
    overflow("eos-overflow-pg-term", true, Stop::Term, Store::Postgres);
}

#[test]
fn at_least_once_on_postgres_5000_finished_runs_above_a_waiting_record_survive_a_sigkill_and_takeover(
) {
    overflow("alo-overflow-pg-kill", false, Stop::Kill, Store::Postgres);
}

#[test]
fn at_least_once_on_postgres_5000_finished_runs_above_a_waiting_record_survive_a_sigterm_handover()
{
    overflow("alo-overflow-pg-term", false, Stop::Term, Store::Postgres);
}

/// The record the commit names, lost from the store: the next owner
/// stops the stream (a store loss, not a skip), and `idemgate rebuild`
/// makes the record again from the outputs above the committed offset.
#[test]
fn at_least_once_a_lost_record_of_runs_stops_the_stream_until_rebuild_makes_it_again() {
    run(
        "alo-overflow-lost",
        false,
        Stop::Term,
        Store::Redis,
        Then::LoseAndRebuild,
    );
}

#[test]
fn exactly_once_on_postgres_a_lost_record_of_runs_is_made_again_by_rebuild() {
    run(
        "eos-overflow-pg-lost",
        true,
        Stop::Kill,
        Store::Postgres,
        Then::LoseAndRebuild,
    );
}

/// What happens between the first replica's stop and the takeover.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Then {
    TakeOver,
    /// The record the committed metadata names is deleted from the store
    /// first.
    LoseAndRebuild,
}

fn overflow(test: &str, exactly_once: bool, stop: Stop, store: Store) {
    run(test, exactly_once, stop, store, Then::TakeOver);
}

fn run(test: &str, exactly_once: bool, stop: Stop, store: Store, then: Then) {
    let topics = Topics::create(&kafka_brokers(), test, 2, 2);
    let mut bank = Bank::new(test, 1);
    bank.copy_rate = (0.0, 0.0);
    let mut original = bank.phase(1, 0, 0).remove(0);
    original.partition = Some(HOLDER);
    let mut waiting: Vec<Planned> = Vec::with_capacity(2 * RUNS);
    for _ in 0..RUNS {
        for mut record in [bank.redelivery(0), bank.malformed_record()] {
            record.partition = Some(WAITING);
            waiting.push(record);
        }
    }
    let redis_url = env("IDEMGATE_TEST_REDIS_URL");
    let mut config = GateConfig::new(test, &topics, redis_url.clone());
    config.max_records = 500;
    if store == Store::Postgres {
        config = config.on_postgres();
    }
    if exactly_once {
        config = config.exactly_once(&unique(&format!("{test}-txn")));
    }

    // The original's claim, as a replica that claimed it and died left it:
    // unsettled, held by offset 0 of the holder partition.
    hold_for_a_dead_replica(&config, &topics.input, &original, exactly_once);

    let mut first = Gate::start(&format!("{test}-first"), &config);
    first.wait_until(
        Instant::now() + BOUND,
        "the first replica was not given both partitions",
        |gate| gate.assigned() == Some(2),
        || std::thread::sleep(Duration::from_millis(100)),
    );
    let producer = Producer::new(&kafka_brokers());
    let mut delivered = producer.send(&topics.input, &waiting, 1000, Duration::ZERO);
    let mut reader = Reader::new(&kafka_brokers(), &topics.outputs());
    let malformed: Vec<&str> = waiting
        .iter()
        .filter(|r| r.hash.is_err())
        .map(|r| r.id.as_str())
        .collect();
    let finished = reader.read_until(
        BOUND,
        |reader| malformed.iter().all(|id| reader.ids.contains(*id)),
        || first.assert_alive(),
    );
    assert!(
        finished,
        "the malformed records did not all reach audit within {BOUND:?}"
    );
    // Visible to read_committed: under exactly once their transactions
    // committed, with the offsets and metadata. At least once the last
    // commit is the one that stays.
    let metadata = steady_metadata(&config, &topics.input);
    say(
        test,
        format!(
            "{RUNS} finished runs above the waiting copies; the commit's metadata: {} bytes, {:?}",
            metadata.1.len(),
            metadata.1.chars().take(120).collect::<String>()
        ),
    );
    match stop {
        Stop::Kill => first.kill(),
        Stop::Term => {
            let status = first.terminate(Duration::from_secs(60));
            assert!(
                status.success(),
                "the first replica exited with {status} on SIGTERM"
            );
        }
    }
    say(test, format!("the first replica stopped by {stop:?}"));
    if then == Then::LoseAndRebuild {
        lose_and_rebuild(test, &config, &topics.input, &mut reader);
    }

    // The restart (the same transactional id: its dead incarnation's open
    // transaction is aborted) takes both partitions over.
    let mut second = Gate::start(&format!("{test}-second"), &config);
    second.wait_until(
        Instant::now() + BOUND,
        "the restart was not given both partitions",
        |gate| gate.assigned() == Some(2),
        || reader.read_for(Duration::from_millis(200)),
    );
    // Now the original arrives: the claim its record meets is its own
    // holder's, unsettled; it is decided and the copies with it.
    let arrived = producer.send(
        &topics.input,
        std::slice::from_ref(&original),
        1,
        Duration::ZERO,
    );
    assert_eq!(
        arrived[&original.id].offset, 0,
        "the holder's record is at offset 0"
    );
    delivered.extend(arrived);
    let mut plan = waiting;
    plan.push(original);
    reader.read_every_input(plan.len(), BOUND, "after the takeover", || {
        second.assert_alive()
    });
    let landed = read_inputs_as_delivered(&kafka_brokers(), &topics, &delivered);
    let summary = check(&plan, &landed, &topics, &reader.records, Expect::Exact);
    say(test, &summary);
    assert!(
        metadata.1.contains(" r="),
        "the runs did not go to a record in the store: {:?}",
        metadata.1
    );
    let (_, unsettled) = config.claims();
    assert!(unsettled.is_empty(), "claims left unsettled: {unsettled:?}");
    let status = second.terminate(Duration::from_secs(60));
    assert!(
        status.success(),
        "the restart exited with {status} on SIGTERM"
    );
}

/// Deletes the record of runs the waiting partition's committed metadata
/// names; a replica started then stops the stream and says so; after it
/// stopped, `idemgate rebuild` writes the record again.
fn lose_and_rebuild(test: &str, config: &GateConfig, input: &str, reader: &mut Reader) {
    let (_, text) = steady_metadata(config, input);
    let reference = text
        .split(' ')
        .find_map(|word| word.strip_prefix("r="))
        .unwrap_or_else(|| panic!("no record named: {text:?}"));
    let mut parts = reference.split('.');
    let name = RunsName {
        stream: StreamId(0),
        topic: TopicTag::of(input),
        partition: WAITING,
        writer: OwnerToken(u32::from_str_radix(parts.next().unwrap(), 16).unwrap()),
        sequence: u64::from_str_radix(parts.next().unwrap(), 36).unwrap(),
    };
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(async {
        let store = open_store(config).await;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_millis() as i64;
        let held = store.get_runs(&name, now).await.expect("the store answers");
        assert!(
            held.is_some(),
            "the store lacks {name:?} before the test deleted it"
        );
        store.delete_runs(&[name]).await.expect("deleted");
    });
    say(test, format!("deleted the record {reference}"));

    let mut lost = Gate::start(&format!("{test}-lost"), config);
    lost.wait_line(
        "names a record of finished runs the store does not hold",
        Instant::now() + BOUND,
        "the replica did not see the record missing",
        || reader.read_for(Duration::from_millis(200)),
    );
    // The stream's loss names what showed it, not the identity.
    let line = lost.store_loss_line();
    assert!(
        line.contains("ERROR") && line.contains("a record of finished runs"),
        "{line}"
    );
    let status = lost.terminate(Duration::from_secs(60));
    assert!(
        status.success(),
        "the replica that saw the loss exited with {status}"
    );

    let until = Instant::now() + BOUND;
    let run = loop {
        let run = idemgate_rebuild(config, &[]);
        if run.ok || !run.stderr.contains("active member") || Instant::now() > until {
            break run;
        }
        // The broker's group coordinator drops the stopped members on its
        // own time: ask it again.
        std::thread::sleep(Duration::from_secs(1));
    };
    assert!(run.ok, "rebuild failed: {}", run.stderr);
    assert!(
        run.stdout
            .contains("1 committed offset(s) name a record of finished runs; 1 missing"),
        "{}",
        run.stdout
    );
    say(test, format!("rebuilt: {}", run.stdout.trim()));
}

/// The test's own connection to the gateway's store.
async fn open_store(config: &GateConfig) -> Box<dyn ClaimStore> {
    let spec = StreamSpec::new("bank", Mode::Exact, Duration::from_secs(3600), None);
    match &config.postgres_schema {
        Some(schema) => {
            let mut options = PostgresOptions::new(config.postgres_url.clone());
            options.schema = schema.clone();
            options.tls = Some(TlsFiles {
                ca_file: Some(env("IDEMGATE_TEST_POSTGRES_CA").into()),
                cert_file: None,
                key_file: None,
            });
            Box::new(
                PostgresStore::connect(&options, vec![spec])
                    .await
                    .expect("the store"),
            )
        }
        None => {
            let options = RedisOptions::new(
                RedisTarget::Standalone(config.redis_url.clone()),
                config.key_prefix.clone(),
            );
            Box::new(
                RedisStore::connect(&options, vec![spec])
                    .await
                    .expect("the store"),
            )
        }
    }
}

/// Writes the original's claim under a dead owner token, held by offset 0
/// of the holder partition, with its fingerprint as the gateway computes
/// it.
fn hold_for_a_dead_replica(
    config: &GateConfig,
    input: &str,
    original: &Planned,
    exactly_once: bool,
) {
    let profile = Profile::resolve("bank-txn", None, None).expect("the bank-txn preset");
    let view = RecordView {
        key: Some(&original.key),
        payload: original.payload.as_deref(),
        headers: &[],
    };
    let print = fingerprint(&profile, 1 << 20, &view).expect("the original hashes");
    assert_eq!(original.hash, Ok(print.hash.to_string()));
    let claim = Claim {
        stream: StreamId(0),
        hash: print.hash,
        digest: print.digest,
        holder: Coordinates {
            topic: TopicTag::of(input),
            partition: HOLDER,
            offset: 0,
        },
        token: OwnerToken::new(0xdead, 0),
        at: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_millis() as i64,
        early_inserts: exactly_once,
    };
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let outcome = runtime.block_on(async {
        let store = open_store(config).await;
        store.claim(&[claim]).await.expect("the claim")
    });
    assert_eq!(outcome, vec![ClaimOutcome::Won { fresh: true }]);
}

/// The waiting partition's committed offset and metadata once two reads
/// a second apart agree (at least once, the last periodic commit is in).
fn steady_metadata(config: &GateConfig, input: &str) -> (i64, String) {
    let until = Instant::now() + BOUND;
    let mut last = None;
    loop {
        let now = committed_now(&config.brokers, &config.group, input, &[WAITING]).remove(0);
        if now.is_some() && now == last {
            return now.unwrap_or_default();
        }
        assert!(
            Instant::now() < until,
            "no steady commit within {BOUND:?}: {now:?}"
        );
        last = now;
        // The next look at the broker's committed offsets.
        std::thread::sleep(Duration::from_secs(1));
    }
}
