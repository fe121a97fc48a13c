//! The parts of `BENCHMARKS.md` that explain the figures: the workload,
//! the detail tables (phases of a batch, CPU, round trips, decisions,
//! memory) and what each figure means.

use std::fmt::Write as _;

use super::report::{bytes, count, human_seconds, opt, rate, run_name, Report};
use super::runs::RunResult;
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

    /// Every run, the counting runs last.
    fn every_run(&self) -> impl Iterator<Item = &RunResult> {
        self.all_runs().chain(self.counting.iter())
    }

    pub(crate) fn detail_sections(&self, md: &mut String) {
        self.cpu_section(md);
        self.counting_section(md);
        self.decisions_section(md);
        self.memory_section(md);
        super::postgres::disk_section(&self.runs, md);
        super::report_txn::steps_section(&self.runs, md);
    }

    fn cpu_section(&self, md: &mut String) {
        md.push_str("### CPU\n\n");
        md.push_str("CPU seconds per million records, and cores busy (CPU seconds / the seconds they were counted over; the machine has 2), from `/proc/<pid>/stat` of each process the bench owns, read before `go` and once every record is committed: the CPU window, which holds the group join before the first poll and so is longer than the wall time records/s is taken over. *PostgreSQL* is the bench's PostgreSQL server, when it started one: the postmaster and every child process (`/proc/<pid>/stat` of each live child, and the postmaster's `cutime` + `cstime` for the children it reaped), idle but in the PostgreSQL runs. *Anything else* is the machine's busy time (`/proc/stat`) less the run's own processes: other work on the machine that competed with the run. The counting runs are listed for what the counting costs; their figures are not the mode's.\n\n");
        md.push_str("| run | wall s | CPU window s | records/s | worker | Kafka | redis-server | PostgreSQL | harness | anything else | total | worker s / M | Kafka s / M | Redis s / M | PostgreSQL s / M | RSS MiB: worker peak, Kafka, redis-server |\n");
        md.push_str("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n");
        for r in self.every_run() {
            let w = r.cpu_window_s.max(1e-9);
            let database = r.database_cpu_s.unwrap_or(0.0);
            let _ = writeln!(
                md,
                "| {} | {:.1} | {:.1} | {} | {:.2} | {:.2} | {:.2} | {} | {:.2} | {:.2} | {:.2} | {:.1} | {:.1} | {:.1} | {} | {:.0}, {:.0}, {:.0} |",
                run_name(r),
                r.seconds,
                r.cpu_window_s,
                rate(r.records_per_s),
                r.worker_cpu_s / w,
                r.kafka_cpu_s / w,
                r.redis_cpu_s / w,
                opt(r.database_cpu_s.map(|s| s / w), 2),
                r.harness_cpu_s / w,
                r.other_cpu_s / w,
                (r.worker_cpu_s + r.kafka_cpu_s + r.redis_cpu_s + database + r.harness_cpu_s + r.other_cpu_s) / w,
                r.worker_cpu_s_per_million,
                r.kafka_cpu_s_per_million,
                r.redis_cpu_s_per_million,
                opt(r.database_cpu_s_per_million, 1),
                r.worker_peak_rss_mb,
                r.kafka_rss_mb,
                r.redis_rss_mb,
            );
        }
    }

    fn counting_section(&self, md: &mut String) {
        if self.counting.is_empty() {
            return;
        }
        md.push_str(
            "\n### Counting runs: store rounds, Redis round trips and commands per batch\n\n",
        );
        md.push_str("A batch here is a store round carrying claims (the worker claims a poll's records in one round; records waiting on another record's claim are claimed again in a later one). Store rounds as the counting store saw them (with claims, or a publish only); Redis round trips and commands of the claim protocol on the wire, through the proxy (set-up and the stats watcher's `INFO` left out, listed as *other*). The records/s and latency of these runs carry the proxy and the counting in their path: they show what the counting costs, not the mode. *Heap allocations / record*: every allocation of the replica's Rust code from `go` to `stop` (the bench's counting allocator around mimalloc; set-up, logs and metrics included) over the records: a record's own copy of its key, payload and headers is one allocation per buffer (its output needs them after the round: for a bench record with one header, five), the fingerprint none. librdkafka's C code allocates with its own malloc and is not counted.\n\n");
        md.push_str("| run | records/s (counting in the path) | p50 / p99 ms | batches | records / batch | store rounds / batch | with a publish / batch | round trips: claims / batch | publish only / batch | total / batch | per store round | commands / batch | other round trips | bytes up / down per batch | heap allocations / record |\n");
        md.push_str("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n");
        for r in &self.counting {
            let Some(c) = &r.counting else { continue };
            let b = c.batches.max(1) as f64;
            let rt = &c.round_trips;
            let _ = writeln!(
                md,
                "| {} | {} | {} / {} | {} | {:.0} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.1} | {} | {:.0} / {:.0} | {:.2} |",
                run_name(r),
                rate(r.records_per_s),
                opt(r.latency_p50_ms, 1),
                opt(r.latency_p99_ms, 1),
                count(c.batches),
                c.records_per_batch,
                c.store_rounds_per_batch,
                c.tally.publish_rounds as f64 / b,
                rt.claim as f64 / b,
                rt.publish as f64 / b,
                c.round_trips_per_batch,
                c.round_trips_per_store_round,
                c.commands_per_batch,
                rt.other,
                rt.bytes_up as f64 / b,
                rt.bytes_down as f64 / b,
                c.allocations_per_record,
            );
        }
        md.push_str("\n### Where a counting replica's wall time goes, per batch\n\n");
        md.push_str("Per batch, ms: each counting replica's wall time split at the events the worker emits (a store round starts: its batch-size metric; a store call starts and ends: the counting store; outputs acknowledged: its records metric, counted once a turn of its loop; an offset commit), summed over the replicas and divided by the batches. With rounds pipelined, each gap goes to the phase its two events bound.\n\n");
        md.push_str("| run |");
        for (name, _) in super::timeline::Phases::default().named() {
            let _ = write!(md, " {name} |");
        }
        md.push_str("\n|---|");
        md.push_str(&"--:|".repeat(9));
        md.push('\n');
        for r in &self.counting {
            let Some(c) = &r.counting else { continue };
            let b = c.batches.max(1) as f64;
            let _ = write!(md, "| {} |", run_name(r));
            for (_, us) in c.phases.named() {
                let _ = write!(md, " {:.2} |", us as f64 / 1000.0 / b);
            }
            md.push('\n');
        }
        md.push_str("\n### What the publishes carried, per batch (counting runs)\n\n");
        md.push_str("| run | watermark raises | done flags set | done flags lost | tier-2 inserts | claims released |\n");
        md.push_str("|---|--:|--:|--:|--:|--:|\n");
        for r in &self.counting {
            let Some(c) = &r.counting else { continue };
            let (t, b) = (&c.tally, c.batches.max(1) as f64);
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
    }

    fn decisions_section(&self, md: &mut String) {
        md.push_str("\n### Decisions\n\n");
        md.push_str("Clean runs: the replicas' `idemgate_records_total` and `idemgate_tier_hits_total` on /metrics; counting runs: the claim outcomes the counting store saw; the baseline: its own.\n\n");
        md.push_str("| run | novel | duplicate, tier 1 | duplicate, filter | conflict | unverified or invalid | replayed (decided before) | claim retries (held) | check |\n");
        md.push_str("|---|--:|--:|--:|--:|--:|--:|--:|---|\n");
        for r in self.every_run() {
            if let Some(s) = &r.scraped {
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {} | {} | {} | | | {} |",
                    run_name(r),
                    count(s.novel),
                    count(s.duplicate_exact),
                    count(s.duplicate_filter),
                    count(s.conflict),
                    count(s.unverified + s.invalid),
                    r.check
                );
            } else if let Some(c) = &r.counting {
                let t = &c.tally;
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {} | {} | | {} | {} | {} |",
                    run_name(r),
                    count(t.won),
                    count(t.duplicate_exact),
                    count(t.duplicate_filter),
                    count(t.conflict),
                    count(t.replayed),
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
            } else if r.passthrough.is_some() {
                let _ = writeln!(md, "| {} | | | | | | | | {} |", run_name(r), r.check);
            }
        }
    }

    fn memory_section(&self, md: &mut String) {
        md.push_str("\n### Redis memory (clean runs)\n\n");
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
