//! Kafka faults injected on the mock cluster: deliveries refused for a while,
//! and every broker down mid-stream.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
use rdkafka::util::Timeout;
use rdkafka::ClientConfig;

use super::support::{
    bank_workload, check_exactly_once, logs, produce, wait_until, Options, Replica, Setup, LIMIT,
};

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
async fn produce_errors_on_the_clean_topic_release_claims_and_retry_without_loss() {
    logs();
    let started = Instant::now();
    let setup = Setup::new("produce-errors", 3);
    let config = setup.config(&Options::default());
    let store = setup.store(&config);
    let sent = produce(
        &setup.brokers,
        &setup.topics.raw,
        &bank_workload(300, 11),
        &[],
    )
    .await;

    let cluster = setup.kafka.cluster().unwrap();
    cluster
        .topic_error(
            &setup.topics.clean,
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED,
        )
        .unwrap();
    cluster.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE; REFUSED_REQUESTS],
    );
    let replica = Replica::start(&config, store.clone()).await;
    wait_until("a clean delivery fails and its claim is released", || {
        store.released() > 0
    })
    .await;
    // Keep refusing for a while: the records retry (with a backoff) and
    // release their claims again each time.
    tokio::time::sleep(Duration::from_secs(1)).await;
    cluster
        .topic_error(
            &setup.topics.clean,
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR,
        )
        .unwrap();

    let outputs = setup.read(sent.len()).await;
    replica.stop().await;
    let counts = check_exactly_once(&setup.topics, &sent, &outputs);
    assert_eq!(counts.events, 300);
    assert_eq!(counts.novel, 300);
    assert!(counts.duplicate > 0 && counts.conflict > 0, "{counts:?}");
    assert_eq!(
        counts.novel + counts.duplicate + counts.conflict,
        sent.len()
    );

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
        .create()
        .unwrap();
    let delivered = probe
        .send(
            FutureRecord::<[u8], [u8]>::to(&setup.topics.raw).payload(b"probe"),
            Timeout::After(LIMIT),
        )
        .await;
    assert!(
        delivered.is_ok(),
        "the brokers still refuse produce requests: the worker did not meet all \
         {REFUSED_REQUESTS} injected errors ({delivered:?})"
    );
    eprintln!(
        "{counts:?}, {released} claims released, took {:?}",
        started.elapsed()
    );
}

/// Every broker goes down mid-stream for three seconds while more records
/// are produced. The outage outlasts the group session, so the coordinator
/// drops the worker: when the brokers come back its assignment is lost
/// (and with it the commit of what it finished meanwhile) and its
/// partitions are fetched again from the last committed offsets. The
/// worker resumes: nothing lost, nothing doubled.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn all_brokers_down_then_up_the_worker_resumes() {
    logs();
    let started = Instant::now();
    let setup = Setup::new("brokers-down", 3);
    let config = setup.config(&Options {
        kafka: &[("session.timeout.ms", "2000")],
        max_records: 50,
        ..Options::default()
    });
    let store = setup.store(&config);
    let replica = Replica::start(&config, store.clone()).await;
    replica
        .wait_assigned("the worker gets its partitions")
        .await;
    let revocations = replica.group.revocations.load(Ordering::SeqCst);

    let workload = bank_workload(400, 22);
    let (first, rest) = workload.split_at(workload.len() / 2);
    let mut sent = produce(&setup.brokers, &setup.topics.raw, first, &[]).await;
    wait_until("the worker is mid-stream", || store.finalized() > 20).await;

    let cluster = setup.kafka.cluster().unwrap();
    for broker in 1..=3 {
        cluster.broker_down(broker).unwrap();
    }
    // Records sent during the outage wait in the producer's queue.
    let brokers = setup.brokers.clone();
    let raw = setup.topics.raw.clone();
    let rest = rest.to_vec();
    let late = tokio::spawn(async move { produce(&brokers, &raw, &rest, &[]).await });
    tokio::time::sleep(Duration::from_secs(3)).await;
    let finalized_during_outage = store.finalized();
    for broker in 1..=3 {
        cluster.broker_up(broker).unwrap();
    }
    sent.extend(late.await.expect("the late producer panicked"));

    let outputs = setup.read(sent.len()).await;
    assert!(
        replica.group.revocations.load(Ordering::SeqCst) > revocations && replica.assigned(),
        "the worker was not dropped from the group and taken back"
    );
    replica.stop().await;
    let counts = check_exactly_once(&setup.topics, &sent, &outputs);
    assert_eq!(counts.events, 400);
    assert_eq!(
        counts.novel + counts.duplicate + counts.conflict,
        sent.len()
    );
    assert!(
        store.finalized() > finalized_during_outage,
        "nothing was finalized after the brokers came back"
    );
    eprintln!("{counts:?}, took {:?}", started.elapsed());
}
