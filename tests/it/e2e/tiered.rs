//! A tiered telemetry stream end to end: the built binary against Apache Kafka and
//! the RedisBloom server. Readings re-sent soon are caught by tier 1 (naming
//! their first copy); readings re-sent after tier 1 has forgotten them (its
//! TTL is a few seconds here) are caught by the Bloom filter. Either way
//! every reading reaches clean exactly once and every input has exactly one
//! output.

use std::time::{Duration, Instant};

use idemgate_testkit::check::{check, Expect};
use idemgate_testkit::kafka::{read_inputs_as_delivered, Producer, Reader, Topics};
use idemgate_testkit::telemetry::Telemetry;
use idemgate_testkit::workload::Planned;
use idemgate_testkit::{env, kafka_brokers, say, BOUND};

use super::process::{Gate, GateConfig};

/// Tier 1 forgets a hash after this; the filter covers the hour.
const TIER1_TTL: Duration = Duration::from_secs(4);

#[test]
fn late_resends_are_caught_by_the_filter_after_tier1_forgot_them() {
    const TEST: &str = "tiered";
    let began = Instant::now();
    let brokers = kafka_brokers();
    let topics = Topics::create(&brokers, TEST, 2, 2);
    let mut telemetry = Telemetry::new(TEST, 6);
    let first: Vec<Planned> = telemetry.round(20, 0.3);
    let producer = Producer::new(&brokers);
    let mut delivered = producer.send(&topics.input, &first, 50, Duration::ZERO);

    let mut config = GateConfig::new(TEST, &topics, env("IDEMGATE_TEST_REDISBLOOM_URL"));
    config.stream = Some(format!(
        "profile = \"payload\"\nmode = \"tiered\"\nttl = {{ explicit = \"1h\" }}\ntier1_ttl = \"{}s\"\npeak_rate = 100\nfp_rate = 0.000001\nfail_mode = \"closed\"",
        TIER1_TTL.as_secs()
    ));
    let mut gate = Gate::start(TEST, &config);
    let mut reader = Reader::new(&brokers, &topics.outputs());
    reader.read_every_input(first.len(), BOUND, "of the first round", || {
        gate.assert_alive()
    });
    say(
        TEST,
        format!("first round decided at {:?}", began.elapsed()),
    );

    // The scenario itself: the vehicles stay offline past tier 1's TTL.
    std::thread::sleep(TIER1_TTL + Duration::from_secs(2));
    let late = telemetry.resend_earlier(40);
    delivered.extend(producer.send(&topics.input, &late, 20, Duration::ZERO));
    let plan: Vec<Planned> = first.into_iter().chain(late.iter().cloned()).collect();
    reader.read_every_input(plan.len(), BOUND, "of the late re-sends", || {
        gate.assert_alive()
    });

    let landed = read_inputs_as_delivered(&brokers, &topics, &delivered);
    let summary = check(&plan, &landed, &topics, &reader.records, Expect::Filtered);
    say(TEST, &summary);
    assert_eq!(
        summary.filter_duplicates,
        late.len(),
        "every late re-send is the filter's to catch"
    );
    assert!(
        summary.decisions.get("duplicate").copied().unwrap_or(0) > late.len(),
        "no re-send was caught by tier 1: {summary}"
    );
}
