//! Exactly once on the mock cluster, where a fault can be injected inside a
//! transaction (its transactions are not real: aborted records stay
//! readable and transactional offsets are not stored, so what is checked
//! here is the worker's side of the protocol).

use std::sync::Arc;
use std::time::{Duration, Instant};

use idemgate::app::Replica;
use idemgate_testkit::check::{check, Expect};
use idemgate_testkit::counting::CountingStore;
use idemgate_testkit::faulty::Fault;
use idemgate_testkit::kafka::Reader;
use idemgate_testkit::workload::Kind;
use idemgate_testkit::{say, BOUND};
use rdkafka::types::RDKafkaRespErr;

use super::support::{bank, count, start_assigned, stop, wait_until, Options, Setup};

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
    let faulty = setup.faulty_store(&config);
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

/// A test's set-up, and its exactly-once config: a transactional id of
/// its own, transactional calls bounded by 1 s.
fn one_second_calls(test: &str) -> (Setup, idemgate::config::Config) {
    let setup = Setup::new(test, 3);
    let transactional_id = format!("{}-txn", setup.group);
    let kafka = [("transactional.id", transactional_id.as_str())];
    let config = setup.config(&Options {
        top: EXACTLY_ONCE,
        kafka: &kafka,
        batch: "transaction_call_timeout = \"1s\"",
        ..Options::default()
    });
    (setup, config)
}

/// A replica under exactly once (call timeout 1 s) that has put a first
/// phase of records out, and the mock cluster answering its next EndTxn
/// requests with `errors`, while a second phase arrives.
struct EndTxnFault {
    setup: Setup,
    config: idemgate::config::Config,
    store: Arc<CountingStore>,
    replica: Replica,
    plan: Vec<idemgate_testkit::workload::Planned>,
    landed: std::collections::HashMap<String, idemgate_testkit::kafka::Landed>,
    metrics: String,
}

impl EndTxnFault {
    async fn start(test: &str, errors: &[RDKafkaRespErr]) -> anyhow::Result<EndTxnFault> {
        let (setup, config) = one_second_calls(test);
        let store = setup.store(&config);
        let replica = start_assigned(&config, &store).await?;
        let metrics = replica.metrics_address().to_string();
        let mut bank = bank(test);
        let first = bank.phase(150, 0, 10);
        let mut landed = setup
            .produce(&setup.topics.input, &first, first.len(), Duration::ZERO)
            .await?;
        setup.read(&setup.topics, first.len()).await?;
        setup
            .kafka
            .cluster()?
            .request_errors(rdkafka::types::RDKafkaApiKey::EndTxn, errors);
        let second = bank.phase(150, 0, 10);
        landed.extend(
            setup
                .produce(&setup.topics.input, &second, second.len(), Duration::ZERO)
                .await?,
        );
        Ok(EndTxnFault {
            plan: first.into_iter().chain(second).collect(),
            setup,
            config,
            store,
            replica,
            landed,
            metrics,
        })
    }

    /// The sum of a metric's series on the replica's `/metrics` (the
    /// process's recorder: other tests' series are in it too).
    fn metric(&self, name: &str) -> f64 {
        idemgate_testkit::process::scrape_metric(&self.metrics, name)
    }
}

/// The transaction coordinator answers every EndTxn with
/// CONCURRENT_TRANSACTIONS for a while (librdkafka retries it), so a commit
/// outlasts `batch.transaction_call_timeout` (1 s) and its outcome is
/// unknown. The guarantee: the worker neither stops nor guesses. It builds
/// the lane's producer again (which ends the transaction), reads the
/// outcome back from the committed offsets (this mock stores no
/// transactional offsets: aborted, so the outputs go again), counts it
/// (`idemgate_transactions_timed_out_total`) and goes on; every input has
/// an output and every event reaches clean through one input, nothing
/// lost. (The mock keeps an aborted transaction's records readable: an
/// input may show two outputs here; e2e::txn_timeout checks one output
/// for a read_committed reader of Apache Kafka.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_commit_that_times_out_is_resolved_by_a_new_producer_and_the_worker_goes_on(
) -> anyhow::Result<()> {
    const TEST: &str = "eos-commit-timeout";
    const TIMED_OUT: &str = "idemgate_transactions_timed_out_total";
    // About 3 s of retries (librdkafka backs off 100 ms or more between
    // them), against a call timeout of 1 s.
    let fault = EndTxnFault::start(
        TEST,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_CONCURRENT_TRANSACTIONS; 30],
    )
    .await?;
    wait_until("a transactional call times out and is resolved", || {
        fault.metric(TIMED_OUT) >= 1.0
    })
    .await;
    assert!(
        !fault.replica.finished(),
        "the worker stopped on a commit that timed out instead of resolving it"
    );
    let outputs = fault
        .setup
        .read(&fault.setup.topics, fault.plan.len())
        .await?;
    assert!(
        !fault.replica.finished(),
        "the worker stopped after the timeout"
    );
    let resolved = fault.metric(TIMED_OUT);
    stop(fault.replica).await?;
    // Replays: the aborted transactions' outputs stay readable on the
    // mock, so an input may show more than one output; every event still
    // reaches clean through one input.
    let summary = check(
        &fault.plan,
        &fault.landed,
        &fault.setup.topics,
        &outputs,
        Expect::Replays,
    );
    say(
        TEST,
        format!("{summary}; {resolved} transactional calls timed out and were resolved"),
    );
    Ok(())
}

