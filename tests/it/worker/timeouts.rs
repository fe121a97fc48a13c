//! Delivery timeouts of outputs the broker did persist (docs/design.md
//! §4.5): the mock brokers answer late (a round-trip time above the
//! producer's `message.timeout.ms`), so the client reports a timeout for an
//! output that is in the log. The record keeps its claim and is produced
//! again; the same input may then be in clean twice, never a second input
//! of one event. A refusal that follows such a timeout for the same record
//! is no proof that nothing landed: the claim is still kept.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use idemgate::decision::REASON;
use idemgate_testkit::check::{check, Expect};
use idemgate_testkit::kafka::{Out, Reader};
use idemgate_testkit::workload::{Kind, Planned};
use idemgate_testkit::{say, BOUND};
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

use super::support::{bank, start_assigned, stop, Options, Setup};

/// The producer's delivery timeout in these tests.
const MESSAGE_TIMEOUT: &str = "1000";
/// Every broker's round-trip time while the outputs time out: well above
/// the delivery timeout, well below the 6 s session timeout.
const SLOW: Duration = Duration::from_millis(2_500);

fn options() -> Options<'static> {
    Options {
        kafka: &[("message.timeout.ms", MESSAGE_TIMEOUT)],
        max_records: 50,
        ..Options::default()
    }
}

/// Reads `topics`' outputs (from the start) on a blocking thread until
/// every id in `ids` has one in clean, within `BOUND`.
async fn wait_in_clean(setup: &Setup, ids: HashSet<String>) -> Vec<Out> {
    let (brokers, topics) = (setup.brokers.clone(), setup.topics.clone());
    tokio::task::spawn_blocking(move || {
        let mut reader = Reader::new(
            &brokers,
            &[(topics.clean.as_str(), topics.output_partitions)],
        );
        let all = reader.read_until(
            BOUND,
            |r| {
                let seen: HashSet<&str> = r.records.iter().map(Out::test_id).collect();
                ids.iter().all(|id| seen.contains(id.as_str()))
            },
            || {},
        );
        assert!(all, "not every original landed in clean within {BOUND:?}");
        reader.records
    })
    .await
    .expect("reader")
}

/// Groups of originals the test may need before a retry meets the refusal.
const GROUPS: usize = 6;
/// How long an armed refusal waits for a retry.
const ARMED: Duration = Duration::from_secs(6);

/// Whether an output refused for its size is in the audit topic within
/// `bound`.
async fn refused_within(setup: &Setup, bound: Duration) -> bool {
    let (brokers, topics) = (setup.brokers.clone(), setup.topics.clone());
    tokio::task::spawn_blocking(move || {
        let mut reader = Reader::new(
            &brokers,
            &[(topics.audit.as_str(), topics.output_partitions)],
        );
        reader.read_until(
            bound,
            |r| {
                r.records.iter().any(|o| {
                    o.header(REASON)
                        .is_some_and(|r| r.starts_with("undeliverable"))
                })
            },
            || {},
        )
    })
    .await
    .expect("reader")
}

fn originals(plan: &[Planned]) -> HashSet<String> {
    plan.iter()
        .filter(|p| p.kind == Kind::Original)
        .map(|p| p.id.clone())
        .collect()
}

