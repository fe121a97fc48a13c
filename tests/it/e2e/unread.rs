//! A stream part of which nobody reads is an alert, not a silence
//! (docs/design.md §11): two replicas on a one-partition input, so one of
//! them waits for an assignment for good. That replica says so at WARN
//! every 30 s with the group's member count; `/metrics` shows what each
//! replica owns per stream (`idemgate_partitions_assigned`) beside the
//! input's partitions (`idemgate_stream_input_partitions`), the two sides
//! of the `IdemgateStreamUnread` alert (its firing and quiet cases are
//! promtool's, `deploy/prometheus/alerts.test.yml`).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use idemgate_testkit::kafka::Topics;
use idemgate_testkit::servers::free_port;
use idemgate_testkit::{env, kafka_brokers, say};

use super::monitoring::http_get;
use super::process::{Gate, GateConfig};

/// The value of `name{stream="bank"}` on a replica's `/metrics`.
fn bank_gauge(addr: SocketAddr, name: &str) -> Option<f64> {
    let (_, body) = http_get(addr, "/metrics").ok()?;
    body.lines()
        .find(|l| l.starts_with(&format!("{name}{{")) && l.contains("stream=\"bank\""))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

#[test]
fn a_replica_left_without_partitions_says_so_and_the_gauges_show_what_each_reads() {
    const TEST: &str = "unread";
    let began = Instant::now();
    let topics = Topics::create(&kafka_brokers(), TEST, 1, 1);
    let mut config = GateConfig::new(TEST, &topics, env("IDEMGATE_TEST_REDIS_URL"));
    let first_at: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
    config.metrics_listen = first_at.to_string();
    let mut first = Gate::start(&format!("{TEST}-1"), &config);
    first.wait_assigned(Duration::from_secs(60));
    let second_at: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
    config.metrics_listen = second_at.to_string();
    let mut second = Gate::start(&format!("{TEST}-2"), &config);

    // The second replica joins a group whose one partition the first one
    // keeps: it waits, and says so once 30 s have passed (a wait on the
    // worker's own clock, hence on the real one here).
    let until = Instant::now() + Duration::from_secs(90);
    let warning = loop {
        second.assert_alive();
        first.assert_alive();
        if let Some(line) = second
            .log_text()
            .lines()
            .find(|l| l.contains("no partitions assigned yet"))
            .map(str::to_string)
        {
            break line;
        }
        assert!(
            Instant::now() < until,
            "no WARN about the wait within 90s; log tail:\n{}",
            second.tail(30)
        );
        // Waiting on the replica's 30 s period.
        std::thread::sleep(Duration::from_millis(500));
    };
    say(TEST, format!("at {:?}: {warning}", began.elapsed()));
    assert!(warning.contains("WARN"), "{warning}");
    assert!(warning.contains("members=2"), "{warning}");
    assert!(warning.contains("streams=bank"), "{warning}");
    assert_eq!(
        second.assigned().unwrap_or(0),
        0,
        "the second replica got a partition"
    );

    // Both sides of the alert, per replica: the first reads the one
    // partition, the second none; the input has one.
    let gauges = |addr| {
        (
            bank_gauge(addr, "idemgate_partitions_assigned"),
            bank_gauge(addr, "idemgate_stream_input_partitions"),
        )
    };
    assert_eq!(gauges(first_at), (Some(1.0), Some(1.0)), "first replica");
    assert_eq!(gauges(second_at), (Some(0.0), Some(1.0)), "second replica");

    for gate in [&mut first, &mut second] {
        let status = gate.terminate(Duration::from_secs(30));
        assert!(status.success(), "{status}");
    }
}
