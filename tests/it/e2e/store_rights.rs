//! A store user the ACL limits (docs/design.md §8.4), each test on a
//! redis-server of its own:
//!
//! - a user that may not run scripts is refused by `idemgate run` before it
//!   joins the group, the refusal naming the command (it used to join and
//!   decide nothing for ever, calling the store unreachable);
//! - a user that loses `SET` while a replica runs: every round is rejected,
//!   which is an ERROR line with the cause and a counter by cause, not an
//!   outage's WARN; the fail-closed stream decides nothing meanwhile, and
//!   once the right is granted again every input has one output and every
//!   event is once in clean, nothing lost.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use idemgate_testkit::check::{check, Expect};
use idemgate_testkit::kafka::{read_inputs_as_delivered, Producer, Topics};
use idemgate_testkit::servers::{free_port, RedisServer, ServerOptions};
use idemgate_testkit::workload::Bank;
use idemgate_testkit::{kafka_brokers, say, BOUND, SETTLE};

use super::group::process;
use super::monitoring::http_get;
use super::process::{Gate, GateConfig};

/// `ACL SETUSER gate ...` on `redis`, for the test's key prefix.
fn set_user(redis: &RedisServer, rules: &[&str]) {
    let mut connection = redis.connection().expect("redis connection");
    let mut cmd = redis::cmd("ACL");
    cmd.arg("SETUSER").arg("gate");
    for rule in rules {
        cmd.arg(*rule);
    }
    cmd.query::<()>(&mut connection).expect("ACL SETUSER");
}

fn config_as_gate(test: &str, topics: &Topics, redis: &RedisServer) -> GateConfig {
    let mut config = GateConfig::new(test, topics, redis.url());
    config.store = "username = \"gate\"\npassword = \"pw\"\n".into();
    config
}

#[test]
fn run_refuses_a_store_user_without_scripts_before_it_joins_the_group() {
    const TEST: &str = "rights-no-scripts";
    let topics = Topics::create(&kafka_brokers(), TEST, 1, 1);
    let redis = RedisServer::start(TEST, ServerOptions::default());
    let config = config_as_gate(TEST, &topics, &redis);
    let pattern = format!("~{}*", config.key_prefix);
    set_user(&redis, &["on", ">pw", &pattern, "+@all", "-@scripting"]);
    let mut gate = Gate::start(TEST, &config);
    let status = gate.wait_exit(Duration::from_secs(60));
    let log = gate.log_text();
    say(TEST, format!("exit {status}"));
    assert!(
        !status.success(),
        "run started with a user that may not run scripts"
    );
    assert!(
        log.contains("may not run EVAL") && log.contains("NOPERM") && log.contains("+eval"),
        "the refusal names the command and the grant:\n{}",
        gate.tail(20)
    );
    assert_eq!(gate.assigned(), None, "it joined the group first");
}

/// The sum of `idemgate_store_errors_total` series with `cause`.
fn store_errors(metrics: SocketAddr, cause: &str) -> f64 {
    let (_, body) = http_get(metrics, "/metrics").expect("GET /metrics");
    let label = format!("cause=\"{cause}\"");
    body.lines()
        .filter(|l| l.starts_with("idemgate_store_errors_total{") && l.contains(&label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
fn a_right_lost_mid_run_is_an_error_with_its_cause_and_loses_nothing() {
    const TEST: &str = "rights-lost-mid-run";
    let began = Instant::now();
    let topics = Topics::create(&kafka_brokers(), TEST, 2, 1);
    let redis = RedisServer::start(TEST, ServerOptions::default());
    let mut config = config_as_gate(TEST, &topics, &redis);
    let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    config.metrics_listen = metrics.to_string();
    let pattern = format!("~{}*", config.key_prefix);
    set_user(&redis, &["on", ">pw", &pattern, "+@all"]);
    let mut gate = Gate::start(TEST, &config);
    gate.wait_assigned(Duration::from_secs(30));
    let mut bank = Bank::new(TEST, 12);
    let before = bank.phase(120, 0, 4);
    let first = process(TEST, &config, &topics, &before, &mut [&mut gate]);
    assert_eq!(store_errors(metrics, "noperm"), 0.0);

    // A fresh stream writes its claims as fields of small hashes
    // (docs/design.md §4.1): its claim script's `HSETNX` is what goes.
    set_user(&redis, &["-hsetnx"]);
    let during = bank.phase(60, 60, 4);
    let delivered =
        Producer::new(&kafka_brokers()).send(&topics.input, &during, 100, Duration::ZERO);
    let line = gate.wait_line(
        "the store rejected a round",
        Instant::now() + BOUND,
        &format!("no ERROR line for the rejected rounds within {BOUND:?}"),
        // The gateway's log, read again: its next round logs the rejection.
        || std::thread::sleep(Duration::from_millis(100)),
    );
    assert!(
        line.contains("ERROR")
            && (line.contains("cause=\"noperm\"") || line.contains("cause=noperm")),
        "{line}"
    );
    assert!(
        line.contains("ACL SETUSER"),
        "the line says what to do: {line}"
    );
    assert!(store_errors(metrics, "noperm") > 0.0);
    assert_eq!(
        store_errors(metrics, "unavailable"),
        0.0,
        "a rejection counted as an outage"
    );

    // Fail-closed: nothing of what came meanwhile is decided (invalid
    // records need no claim).
    let mut reader = first.reader;
    let read_before = reader.records.len();
    reader.read_for(SETTLE);
    let decided: Vec<String> = reader.records[read_before..]
        .iter()
        .filter(|out| out.decision() != "invalid")
        .map(|out| format!("{} {}", out.test_id(), out.decision()))
        .collect();
    assert!(decided.is_empty(), "decided without the store: {decided:?}");

    set_user(&redis, &["+hsetnx"]);
    let mut plan = before.clone();
    plan.extend(during.iter().cloned());
    reader.read_every_input(plan.len(), BOUND, "after the grant", || gate.assert_alive());
    let mut all_delivered = first.landed;
    all_delivered.extend(delivered);
    let landed = read_inputs_as_delivered(&kafka_brokers(), &topics, &all_delivered);
    let summary = check(&plan, &landed, &topics, &reader.records, Expect::Exact);
    say(TEST, format!("{summary}; took {:?}", began.elapsed()));
}