/// The guarantee: for every distinct event, exactly one copy in clean and
/// nothing lost; an input may be in clean more than once (its timed-out
/// attempts landed), every event through one input only (Expect::Replays),
/// and no claim is ever released. Evidence that the timeouts hit: every
/// original was in clean while its delivery reports could not have come
/// yet, and inputs have more than one output.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn delivery_timeouts_of_persisted_outputs_keep_their_claims_and_let_no_event_through_twice(
) -> anyhow::Result<()> {
    const TEST: &str = "timeouts-persisted";
    let began = Instant::now();
    let setup = Setup::new(TEST, 3);
    let config = setup.config(&options());
    let store = setup.store(&config);
    let replica = start_assigned(&config, &store).await?;
    let cluster = setup.kafka.cluster()?;
    let mut bank = bank(TEST);
    let plan = bank.phase(120, 0, 0);
    cluster.broker_round_trip_time(-1, SLOW)?;
    let slow_from = Instant::now();
    let mut landed = setup
        .produce(&setup.topics.input, &plan, plan.len(), Duration::ZERO)
        .await?;
    // Every original in clean, and a while more: the first attempts have
    // all timed out by then, and their retries landed and timed out too.
    wait_in_clean(&setup, originals(&plan)).await;
    say(
        TEST,
        format!(
            "every original in clean {:?} into the slow spell",
            slow_from.elapsed()
        ),
    );
    // A wait on the brokers, not on the worker's clock: librdkafka times
    // its deliveries out on its own clock, so the slow spell lasts two
    // slow round trips of real time for the retries to time out too.
    tokio::time::sleep(SLOW * 2).await;
    cluster.broker_round_trip_time(-1, Duration::ZERO)?;
    say(TEST, format!("brokers slow for {:?}", slow_from.elapsed()));
    // Later copies of the same events meet the claims the timeouts kept.
    let later = bank.phase(20, 120, 0);
    landed.extend(
        setup
            .produce(&setup.topics.input, &later, later.len(), Duration::ZERO)
            .await?,
    );
    let plan: Vec<Planned> = plan.into_iter().chain(later).collect();
    let outputs = setup.read(&setup.topics, plan.len()).await?;
    stop(replica).await?;

    let summary = check(&plan, &landed, &setup.topics, &outputs, Expect::Replays);
    say(TEST, &summary);
    assert_eq!(summary.events, bank.events());
    assert_eq!(summary.events_through_two_inputs, 0, "{summary}");
    assert!(
        summary.replayed_inputs > 0,
        "no output was written twice: the timeouts never hit ({summary})"
    );
    assert_eq!(
        store.released(),
        0,
        "a claim was released after a timeout (its output may have landed)"
    );
    say(
        TEST,
        format!("took {:?}; {:?}", began.elapsed(), store.tally()),
    );
    Ok(())
}

