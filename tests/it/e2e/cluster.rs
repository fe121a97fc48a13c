//! Two replicas end to end on the three-master Redis Cluster
//! (`IDEMGATE_TEST_REDIS_CLUSTER`, docs/design.md §6): claims spread over
//! every master's slots (a hash tag per claim keeps each script's keys in
//! one slot), the watermark hash on whichever master owns it, and copies of
//! one event on different partitions, so on different replicas.

use std::time::{Duration, Instant};

use idemgate::decision::FIRST_SEEN;
use idemgate_testkit::check::{check, Expect};
use idemgate_testkit::kafka::{read_inputs_as_delivered, Producer, Reader, Topics};
use idemgate_testkit::servers::{claim_ttls, unsettled_claims_on};
use idemgate_testkit::workload::{Bank, Planned};
use idemgate_testkit::{env, kafka_brokers, say, BOUND};

use super::process::{wait_split, Gate, GateConfig};

/// The guarantee: for every distinct event, exactly one copy in clean and
/// nothing lost (Expect::Exact: no replica died, both stopped by
/// SIGTERM), and every claim settled afterwards (below its partition's
/// watermark or flagged done), wherever the cluster keeps it. Evidence
/// that the cluster and the spread were in play: claim keys on every
/// master, and duplicates whose holder sits in another partition.
#[test]
fn two_replicas_on_a_redis_cluster_with_copies_across_partitions_settle_every_claim() {
    const TEST: &str = "cluster";
    let began = Instant::now();
    let nodes: Vec<String> = env("IDEMGATE_TEST_REDIS_CLUSTER")
        .split(',')
        .map(str::to_string)
        .collect();
    let partitions = 4;
    let topics = Topics::create(&kafka_brokers(), TEST, partitions, 2);
    let mut bank = Bank::new(TEST, 32);
    bank.copies_share_key = false;
    bank.copy_rate = (0.5, 0.2);
    bank.conflict_rate = 0.03;
    bank.copy_spread = 1_000;
    let first = bank.phase(600, 0, 12);
    let later = bank.phase(200, 300, 6);
    let mut config = GateConfig::new(TEST, &topics, String::new()).on_cluster(nodes.clone());
    config.max_records = 100;

    let mut a = Gate::start(&format!("{TEST}-a"), &config);
    let mut b = Gate::start(&format!("{TEST}-b"), &config);
    let split = wait_split(&mut a, &mut b, partitions as usize, Duration::from_secs(30));
    say(TEST, format!("assigned {split:?} at {:?}", began.elapsed()));
    let producer = Producer::new(&kafka_brokers());
    let mut delivered = producer.send(&topics.input, &first, 100, Duration::from_millis(50));
    delivered.extend(producer.send(&topics.input, &later, 100, Duration::from_millis(50)));
    let plan: Vec<Planned> = first.into_iter().chain(later).collect();
    let mut reader = Reader::new(&kafka_brokers(), &topics.outputs());
    reader.read_every_input(plan.len(), BOUND, "on the cluster", || {
        a.assert_alive();
        b.assert_alive();
    });
    let landed = read_inputs_as_delivered(&kafka_brokers(), &topics, &delivered);
    let summary = check(&plan, &landed, &topics, &reader.records, Expect::Exact);
    say(TEST, &summary);
    for gate in [&mut a, &mut b] {
        let status = gate.terminate(Duration::from_secs(20));
        assert!(
            status.success(),
            "[{}] exited with {status} on SIGTERM",
            gate.name
        );
    }

    let across = reader
        .records
        .iter()
        .filter(|o| o.decision() == "duplicate")
        .filter(|o| {
            let holder = o
                .header(FIRST_SEEN)
                .and_then(|s| s.rsplit('/').nth(1)?.parse::<i32>().ok());
            holder.is_some_and(|p| p != landed[o.test_id()].partition)
        })
        .count();
    assert!(across > 0, "no duplicate met a holder in another partition");
    let per_node: Vec<usize> = nodes
        .iter()
        .map(|node| claim_ttls(node, &config.key_prefix).len())
        .collect();
    assert!(
        per_node.iter().all(|n| *n > 0),
        "claim keys per master {per_node:?}: the cluster's slots were not all used"
    );
    let (claims, unsettled) = unsettled_claims_on(&nodes, &config.key_prefix);
    assert_eq!(claims, bank.events(), "claim keys, one per event");
    assert!(unsettled.is_empty(), "claims left unsettled: {unsettled:?}");
    say(
        TEST,
        format!(
            "claims per master {per_node:?}, all settled; {across} duplicates across partitions; took {:?}",
            began.elapsed()
        ),
    );
}
