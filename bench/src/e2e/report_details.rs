//! The parts of `BENCHMARKS.md` that explain the figures: the workload,
//! the detail tables (phases of a batch, CPU, round trips, decisions,
//! memory) and what each figure means.

use std::fmt::Write as _;

use super::report::{bytes, count, human_seconds, opt, rate, run_name, Report};
use idemgate_testkit::feed::{LADDER, PAYLOAD_BYTES};

impl Report {
    pub(crate) fn workload_section(&self, md: &mut String) {
        md.push_str("## Workload\n\n");
        for d in &self.datasets {
            let _ = writeln!(
                md,
                "- `{}`: {} records in {} partitions, {PAYLOAD_BYTES}-byte bank-txn JSON; {} distinct \
                 events and {} redeliveries ({:.1} %; by rung of the ladder: {}). Loaded before \
                 any timing in {:.1} s ({} records/s).",
                d.topic,
                count(d.records),
                self.partitions,
                count(d.events),
                count(d.copies),
                d.copies as f64 * 100.0 / d.records.max(1) as f64,
                d.per_rung
                    .iter()
                    .map(|n| count(*n))
                    .collect::<Vec<_>>()
                    .join(", "),
                d.load_seconds,
                rate(d.records as f64 / d.load_seconds.max(1e-9)),
            );
        }
        let ladder: Vec<String> = LADDER.iter().map(|s| human_seconds(*s)).collect();
        let _ = writeln!(
            md,
            "\nFirst attempts arrive at a simulated {} events a second (`--feed-rate`); a retried \
             event comes again on the ladder {} after its first attempt (one more attempt with \
             probability 1/2, two with 1/4, ...); copies whose rung lies past the last first \
             attempt follow at the end of the topic. At this rate the first rung is {} records \
             later, so a batch rarely holds two copies of one event (a slower feed, caught up as \
             a backlog, puts copies in the same batch: they wait for their original and are \
             decided in a later round, see the claim rounds per batch). Two thirds of the copies are byte for byte the first attempt, a third \
             re-serialized (other key order, `\"1234.560\"` for `\"1234.56\"`). Records are keyed \
             and partitioned by account, in arrival order, each with an `x-delivery-attempt` \
             header. The worker reads them as a stream `bank` (profile `bank-txn`), batches of up \
             to {} records, `linger` 20 ms. Exact mode remembers 11 h 20 min; tiered \
             mode keeps tier-1 keys 1 h and sizes each Bloom generation (1 day, 2 slots) for every \
             distinct event at 1e-3. Redis runs on wall time, so every copy here lands while its \
             original's tier-1 key lives: tier 2 is probed and written for every record but \
             finds only false positives.\n",
            rate(self.feed_rate),
            ladder.join(", "),
            rate(self.feed_rate * 60.0),
            self.batch_records
        );
    }

