//! Kafka faults injected on the mock cluster: deliveries refused for a while,
//! and every broker down mid-stream.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use idemgate::app::Replica;
use idemgate::demo::mock::MockKafka;
use idemgate_testkit::check::{check, Expect};
use idemgate_testkit::kafka::Reader;
use idemgate_testkit::workload::Planned;
use idemgate_testkit::{say, unique, BOUND};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::future_producer::OwnedDeliveryResult;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
use rdkafka::util::Timeout;
use rdkafka::{ClientConfig, Offset};

use super::support::{
    bank, count, start_assigned, stop, wait_until, Options, Setup, ONE_PRODUCE_IN_FLIGHT,
};

/// How many Produce requests the brokers answer with a timeout.
const TIMED_OUT_REQUESTS: usize = 8;

/// Two faults at once, from the worker's first delivery on:
///
/// - the clean topic answers metadata with "topic authorization failed"
///   until the test lifts it, so every clean output fails in the client
///   while audit outputs go through;
/// - the brokers answer the next `TIMED_OUT_REQUESTS` Produce requests with
///   "request timed out": outputs that may or may not have landed.
///
/// The guarantee: for every distinct event, exactly one copy in clean and
/// nothing lost; and no claim is released for a failed delivery (it may
/// have been persisted: the record keeps its claim and is produced again,
/// docs/design.md §4.5). Evidence that clean deliveries failed: while the
/// topic refuses, no output arrives at all (copies wait on their originals'
/// claims); once it is lifted, every input gets its output. Evidence that
/// the broker errors were met: a probe produce after the run succeeds, so
/// the worker's Produce requests (the only ones made since the errors were
/// pushed) used every one of them up. The worker sends one Produce request
/// at a time per broker (`ONE_PRODUCE_IN_FLIGHT`, see the next test).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failed_deliveries_keep_their_claims_and_are_produced_again_without_loss(
) -> anyhow::Result<()> {
    const TEST: &str = "produce-errors";
    let started = Instant::now();
    let setup = Setup::new(TEST, 3);
    let config = setup.config(&Options {
        kafka: &[ONE_PRODUCE_IN_FLIGHT],
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
    cluster.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT; TIMED_OUT_REQUESTS],
    );
    let replica = Replica::start(&config, store.clone()).await?;
    // While the clean topic refuses, nothing reaches it; and nothing can be
    // suppressed either, since every copy waits on an original whose output
    // is not delivered yet (a claim is never settled by a failed attempt).
    let (brokers, topics) = (setup.brokers.clone(), setup.topics.clone());
    let while_refused = tokio::task::spawn_blocking(move || {
        let mut reader = Reader::new(&brokers, &topics.outputs());
        reader.read_for(Duration::from_secs(3));
        reader.records.len()
    })
    .await?;
    assert_eq!(while_refused, 0, "outputs while the clean topic refused");
    cluster.topic_error(
        &setup.topics.clean,
        RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR,
    )?;

    let outputs = setup.read_landed(&setup.topics, &landed).await?;
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
    assert_eq!(
        store.released(),
        0,
        "a claim was released after a delivery that may have landed"
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
        "the brokers still time out produce requests: the worker did not meet all \
         {TIMED_OUT_REQUESTS} injected errors ({delivered:?})"
    );
    say(
        TEST,
        format!("{summary}; no claim released, took {:?}", started.elapsed()),
    );
    Ok(())
}

/// Why `ONE_PRODUCE_IN_FLIGHT`: on the mock cluster, a Produce request
/// answered with an injected error while the next request of its partition
/// is in flight loses its record behind a delivery report of success. The
/// brokers answer 300 ms late, so `a` and `b` go as two requests before
/// either is answered; the first is answered "request timed out" and
/// written nowhere, the second is written (the mock checks the sequence
/// numbers of a transactional producer only), and librdkafka takes its
/// acknowledgement to mean `a` landed too: a report without an offset. One
/// request in flight, and `a` is sent again before `b` goes: both land.
/// If the mock ever refuses the out-of-order batch, the first half fails
/// and the setting can go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mock_acknowledges_a_failed_produce_unless_one_request_is_in_flight(
) -> anyhow::Result<()> {
    let (a, log) = timed_out_behind_a_later_request("5").await?;
    assert_eq!(a, Offset::Invalid, "a's delivery report, five in flight");
    assert_eq!(log, ["warm-up", "b"], "the log, five in flight");

    let (a, log) = timed_out_behind_a_later_request(ONE_PRODUCE_IN_FLIGHT.1).await?;
    assert_eq!(a, Offset::Offset(1), "a's delivery report, one in flight");
    assert_eq!(log, ["warm-up", "a", "b"], "the log, one in flight");
    Ok(())
}

