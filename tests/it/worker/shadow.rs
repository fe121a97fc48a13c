//! `shadow = true` (docs/design.md §2.1): claims and decisions as usual,
//! every output in clean with its decision headers, nothing in audit.

use std::collections::HashMap;
use std::time::Duration;

use idemgate::decision::DECISION;
use idemgate_testkit::say;

use super::support::{bank, start_assigned, stop, wait_committed, Options, Setup, BANK_STREAM};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_shadow_stream_sends_duplicates_conflicts_and_invalid_records_to_clean_marked(
) -> anyhow::Result<()> {
    const TEST: &str = "shadow";
    let setup = Setup::new(TEST, 2);
    let stream = format!("{BANK_STREAM}\nshadow = true");
    let config = setup.config(&Options {
        stream: &stream,
        ..Options::default()
    });
    let store = setup.store(&config);
    let mut workload = bank(TEST);
    let plan = workload.phase(150, 0, 6);
    let replica = start_assigned(&config, &store).await?;
    let landed = setup
        .produce(&setup.topics.input, &plan, 50, Duration::ZERO)
        .await?;
    let outputs = setup.read(&setup.topics, plan.len()).await?;
    wait_committed(&setup, &landed).await?;
    stop(replica).await?;

    let mut by_decision: HashMap<String, usize> = HashMap::new();
    let mut per_input: HashMap<&str, usize> = HashMap::new();
    for out in &outputs {
        assert_eq!(
            out.topic,
            setup.topics.clean,
            "{} ({}) went to {}",
            out.test_id(),
            out.decision(),
            out.topic
        );
        let decision = out.header(DECISION).expect("every output has its decision");
        *by_decision.entry(decision.to_string()).or_default() += 1;
        *per_input.entry(out.test_id()).or_default() += 1;
    }
    say(
        TEST,
        format!("{} inputs; clean got {by_decision:?}", plan.len()),
    );
    assert_eq!(per_input.len(), plan.len(), "every input has an output");
    assert!(per_input.values().all(|n| *n == 1), "one output per input");
    let events = workload.events();
    assert_eq!(
        by_decision.get("novel").copied(),
        Some(events),
        "one novel per event"
    );
    assert!(
        by_decision.get("duplicate").copied().unwrap_or(0) > 0,
        "{by_decision:?}"
    );
    assert_eq!(
        by_decision.get("invalid").copied(),
        Some(6),
        "{by_decision:?}"
    );
    let counted = store.tally();
    assert_eq!(
        counted.won as usize, events,
        "claims won as usual: {counted:?}"
    );
    Ok(())
}
