//! The gateways' consumer group as the broker keeps it, shared by the
//! scenarios that run a workload through, stop, reset and restart it
//! (`exactly_once`, `resets`, `reset_command`, `reset_kafka`, `replay`):
//! the first run to the end of the input, a first run stopped with a
//! pending claim per event, where the input ends, waiting for the group to
//! commit there, and `idemgate reset` and `idemgate rebuild` run as an
//! operator runs them.

use std::collections::HashMap;
use std::process::Command;
use std::time::{Duration, Instant};

use idemgate_testkit::check::{check, Expect};
use idemgate_testkit::kafka::{
    committed_offsets, read_inputs_as_delivered, Landed, Producer, Reader, Topics,
};
use idemgate_testkit::servers::{claim_ttls, unsettled_claims};
use idemgate_testkit::workload::Planned;
use idemgate_testkit::{kafka_brokers, say, unique, BOUND};

use super::process::{Gate, GateConfig};

/// What a run over a whole workload left: every output read so far,
/// where each input landed, and the input's ends, which the group has
/// committed.
pub struct Processed {
    pub reader: Reader,
    pub landed: HashMap<String, Landed>,
    pub ends: Vec<(i32, i64)>,
}

/// Sends `plan` to the input while `gates` (assigned already) run, reads
/// until every input has an output, holds the outputs to `Expect::Exact`
/// and waits until the group has committed the end of every partition.
pub fn process(
    test: &str,
    config: &GateConfig,
    topics: &Topics,
    plan: &[Planned],
    gates: &mut [&mut Gate],
) -> Processed {
    let delivered = Producer::new(&kafka_brokers()).send(&topics.input, plan, 100, Duration::ZERO);
    let mut reader = Reader::new(&kafka_brokers(), &topics.outputs());
    reader.read_every_input(plan.len(), BOUND, "of the first run", || {
        for gate in gates.iter_mut() {
            gate.assert_alive();
        }
    });
    let landed = read_inputs_as_delivered(&kafka_brokers(), topics, &delivered);
    let summary = check(plan, &landed, topics, &reader.records, Expect::Exact);
    say(test, format!("first run: {summary}"));
    let ends = ends(&landed, topics.input_partitions);
    wait_committed(config, topics, &ends, gates);
    Processed {
        reader,
        landed,
        ends,
    }
}

/// What a first run that could not deliver left: where each input was
/// sent, and the input's ends (never committed by it).
pub struct Pending {
    pub delivered: HashMap<String, Landed>,
    pub ends: Vec<(i32, i64)>,
}

/// A first gateway of `config` runs `plan` (of `events` distinct events)
/// with a clean topic no broker accepts, so every clean delivery fails
/// (retriably: it may have landed, as far as the gateway knows) and its
/// claim stays pending; it is stopped gracefully (leaving the group) once
/// every event is claimed. Asserts one pending claim per event.
pub fn stop_with_pending_claims(
    test: &str,
    config: &GateConfig,
    topics: &Topics,
    plan: &[Planned],
    events: usize,
) -> Pending {
    let mut broken = config.clone();
    broken.clean = format!("{} not/a topic!", unique(test));
    let mut first = Gate::start(&format!("{test}-1"), &broken);
    first.wait_assigned(Duration::from_secs(30));
    let delivered = Producer::new(&kafka_brokers()).send(&topics.input, plan, 100, Duration::ZERO);
    first.wait_until(
        Instant::now() + BOUND,
        &format!("the events were not all claimed and refused within {BOUND:?}"),
        |gate| {
            claim_ttls(&config.redis_url, &config.key_prefix).len() >= events
                && gate.log_text().contains("output not delivered")
        },
        // Redis's claim keys and the gateway's log, read again: its rounds
        // and refused produces land on their own time.
        || std::thread::sleep(Duration::from_millis(200)),
    );
    // A graceful stop: the failed outputs keep their claims (never
    // released, they may have landed as far as the gateway knows), and the
    // member leaves the group, so a reset may commit at once.
    let status = first.terminate(Duration::from_secs(40));
    assert!(status.success(), "idemgate exited with {status} on SIGTERM");
    let pending = unsettled_claims(&config.redis_url, &config.key_prefix);
    assert_eq!(pending.len(), events, "pending claims, one per event");
    let landed = read_inputs_as_delivered(&kafka_brokers(), topics, &delivered);
    let ends = ends(&landed, topics.input_partitions);
    Pending { delivered, ends }
}

