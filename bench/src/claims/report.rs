//! The printed tables. Everything measured ends up here, so the run's
//! output is one block that can be pasted as it is.

use super::fingerprints;
use super::footprint::Tier1;
use super::live::Live;
use super::runs;
use super::throughput::{self, Trips};
use idemgate::store::redis::Tier1Layout;

pub struct Tier2 {
    pub backend: String,
    pub what: String,
    pub bytes: u64,
}

pub struct Report {
    bench: bool,
    pub fingerprints: Vec<fingerprints::Row>,
    pub claims: Vec<throughput::Row>,
    pub tier1: Option<Tier1>,
    /// Bytes and server CPU per live claim, per tier-1 layout.
    pub live: Vec<Live>,
    pub tier2: Vec<Tier2>,
    pub runs: Vec<runs::Row>,
    pub unmeasured: Vec<String>,
    pub versions: Vec<(String, String)>,
}

/// `20802` (MODULE LIST's `ver`) as `2.8.2 (20802)`.
pub fn bloom_semver(ver: &str) -> String {
    match ver.parse::<u64>() {
        Ok(v) => format!("{}.{}.{} ({v})", v / 10_000, v / 100 % 100, v % 100),
        Err(_) => ver.to_string(),
    }
}

/// Thousands separated, so rates can be read at a glance.
fn grouped(n: f64) -> String {
    let digits = format!("{:.0}", n.max(0.0));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn per_batch(trips: &Trips, pick: fn(&Trips) -> crate::proxy::Snapshot) -> String {
    let s = pick(trips);
    let n = trips.batches.max(1) as f64;
    format!(
        "{:.2} rt / {} cmd",
        s.round_trips() as f64 / n,
        grouped(s.commands as f64 / n)
    )
}

impl Report {
    /// Bytes and server CPU per live claim, each layout against `keys`.
    pub fn print_live(&self) {
        for l in &self.live {
            let keys = self
                .live
                .iter()
                .find(|k| k.layout == Tier1Layout::Keys && k.server == l.server);
            let cpu_vs_keys = keys
                .map(|k| {
                    format!(
                        " ({:.2}x keys)",
                        l.server_us_per_claim / k.server_us_per_claim
                    )
                })
                .unwrap_or_default();
            println!(
                "   tier 1 live, {:<7} ({}): {}/s for {} x ttl {:?}: used_memory {} -> {} \
                 over {} live claims = {:.1} bytes/live claim; server cpu {:.2} us/claim{} \
                 ({} written, {} keys at the end)",
                format!("{:?}", l.layout).to_lowercase(),
                l.server,
                grouped(l.pace.rate as f64),
                l.pace.ttls,
                l.pace.ttl,
                grouped(l.used_before as f64),
                grouped(l.used_after as f64),
                grouped(l.live as f64),
                l.bytes_per_live_claim,
                l.server_us_per_claim,
                cpu_vs_keys,
                grouped(l.written as f64),
                grouped(l.keys as f64),
            );
        }
    }

    pub fn new(bench: bool) -> Report {
        Report {
            bench,
            fingerprints: Vec::new(),
            claims: Vec::new(),
            tier1: None,
            live: Vec::new(),
            tier2: Vec::new(),
            runs: Vec::new(),
            unmeasured: Vec::new(),
            versions: Vec::new(),
        }
    }

    pub fn print(&self) {
        let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
        println!();
        println!(
            "idemgate claims bench ({}; {cores} cores; {} build)",
            if self.bench {
                "full run"
            } else {
                "SMOKE pass: tiny sizes, figures meaningless"
            },
            if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            }
        );
        for (what, version) in &self.versions {
            println!("  {what}: {version}");
        }

        println!();
        println!("1. fingerprints (idemgate::fingerprint::fingerprint only; median of passes)");
        println!(
            "{:<44} {:>8} {:>10} {:>14} {:>10}",
            "profile", "records", "avg bytes", "records/s", "ns/record"
        );
        for row in &self.fingerprints {
            println!(
                "{:<44} {:>8} {:>10.0} {:>14} {:>10.0}",
                row.profile,
                row.records,
                row.mean_bytes,
                grouped(row.per_second),
                row.ns_per_record
            );
        }

        println!();
        println!("2. claim batches (records/s; time inside ClaimStore calls only). A batch is a");
        println!(
            "   claim round, then a publish round (a watermark raise per partition, done flags"
        );
        println!("   where a raise does not cover a record, tier-2 inserts when tiered), then the");
        println!("   same hashes claimed by other records. The worker sends each publish with the");
        println!("   next batch's claims, in one round; here each goes alone, to be timed apart.");
        println!(
            "{:<18} {:<7} {:>6} {:>8} {:>14} {:>20} {:>16}",
            "backend", "mode", "batch", "records", "new: claim", "new: claim+publish", "dup: claim"
        );
        for row in &self.claims {
            println!(
                "{:<18} {:<7} {:>6} {:>8} {:>14} {:>20} {:>16}",
                row.backend,
                row.mode,
                row.batch,
                row.records,
                grouped(row.claim_new),
                grouped(row.claim_publish_new),
                grouped(row.claim_duplicate)
            );
        }
        let counted: Vec<_> = self.claims.iter().filter(|r| r.trips.is_some()).collect();
        if !counted.is_empty() {
            println!();
            println!("   round trips per batch (RESP proxy on the wire; standalone only: a cluster client");
            println!("   connects to the nodes CLUSTER SLOTS names, so it is not counted; memory has none)");
            println!(
                "   (a publish carries, per batch: watermark raises / done flags / tier-2 inserts)"
            );
            println!(
                "{:<18} {:<7} {:>11} {:>22} {:>22} {:>22} {:>18}",
                "backend",
                "mode",
                "batches of",
                "new: claim",
                "new: publish",
                "dup: claim",
                "publish carries"
            );
            for row in counted {
                if let Some(trips) = &row.trips {
                    let n = trips.batches.max(1) as f64;
                    println!(
                        "{:<18} {:<7} {:>11} {:>22} {:>22} {:>22} {:>18}",
                        row.backend,
                        row.mode,
                        format!("{} x {}", trips.batches, trips.size),
                        per_batch(trips, |t| t.claim),
                        per_batch(trips, |t| t.publish),
                        per_batch(trips, |t| t.duplicate),
                        format!(
                            "{:.1} / {:.1} / {:.0}",
                            trips.raises as f64 / n,
                            trips.done_flags as f64 / n,
                            trips.inserts as f64 / n
                        )
                    );
                }
            }
        }

        let with_cpu: Vec<_> = self.claims.iter().filter(|r| r.cpu.is_some()).collect();
        if !with_cpu.is_empty() {
            println!();
            println!(
                "   CPU per record, new claim + publish + duplicate claim together (client: this"
            );
            println!("   process, /proc ticks; server: INFO cpu on every master, other clients included)");
            println!(
                "{:<18} {:<7} {:>10} {:>12} {:>12}",
                "backend", "mode", "wall us", "client us", "server us"
            );
            for row in with_cpu {
                if let Some(cpu) = &row.cpu {
                    println!(
                        "{:<18} {:<7} {:>10.2} {:>12.2} {:>12}",
                        row.backend,
                        row.mode,
                        cpu.wall_us,
                        cpu.client_us,
                        cpu.server_us
                            .map_or("-".to_string(), |us| format!("{us:.2}"))
                    );
                }
            }
        }

        println!();
        println!("3. Redis memory");
        match &self.tier1 {
            Some(t) => {
                println!(
                    "   tier 1 (scratch redis-server pid {}, exact stream, claim + publish; {} \
                     other key{} (watermarks) written before the first reading):",
                    t.server_pid,
                    t.other_keys,
                    if t.other_keys == 1 { "" } else { "s" }
                );
                println!(
                    "   {} keys: used_memory {} -> {} = {:.1} bytes/key (key {} bytes, value {} bytes; MEMORY USAGE of one key: {})",
                    grouped(t.keys as f64),
                    grouped(t.used_before as f64),
                    grouped(t.used_after as f64),
                    t.bytes_per_key,
                    t.key_len,
                    t.value_len,
                    t.memory_usage_one
                );
            }
            None => println!("   tier 1: not measured"),
        }
        self.print_live();
        let sizing = throughput::sizing();
        println!(
            "   tier 2 sizing: capacity {} at p={}: {:.2} bits/key, k={} ({} bytes a generation)",
            grouped(sizing.capacity as f64),
            sizing.fp_rate,
            sizing.bits_per_key(),
            sizing.hashes,
            grouped(sizing.bits.div_ceil(8) as f64)
        );
        for t in &self.tier2 {
            println!(
                "   tier 2 {:<16} MEMORY USAGE {} bytes of {} / capacity = {:.2} bits/key",
                t.backend,
                grouped(t.bytes as f64),
                t.what,
                t.bytes as f64 * 8.0 / sizing.capacity as f64
            );
        }

        self.print_runs();

        if !self.unmeasured.is_empty() {
            println!();
            println!("NOT MEASURED:");
            for line in &self.unmeasured {
                println!("   {line}");
            }
        }
    }
}

