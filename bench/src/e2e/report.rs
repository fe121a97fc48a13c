//! The figures as a table on stdout, as `BENCHMARKS.md` (with the machine,
//! the versions, what each figure means, the targets and a closing note
//! derived from the figures) and as `BENCHMARKS.json`.

use std::fmt::Write as _;
use std::process::Command;

use serde::Serialize;

use super::pairs::{CPU_OVER_PASSTHROUGH, OVER_PASSTHROUGH};
use super::runs::{Dataset, Kind, Mode, RunResult, Setup};
use super::BenchArgs;

/// Every run of an invocation, by role.
pub(crate) struct Runs {
    /// The mode's figures: nothing of the bench in the path.
    pub clean: Vec<RunResult>,
    /// Round trips, commands, store rounds: through the proxy and the
    /// counting store.
    pub counting: Vec<RunResult>,
    pub passthrough: Option<RunResult>,
    pub baseline: Option<RunResult>,
    /// The extra clean run under perf.
    pub profiled: Option<RunResult>,
    /// Exact mode and the passthrough, alternated.
    pub pairs: Option<super::pairs::Pairs>,
    pub handovers: Vec<super::handover::HandoverResult>,
}

#[derive(Serialize)]
pub(crate) struct Report {
    pub generated_at: String,
    pub command: String,
    /// The whole invocation, loading and every run, seconds.
    pub total_seconds: f64,
    pub machine: Vec<(String, String)>,
    pub versions: Vec<(String, String)>,
    pub batch_records: usize,
    pub partitions: i32,
    pub feed_rate: f64,
    pub datasets: Vec<Dataset>,
    /// The clean runs: every mode's figures.
    pub runs: Vec<RunResult>,
    /// The counting runs: round trips, commands and store rounds per batch
    /// (their throughput is not a mode's).
    pub counting: Vec<RunResult>,
    /// Consume, produce, commit with the worker's clients and no store.
    pub passthrough: Option<RunResult>,
    pub baseline: Option<RunResult>,
    /// Exact mode, one replica, over the per-record baseline (records/s).
    pub baseline_ratio: Option<f64>,
    /// Exact mode, one replica, over the passthrough (records/s).
    pub passthrough_ratio: Option<f64>,
    pub targets: Vec<Target>,
    /// The extra run under perf, when asked for (not in the table).
    pub profiled: Option<RunResult>,
    pub profile: Option<super::profile::Profile>,
    /// Exact mode and the passthrough, alternated: each pair's ratios and
    /// their medians.
    pub pairs: Option<super::pairs::Pairs>,
    /// Whether the bench started a PostgreSQL server (PostgreSQL runs).
    pub postgres: bool,
    /// The handover runs: how long a moved partition is unserved.
    pub handovers: Vec<super::handover::HandoverResult>,
}

#[derive(Clone, Serialize)]
pub(crate) struct Target {
    pub target: String,
    pub figure: String,
    pub met: Option<bool>,
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

fn output(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn machine() -> Vec<(String, String)> {
    let cpu = read("/proc/cpuinfo")
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).to_string())
        .unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem_kb: f64 = read("/proc/meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|l| l.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0.0);
    let os = read("/etc/os-release")
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|l| l.trim_matches('"').to_string())
        .unwrap_or_default();
    vec![
        ("CPU".into(), format!("{cpu}, {cores} cores")),
        (
            "memory".into(),
            format!("{:.1} GiB", mem_kb / 1024.0 / 1024.0),
        ),
        (
            "OS".into(),
            format!("{os}, Linux {}", read("/proc/sys/kernel/osrelease").trim()),
        ),
    ]
}

fn versions(setup: &Setup) -> Vec<(String, String)> {
    let commit = output(
        "git",
        &[
            "-C",
            env!("CARGO_MANIFEST_DIR"),
            "rev-parse",
            "--short",
            "HEAD",
        ],
    )
    .map(|c| format!(" (built from the tree at commit {c}, with any uncommitted changes)"))
    .unwrap_or_default();
    let mut v = vec![
        (
            "idemgate".into(),
            format!("{}{commit}, release build", env!("CARGO_PKG_VERSION")),
        ),
        (
            "rustc".into(),
            output("rustc", &["--version"]).unwrap_or_else(|| "unknown".into()),
        ),
        (
            "librdkafka".into(),
            format!(
                "{} (bundled by rdkafka-sys)",
                rdkafka::util::get_rdkafka_version().1
            ),
        ),
        (
            "broker".into(),
            format!(
                "{} (KRaft, one node: broker and controller in one JVM, `{}`; its log on local disk)",
                setup.broker.version, setup.broker.heap
            ),
        ),
        ("Java".into(), setup.broker.java.clone()),
        ("redis".into(), setup.redis.version.clone()),
    ];
    if let Some(bloom) = &setup.redis.bloom_version {
        v.push(("RedisBloom".into(), format!("module version {bloom}")));
    }
    v.extend(setup.postgres.as_ref().map(super::postgres::version_row));
    v
}