/// The guarantee: for every distinct event, exactly one input in clean and
/// nothing lost, when a record's delivery timed out (and landed) and its
/// next attempt was then refused for its size: the refusal proves nothing
/// about the attempt before, so its claim is kept (never released), the
/// record goes to audit without its payload as well, and every later copy
/// of its event is a duplicate naming it. Evidence: records refused for
/// their size whose earlier attempts are in clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_size_refusal_after_a_timeout_keeps_the_claim_and_lets_no_copy_through(
) -> anyhow::Result<()> {
    const TEST: &str = "timeout-then-refused";
    let began = Instant::now();
    let setup = Setup::new(TEST, 2);
    let config = setup.config(&options());
    let store = setup.store(&config);
    let replica = start_assigned(&config, &store).await?;
    let cluster = setup.kafka.cluster()?;
    let mut bank = bank(TEST);
    // No malformed records, and originals alone while the outputs time
    // out: then nothing but their clean retries is produced, so a refusal
    // meets a clean retry of a record whose earlier attempt landed. (With
    // copies in the input, a holder whose report came through makes its
    // copies duplicates, and the refused request may carry only those.)
    //
    // Whether the worker still has a retry to send once every first
    // attempt has landed is up to librdkafka (an attempt in flight is
    // acknowledged late, one that waited in its queue times out), so the
    // refusal is armed after each group of originals has landed, and a
    // new group comes while none has met it: every group's attempts have
    // all landed before the refusal is armed, so it meets a retry or
    // nothing.
    let mut plan: Vec<Planned> = Vec::new();
    let mut landed = std::collections::HashMap::new();
    let mut copies: Vec<Planned> = Vec::new();
    let mut met = false;
    for group in 0..GROUPS {
        let phase = bank.phase(70, if group == 0 { 0 } else { 30 }, 0);
        let (firsts, rest): (Vec<Planned>, Vec<Planned>) = phase
            .iter()
            .cloned()
            .partition(|p| p.kind == Kind::Original);
        plan.extend(phase);
        copies.extend(rest);
        cluster.broker_round_trip_time(-1, SLOW)?;
        landed.extend(
            setup
                .produce(&setup.topics.input, &firsts, firsts.len(), Duration::ZERO)
                .await?,
        );
        wait_in_clean(&setup, originals(&firsts)).await;
        // The next Produce request of any client (the test's producer is
        // done) is refused for its size; then the brokers answer at once,
        // and the worker sends what timed out again.
        cluster.request_errors(
            RDKafkaApiKey::Produce,
            &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE],
        );
        cluster.broker_round_trip_time(-1, Duration::ZERO)?;
        met = refused_within(&setup, ARMED).await;
        if !met {
            // Nothing to retry was left: take the refusal back before the
            // next group's first attempts could meet it.
            cluster.clear_request_errors(RDKafkaApiKey::Produce);
            met = refused_within(&setup, Duration::from_millis(500)).await;
        }
        say(
            TEST,
            format!("group {group}: the refusal met a retry: {met}"),
        );
        if met {
            break;
        }
    }
    assert!(met, "no retry met the refusal in {GROUPS} groups");
    // The copies come now: every one meets its original's kept claim.
    landed.extend(
        setup
            .produce(&setup.topics.input, &copies, copies.len(), Duration::ZERO)
            .await?,
    );
    let outputs = setup.read(&setup.topics, plan.len()).await?;
    stop(replica).await?;

    let refused: Vec<&Out> = outputs
        .iter()
        .filter(|o| {
            o.header(REASON)
                .is_some_and(|r| r.starts_with("undeliverable"))
        })
        .collect();
    let in_clean: HashSet<&str> = outputs
        .iter()
        .filter(|o| o.topic == setup.topics.clean)
        .map(Out::test_id)
        .collect();
    say(
        TEST,
        format!(
            "{} refused for their size: {:?}",
            refused.len(),
            refused.iter().map(|o| o.test_id()).collect::<Vec<_>>()
        ),
    );
    // The refused request may also have carried copies decided meanwhile
    // (a holder whose report came through): they have no claim of their
    // own and go to audit bare, as any refused output (docs/design.md §10).
    // The case under test is the originals' retries among them.
    let original = |id: &str| plan.iter().any(|p| p.id == id && p.kind == Kind::Original);
    let (retries, copies): (Vec<&Out>, Vec<&Out>) =
        refused.iter().partition(|o| original(o.test_id()));
    assert!(
        !retries.is_empty(),
        "no original's retry was refused for its size: not the case under test"
    );
    for out in &refused {
        assert_eq!(out.topic, setup.topics.audit);
    }
    for out in &retries {
        assert!(
            in_clean.contains(out.test_id()),
            "{} was refused without an earlier attempt in clean: its first attempt was refused",
            out.test_id()
        );
    }
    let released = store.released();
    say(
        TEST,
        format!(
            "{} retries and {} copies refused; claims released: {released}; {:?}",
            retries.len(),
            copies.len(),
            store.tally()
        ),
    );
    // The retries' audit outputs aside, what is left is judged as a
    // replay: each refused retry's landed attempts are its clean output.
    // The refused copies' bare audit outputs are their decisions: they
    // are left out of the judgement.
    let retry_ids: HashSet<&str> = retries.iter().map(|o| o.test_id()).collect();
    let copy_ids: HashSet<&str> = copies.iter().map(|o| o.test_id()).collect();
    let judged: Vec<Out> = outputs
        .iter()
        .filter(|o| !(o.topic == setup.topics.audit && retry_ids.contains(o.test_id())))
        .filter(|o| !copy_ids.contains(o.test_id()))
        .cloned()
        .collect();
    let plan: Vec<Planned> = plan
        .into_iter()
        .filter(|p| !copy_ids.contains(p.id.as_str()))
        .collect();
    let summary = check(&plan, &landed, &setup.topics, &judged, Expect::Replays);
    say(TEST, &summary);
    assert_eq!(summary.events, bank.events());
    assert_eq!(
        released, 0,
        "a claim was released after a refusal that followed a timeout (the earlier attempt landed)"
    );
    say(
        TEST,
        format!("took {:?}; {:?}", began.elapsed(), store.tally()),
    );
    Ok(())
}
