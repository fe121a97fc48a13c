//! The memory store on event time (`store.clock = "event"`,
//! docs/design.md §6): every claim is made at its record's own Kafka
//! timestamp, so partitions run at points of the clock far apart. Here
//! partition 0 carries records stamped ten days before those of partition
//! 1, and the copies of one event sit in both.

use std::time::{Duration, Instant};

use idemgate::config::StoreConfig;
use idemgate::store::memory::MemoryStore;
use idemgate_testkit::check::{check, Expect};
use idemgate_testkit::counting::CountingStore;
use idemgate_testkit::say;
use idemgate_testkit::workload::Planned;
use std::sync::Arc;

use super::support::{bank, start_assigned, stop, Options, Setup};

const DAY_MS: i64 = 24 * 3600 * 1000;
/// 2024-03-01T00:00:00Z: partition 0's first record.
const START_MS: i64 = 1_709_251_200_000;
/// How far ahead of partition 0 partition 1 runs.
const GAP_MS: i64 = 10 * DAY_MS;

/// The bank stream with a tier-1 TTL just past the gap: a copy in
/// partition 1 meets a claim made ten days earlier on its clock, while
/// it lives; a claim made on any other clock (the wall's, 2026 and on)
/// would have lapsed for one side or the other.
const STREAM: &str = r#"profile = "bank-txn"
mode = "exact"
ttl = { explicit = "11d" }
fail_mode = "closed""#;

/// Puts every record in partition 0 or 1 (by its id, so copies of one
/// event land in both), stamped on that partition's clock: a second per
/// record, partition 1 ten days ahead.
fn on_two_clocks(plan: Vec<Planned>, first: usize) -> Vec<Planned> {
    plan.into_iter()
        .enumerate()
        .map(|(n, mut record)| {
            let number: u64 = record
                .id
                .rsplit('-')
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            let partition = i32::from(number.wrapping_mul(0x9e37_79b9) >> 7 & 1 == 1);
            record.partition = Some(partition);
            let at = START_MS + (first + n) as i64 * 1000 + i64::from(partition) * GAP_MS;
            record.stamped(at)
        })
        .collect()
}

/// The guarantee: for every distinct event, exactly one copy in clean and
/// nothing lost (Expect::Exact), though its copies are claimed on clocks
/// ten days apart, in both orders (a copy stamped before its holder's
/// claim, and one stamped ten days after it). Evidence that the store ran
/// on event time: the claims of partition 0 were made at times ten days
/// before those of partition 1, and every output kept its input's
/// timestamp.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn partitions_ten_days_apart_on_event_time_let_every_event_through_once() -> anyhow::Result<()>
{
    const TEST: &str = "event-time";
    let began = Instant::now();
    let setup = Setup::new(TEST, 2);
    let mut config = setup.config(&Options {
        stream: STREAM,
        max_records: 40,
        ..Options::default()
    });
    config.store = StoreConfig::Memory { event_time: true };
    let streams = config.streams.iter().map(|s| s.spec.clone()).collect();
    let store = Arc::new(CountingStore::new(Arc::new(MemoryStore::on_event_time(
        streams,
    ))));
    let replica = start_assigned(&config, &store).await?;
    let mut bank = bank(TEST);
    bank.copies_share_key = false;
    let first = on_two_clocks(bank.phase(150, 0, 6), 0);
    let later = on_two_clocks(bank.phase(50, 80, 4), first.len());
    let mut landed = setup
        .produce(&setup.topics.input, &first, 25, Duration::from_millis(20))
        .await?;
    landed.extend(
        setup
            .produce(&setup.topics.input, &later, 25, Duration::from_millis(20))
            .await?,
    );
    let plan: Vec<Planned> = first.into_iter().chain(later).collect();
    let outputs = setup.read(&setup.topics, plan.len()).await?;
    stop(replica).await?;

    let summary = check(&plan, &landed, &setup.topics, &outputs, Expect::Exact);
    say(TEST, &summary);
    assert_eq!(summary.events, bank.events());
    let both = plan
        .iter()
        .filter_map(|p| p.event)
        .filter(|e| {
            let parts: std::collections::BTreeSet<i32> = plan
                .iter()
                .filter(|p| p.event == Some(*e))
                .filter_map(|p| p.partition)
                .collect();
            parts.len() == 2
        })
        .collect::<std::collections::BTreeSet<usize>>()
        .len();
    assert!(
        both > 20,
        "only {both} events have copies in both partitions"
    );

    let stamps: std::collections::HashMap<&str, i64> = plan
        .iter()
        .map(|p| (p.id.as_str(), p.timestamp().expect("stamped")))
        .collect();
    for out in &outputs {
        assert_eq!(
            out.timestamp,
            Some(stamps[out.test_id()]),
            "{}'s output lost its input's timestamp",
            out.test_id()
        );
    }
    let times = store.claim_times();
    say(TEST, format!("claim times by partition (ms): {times:?}"));
    let (p0, p1) = (times[&0], times[&1]);
    let last_planned = START_MS + plan.len() as i64 * 1000;
    assert!(
        p0.0 >= START_MS && p0.1 < last_planned,
        "partition 0 claimed off its records' clock: {p0:?}"
    );
    assert!(
        p1.0 >= START_MS + GAP_MS && p1.1 < last_planned + GAP_MS,
        "partition 1 claimed off its records' clock: {p1:?}"
    );
    say(
        TEST,
        format!(
            "{both} events in both partitions; took {:?}; {:?}",
            began.elapsed(),
            store.tally()
        ),
    );
    Ok(())
}
