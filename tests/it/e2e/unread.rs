//! A stream part of which nobody reads is an alert, not a silence
//! (docs/design.md §11): two replicas on a one-partition input, so one of
//! them waits for an assignment for good. That replica says so at WARN
//! every 30 s with the group's member count; `/metrics` shows what each
//! replica owns per stream (`idemgate_partitions_assigned`) beside the
//! input's partitions (`idemgate_stream_input_partitions`), the two sides
//! of the `IdemgateStreamUnread` alert (its firing and quiet cases are
//! promtool's, `deploy/prometheus/alerts.test.yml`). And a replica's lag
//! series are those of the partitions it owns, and its readiness holds
//! while it keeps partitions through an incremental rebalance.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use idemgate_testkit::kafka::{Producer, Topics};
use idemgate_testkit::servers::free_port;
use idemgate_testkit::workload::Bank;
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

    // One replica keeps the one partition (which one is the assignor's
    // choice), the other waits, and says so once 30 s have passed (a wait
    // on the worker's own clock, hence on the real one here).
    let until = Instant::now() + Duration::from_secs(90);
    let (warning, idle, reading) = loop {
        second.assert_alive();
        first.assert_alive();
        let warned = |gate: &Gate| {
            gate.log_text()
                .lines()
                .find(|l| l.contains("no partitions assigned yet"))
                .map(str::to_string)
        };
        if let Some(line) = warned(&second) {
            break (line, (&second, second_at), (&first, first_at));
        }
        if let Some(line) = warned(&first) {
            break (line, (&first, first_at), (&second, second_at));
        }
        assert!(
            Instant::now() < until,
            "no WARN about the wait within 90s; log tails:\n{}\n{}",
            first.tail(15),
            second.tail(15)
        );
        // Waiting on the replica's 30 s period.
        std::thread::sleep(Duration::from_millis(500));
    };
    say(TEST, format!("at {:?}: {warning}", began.elapsed()));
    assert!(warning.contains("WARN"), "{warning}");
    assert!(warning.contains("members=2"), "{warning}");
    assert!(warning.contains("streams=bank"), "{warning}");
    assert_eq!(
        idle.0.assigned().unwrap_or(0),
        0,
        "the idle replica owns a partition"
    );
    assert_eq!(reading.0.assigned(), Some(1), "the reading replica");

    // Both sides of the alert, per replica: one reads the one partition,
    // the other none; the input has one.
    let gauges = |addr| {
        (
            bank_gauge(addr, "idemgate_partitions_assigned"),
            bank_gauge(addr, "idemgate_stream_input_partitions"),
        )
    };
    assert_eq!(
        gauges(reading.1),
        (Some(1.0), Some(1.0)),
        "the reading replica"
    );
    assert_eq!(gauges(idle.1), (Some(0.0), Some(1.0)), "the idle replica");

    for gate in [&mut first, &mut second] {
        let status = gate.terminate(Duration::from_secs(30));
        assert!(status.success(), "{status}");
    }
}