/// Per input partition (0 to `partitions`), the offset after the last of
/// `landed` there (0 where nothing landed).
pub fn ends(landed: &HashMap<String, Landed>, partitions: i32) -> Vec<(i32, i64)> {
    (0..partitions)
        .map(|p| {
            let end = landed
                .values()
                .filter(|at| at.partition == p)
                .map(|at| at.offset + 1)
                .max()
                .unwrap_or(0);
            (p, end)
        })
        .collect()
}

/// Waits (bounded) until the group has committed `wanted` (partition,
/// offset) on `topics`' input, with `gates` alive; fails with their log
/// tails.
pub fn wait_committed(
    config: &GateConfig,
    topics: &Topics,
    wanted: &[(i32, i64)],
    gates: &mut [&mut Gate],
) {
    let partitions: Vec<i32> = wanted.iter().map(|(p, _)| *p).collect();
    let want: Vec<Option<i64>> = wanted.iter().map(|(_, o)| Some(*o)).collect();
    let until = Instant::now() + BOUND;
    loop {
        let committed =
            committed_offsets(&kafka_brokers(), &config.group, &topics.input, &partitions);
        if committed == want {
            return;
        }
        for gate in gates.iter_mut() {
            gate.assert_alive();
        }
        if Instant::now() >= until {
            let tails: Vec<String> = gates
                .iter()
                .map(|g| format!("[{}] log tail:\n{}", g.name, g.tail(30)))
                .collect();
            panic!(
                "committed {committed:?}, not {want:?}, within {BOUND:?}\n{}",
                tails.join("\n")
            );
        }
        // The broker's committed offsets, asked again: a commit lands at
        // the gateway's next commit interval or transaction.
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// What an operator's command (`idemgate reset`, `idemgate rebuild`) did:
/// its exit, stdout and stderr.
pub struct CommandRun {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `idemgate reset --config <config> --stream bank <args>` as an
/// operator does, with the config written to a file of its own.
pub fn idemgate_reset(config: &GateConfig, args: &[&str]) -> CommandRun {
    idemgate(config, "reset", args)
}

/// Runs `idemgate rebuild --config <config> --stream bank <args>`.
pub fn idemgate_rebuild(config: &GateConfig, args: &[&str]) -> CommandRun {
    idemgate(config, "rebuild", args)
}

fn idemgate(config: &GateConfig, command: &str, args: &[&str]) -> CommandRun {
    let path = std::env::temp_dir().join(format!("idemgate-{command}-{}.toml", unique(command)));
    std::fs::write(&path, config.toml()).expect("writing the config");
    let output = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .arg(command)
        .arg("--config")
        .arg(&path)
        .args(["--stream", "bank"])
        .args(args)
        // The config file says everything (as for the gateways).
        .env_remove("IDEMGATE_KAFKA_BROKERS")
        .env_remove("IDEMGATE_REDIS_URL")
        .env_remove("IDEMGATE_REDIS_NODES")
        .output()
        .unwrap_or_else(|e| panic!("running idemgate {command}: {e}"));
    let _ = std::fs::remove_file(&path);
    let run = CommandRun {
        ok: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    };
    println!(
        "idemgate {command} {args:?}: {}\n{}{}",
        output.status, run.stdout, run.stderr
    );
    run
}

/// The rows of an `idemgate reset` report, as (topic, partition, new
/// offset), sorted: its first table is Kafka's (`GROUP TOPIC PARTITION
/// NEW-OFFSET`), read as Kafka's tool's is.
pub fn idemgate_reset_rows(report: &str) -> Vec<(String, i32, i64)> {
    let table = report
        .trim_start_matches('\n')
        .split("\n\n")
        .next()
        .unwrap_or("");
    assert!(
        table.starts_with("GROUP "),
        "no Kafka reset table first in:\n{report}"
    );
    idemgate_testkit::tools::reset_rows(table)
}