    pub(crate) fn detail_sections(&self, md: &mut String) {
        md.push_str("### Where a batch's wall time goes\n\n");
        md.push_str(
            "Per batch, ms: each replica's wall time split at the events the worker emits (see \
             below), summed over the replicas and divided by their batches. The phases follow \
             each other, so they add up to the batch cycle; a batch whose records wait on each \
             other is claimed again in a later round. A claim round carries the publish of the \
             batches delivered before it; a publish-only round goes when there is nothing to \
             claim.\n\n",
        );
        md.push_str("| run | records / batch | claim rounds / batch |");
        for (name, _) in super::timeline::Phases::default().named() {
            let _ = write!(md, " {name} |");
        }
        md.push_str(" batch cycle p50 / p99 |\n|---|--:|--:|");
        md.push_str(&"--:|".repeat(10));
        md.push('\n');
        for r in &self.runs {
            let (Some(phases), Some(t)) = (&r.phases, &r.tally) else {
                continue;
            };
            let b = r.batches.max(1) as f64;
            let _ = write!(
                md,
                "| {} | {:.0} | {:.2} |",
                run_name(r),
                r.batch_records as f64 / b,
                t.claim_rounds as f64 / b
            );
            for (_, us) in phases.named() {
                let _ = write!(md, " {:.2} |", us as f64 / 1000.0 / b);
            }
            let _ = writeln!(
                md,
                " {} / {} |",
                opt(r.batch_cycle_p50_ms, 1),
                opt(r.batch_cycle_p99_ms, 1)
            );
        }
        md.push_str("\n### CPU\n\n");
        md.push_str("Cores busy over each run's wall time (CPU seconds / wall seconds; the machine has 2), and CPU seconds per million records. *Anything else* is the machine's busy time (`/proc/stat`) less the run's own processes: other work on the machine that competed with the run.\n\n");
        md.push_str("| run | wall s | worker | Tansu | redis-server | harness | anything else | total | worker s / M | Tansu s / M | Redis s / M | RSS MiB: worker peak, Tansu, redis-server |\n");
        md.push_str("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n");
        for r in self.all_runs() {
            let w = r.seconds.max(1e-9);
            let m = r.records.max(1) as f64 / 1e6;
            let _ = writeln!(
                md,
                "| {} | {:.1} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.1} | {:.1} | {:.1} | {:.0}, {:.0}, {:.0} |",
                run_name(r),
                r.seconds,
                r.worker_cpu_s / w,
                r.tansu_cpu_s / w,
                r.redis_cpu_s / w,
                r.harness_cpu_s / w,
                r.other_cpu_s / w,
                (r.worker_cpu_s
                    + r.tansu_cpu_s
                    + r.redis_cpu_s
                    + r.harness_cpu_s
                    + r.other_cpu_s)
                    / w,
                r.worker_cpu_s / m,
                r.tansu_cpu_s / m,
                r.redis_cpu_s / m,
                r.worker_peak_rss_mb,
                r.tansu_rss_mb,
                r.redis_rss_mb,
            );
        }
        md.push_str("\n### Store rounds and Redis round trips per batch\n\n");
        md.push_str("Store rounds per batch as the replicas' counting store saw them (a round carries claims, a publish, or both), and Redis round trips per batch on the wire, by what they carried; beside them, Redis round trips per store round, which is what the protocol fixes.\n\n");
        md.push_str("| run | batches | store rounds | with claims | with a publish | round trips: claims | publish only | total | per store round | other (connect, stats watcher) | commands / batch | bytes up / down per batch |\n");
        md.push_str("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n");
        for r in &self.runs {
            let Some(rt) = r.round_trips else { continue };
            let b = r.batches.max(1) as f64;
            let per_batch = |n: u64| format!("{:.3}", n as f64 / b);
            let (rounds, claim_rounds, publish_rounds, per_round) =
                r.tally.as_ref().map_or_else(Default::default, |t| {
                    (
                        per_batch(t.rounds),
                        per_batch(t.claim_rounds),
                        per_batch(t.publish_rounds),
                        format!(
                            "{:.3}",
                            rt.protocol_round_trips() as f64 / t.rounds.max(1) as f64
                        ),
                    )
                });
            let _ = writeln!(
                md,
                "| {} | {} | {rounds} | {claim_rounds} | {publish_rounds} | {:.3} | {:.3} | {:.3} | {per_round} | {} | {:.0} | {:.0} / {:.0} |",
                run_name(r),
                count(r.batches),
                rt.claim as f64 / b,
                rt.publish as f64 / b,
                rt.protocol_round_trips() as f64 / b,
                rt.other,
                rt.commands as f64 / b,
                rt.bytes_up as f64 / b,
                rt.bytes_down as f64 / b,
            );
        }
        md.push_str("\n### What the publishes carried, per batch\n\n");
        md.push_str("| run | watermark raises | done flags set | done flags lost | tier-2 inserts | claims released |\n");
        md.push_str("|---|--:|--:|--:|--:|--:|\n");
        for r in &self.runs {
            let Some(t) = &r.tally else { continue };
            let b = r.batches.max(1) as f64;
            let _ = writeln!(
                md,
                "| {} | {:.2} | {:.2} | {} | {:.1} | {} |",
                run_name(r),
                t.raises as f64 / b,
                t.done_flags as f64 / b,
                count(t.done_lost),
                t.inserts as f64 / b,
                count(t.released),
            );
        }
        md.push_str("\n### Decisions (from the claim outcomes)\n\n");
        md.push_str("| run | novel | duplicate, tier 1 | duplicate, filter | conflict | replayed (decided before) | own claim re-stamped (after a rebalance) | claim retries (held) | check |\n");
        md.push_str("|---|--:|--:|--:|--:|--:|--:|--:|---|\n");
        for r in self.all_runs() {
            if let Some(t) = &r.tally {
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    run_name(r),
                    count(t.won),
                    count(t.duplicate_exact),
                    count(t.duplicate_filter),
                    count(t.conflict),
                    count(t.replayed),
                    count(t.restamped),
                    count(t.held),
                    r.check
                );
            } else if let Some(b) = &r.baseline {
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | | | | | | {} |",
                    run_name(r),
                    count(b.novel),
                    count(b.duplicates),
                    r.check
                );
            }
        }
        md.push_str("\n### Redis memory\n\n");
        md.push_str("| run | tier-1 keys | used_memory growth | bytes / tier-1 key | MEMORY USAGE of a tier-1 key | key + value bytes | tier-2 keys | tier-2 bytes | keys inserted | capacity | bits / key: sizing, held per capacity, held per insert |\n");
        md.push_str("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n");
        for r in &self.runs {
            let Some(m) = &r.memory else { continue };
            let t2 = m.tier2.as_ref();
            let _ = writeln!(
                md,
                "| {} | {} | {} | {:.1} | {:.1} | {} + {} | {} | {} | {} | {} | {} |",
                run_name(r),
                count(m.tier1_keys),
                bytes(m.used_memory_after - m.used_memory_before),
                m.tier1_bytes_per_key,
                m.tier1_memory_usage,
                m.tier1_key_len,
                m.tier1_value_len,
                t2.map_or("".into(), |t| t.keys.to_string()),
                t2.map_or("".into(), |t| bytes(t.bytes as i64)),
                t2.map_or("".into(), |t| count(t.inserts)),
                t2.map_or("".into(), |t| count(t.capacity)),
                t2.map_or("".into(), |t| format!(
                    "{:.2}, {:.2}, {:.2}",
                    t.sized_bits_per_key, t.bits_per_capacity_key, t.bits_per_inserted_key
                )),
            );
        }
        md.push('\n');
    }
}