impl Report {
    /// Section 4: what a commit whose finished runs overflow its metadata
    /// costs (`runs.rs`).
    pub fn print_runs(&self) {
        println!();
        println!("4. Finished runs that do not fit in a commit's metadata (docs/design.md §7)");
        println!(
            "   one finished record, then one waiting, repeated; each commit: its metadata, and where \
             the runs do not fit inline one put (or one refresh, where unchanged) acknowledged before \
             it, one delete once a later commit is known committed, one read at the next assignment"
        );
        println!(
            "   {:<16} {:>7} {:>15} {:>13} {:>9} {:>11} {:>8} {:>11}",
            "backend",
            "runs",
            "metadata bytes",
            "record bytes",
            "put us",
            "refresh us",
            "get us",
            "delete us"
        );
        let us = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.0}"));
        for r in &self.runs {
            println!(
                "   {:<16} {:>7} {:>15} {:>13} {:>9} {:>11} {:>8} {:>11}",
                r.backend,
                grouped(r.runs as f64),
                grouped(r.metadata_bytes as f64),
                r.record_bytes
                    .map_or("inline".into(), |b| grouped(b as f64)),
                us(r.put_us),
                us(r.refresh_us),
                us(r.get_us),
                us(r.delete_us)
            );
        }
    }
}
