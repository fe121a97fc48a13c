//! The demo as a test: the whole product in one process must report every
//! distinct event exactly once.

use std::time::Instant;

use idemgate_testkit::say;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_demo_reports_every_event_exactly_once() {
    super::support::logs();
    let started = Instant::now();
    let report = idemgate::demo::run(300, 5, 30, |_| {})
        .await
        .expect("the demo failed to run");
    assert!(report.ok(), "the demo check failed:\n{}", report.table());

    let bank = &report.streams["bank"];
    let telemetry = &report.streams["telemetry"];
    for (name, t) in &report.streams {
        assert_eq!(
            t.records_in,
            t.novel
                + t.duplicate_exact
                + t.duplicate_filter
                + t.conflict
                + t.invalid
                + t.unverified,
            "{name}: decisions do not add up to the records in"
        );
        assert_eq!(t.novel, t.distinct_events, "{name}: novel records");
        assert_eq!(t.exactly_once, t.distinct_events, "{name}");
        assert_eq!((t.missing, t.doubled), (0, 0), "{name}");
        assert_eq!(t.unverified, 0, "{name}: the store never failed");
    }
    assert_eq!(bank.distinct_events, 300);
    assert_eq!(telemetry.distinct_events, 5 * 30);
    assert!(bank.duplicate_exact > 0, "{}", report.table());
    assert!(
        bank.conflict > 0 && bank.conflict == bank.expected_conflicts,
        "{}",
        report.table()
    );
    assert!(
        bank.invalid > 0 && bank.invalid == bank.expected_invalid,
        "{}",
        report.table()
    );
    assert_eq!(
        bank.duplicate_filter, 0,
        "the bank stream runs in exact mode"
    );
    assert!(telemetry.duplicate_exact > 0, "{}", report.table());
    assert!(telemetry.duplicate_filter > 0, "{}", report.table());
    say(
        "demo",
        format!("{}took {:?}", report.table(), started.elapsed()),
    );
}
