//! Alternated pairs: exact mode with one replica and the passthrough, run
//! one right after the other `--pairs` times on the main topic, which one
//! goes first swapped from pair to pair. On a small machine one run of
//! either moves by 15 % and more between invocations (on two cores the
//! passthrough went from 125,000 to 200,000 records/s, and the same build's
//! worker CPU from 6.6 to 9.1 s per million records), so the ratios the
//! targets speak of are taken within each pair, and the figure is their
//! median.

use std::fmt::Write as _;

use anyhow::Result;
use serde::Serialize;

use super::run_others::passthrough;
use super::run_workers::{clean, Run};
use super::runs::{Dataset, Mode, RunResult, Setup};
use crate::stats::median;

/// Exact mode's records/s over the passthrough's, at least.
pub(crate) const OVER_PASSTHROUGH: f64 = 0.85;
/// Exact mode's worker CPU per record over the passthrough's, at most.
pub(crate) const CPU_OVER_PASSTHROUGH: f64 = 2.0;

/// One pair's figures.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Pair {
    pub exact_first: bool,
    pub exact_records_per_s: f64,
    pub passthrough_records_per_s: f64,
    pub exact_worker_cpu_s_per_million: f64,
    pub passthrough_cpu_s_per_million: f64,
    pub exact_kafka_cpu_s_per_million: f64,
    pub passthrough_kafka_cpu_s_per_million: f64,
    pub exact_redis_cpu_s_per_million: f64,
    /// Exact mode's records/s over the passthrough's.
    pub ratio: f64,
    /// Exact mode's worker CPU per record over the passthrough's.
    pub cpu_ratio: f64,
    /// "ok", or what either run's check found.
    pub check: String,
}

/// Every pair, and the medians of their ratios.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Pairs {
    pub pairs: Vec<Pair>,
    pub median_ratio: f64,
    pub median_cpu_ratio: f64,
}

/// Runs `n` pairs over `dataset`; `None` for none.
pub(crate) async fn run(setup: &Setup, dataset: &Dataset, n: usize) -> Result<Option<Pairs>> {
    let mut pairs = Vec::new();
    for i in 1..=n {
        let exact_first = i % 2 == 0;
        let exact_run = || clean(setup, dataset, Mode::Exact, 1, Run::Pair(i));
        let suffix = format!("-pair{i}");
        let (exact, other) = if exact_first {
            let exact = exact_run().await?;
            (exact, passthrough(setup, dataset, &suffix).await?)
        } else {
            let other = passthrough(setup, dataset, &suffix).await?;
            (exact_run().await?, other)
        };
        let pair = pair(exact_first, &exact, &other);
        eprintln!(
            "pair {i}: exact {:.0} records/s, passthrough {:.0}: {:.2}x; worker CPU {:.2}x",
            pair.exact_records_per_s, pair.passthrough_records_per_s, pair.ratio, pair.cpu_ratio
        );
        pairs.push(pair);
    }
    if pairs.is_empty() {
        return Ok(None);
    }
    let median_ratio = median(pairs.iter().map(|p| p.ratio).collect());
    let median_cpu_ratio = median(pairs.iter().map(|p| p.cpu_ratio).collect());
    Ok(Some(Pairs {
        pairs,
        median_ratio,
        median_cpu_ratio,
    }))
}

fn pair(exact_first: bool, exact: &RunResult, other: &RunResult) -> Pair {
    let over = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
    let checks: Vec<&str> = [&exact.check, &other.check]
        .into_iter()
        .map(String::as_str)
        .filter(|c| *c != "ok")
        .collect();
    Pair {
        exact_first,
        exact_records_per_s: exact.records_per_s,
        passthrough_records_per_s: other.records_per_s,
        exact_worker_cpu_s_per_million: exact.worker_cpu_s_per_million,
        passthrough_cpu_s_per_million: other.worker_cpu_s_per_million,
        exact_kafka_cpu_s_per_million: exact.kafka_cpu_s_per_million,
        passthrough_kafka_cpu_s_per_million: other.kafka_cpu_s_per_million,
        exact_redis_cpu_s_per_million: exact.redis_cpu_s_per_million,
        ratio: over(exact.records_per_s, other.records_per_s),
        cpu_ratio: over(
            exact.worker_cpu_s_per_million,
            other.worker_cpu_s_per_million,
        ),
        check: if checks.is_empty() {
            "ok".into()
        } else {
            checks.join("; ")
        },
    }
}

impl Pairs {
    /// The pairs' table and medians, for stdout and the Markdown alike.
    pub(crate) fn table(&self) -> String {
        let mut out = String::from(
            "| pair | first | exact records/s | passthrough records/s | x passthrough | \
             worker CPU s/M: exact / passthrough | x | Kafka CPU s/M: exact / passthrough | \
             Redis CPU s/M | check |\n|--:|---|--:|--:|--:|--:|--:|--:|--:|---|\n",
        );
        for (i, p) in self.pairs.iter().enumerate() {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {:.2} | {:.2} / {:.2} | {:.2} | {:.2} / {:.2} | {:.2} | {} |",
                i + 1,
                if p.exact_first { "exact" } else { "passthrough" },
                super::report::rate(p.exact_records_per_s),
                super::report::rate(p.passthrough_records_per_s),
                p.ratio,
                p.exact_worker_cpu_s_per_million,
                p.passthrough_cpu_s_per_million,
                p.cpu_ratio,
                p.exact_kafka_cpu_s_per_million,
                p.passthrough_kafka_cpu_s_per_million,
                p.exact_redis_cpu_s_per_million,
                p.check,
            );
        }
        let _ = writeln!(
            out,
            "\nMedians over {} pairs: exact mode at {:.2}x the passthrough's records/s, its worker \
             CPU per record {:.2}x the passthrough's.",
            self.pairs.len(),
            self.median_ratio,
            self.median_cpu_ratio
        );
        out
    }

    /// BENCHMARKS.md's section.
    pub(crate) fn section(&self, md: &mut String) {
        md.push_str("## Exact mode against the passthrough, alternated\n\n");
        md.push_str(
            "Exact mode with one replica and the passthrough, run one right after the other on \
             the main topic, which one goes first swapped from pair to pair (each run as in the \
             table above: its own group and output topics, Redis emptied before the exact run). \
             One run of either moves by 15 % and more from one invocation to the next on a small \
             machine, and the machine's state drifts within one; a ratio taken within a pair \
             shares that state, and the targets' figures are the medians of the pairs' ratios.\n\n",
        );
        md.push_str(&self.table());
        md.push('\n');
    }
}