fn now_utc() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// Tiered mode's (RedisBloom) records/s over exact mode's, at least.
const TIERED_OVER_EXACT: f64 = 0.95;
/// Exact mode's records/s with tier 1 grouped over tier 1 as keys, at
/// least, and Redis's CPU per record, at most (issue 49).
const GROUPED_OVER_KEYS: f64 = 0.95;
const GROUPED_REDIS_CPU: f64 = 1.5;
/// Exact mode on PostgreSQL over exact mode on Redis, at least.
const POSTGRES_OVER_REDIS: f64 = 0.75;

fn exact_one(runs: &[RunResult]) -> Option<&RunResult> {
    runs.iter()
        .find(|r| r.mode == Some(Mode::Exact) && r.replicas == 1)
}

impl Report {
    pub fn new(
        args: &BenchArgs,
        setup: &Setup,
        datasets: Vec<Dataset>,
        all: Runs,
        total_seconds: f64,
    ) -> Report {
        let Runs {
            clean: mut runs,
            mut counting,
            passthrough,
            baseline,
            profiled,
            pairs,
            handovers,
        } = all;
        let ceiling = passthrough.as_ref().map(|p| p.records_per_s);
        for r in runs.iter_mut().chain(counting.iter_mut()) {
            r.over_passthrough = ceiling.filter(|c| *c > 0.0).map(|c| r.records_per_s / c);
        }
        let passthrough_ratio = exact_one(&runs).and_then(|r| r.over_passthrough);
        let command = std::env::args()
            .skip(1)
            .collect::<Vec<_>>()
            .join(" ")
            .replace(&setup.exe.display().to_string(), "idemgate");
        let baseline_ratio = match (exact_one(&runs), &baseline) {
            (Some(e), Some(b)) if b.records_per_s > 0.0 => Some(e.records_per_s / b.records_per_s),
            _ => None,
        };
        let profile = profiled.as_ref().and_then(|p| p.profile.clone());
        let mut report = Report {
            generated_at: now_utc(),
            command: format!("idemgate {command}"),
            total_seconds,
            machine: machine(),
            versions: versions(setup),
            batch_records: args.batch,
            partitions: args.partitions,
            feed_rate: args.feed_rate,
            datasets,
            runs,
            counting,
            passthrough,
            baseline,
            baseline_ratio,
            passthrough_ratio,
            targets: Vec::new(),
            profiled,
            profile,
            pairs,
            postgres: setup.postgres.is_some(),
            handovers,
        };
        report.targets = report.targets();
        report
    }

