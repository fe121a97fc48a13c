//! Kafka faults injected on the mock cluster: deliveries refused for a while,
//! and every broker down mid-stream.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use idemgate::app::Replica;
use idemgate_testkit::check::{check, Expect};
use idemgate_testkit::workload::Planned;
use idemgate_testkit::{say, BOUND};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
use rdkafka::util::Timeout;
use rdkafka::ClientConfig;

use super::support::{bank, count, start_assigned, stop, wait_until, Options, Setup};

/// How many Produce requests the brokers refuse outright.
const REFUSED_REQUESTS: usize = 8;

/// Two faults at once, from the worker's first delivery on:
///
/// - the clean topic answers metadata with "topic authorization failed"
///   until the test lifts it, so every clean output fails in the client
///   while audit outputs go through;
/// - the brokers refuse the next `REFUSED_REQUESTS` Produce requests with
///   "message size too large", a permanent error the idempotent producer
///   does not retry, so outputs of both kinds fail (audit ones included).
///
/// Evidence that deliveries failed and claims were released: the counted
/// store saw releases that really deleted a claim (the worker releases only
/// the claim of a novel record whose output was not delivered, or at
/// shutdown and revoke, neither of which happens before the outputs are
/// read). Evidence that the broker errors were met: a probe produce after
/// the run succeeds, so the worker's Produce requests (the only ones made
/// since the errors were pushed) used every one of them up.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn produce_errors_on_the_clean_topic_release_claims_and_retry_without_loss(
) -> anyhow::Result<()> {
    const TEST: &str = "produce-errors";
    let started = Instant::now();
    let setup = Setup::new(TEST, 3);
    let config = setup.config(&Options::default());
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
    cluster.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE; REFUSED_REQUESTS],
    );
    let replica = Replica::start(&config, store.clone()).await?;
    wait_until("a clean delivery fails and its claim is released", || {
        store.released() > 0
    })
    .await;
    // Keep refusing for a while: the records retry (with a backoff) and
    // release their claims again each time.
    tokio::time::sleep(Duration::from_secs(1)).await;
    cluster.topic_error(
        &setup.topics.clean,
        RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR,
    )?;

    let outputs = setup.read(&setup.topics, plan.len()).await?;
    stop(replica).await?;
    let summary = check(&plan, &landed, &setup.topics, &outputs, Expect::Exact);
    let (novel, duplicate, conflict) = (
        count(&summary, &["novel"]),
        count(&summary, &["duplicate"]),
        count(&summary, &["conflict"]),
    );
    assert_eq!(summary.events, 300);
    assert_eq!(novel, 300);
    assert!(duplicate > 0 && conflict > 0, "{summary}");
    assert_eq!(novel + duplicate + conflict, plan.len());

    let released = store.released();
    assert!(released > 0, "no claim was released");
    // Retries back off: a failed round is not retried at once. A worker
    // spinning on the refused topic released 18 000 to 24 000 claims in this
    // window; one batch of at most 200 records retried with a doubling
    // backoff releases well under 2 000.
    assert!(
        released < 4_000,
        "{released} releases: failed deliveries are retried without a backoff"
    );

    let probe: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &setup.brokers)
        .create()?;
    let delivered = probe
        .send(
            FutureRecord::<[u8], [u8]>::to(&setup.topics.input).payload(b"probe"),
            Timeout::After(BOUND),
        )
        .await;
    assert!(
        delivered.is_ok(),
        "the brokers still refuse produce requests: the worker did not meet all \
         {REFUSED_REQUESTS} injected errors ({delivered:?})"
    );
    say(
        TEST,
        format!(
            "{summary}; {released} claims released, took {:?}",
            started.elapsed()
        ),
    );
    Ok(())
}

/// Every broker goes down mid-stream for three seconds while more records
/// are produced. The outage outlasts the group session, so the coordinator
/// drops the worker: when the brokers come back its assignment is lost
/// (and with it the commit of what it finished meanwhile) and its
/// partitions are fetched again from the last committed offsets. The
/// worker resumes: nothing lost, nothing doubled.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn all_brokers_down_then_up_the_worker_resumes() -> anyhow::Result<()> {
    const TEST: &str = "brokers-down";
    let started = Instant::now();
    let setup = Setup::new(TEST, 3);
    let config = setup.config(&Options {
        kafka: &[("session.timeout.ms", "2000")],
        max_records: 50,
        ..Options::default()
    });
    let store = setup.store(&config);
    let replica = start_assigned(&config, &store).await?;
    let revocations = replica.group().revocations.load(Ordering::SeqCst);

    let mut bank = bank(TEST);
    // The records after the outage also redeliver events from before it.
    let first = bank.phase(200, 0, 0);
    let rest = bank.phase(200, 80, 0);
    let mut landed = setup
        .produce(&setup.topics.input, &first, first.len(), Duration::ZERO)
        .await?;
    wait_until("the worker is mid-stream", || store.finalized() > 20).await;

    let cluster = setup.kafka.cluster()?;
    for broker in 1..=3 {
        cluster.broker_down(broker)?;
    }
    // Records sent during the outage wait in the producer's queue.
    let late = setup.produce(&setup.topics.input, &rest, rest.len(), Duration::ZERO);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let finalized_during_outage = store.finalized();
    for broker in 1..=3 {
        cluster.broker_up(broker)?;
    }
    landed.extend(late.await?);
    let plan: Vec<Planned> = first.into_iter().chain(rest).collect();

    let outputs = setup.read(&setup.topics, plan.len()).await?;
    assert!(
        replica.group().revocations.load(Ordering::SeqCst) > revocations && replica.assigned(),
        "the worker was not dropped from the group and taken back"
    );
    stop(replica).await?;
    let summary = check(&plan, &landed, &setup.topics, &outputs, Expect::Exact);
    assert_eq!(summary.events, 400);
    assert_eq!(
        count(&summary, &["novel", "duplicate", "conflict"]),
        plan.len()
    );
    assert!(
        store.finalized() > finalized_during_outage,
        "nothing was finalized after the brokers came back"
    );
    say(TEST, format!("{summary}, took {:?}", started.elapsed()));
    Ok(())
}
