//! The closing note of `BENCHMARKS.md`: for every target missed, where the
//! time or the memory goes, in this run's own figures (and, with `--perf`,
//! the sampled profile), and what would close the gap.

use std::fmt::Write as _;

use super::report::{count, rate, run_name, Report};
use super::runs::{Mode, RunResult};

pub(crate) fn closing_note(report: &Report) -> String {
    let mut md = String::from("## Closing note: where the time and the memory go\n\n");
    let missed: Vec<&str> = report
        .targets
        .iter()
        .filter(|t| t.met == Some(false))
        .map(|t| t.target.as_str())
        .collect();
    if missed.is_empty() {
        md.push_str("Every target that was run is met.\n\n");
    } else {
        let _ = writeln!(md, "Missed: {}.\n", missed.join("; "));
    }
    let exact = report
        .runs
        .iter()
        .find(|r| r.mode == Some(Mode::Exact) && r.replicas == 1);
    if let Some(r) = exact {
        throughput(&mut md, report, r);
        if let Some(m) = &r.memory {
            tier1(&mut md, r, m);
        }
    }
    modes(&mut md, report);
    tier2(&mut md, report);
    if let Some(profile) = &report.profile {
        md.push_str("### Sampled profile (perf, exact mode, one replica, an extra run)\n\n");
        if let Some(p) = &report.profiled {
            let _ = writeln!(
                md,
                "That run: {} records/s, worker {:.1} CPU s per million records (perf itself \
                 costs a little).\n",
                rate(p.records_per_s),
                p.worker_cpu_s_per_million
            );
        }
        for process in &profile.processes {
            let _ = writeln!(
                md,
                "**{}** ({} samples). By component: {}.\n",
                process.role,
                count(process.samples),
                process
                    .components
                    .iter()
                    .filter(|(_, p)| *p >= 0.5)
                    .map(|(c, p)| format!("{c} {p:.1} %"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            if process.role == "worker" {
                md.push_str("| % of worker samples | thread | symbol |\n|--:|---|---|\n");
                for (percent, thread, symbol) in &process.top {
                    let _ = writeln!(
                        md,
                        "| {percent:.2} | {thread} | `{}` |",
                        symbol.replace('|', "\\|")
                    );
                }
                md.push('\n');
            }
        }
    }
    md
}

fn throughput(md: &mut String, report: &Report, r: &RunResult) {
    md.push_str("### Throughput\n\n");
    let wall = r.seconds.max(1e-9);
    let ours = r.worker_cpu_s + r.tansu_cpu_s + r.redis_cpu_s + r.harness_cpu_s;
    let ceiling = 1e6 / r.worker_cpu_s_per_million.max(1e-9);
    let b = r.batches.max(1) as f64;
    let ms = |us: u64| us as f64 / 1000.0 / b;
    let _ = writeln!(
        md,
        "Exact mode with one replica: {} records/s. A replica decides one batch at a time, so \
         its rate is the batch size over the batch cycle (p50 {:.1} ms for about {:.0} records).",
        rate(r.records_per_s),
        r.batch_cycle_p50_ms.unwrap_or(0.0),
        r.batch_records as f64 / b
    );
    if let Some(phases) = &r.phases {
        let named = phases.named();
        let total: u64 = named.iter().map(|(_, us)| us).sum();
        let parts: Vec<String> = named
            .iter()
            .filter(|(_, us)| *us * 100 >= total.max(1))
            .map(|(name, us)| {
                format!(
                    "{name} {:.2} ms ({:.0} %)",
                    ms(*us),
                    *us as f64 * 100.0 / total.max(1) as f64
                )
            })
            .collect();
        let _ = writeln!(md, "Per batch: {}.", parts.join(", "));
    }
    let _ = writeln!(
        md,
        "Over the run's {wall:.1} s the replica kept {:.2} of a core busy, Tansu {:.2}, \
         redis-server {:.2}, the harness {:.2}: {:.2} of the machine's 2 cores (anything else on \
         the machine took {:.2}). At {:.1} CPU seconds per million records the worker alone would \
         reach at most {} records/s on a core of its own.\n",
        r.worker_cpu_s / wall,
        r.tansu_cpu_s / wall,
        r.redis_cpu_s / wall,
        r.harness_cpu_s / wall,
        ours / wall,
        r.other_cpu_s / wall,
        r.worker_cpu_s_per_million,
        rate(ceiling)
    );
    if r.records_per_s >= 100_000.0 {
        md.push_str("The target is met on this machine.\n\n");
        return;
    }
    md.push_str("What keeps it below 100,000 records/s, and what would close the gap:\n\n");
    let mut causes = Vec::new();
    if let Some(p) = &r.phases {
        let total: u64 = p.named().iter().map(|(_, us)| us).sum();
        let share = |us: u64| us as f64 * 100.0 / total.max(1) as f64;
        let redis = p.claim + p.finalize;
        let waits = share(redis + p.produce);
        causes.push(format!(
            "**The loop waits more than it computes.** The replica keeps {:.2} of a core busy; \
             {waits:.0} % of a batch is spent waiting on Redis (claim {:.1} ms, finalize {:.1} \
             ms) and on the broker's acknowledgements ({:.1} ms), one after the other, while the \
             next batch sits in librdkafka's queue. Overlapping batches (fingerprint and claim \
             batch n+1 while batch n's outputs are in flight; finalize and commit strictly in \
             order) would hide most of that wait without loosening any guarantee; it is a change \
             to the worker's loop",
            r.worker_cpu_s / wall,
            ms(p.claim),
            ms(p.finalize),
            ms(p.produce)
        ));
        if share(p.finalize) >= 12.0 {
            causes.push(format!(
                "**Finalize is a second Redis round trip** ({:.1} ms a batch): one `EVALSHA` per \
                 hash-tag group (up to 64 a batch), each a Lua loop that reads, compares and \
                 rewrites every key of its group, after the outputs are acknowledged. Overlapping \
                 it with the next batch's claim (it does not gate the next batch, only the \
                 commit) would take it off the batch cycle",
                ms(p.finalize)
            ));
        }
        if share(p.produce) >= 20.0 {
            causes.push(format!(
                "**The broker's acknowledgements** take {:.1} ms a batch: the outputs of a batch \
                 go to {} clean and {} audit partitions and the worker awaits every delivery \
                 report. This share is the broker's (here Tansu, in memory, on the same two \
                 cores), not idemgate's; it changes with the production broker",
                ms(p.produce),
                report.partitions,
                report.partitions
            ));
        }
    }
    if ceiling < 100_000.0 {
        let components = report
            .profile
            .as_ref()
            .and_then(|p| p.processes.iter().find(|p| p.role == "worker"))
            .map(|w| {
                w.components
                    .iter()
                    .take(4)
                    .map(|(c, p)| format!("{c} {p:.0} %"))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .map(|c| format!(" The profile below splits it: {c}."))
            .unwrap_or_else(|| " Run with `--perf` for the split.".into());
        causes.push(format!(
            "**Even without waiting, the worker's CPU per record is too high**: {:.1} s per \
             million records caps a core at {} records/s; 100,000 records/s needs under 10.{components} \
             Allocation is mostly per-record copies (the polled record's topic, key, payload and \
             headers are copied into owned buffers, the outputs' headers built again, the hash \
             hex-encoded per header and log line); borrowing the messages and a faster allocator \
             would cut it. The fingerprint builds a JSON tree and serializes it twice (hash and \
             digest)",
            r.worker_cpu_s_per_million,
            rate(ceiling)
        ));
    }
    if ours / wall >= 1.6 {
        causes.push(format!(
            "**The machine is saturated** ({:.2} of 2 cores busy with the run): in production the \
             broker and Redis run elsewhere",
            ours / wall
        ));
    }
    if let Some(two) = report
        .runs
        .iter()
        .find(|x| x.mode == Some(Mode::Exact) && x.replicas == 2)
    {
        causes.push(format!(
            "**A second replica** adds throughput while the cores have room: two replicas \
             together reached {} records/s ({} each) on the same two cores, with {:.2} cores busy",
            rate(two.records_per_s),
            rate(two.records_per_s / 2.0),
            (two.worker_cpu_s + two.tansu_cpu_s + two.redis_cpu_s + two.harness_cpu_s)
                / two.seconds.max(1e-9)
        ));
    }
    for cause in causes {
        let _ = writeln!(md, "- {cause}.");
    }
    md.push('\n');
}

/// How the tiered runs compare with exact mode, one replica each: what the
/// second tier costs per batch and on the server.
fn modes(md: &mut String, report: &Report) {
    let one = |mode| {
        report
            .runs
            .iter()
            .find(|r| r.mode == Some(mode) && r.replicas == 1)
    };
    let Some(exact) = one(Mode::Exact) else {
        return;
    };
    let ms = |r: &RunResult, us: fn(&super::timeline::Phases) -> u64| {
        r.phases
            .as_ref()
            .map_or(0.0, |p| us(p) as f64 / 1000.0 / r.batches.max(1) as f64)
    };
    let mut lines = Vec::new();
    for mode in [Mode::RedisBloom, Mode::Bitmap] {
        let Some(r) = one(mode) else { continue };
        let up = r.round_trips.map_or(0.0, |rt| {
            rt.bytes_up as f64 / r.batches.max(1) as f64 / 1024.0
        });
        lines.push(format!(
            "- {}: {} records/s ({:.0} % of exact mode). Claim {:.1} ms and finalize {:.1} ms a \
             batch (exact: {:.1} and {:.1}); redis-server {:.1} CPU s per million records (exact: \
             {:.1}); {:.0} KiB sent to Redis a batch.{}",
            run_name(r),
            rate(r.records_per_s),
            r.records_per_s * 100.0 / exact.records_per_s.max(1e-9),
            ms(r, |p| p.claim),
            ms(r, |p| p.finalize),
            ms(exact, |p| p.claim),
            ms(exact, |p| p.finalize),
            r.redis_cpu_s * 1e6 / r.records.max(1) as f64,
            exact.redis_cpu_s * 1e6 / exact.records.max(1) as f64,
            up,
            if mode == Mode::Bitmap {
                " On bitmaps a record's probe is k bit reads (10 at 1e-3) in every live \
                 generation (2 or 3), each a `GET u1 <offset>` sub-command of `BITFIELD_RO` \
                 (three arguments), and its insert k `SET u1 <offset> 1`: the server parses \
                 and executes some 100 arguments per record where RedisBloom gets the hash once \
                 per generation and computes the positions itself. Skipping generations that do \
                 not exist would halve the reads here (the stream is new, so the previous \
                 generation is absent); in steady state both are live and read."
            } else {
                ""
            }
        ));
    }
    if lines.is_empty() {
        return;
    }
    md.push_str("### Tiered mode\n\n");
    for line in lines {
        md.push_str(&line);
        md.push('\n');
    }
    md.push('\n');
}

/// jemalloc's size class for an allocation of `n` bytes (small classes:
/// 8, 16, then four per doubling from 32), which is what Redis really
/// spends on it.
fn jemalloc_class(n: usize) -> usize {
    if n <= 8 {
        return 8;
    }
    if n <= 16 {
        return 16;
    }
    if n <= 64 {
        return n.div_ceil(16) * 16;
    }
    let group = n.next_power_of_two() / 2;
    let step = group / 4;
    n.div_ceil(step) * step
}

/// Bytes of the value object of a string of `len` bytes: an embedded
/// string (object header and sds in one allocation) up to 44 bytes.
fn value_bytes(len: usize) -> usize {
    if len <= 44 {
        jemalloc_class(16 + 3 + len + 1)
    } else {
        16 + jemalloc_class(3 + len + 1)
    }
}

fn tier1(md: &mut String, r: &RunResult, m: &super::memory::Memory) {
    md.push_str("### Tier-1 memory\n\n");
    let entry = jemalloc_class(24);
    let key = jemalloc_class(3 + m.tier1_key_len + 1);
    let value = value_bytes(m.tier1_value_len);
    let tables = m.tier1_bytes_per_key - (entry + key + value + entry) as f64;
    let _ = writeln!(
        md,
        "{}: {:.1} bytes of `used_memory` per tier-1 key (`MEMORY USAGE` of one key says \
         {:.0}; it counts the table entry at 24 bytes and leaves out the expiry entry and the \
         tables). In jemalloc's size classes, one claim is: the main table's entry {entry}, the \
         key {key} (a {}-byte string: prefix `{}`, stream name, `:c:`, a cluster hash tag and 16 \
         bytes of hash), the value object {value} (its {}-byte claim value embedded), the entry \
         in the expiry table {entry} (every claim has a TTL), and the two tables' bucket arrays, \
         {tables:.0} bytes per key at this key count (8 bytes per bucket each, tables sized to \
         the next power of two).",
        run_name(r),
        m.tier1_bytes_per_key,
        m.tier1_memory_usage,
        m.tier1_key_len,
        super::runs::PREFIX,
        m.tier1_value_len
    );
    if m.tier1_bytes_per_key <= 150.0 {
        md.push_str("\nThe 150-byte target is met.\n\n");
        return;
    }
    let small_key = jemalloc_class(3 + 28 + 1);
    let small_value = value_bytes(28);
    let floor = (entry + small_key + small_value + entry) as f64 + tables;
    let _ = writeln!(
        md,
        "\nWhat would close the gap: savings come in whole size classes. A key of at most 28 \
         bytes (a short prefix, a one-byte stream id instead of the name, the hash tag and 16 \
         bytes of hash) takes {small_key} bytes instead of {key}; a value of at most 28 bytes \
         (dropping the 8-byte claim time and judging expiry by Redis' TTL alone, or a 4-byte \
         offset delta) takes {small_value} instead of {value}. Both together give about \
         {floor:.0} bytes: with one key per claim on this Redis (7.0), the two table entries \
         and buckets (about {:.0} bytes) are a floor that leaves 150 out of reach. What goes \
         below it: a server with a leaner key table (the Valkey project reports its 8.1 hash \
         table saves up to 30 bytes per key with a TTL: with the shorter key and value, about \
         {:.0} bytes), a value Redis stores as an integer (a 16-byte object: a claim packed \
         into 63 bits, at the price of a shorter payload digest), or claims grouped into \
         small hashes with per-field expiry (`HPEXPIRE`, Redis 7.4 and later).\n",
        (entry * 2) as f64 + tables,
        floor - 30.0
    );
}

fn tier2(md: &mut String, report: &Report) {
    let mut lines = Vec::new();
    for r in &report.runs {
        let Some(t) = r.memory.as_ref().and_then(|m| m.tier2.as_ref()) else {
            continue;
        };
        if r.replicas != 1 {
            continue;
        }
        let false_positives = r.tally.as_ref().map_or(0, |t| t.duplicate_filter);
        let first_probes = r.tally.as_ref().map_or(0, |t| t.won + t.duplicate_filter);
        lines.push(format!(
            "- {}: {} generation key(s) hold {} bytes for a capacity of {} keys: {:.2} bits per \
             key, against {:.2} from the sizing formula; {} keys were inserted ({:.2} bits per \
             key inserted). Every copy here met its original in tier 1, so each filter hit was \
             a false positive (a new event suppressed): {} of {} new hashes, {:.1e}, averaged \
             over a generation filling from empty to {:.0} % of capacity (1e-3 is the rate at \
             capacity){}",
            run_name(r),
            t.keys,
            count(t.bytes),
            count(t.capacity),
            t.bits_per_capacity_key,
            t.sized_bits_per_key,
            count(t.inserts),
            t.bits_per_inserted_key,
            count(false_positives),
            count(first_probes),
            false_positives as f64 / first_probes.max(1) as f64,
            t.inserts as f64 * 100.0 / t.capacity.max(1) as f64,
            if t.bits_per_capacity_key > 15.0 {
                ". Over 15 bits because the allocator rounds each bitmap shard up to its size \
                 class (shards are m / shards bits, not a class size): sizing the shards to \
                 exactly 1 MiB (8,388,608 bits, a jemalloc class) and raising the generation's \
                 capacity to fill whole shards at the same false-positive rate would bring it \
                 to the formula's 14.4 bits per key"
            } else {
                ""
            }
        ));
    }
    if lines.is_empty() {
        return;
    }
    md.push_str("### Tier-2 memory\n\n");
    for line in lines {
        md.push_str(&line);
        md.push_str(".\n");
    }
    md.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocations_round_up_to_jemalloc_size_classes() {
        assert_eq!(jemalloc_class(24), 32);
        assert_eq!(jemalloc_class(40), 48);
        assert_eq!(jemalloc_class(53), 64);
        assert_eq!(jemalloc_class(100), 112);
        assert_eq!(jemalloc_class(130), 160);
        // A 33-byte claim value: object header + sds header + bytes + NUL.
        assert_eq!(value_bytes(33), 64);
        assert_eq!(value_bytes(28), 48);
    }
}
