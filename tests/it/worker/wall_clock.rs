//! The worker's injected clock (`idemgate::clock`): a test says "nine
//! hours later" by moving the replica's clock, not by sleeping. The memory
//! store on wall time ages claims on the times the worker passes it, so
//! the bank stream's one-hour TTL is crossed in no time at all.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use idemgate::app::Replica;
use idemgate::clock::{Clock, ManualClock};
use idemgate::store::memory::MemoryStore;
use idemgate_testkit::counting::CountingStore;
use idemgate_testkit::say;

use super::support::{bank, stop, wait_until, Options, Setup};

/// The guarantee, on the worker's clock: a late copy 40 minutes after its
/// original (inside the one-hour TTL) is a duplicate; one nine hours after
/// it (the claim expired on that clock) is decided afresh, once per
/// event, as the TTL says. Evidence: the claims of the last copies were made nine hours
/// ahead of the wall.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nine_hours_later_on_the_workers_clock_a_late_copy_is_past_its_ttl() -> anyhow::Result<()> {
    const TEST: &str = "wall-clock";
    let began = Instant::now();
    let setup = Setup::new(TEST, 1);
    let config = setup.config(&Options {
        max_records: 50,
        ..Options::default()
    });
    let streams = config.streams.iter().map(|s| s.spec.clone()).collect();
    let store = Arc::new(CountingStore::new(Arc::new(MemoryStore::new(streams))));
    let clock = Arc::new(ManualClock::new());
    let replica = Replica::start_on(&config, store.clone(), clock.clone()).await?;
    wait_until("a replica gets partitions", || replica.assigned()).await;

    let mut bank = bank(TEST);
    bank.copies_share_key = false;
    let originals = bank.phase(40, 0, 0);
    let mut landed = setup
        .produce(&setup.topics.input, &originals, 20, Duration::ZERO)
        .await?;
    setup.read(&setup.topics, originals.len()).await?;

    clock.advance(Duration::from_secs(40 * 60));
    let soon = bank.phase(0, 20, 0);
    landed.extend(
        setup
            .produce(&setup.topics.input, &soon, 20, Duration::ZERO)
            .await?,
    );
    setup
        .read(&setup.topics, originals.len() + soon.len())
        .await?;

    let wall_before_jump = clock.wall_ms();
    clock.advance(Duration::from_secs(9 * 3600));
    let late = bank.phase(0, 20, 0);
    landed.extend(
        setup
            .produce(&setup.topics.input, &late, 20, Duration::ZERO)
            .await?,
    );
    let total = originals.len() + soon.len() + late.len();
    let outputs = setup.read(&setup.topics, total).await?;
    stop(replica).await?;
    assert_eq!(landed.len(), total, "inputs produced");

    let decisions = |ids: &HashSet<&str>| -> Vec<String> {
        outputs
            .iter()
            .filter(|out| ids.contains(out.test_id()))
            .map(|out| out.decision().to_string())
            .collect()
    };
    let soon_ids: HashSet<&str> = soon.iter().map(|p| p.id.as_str()).collect();
    let late_ids: HashSet<&str> = late.iter().map(|p| p.id.as_str()).collect();
    let (soon_decided, late_decided) = (decisions(&soon_ids), decisions(&late_ids));
    say(
        TEST,
        format!("40 min later: {soon_decided:?}; 9 h 40 min later: {late_decided:?}"),
    );
    assert_eq!(soon_decided.len(), soon.len());
    assert!(
        soon_decided
            .iter()
            .all(|d| d == "duplicate" || d == "conflict"),
        "a copy inside the TTL passed: {soon_decided:?}"
    );
    // Past the TTL each event is decided afresh once: its first late copy
    // is novel, and any second one a duplicate of that first.
    assert_eq!(late_decided.len(), late.len());
    let late_events: HashSet<usize> = late.iter().filter_map(|p| p.event).collect();
    let novel = late_decided.iter().filter(|d| *d == "novel").count();
    assert_eq!(
        novel,
        late_events.len(),
        "not one novel copy per event past the TTL on the worker's clock: {late_decided:?}"
    );
    let (_, last_claim) = store.claim_times()[&0];
    assert!(
        last_claim >= wall_before_jump + 9 * 3_600_000,
        "the last claims were not made on the worker's clock: {last_claim} vs {wall_before_jump}"
    );
    say(TEST, format!("took {:?}", began.elapsed()));
    Ok(())
}