    fn targets(&self) -> Vec<Target> {
        let mut t = Vec::new();
        let exact = exact_one(&self.runs);
        t.push(Target {
            target: "≥ 100,000 records/s per replica end to end, exact mode".into(),
            figure: exact.map_or("not run".into(), |r| {
                format!("{} records/s (one replica)", rate(r.records_per_s))
            }),
            met: exact.map(|r| r.records_per_s >= 100_000.0),
        });
        t.push(Target {
            target: "≥ 5x the per-record baseline".into(),
            figure: self
                .baseline_ratio
                .map_or("not run".into(), |x| format!("{x:.1}x")),
            met: self.baseline_ratio.map(|x| x >= 5.0),
        });
        // A store round carries a publish (inserts, raises, done flags) and
        // the next batch's claims: one Redis round trip on a standalone
        // server. A batch whose records wait on each other is claimed again
        // in a later round, and a publish with nothing to claim goes alone,
        // so store rounds per batch are shown beside the round trips.
        let per_round: Vec<(String, bool)> = self
            .counting
            .iter()
            .filter_map(|r| {
                let c = r.counting.as_ref()?;
                // Allowed on top: one NOSCRIPT retry per replica (the first
                // script on a server that has not seen it).
                let ok = c.round_trips.protocol_round_trips() <= c.tally.rounds + r.replicas as u64;
                Some((
                    format!(
                        "{}: {:.3} Redis round trips per store round; {:.2} store rounds, \
                         {:.2} Redis round trips and {:.1} Redis commands per batch",
                        run_name(r),
                        c.round_trips_per_store_round,
                        c.store_rounds_per_batch,
                        c.round_trips_per_batch,
                        c.commands_per_batch,
                    ),
                    ok,
                ))
            })
            .collect();
        t.push(Target {
            target: "one Redis round trip per store round, the publish riding with the next claims (counting runs)"
                .into(),
            figure: if per_round.is_empty() {
                "not run".into()
            } else {
                per_round
                    .iter()
                    .map(|(s, _)| s.clone())
                    .collect::<Vec<_>>()
                    .join("; ")
            },
            met: (!per_round.is_empty()).then(|| per_round.iter().all(|(_, ok)| *ok)),
        });
        let pairs = self.pairs.as_ref();
        t.push(Target {
            target: format!(
                "exact mode ≥ {OVER_PASSTHROUGH}x the passthrough's records/s, one replica (median of the alternated pairs)"
            ),
            figure: pairs.map_or("not run".into(), |p| {
                format!("{:.2}x over {} pairs", p.median_ratio, p.pairs.len())
            }),
            met: pairs.map(|p| p.median_ratio >= OVER_PASSTHROUGH),
        });
        t.push(Target {
            target: format!(
                "exact mode's worker CPU per record ≤ {CPU_OVER_PASSTHROUGH}x the passthrough's (median of the alternated pairs)"
            ),
            figure: pairs.map_or("not run".into(), |p| {
                format!("{:.2}x over {} pairs", p.median_cpu_ratio, p.pairs.len())
            }),
            met: pairs.map(|p| p.median_cpu_ratio <= CPU_OVER_PASSTHROUGH),
        });
        let bloom = self
            .runs
            .iter()
            .find(|r| r.mode == Some(Mode::RedisBloom) && r.replicas == 1);
        let tiered = match (bloom, exact) {
            (Some(b), Some(e)) if e.records_per_s > 0.0 => Some(b.records_per_s / e.records_per_s),
            _ => None,
        };
        t.push(Target {
            target: format!(
                "tiered mode (RedisBloom) ≥ {TIERED_OVER_EXACT}x exact mode's records/s, one replica (the table's runs)"
            ),
            figure: tiered.map_or("not run".into(), |x| format!("{x:.2}x")),
            met: tiered.map(|x| x >= TIERED_OVER_EXACT),
        });
        // Issue 49: the grouped tier 1 against a key per claim, in the
        // same invocation.
        let keys = self
            .runs
            .iter()
            .find(|r| r.mode == Some(Mode::ExactKeys) && r.replicas == 1);
        let (speed, redis_cpu) = match (exact, keys) {
            (Some(e), Some(k)) => (
                (k.records_per_s > 0.0).then(|| e.records_per_s / k.records_per_s),
                (k.redis_cpu_s_per_million > 0.0)
                    .then(|| e.redis_cpu_s_per_million / k.redis_cpu_s_per_million),
            ),
            _ => (None, None),
        };
        t.push(Target {
            target: format!(
                "exact mode, tier 1 grouped ≥ {GROUPED_OVER_KEYS}x the records/s of tier 1 as keys, one replica (the table's runs)"
            ),
            figure: speed.map_or("not run".into(), |x| format!("{x:.2}x")),
            met: speed.map(|x| x >= GROUPED_OVER_KEYS),
        });
        t.push(Target {
            target: format!(
                "Redis CPU per record, tier 1 grouped ≤ {GROUPED_REDIS_CPU}x tier 1 as keys (exact, one replica)"
            ),
            figure: redis_cpu.map_or("not run".into(), |x| format!("{x:.2}x")),
            met: redis_cpu.map(|x| x <= GROUPED_REDIS_CPU),
        });
        let postgres = self
            .runs
            .iter()
            .find(|r| r.mode == Some(Mode::Postgres) && r.replicas == 1);
        let pg = match (postgres, exact) {
            (Some(p), Some(e)) if e.records_per_s > 0.0 => Some(p.records_per_s / e.records_per_s),
            _ => None,
        };
        t.push(Target {
            target: format!(
                "exact mode on PostgreSQL (fsync and synchronous_commit on) ≥ {POSTGRES_OVER_REDIS}x exact mode on Redis's records/s, one replica (the table's runs)"
            ),
            figure: pg.map_or("not run".into(), |x| format!("{x:.2}x")),
            met: pg.map(|x| x >= POSTGRES_OVER_REDIS),
        });
        for (run, bound, what) in [(exact, 60.0, "grouped"), (keys, 150.0, "as keys")] {
            let tier1 = run.and_then(|r| r.memory.as_ref());
            t.push(Target {
                target: format!(
                    "tier 1 {what} ≤ {bound:.0} bytes per claim, claim value included (every claim live: the TTL outlasts the run)"
                ),
                figure: tier1.map_or("not run".into(), |m| {
                    format!(
                        "{:.0} bytes per claim (used_memory growth, exact mode)",
                        m.tier1_bytes_per_key
                    )
                }),
                met: tier1.map(|m| m.tier1_bytes_per_key <= bound),
            });
        }
        for mode in [Mode::RedisBloom, Mode::Bitmap] {
            let tier2 = self
                .runs
                .iter()
                .filter(|r| r.mode == Some(mode))
                .find_map(|r| r.memory.as_ref()?.tier2.clone());
            t.push(Target {
                target: format!("tier 2 ≤ 15 bits per key at 1e-3 ({})", mode.label()),
                figure: tier2.as_ref().map_or("not run".into(), |m| {
                    format!(
                        "{:.2} bits per key of capacity held ({:.2} per key inserted; sizing {:.2})",
                        m.bits_per_capacity_key, m.bits_per_inserted_key, m.sized_bits_per_key
                    )
                }),
                met: tier2.map(|m| m.bits_per_capacity_key <= 15.0),
            });
        }
        t
    }