/// The lag series of a replica are those of the partitions it owns: when a
/// second replica joins and takes half, the first one's series for the
/// partitions it handed over go (they kept their last value before, eight
/// series on a replica owning four).
#[test]
fn lag_series_leave_with_their_partitions() {
    const TEST: &str = "lag-series";
    let topics = Topics::create(&kafka_brokers(), TEST, 4, 1);
    // Records in every partition: a partition's lag is reported once its
    // position is known.
    let records: Vec<_> = (0..4)
        .flat_map(|partition| {
            let mut bank = Bank::new(&format!("{TEST}-{partition}"), 3);
            bank.phase(5, 0, 0).into_iter().map(move |mut r| {
                r.partition = Some(partition);
                r
            })
        })
        .collect();
    Producer::new(&kafka_brokers()).send(&topics.input, &records, 100, Duration::ZERO);
    let mut config = GateConfig::new(TEST, &topics, env("IDEMGATE_TEST_REDIS_URL"));
    let first_at: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
    config.metrics_listen = first_at.to_string();
    let mut first = Gate::start(&format!("{TEST}-1"), &config);
    first.wait_assigned(Duration::from_secs(60));
    let lag_partitions = |addr| -> Vec<String> {
        let Ok((_, body)) = http_get(addr, "/metrics") else {
            return Vec::new();
        };
        body.lines()
            .filter(|l| {
                l.starts_with("idemgate_consumer_lag_records{")
                    && l.contains(&format!("topic=\"{}\"", topics.input))
            })
            .map(str::to_string)
            .collect()
    };
    // librdkafka's statistics come every 5 s: all four, from the first.
    let until = Instant::now() + Duration::from_secs(60);
    while lag_partitions(first_at).len() < 4 {
        first.assert_alive();
        assert!(
            Instant::now() < until,
            "no lag series for the 4 partitions within 60s"
        );
        // Waiting on librdkafka's statistics interval.
        std::thread::sleep(Duration::from_millis(500));
    }
    let second_at: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
    config.metrics_listen = second_at.to_string();
    let mut second = Gate::start(&format!("{TEST}-2"), &config);
    second.wait_assigned(Duration::from_secs(60));
    // Each replica ends with the series of what it owns: two each.
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let (a, b) = (lag_partitions(first_at), lag_partitions(second_at));
        if a.len() == 2 && b.len() == 2 {
            say(TEST, format!("first {a:?}, second {b:?}"));
            break;
        }
        first.assert_alive();
        second.assert_alive();
        assert!(
            Instant::now() < until,
            "lag series do not follow the partitions within 60s: first {a:?}, second {b:?}"
        );
        // Waiting on the rebalance and the statistics interval.
        std::thread::sleep(Duration::from_millis(500));
    }
    for gate in [&mut first, &mut second] {
        let status = gate.terminate(Duration::from_secs(30));
        assert!(status.success(), "{status}");
    }
}

/// Under cooperative-sticky assignment a replica that keeps partitions
/// through an incremental rebalance stays ready: a second replica joins
/// and leaves, and the first one's `/readyz` answers 200 throughout (it
/// reported not ready while it kept its partitions before).
#[test]
fn readiness_holds_through_incremental_rebalances_under_cooperative_sticky() {
    const TEST: &str = "ready-coop";
    let topics = Topics::create(&kafka_brokers(), TEST, 4, 1);
    let mut config = GateConfig::new(TEST, &topics, env("IDEMGATE_TEST_REDIS_URL"));
    config
        .kafka
        .push(("partition.assignment.strategy", "cooperative-sticky".into()));
    let first_at: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
    config.metrics_listen = first_at.to_string();
    let mut first = Gate::start(&format!("{TEST}-1"), &config);
    first.wait_assigned(Duration::from_secs(60));
    let ready = |addr| http_get(addr, "/readyz").map(|(code, _)| code).unwrap_or(0);
    let until = Instant::now() + Duration::from_secs(30);
    while ready(first_at) != 200 {
        assert!(Instant::now() < until, "the first replica never got ready");
        // Waiting on the replica's assignment.
        std::thread::sleep(Duration::from_millis(100));
    }
    // Watch the first replica's readiness on a thread of its own while a
    // second replica joins (an incremental revoke of half) and leaves (an
    // incremental assignment back).
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut codes = std::collections::BTreeMap::new();
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                *codes.entry(ready(first_at)).or_insert(0u32) += 1;
                // A probe every 50 ms, as a strict readiness probe would.
                std::thread::sleep(Duration::from_millis(50));
            }
            codes
        })
    };
    config.metrics_listen = "127.0.0.1:0".into();
    let mut second = Gate::start(&format!("{TEST}-2"), &config);
    second.wait_assigned(Duration::from_secs(60));
    let status = second.terminate(Duration::from_secs(30));
    assert!(status.success(), "{status}");
    // The first replica takes the partitions back.
    first.wait_until(
        Instant::now() + Duration::from_secs(60),
        "the first replica did not take all 4 partitions back within 60s",
        |gate| gate.assigned() == Some(4),
        // Waiting on the rebalance after the leave.
        || std::thread::sleep(Duration::from_millis(200)),
    );
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let codes = watcher.join().expect("watcher");
    say(
        TEST,
        format!("/readyz answers while the group changed: {codes:?}"),
    );
    assert_eq!(
        codes.keys().copied().collect::<Vec<_>>(),
        vec![200],
        "/readyz of the replica that kept partitions: {codes:?}"
    );
    let status = first.terminate(Duration::from_secs(30));
    assert!(status.success(), "{status}");
}
