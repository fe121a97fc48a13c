//! Exactly once on the mock cluster, where a fault can be injected inside a
//! transaction (its transactions are not real: aborted records stay
//! readable and transactional offsets are not stored, so what is checked
//! here is the worker's side of the protocol).

use std::sync::Arc;
use std::time::{Duration, Instant};

use idemgate::app::Replica;
use idemgate::store::memory::MemoryStore;
use idemgate_testkit::check::{check, Expect};
use idemgate_testkit::counting::CountingStore;
use idemgate_testkit::faulty::{Fault, FaultyStore};
use idemgate_testkit::{say, BOUND};
use rdkafka::types::RDKafkaRespErr;

use super::support::{bank, count, start_assigned, stop, wait_until, Options, Setup};

const EXACTLY_ONCE: &str = "guarantee = \"exactly-once\"";

/// Every clean output fails in the client (the clean topic refuses
/// authorization) inside an open transaction, while audit outputs go
/// through. The guarantee: a transaction holding a failed delivery is never
/// committed: the worker aborts it and stops with the error (a crash, for
/// its supervisor), instead of committing the offsets past the failed
/// output; once the topic is lifted, its restart (same transactional id)
/// gives every input an output, every event once in clean through one
/// input, nothing lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_delivery_inside_a_transaction_aborts_it_and_stops_the_worker(
) -> anyhow::Result<()> {
    const TEST: &str = "eos-failed-delivery";
    let started = Instant::now();
    let setup = Setup::new(TEST, 3);
    let transactional_id = format!("{}-txn", setup.group);
    let kafka = [("transactional.id", transactional_id.as_str())];
    let config = setup.config(&Options {
        top: EXACTLY_ONCE,
        kafka: &kafka,
        ..Options::default()
    });
    let store = setup.store(&config);
    let plan = bank(TEST).phase(300, 0, 0);
    let landed = setup
        .produce(&setup.topics.input, &plan, plan.len(), Duration::ZERO)
        .await?;
    let cluster = setup.kafka.cluster()?;
    cluster.topic_error(
        &setup.topics.clean,
        RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED,
    )?;
    let first = Replica::start(&config, store.clone()).await?;
    wait_until("the worker stops on the failed transaction", || {
        first.finished()
    })
    .await;
    let error = first
        .stop()
        .await
        .expect_err("the worker ended without an error");
    let text = format!("{error:#}");
    say(TEST, format!("the first replica stopped: {text}"));
    assert!(
        text.contains("transaction"),
        "the error does not name the transaction: {text}"
    );
    cluster.topic_error(
        &setup.topics.clean,
        RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR,
    )?;
    let second = Replica::start(&config, store.clone()).await?;
    let outputs = setup.read(&setup.topics, plan.len()).await?;
    stop(second).await?;
    let summary = check(&plan, &landed, &setup.topics, &outputs, Expect::Replays);
    assert_eq!(count(&summary, &["novel"]), summary.events);
    say(
        TEST,
        format!("{summary}; took {:?} (within {BOUND:?})", started.elapsed()),
    );
    Ok(())
}

/// The drain's bound is the config's: with `batch.handover_drain = "1s"`
/// and the store down (every round refused) after records were read, a
/// stop's drain cannot finish them, and the stop ends after the 1 s and
/// well before the 10 s the bound used to be fixed at (measured on the
/// machine's clock, the one this replica runs on: the upper bound leaves
/// 5 s for the commit, the leave and the producer's flush on the mock
/// cluster). The guarantee: what the drain left unfinished is not lost: a
/// second replica, the store back, gives every input an output and every
/// event once in clean through one input.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_drain_that_cannot_finish_ends_at_the_configured_bound() -> anyhow::Result<()> {
    const TEST: &str = "eos-drain-bound";
    const DRAIN: Duration = Duration::from_secs(1);
    const SLACK: Duration = Duration::from_secs(5);
    let setup = Setup::new(TEST, 1);
    let transactional_id = format!("{}-txn", setup.group);
    let kafka = [("transactional.id", transactional_id.as_str())];
    let config = setup.config(&Options {
        top: EXACTLY_ONCE,
        kafka: &kafka,
        batch: "handover_drain = \"1s\"",
        max_records: 50,
        ..Options::default()
    });
    let streams = config.streams.iter().map(|s| s.spec.clone()).collect();
    let faulty = Arc::new(FaultyStore::new(Arc::new(MemoryStore::new(streams))));
    // Outside the fault: it sees every round asked for, refused or not.
    let store = Arc::new(CountingStore::new(faulty.clone()));
    let first = start_assigned(&config, &store).await?;
    let mut bank = bank(TEST);
    let before = bank.phase(60, 0, 0);
    let mut landed = setup
        .produce(&setup.topics.input, &before, before.len(), Duration::ZERO)
        .await?;
    setup.read(&setup.topics, before.len()).await?;
    faulty.set(Fault::Down);
    let stuck = bank.phase(40, 0, 0);
    landed.extend(
        setup
            .produce(&setup.topics.input, &stuck, stuck.len(), Duration::ZERO)
            .await?,
    );
    let first_stuck = before.len() as i64;
    wait_until(
        "the replica asks claims for the records produced while the store is down",
        || {
            store
                .take_holders()
                .iter()
                .any(|(_, offset)| *offset >= first_stuck)
        },
    )
    .await;
    let stopping = Instant::now();
    stop(first).await?;
    let took = stopping.elapsed();
    say(
        TEST,
        format!("the stop took {took:?} with handover_drain {DRAIN:?}"),
    );
    assert!(
        took >= DRAIN,
        "the stop took {took:?}: the drain ended before its bound, the records read were not stuck"
    );
    assert!(
        took < DRAIN + SLACK,
        "the stop took {took:?}: the drain outlasted handover_drain = {DRAIN:?}"
    );
    faulty.set(Fault::None);
    let second = start_assigned(&config, &store).await?;
    let plan: Vec<_> = before.into_iter().chain(stuck).collect();
    let outputs = setup.read(&setup.topics, plan.len()).await?;
    stop(second).await?;
    let summary = check(&plan, &landed, &setup.topics, &outputs, Expect::Replays);
    assert_eq!(count(&summary, &["novel"]), summary.events);
    say(TEST, format!("{summary}"));
    Ok(())
}