    /// The table's rows: the clean runs, the passthrough, the baseline.
    pub(crate) fn all_runs(&self) -> impl Iterator<Item = &RunResult> {
        self.runs
            .iter()
            .chain(self.passthrough.iter())
            .chain(self.baseline.iter())
    }

    /// The counting run that gives a clean run its round trips: the one of
    /// the same mode and replicas, else the mode's first.
    pub(crate) fn counting_for(&self, r: &RunResult) -> Option<&RunResult> {
        let same_mode = || self.counting.iter().filter(|c| c.mode == r.mode);
        same_mode()
            .find(|c| c.replicas == r.replicas)
            .or_else(|| same_mode().next())
    }

    /// The main table, for stdout and the Markdown alike.
    pub fn table(&self) -> String {
        let mut out = String::new();
        out.push_str("| run | records | records/s | per replica | x passthrough | p50 ms | p99 ms | worker CPU s / M | Kafka CPU s / M | Redis CPU s / M | PostgreSQL CPU s / M | Redis round trips / batch | Redis commands / batch | store rounds / batch | tier-1 bytes / key | tier-2 bits / key | PostgreSQL bytes / claim on disk |\n");
        out.push_str("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n");
        let mut borrowed = false;
        for r in self.all_runs() {
            let memory = r.memory.as_ref();
            let (trips, commands, rounds) = match r.kind {
                Kind::Baseline => ("1 per record".into(), "1 per record".into(), "".into()),
                Kind::Passthrough => ("none".into(), "none".into(), "".into()),
                _ => match self
                    .counting_for(r)
                    .and_then(|c| Some((c, c.counting.as_ref()?)))
                {
                    Some((c, counted)) => {
                        let mark = if c.replicas == r.replicas { "" } else { "*" };
                        borrowed |= !mark.is_empty();
                        (
                            format!("{:.2}{mark}", counted.round_trips_per_batch),
                            format!("{:.1}{mark}", counted.commands_per_batch),
                            format!("{:.2}{mark}", counted.store_rounds_per_batch),
                        )
                    }
                    None => ("".into(), "".into(), "".into()),
                },
            };
            let (database_cpu, disk) = super::postgres::cells(r);
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {:.1} | {:.1} | {:.1} | {database_cpu} | {trips} | {commands} | {rounds} | {} | {} | {disk} |",
                run_name(r),
                count(r.records),
                rate(r.records_per_s),
                rate(r.records_per_s / r.replicas as f64),
                match r.kind {
                    Kind::Passthrough => "1.00".into(),
                    _ => opt(r.over_passthrough, 2),
                },
                opt(r.latency_p50_ms, 1),
                opt(r.latency_p99_ms, 1),
                r.worker_cpu_s_per_million,
                r.kafka_cpu_s_per_million,
                r.redis_cpu_s_per_million,
                memory.map_or("".into(), |m| format!("{:.0}", m.tier1_bytes_per_key)),
                memory
                    .and_then(|m| m.tier2.as_ref())
                    .map_or("".into(), |t| format!("{:.2}", t.bits_per_capacity_key)),
            );
        }
        if borrowed {
            out.push_str("\n\\* from the mode's counting run with another replica count (see the counting runs).\n");
        }
        out.push_str("\nRecords/s, latency and CPU: clean runs, nothing of the bench in the worker's path; latency read from the worker's own idemgate_decision_latency_seconds histogram (/metrics). Round trips, commands and store rounds per batch (a store round with claims): the mode's counting run, through the proxy and the counting store.\n");
        if self.postgres {
            out.push_str(super::postgres::TABLE_NOTE);
        }
        if let Some(p) = &self.passthrough {
            let _ = writeln!(
                out,
                "\nPassthrough (consume, produce, commit; the worker's clients, no store): {} records/s, the ceiling here; x passthrough is each run's records/s over it.",
                rate(p.records_per_s)
            );
        }
        if let Some(x) = self.baseline_ratio {
            let _ = writeln!(
                out,
                "\nExact mode, one replica, over the per-record baseline: {x:.1}x records/s."
            );
        }
        out
    }

    pub fn markdown(&self) -> String {
        let mut md = String::new();
        md.push_str("# idemgate: end-to-end benchmark\n\n");
        let _ = writeln!(
            md,
            "Generated {} by `{}` in {:.1} minutes (`scripts/bench.sh` runs it: it starts the test \
             services for Apache Kafka's jars and the RedisBloom module, then `cargo run \
             --release -p idemgate-bench -- e2e \"$@\"`). Every figure below comes from that run; regenerate rather than edit.\n",
            self.generated_at,
            self.command,
            self.total_seconds / 60.0
        );
        md.push_str("## Machine and versions\n\n| | |\n|---|---|\n");
        for (k, v) in self.machine.iter().chain(&self.versions) {
            let _ = writeln!(md, "| {k} | {v} |");
        }
        md.push_str(
            "\nEverything runs on this one machine and shares its cores: the worker replicas \
             (child processes), the Kafka broker (one JVM), the redis-server, and the harness \
             (the commit watcher; in the counting runs also its Redis round-trip proxy). The \
             bench starts its own Kafka broker and redis-server on spare loopback ports, so no \
             other session's keys or topics are in its figures. Redis runs with \
             `maxmemory-policy noeviction`, no persistence.",
        );
        if self.postgres {
            md.push(' ');
            md.push_str(super::postgres::CONDITIONS);
        }
        md.push_str("\n\n");
        self.workload_section(&mut md);
        md.push_str(super::definitions::RUNS);
        md.push_str("## Results\n\n");
        md.push_str(&self.table());
        md.push('\n');
        self.detail_sections(&mut md);
        if let Some(pairs) = &self.pairs {
            pairs.section(&mut md);
        }
        self.handover_section(&mut md);
        md.push_str("## Targets\n\n| target | figure | met |\n|---|---|---|\n");
        for t in &self.targets {
            let met = match t.met {
                Some(true) => "yes",
                Some(false) => "**no**",
                None => "—",
            };
            let _ = writeln!(md, "| {} | {} | {met} |", t.target, t.figure);
        }
        md.push('\n');
        md.push_str(super::definitions::DEFINITIONS);
        md
    }
}