/// The coordinator answers one EndTxn (a commit) with an error librdkafka
/// leaves abortable (UNKNOWN_SERVER_ERROR, code -1). The guarantee: the worker
/// aborts that transaction and sends its outputs again in the next one,
/// without stopping (`idemgate_transactions_aborted_total{reason="commit"}`);
/// every input has an output and every event reaches clean through one
/// input, nothing lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_commit_the_brokers_fail_abortably_is_aborted_and_the_worker_goes_on(
) -> anyhow::Result<()> {
    const TEST: &str = "eos-commit-abortable";
    let aborted = |fault: &EndTxnFault| {
        fault.metric("idemgate_transactions_aborted_total{reason=\"commit\"}")
    };
    let fault = EndTxnFault::start(TEST, &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN]).await?;
    wait_until("a commit fails abortably and is aborted", || {
        aborted(&fault) >= 1.0
    })
    .await;
    let outputs = fault
        .setup
        .read(&fault.setup.topics, fault.plan.len())
        .await?;
    assert!(
        !fault.replica.finished(),
        "the worker stopped on an abortable commit failure"
    );
    stop(fault.replica).await?;
    let summary = check(
        &fault.plan,
        &fault.landed,
        &fault.setup.topics,
        &outputs,
        Expect::Replays,
    );
    say(TEST, format!("{summary}"));
    Ok(())
}

/// The coordinator answers an EndTxn (a commit) with PRODUCER_FENCED:
/// fatal. The guarantee: the worker ends with the error (it neither
/// retries nor guesses), and a replica started in its place (the same
/// transactional id) gives every input an output, every event through one
/// input in clean, nothing lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fenced_commit_ends_the_worker_and_its_restart_loses_nothing() -> anyhow::Result<()> {
    const TEST: &str = "eos-commit-fenced";
    let fault =
        EndTxnFault::start(TEST, &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_PRODUCER_FENCED]).await?;
    wait_until("the fenced worker ends", || fault.replica.finished()).await;
    let ended = stop(fault.replica).await;
    let error = format!(
        "{:#}",
        ended.expect_err("the fenced worker ended without an error")
    );
    assert!(error.contains("committing the transaction"), "{error}");
    let restarted = start_assigned(&fault.config, &fault.store).await?;
    let outputs = fault
        .setup
        .read(&fault.setup.topics, fault.plan.len())
        .await?;
    stop(restarted).await?;
    let summary = check(
        &fault.plan,
        &fault.landed,
        &fault.setup.topics,
        &outputs,
        Expect::Replays,
    );
    say(
        TEST,
        format!("the worker ended with: {error}; then {summary}"),
    );
    Ok(())
}

/// The transaction coordinator answers every InitProducerId with
/// COORDINATOR_LOAD_IN_PROGRESS for a while when the replica starts (as a
/// broker just restarted does while it loads its transaction state), so
/// the replica's first `init_transactions` outlasts
/// `batch.transaction_call_timeout` (1 s). The guarantee: the replica
/// tries again within its bound instead of exiting, and once the
/// coordinator answers it decides every record: every input exactly one
/// output, every event exactly once in clean, nothing lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_transaction_coordinator_still_loading_at_start_is_waited_for() -> anyhow::Result<()> {
    const TEST: &str = "eos-init-loading";
    let (setup, config) = one_second_calls(TEST);
    let store = setup.store(&config);
    // librdkafka asks again itself, about every 500 ms: six errors hold
    // the first lane's producer ID for 2 to 3 s, two or three calls of 1 s
    // (the replica makes four at most).
    setup.kafka.cluster()?.request_errors(
        rdkafka::types::RDKafkaApiKey::InitProducerId,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS; 6],
    );
    let started = Instant::now();
    let replica = start_assigned(&config, &store).await?;
    let plan = bank(TEST).phase(200, 0, 10);
    let landed = setup
        .produce(&setup.topics.input, &plan, plan.len(), Duration::ZERO)
        .await?;
    let outputs = setup.read(&setup.topics, plan.len()).await?;
    let took = started.elapsed();
    assert!(!replica.finished(), "the worker stopped after its start-up");
    stop(replica).await?;
    let summary = check(&plan, &landed, &setup.topics, &outputs, Expect::Exact);
    say(
        TEST,
        format!("{summary}; every output read {took:?} after the replica's start"),
    );
    Ok(())
}
