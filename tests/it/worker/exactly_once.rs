//! Exactly once on the mock cluster, where a fault can be injected inside a
//! transaction (its transactions are not real: aborted records stay
//! readable and transactional offsets are not stored, so what is checked
//! here is the worker's side of the protocol).

use std::time::{Duration, Instant};

use idemgate::app::Replica;
use idemgate_testkit::check::{check, Expect};
use idemgate_testkit::{say, BOUND};
use rdkafka::types::RDKafkaRespErr;

use super::support::{bank, count, stop, wait_until, Options, Setup};

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