pub(crate) fn run_name(r: &RunResult) -> String {
    match (r.kind, r.mode) {
        (Kind::Passthrough, _) => "passthrough (no store)".into(),
        (Kind::Baseline, _) | (_, None) => "per-record baseline".into(),
        (kind, Some(mode)) => format!(
            "{}, {} replica{}{}",
            mode.label(),
            r.replicas,
            if r.replicas == 1 { "" } else { "s" },
            if kind == Kind::Counting {
                " (counting)"
            } else {
                ""
            }
        ),
    }
}

pub(crate) fn opt(x: Option<f64>, digits: usize) -> String {
    x.map_or("".into(), |x| format!("{x:.digits$}"))
}

pub(crate) fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

pub(crate) fn rate(x: f64) -> String {
    count(x.round().max(0.0) as u64)
}

pub(crate) fn bytes(n: i64) -> String {
    let x = n as f64;
    if x.abs() >= 1048576.0 {
        format!("{:.1} MiB", x / 1048576.0)
    } else if x.abs() >= 1024.0 {
        format!("{:.1} KiB", x / 1024.0)
    } else {
        format!("{n} B")
    }
}

pub(crate) fn human_seconds(s: i64) -> String {
    match (s / 3600, (s % 3600) / 60) {
        (0, m) => format!("{m} min"),
        (h, 0) => format!("{h} h"),
        (h, m) => format!("{h} h {m} min"),
    }
}
