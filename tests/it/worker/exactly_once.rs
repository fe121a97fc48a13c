//! Exactly once on the mock cluster, where a fault can be injected inside a
//! transaction (its transactions are not real: aborted records stay
//! readable and transactional offsets are not stored, so what is checked
//! here is the worker's side of the protocol).

use std::time::{Duration, Instant};

use idemgate::app::Replica;
use idemgate_testkit::check::{check, Expect};
use idemgate_testkit::kafka::Reader;
use idemgate_testkit::workload::Kind;
use idemgate_testkit::{say, BOUND};
use rdkafka::types::RDKafkaRespErr;

use super::support::{bank, count, stop, Options, Setup};

const EXACTLY_ONCE: &str = "guarantee = \"exactly-once\"";

/// Every clean output fails in the client (the clean topic refuses
/// authorization) inside an open transaction, while audit outputs go
/// through. The guarantee: a transaction holding a failed delivery is never
/// committed: the worker aborts it at once and sends its outputs again in
/// the next transaction, over and over while the topic refuses, without
/// stopping (no crash loop: every invalid record, spread among the doomed
/// clean outputs, reaches audit while the topic still refuses, and the
/// worker is still running); once the topic is lifted every input has an
/// output, every event reaches clean once through one input, nothing lost.
/// (The mock cluster keeps an aborted transaction's records readable, so an
/// input may show two outputs here; a read_committed reader of real brokers
/// sees one, e2e::exactly_once's refusal test.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_delivery_inside_a_transaction_aborts_it_and_its_outputs_go_again(
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
    // Invalid records go to audit, without a claim: they are delivered in
    // the transactions that the clean outputs doom.
    let plan = bank(TEST).phase(300, 0, 20);
    assert!(
        plan.iter().any(|p| p.kind == Kind::Malformed),
        "the plan has no invalid record"
    );
    let landed = setup
        .produce(&setup.topics.input, &plan, plan.len(), Duration::ZERO)
        .await?;
    let cluster = setup.kafka.cluster()?;
    cluster.topic_error(
        &setup.topics.clean,
        RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED,
    )?;
    let first = Replica::start(&config, store.clone()).await?;
    let invalid: std::collections::HashSet<String> = plan
        .iter()
        .filter(|p| p.kind == Kind::Malformed)
        .map(|p| p.id.clone())
        .collect();
    let (brokers, audit) = (setup.brokers.clone(), setup.topics.audit.clone());
    let partitions = setup.topics.output_partitions;
    let every_invalid_out = tokio::task::spawn_blocking(move || {
        let mut reader = Reader::new(&brokers, &[(audit.as_str(), partitions)]);
        reader.read_until(
            BOUND,
            |r| invalid.iter().all(|id| r.ids.contains(id)),
            || {},
        )
    })
    .await?;
    assert!(
        every_invalid_out,
        "invalid records never reached audit while the clean topic refused: the worker stopped at a failed transaction"
    );
    assert!(
        !first.finished(),
        "the worker stopped on a failed delivery instead of aborting and going on"
    );
    cluster.topic_error(
        &setup.topics.clean,
        RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR,
    )?;
    let outputs = setup.read(&setup.topics, plan.len()).await?;
    stop(first).await?;
    let summary = check(&plan, &landed, &setup.topics, &outputs, Expect::Replays);
    assert_eq!(count(&summary, &["novel"]), summary.events);
    say(
        TEST,
        format!("{summary}; took {:?} (within {BOUND:?})", started.elapsed()),
    );
    Ok(())
}