/// On a mock cluster of its own, an idempotent producer with `in_flight`
/// requests in flight per connection and one record per request sends
/// `warm-up`; then, the brokers answering 300 ms late and the next Produce
/// request with "request timed out", `a` and `b`. Both are reported
/// delivered; returns the offset `a`'s report gave and the payloads the
/// partition holds.
async fn timed_out_behind_a_later_request(
    in_flight: &str,
) -> anyhow::Result<(Offset, Vec<String>)> {
    let kafka = MockKafka::start(1, 100)?;
    let brokers = kafka.bootstrap_servers()?;
    let topic = unique("in-flight");
    kafka.create_topic(&topic, 1)?;
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "0")
        .set("batch.num.messages", "1")
        .set(ONE_PRODUCE_IN_FLIGHT.0, in_flight)
        .create()?;
    let send = |payload: &'static str| {
        producer
            .send_result(
                FutureRecord::<[u8], [u8]>::to(&topic)
                    .partition(0)
                    .payload(payload.as_bytes()),
            )
            .map_err(|(error, _)| error)
    };
    let delivered = |result: OwnedDeliveryResult| result.map_err(|(error, _)| error);
    delivered(send("warm-up")?.await?)?;

    let cluster = kafka.cluster()?;
    cluster.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT],
    );
    cluster.broker_round_trip_time(-1, Duration::from_millis(300))?;
    let (a, b) = (send("a")?, send("b")?);
    let a = delivered(a.await?)?;
    delivered(b.await?)?;
    cluster.broker_round_trip_time(-1, Duration::ZERO)?;

    let (brokers, topic) = (brokers.clone(), topic.clone());
    let log = tokio::task::spawn_blocking(move || {
        let (_, end) = ClientConfig::new()
            .set("bootstrap.servers", &brokers)
            .create::<BaseConsumer>()
            .expect("a consumer")
            .fetch_watermarks(&topic, 0, BOUND)
            .expect("the partition's watermarks");
        let mut reader = Reader::new(&brokers, &[(&topic, 1)]);
        let read = reader.read_until(BOUND, |r| r.records.len() as i64 >= end, || {});
        assert!(
            read,
            "{topic}: fewer than {end} records read within {BOUND:?}"
        );
        reader
            .records
            .iter()
            .map(|r| String::from_utf8_lossy(r.payload.as_deref().unwrap_or_default()).into_owned())
            .collect::<Vec<_>>()
    })
    .await?;
    Ok((Offset::from_raw(a.offset), log))
}

/// Every broker goes down mid-stream for three seconds while more records
/// are produced. The outage outlasts the group session, so the coordinator
/// drops the worker: when the brokers come back its assignment is lost
/// (and with it the commit of what it finished meanwhile) and its
/// partitions are fetched again from the last committed offsets. The
/// worker resumes: nothing lost, no event through two inputs; what the
/// lost commit covered may be decided twice (the same input's output
/// again).
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
    wait_until("the worker is mid-stream", || store.settled() > 20).await;

    let cluster = setup.kafka.cluster()?;
    for broker in 1..=3 {
        cluster.broker_down(broker)?;
    }
    // Records sent during the outage wait in the producer's queue. The
    // outage is three seconds of the brokers' and librdkafka's real time
    // (their timers do not run on the worker's clock), longer than the
    // 2 s session: a wait on the brokers.
    let late = setup.produce(&setup.topics.input, &rest, rest.len(), Duration::ZERO);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let finalized_during_outage = store.settled();
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
    // The commit of what it finished during the outage is lost with the
    // assignment: records finished above its last successful commit (behind
    // a waiting one, or not yet published) are decided again, so an input
    // may have two outputs with one decision (docs/design.md §7, crashes);
    // never an event through two inputs. Under load this happens in about
    // half the runs.
    let summary = check(&plan, &landed, &setup.topics, &outputs, Expect::Replays);
    assert_eq!(summary.events, 400);
    assert_eq!(
        count(&summary, &["novel", "duplicate", "conflict"]),
        plan.len() + (summary.outputs - summary.inputs),
    );
    assert!(
        store.settled() > finalized_during_outage,
        "nothing was finalized after the brokers came back"
    );
    say(TEST, format!("{summary}, took {:?}", started.elapsed()));
    Ok(())
}