pub(crate) const DEFINITIONS: &str = "## What the figures mean\n\n\
- **records/s** end to end: records of the topic / (the first poll of any replica that \
returned records, to the moment the group's committed offsets cover every record). Completion is judged from the committed offsets against the offsets the loader \
got back for every record (never from Tansu's high watermark, which is wrong); the harness \
polls every 50 ms. With two replicas the window includes the rebalance when the second joins. \
*Per replica* is that divided by the replicas.\n\
- **decision latency** (p50, p99), per record: from the moment the poll that read it returned \
(the worker's batch-size metric; nothing else has happened to the batch yet) to the moment its \
output was acknowledged by the broker (the worker's records metric, which it emits per record \
right after the acknowledgements of the record's round). Measured inside each replica: its \
metrics recorder (the Prometheus one `idemgate run` installs) is wrapped to see those two \
metrics and the offset commits, and its claim store is wrapped to see each call start and end. \
It leaves out the time a record waits in the topic before it is polled (here everything is \
loaded before the run, so that wait would only measure the backlog) and the publish and commit \
after the acknowledgement. For the baseline: from the consumer handing over the record to its \
output's acknowledgement.\n\
- **where a batch's time goes**: the same events split each replica's wall time into phases: \
poll returned → first claim round: fingerprint (and building the claims); a store round \
carrying claims (with the publish riding on it): claim; claim returned → first acknowledged \
output: produce + acks; between acknowledged outputs and a publish-only round: the per-record \
metrics and decision logs; a store round carrying only a publish: publish-only round; → commit \
metric: commit; commit → next poll returned: poll. A round that decides nothing backs off.\n\
- **store rounds per batch**: the replicas' `ClaimStore::round` calls, counted by the store \
wrapper of the test kit (`StoreTally`): *store rounds* is every call, *with claims* those \
carrying claims (`claim_rounds`), *with a publish* those carrying a publish (`publish_rounds`: \
tier-2 inserts, watermark raises, done flags, releases); a round carrying both counts in both. \
Over the batches (polls that returned records) of every replica. The publish table gives what \
the publishes carried: watermark raises (one per partition with finished records), done flags \
set (delivered records a raise did not cover) and lost (the claim gone or re-stamped by another \
owner), tier-2 inserts, claims released.\n\
- **worker CPU**: user + system CPU seconds of the replica processes (`/proc/<pid>/stat`) from \
`go` to the last commit, per million records. A replica is `idemgate run` in a child process: \
the same worker, Prometheus recorder, /metrics listener and store watcher, at the default log \
level (every non-novel decision is logged, to a file). Tansu, Redis and the harness are given \
beside it: they share the machine's cores (see Machine and versions).\n\
- **Redis round trips per batch**: counted on the wire by a proxy between the replicas and \
redis-server that parses RESP both ways; a round trip is a burst the client starts while none \
of its requests is unanswered, named by what its commands carry: *claims* if any is a claim or \
a tier-2 probe (`SET`, `BF.MEXISTS`, `BITFIELD_RO`), whatever publish rides with them; \
*publish only* if any is a write (a script: raise, done flag, release, re-stamp; \
`BF.INSERT`/`BITFIELD`/`INCRBY`/`PEXPIRE`: tier-2 inserts), as a publish-only round or a \
round's follow-up (a re-stamp, a NOSCRIPT retry) sends. The per-batch figure is the claim \
protocol's round trips (connection set-up and the stats watcher's `INFO` every 5 s are listed \
apart) over the batches; per store round, over the rounds the replicas' counting store saw. \
The protocol fixes a store round at one pipelined round trip per node: the publish (tier-2 inserts \
first, then the watermark raises, done flags and releases), the watermark reads and every \
claim's `SET NX PX GET` with its filter probes. The worker's Redis connection goes through the \
proxy; the baseline's does not.\n\
- **tier-1 bytes per key**: growth of redis-server's `used_memory` over the run (emptied before \
it), less the `MEMORY USAGE` of the stream's other keys (tier-2 generations and counters, the \
watermark hash), per tier-1 key: the key (the `ig:` prefix, the \
stream's short key id, the hash tag and 16 bytes of hash), the 28-byte claim value (holder, \
owner token, payload digest, claim time, done flag), the expiry entry and the hash tables' \
share. `MEMORY USAGE` of single keys (which \
leaves out the expiry entry and the table buckets) is given beside it.\n\
- **tier-2 bits per key**: `MEMORY USAGE` of the generation keys (RedisBloom filter, or bitmap \
shards, plus the insert counter) x 8 / the generation's capacity (peak rate x horizon, sized \
for every distinct event of the dataset), beside the sizing formula's m/n and the bits per key \
actually inserted.\n\
- **per-record baseline**: for each record, in order, fingerprint it, one `SET key value NX PX \
ttl` round trip, produce its output and await the acknowledgement, then store its offset for \
commit (librdkafka commits stored offsets every 100 ms, and once synchronously at the end). It \
gets `linger.ms = 0` and a direct Redis connection, its best case. It runs over the first \
records of the exact run's topic (see its record count); the ratio compares records/s.\n\n";
