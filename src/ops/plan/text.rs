//! A plan as an operator reads it: exact and tiered in columns, counts with
//! thousands separators, bytes in decimal units (GB = 10^9 bytes).

use std::fmt::Write;
use std::time::Duration;

use crate::ops::plan::{
    ClaimsIn, ExactPlan, Plan, RateSource, StreamPlan, POSTGRES_BYTES_PER_CLAIM,
    TIER1_BYTES_PER_CLAIM, TIER1_BYTES_PER_KEY,
};
use crate::store::Mode;
use crate::ttl::{format_duration, format_years};

/// `1728000000` -> `1,728,000,000`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Decimal units, one decimal: `336960000000` -> `337.0 GB`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["kB", "MB", "GB", "TB", "PB", "EB"];
    if bytes < 1000 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64;
    let mut unit = "B";
    for next in UNITS {
        if value < 1000.0 {
            break;
        }
        value /= 1000.0;
        unit = next;
    }
    format!("{value:.1} {unit}")
}

/// Seconds first, for scripts; then as a config writes it, and from a
/// year up its length in years: `220903200 s (2556d18h, 7y)`.
pub fn seconds(d: Duration) -> String {
    let years = format_years(d)
        .map(|y| format!(", {y}"))
        .unwrap_or_default();
    format!("{} s ({}{years})", d.as_secs(), format_duration(d))
}

/// The plan's inputs on one line, then its table (Redis first: no store
/// is named), then, where both were asked for without a tier-1 TTL, how
/// to get the tiered figures.
pub fn plan(plan: &Plan) -> String {
    let input = &plan.input;
    let mut out = format!(
        "rate {} events/s, horizon {}",
        thousands(input.rate),
        seconds(input.horizon)
    );
    if plan.tiered.is_some() {
        if let Some(tier1) = input.tier1_ttl {
            let _ = write!(
                out,
                ", tier-1 ttl {}, fp rate {}, {} slots",
                seconds(tier1),
                input.fp_rate,
                input.slots
            );
        }
    }
    out.push('\n');
    out.push_str(&table(plan, ClaimsIn::Redis));
    if plan.tiered_needs_tier1 {
        out.push_str(
            "tiered: add --tier1-ttl D (how long a hash stays an exact key, shorter than the horizon) for its figures\n",
        );
    }
    out
}

/// The figures of the store the claims live in first: PostgreSQL's disk
/// for an exact stream there, else memory, exact and tiered in columns.
fn table(plan: &Plan, claims_in: ClaimsIn) -> String {
    match (claims_in, &plan.exact, &plan.tiered) {
        (ClaimsIn::Postgres, Some(exact), None) => on_disk(exact),
        _ => in_memory(plan),
    }
}

/// Exact claims on PostgreSQL's disk, with what Redis would hold beside.
fn on_disk(exact: &ExactPlan) -> String {
    let mut out = grid(
        &["exact"],
        &[
            ("claims", vec![thousands(exact.keys)]),
            ("postgres disk", vec![human_bytes(exact.disk_bytes)]),
            ("or redis memory", vec![human_bytes(exact.bytes)]),
        ],
    );
    let _ = writeln!(
        out,
        "({POSTGRES_BYTES_PER_CLAIM} B a claim on PostgreSQL's disk in steady state, settled \
         by done flags under default autovacuum; {TIER1_BYTES_PER_CLAIM} B a claim in Redis, grouped ({TIER1_BYTES_PER_KEY} B \
         where a stream writes keys); as measured in BENCHMARKS.md)"
    );
    out
}

/// Rows of memory figures, one column per mode planned.
fn in_memory(plan: &Plan) -> String {
    let mut columns = Vec::new();
    let mut cells: Vec<Vec<String>> = Vec::new();
    let dash = || "-".to_string();
    if let Some(exact) = &plan.exact {
        columns.push("exact");
        cells.push(vec![
            thousands(exact.keys),
            human_bytes(exact.bytes),
            dash(),
            dash(),
            dash(),
            human_bytes(exact.bytes),
            human_bytes(exact.disk_bytes),
        ]);
    }
    if let Some(tiered) = &plan.tiered {
        columns.push("tiered");
        cells.push(vec![
            thousands(tiered.tier1_keys),
            human_bytes(tiered.tier1_bytes),
            format!("{:.2}", tiered.bits_per_key),
            format!(
                "{} ({} keys)",
                human_bytes(tiered.generation_bytes),
                thousands(tiered.generation.capacity)
            ),
            format!(
                "{} ({} generations)",
                human_bytes(tiered.filter_bytes),
                tiered.slots
            ),
            human_bytes(tiered.total_bytes),
            // Tiered streams need Redis (docs/design.md §6).
            dash(),
        ]);
    }
    let labels = [
        "tier-1 keys",
        "tier-1 memory",
        "tier-2 bits per key",
        "tier-2 generation",
        "tier-2 memory",
        "total",
        "or postgres disk",
    ];
    let rows: Vec<(&str, Vec<String>)> = labels
        .iter()
        .enumerate()
        .filter(|(row, _)| plan.tiered.is_some() || !(2..5).contains(row))
        .filter(|(row, _)| plan.exact.is_some() || *row != 6)
        .map(|(row, label)| (*label, cells.iter().map(|c| c[row].clone()).collect()))
        .collect();
    let mut out = grid(&columns, &rows);
    let _ = write!(
        out,
        "(tier 1 at {TIER1_BYTES_PER_CLAIM} B a claim in Redis, grouped ({TIER1_BYTES_PER_KEY} B \
         where a stream writes keys)"
    );
    if plan.exact.is_some() {
        let _ = write!(
            out,
            ", {POSTGRES_BYTES_PER_CLAIM} B a claim on PostgreSQL's disk"
        );
    }
    out.push_str(", as measured in BENCHMARKS.md");
    if plan.tiered.is_some() {
        out.push_str("; each generation sized as the store sizes it, rate x horizon keys");
    }
    out.push_str(")\n");
    out
}

/// A header of column names over labelled rows, each column right-aligned
/// to its widest cell.
fn grid(columns: &[&str], rows: &[(&str, Vec<String>)]) -> String {
    let widths: Vec<usize> = columns
        .iter()
        .enumerate()
        .map(|(column, name)| {
            rows.iter()
                .map(|(_, cells)| cells[column].len())
                .chain([name.len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = format!("{:<20}", "");
    for (name, width) in columns.iter().zip(&widths) {
        let _ = write!(out, "  {name:>width$}");
    }
    out.push('\n');
    for (label, cells) in rows {
        let _ = write!(out, "{label:<20}");
        for (cell, width) in cells.iter().zip(&widths) {
            let _ = write!(out, "  {cell:>width$}");
        }
        out.push('\n');
    }
    out
}

/// A configured stream: its TTLs, where its claims live and its rate came
/// from, its plan.
pub fn stream(stream: &StreamPlan) -> String {
    let mode = match stream.mode {
        Mode::Exact => "exact",
        Mode::Tiered => "tiered",
    };
    let mut out = format!("stream {} ({mode})\n", stream.name);
    let _ = writeln!(out, "  tier-1 ttl  {}", seconds(stream.tier1_ttl));
    let horizon_note = match stream.mode {
        Mode::Exact => " = the tier-1 ttl: every hash is an exact key",
        Mode::Tiered => "",
    };
    let _ = writeln!(
        out,
        "  horizon     {}{horizon_note}",
        seconds(stream.horizon)
    );
    let store = match stream.claims_in {
        ClaimsIn::Memory => "memory: claims in this replica's memory",
        ClaimsIn::Redis => "redis: claims in its memory",
        ClaimsIn::Postgres => "postgres: claims on its disk",
    };
    let _ = writeln!(out, "  store       {store}");
    let rate = thousands(stream.plan.input.rate);
    let _ = writeln!(
        out,
        "  rate        {}",
        match stream.rate {
            RateSource::PeakRate => format!("{rate} events/s (peak_rate)"),
            RateSource::Given => format!("{rate} events/s (--rate)"),
            RateSource::PerEventPerSecond => {
                "none in the config: figures per event/s (set the stream's peak_rate, or plan --rate N)".into()
            }
        }
    );
    for line in table(&stream.plan, stream.claims_in).lines() {
        let _ = writeln!(out, "  {line}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::plan::{plan as make_plan, PlanInput, PlanMode};

    /// 7 x 365.25 days, as `ttl = { retention_years = 7 }` derives it.
    const SEVEN_YEARS: Duration = Duration::from_secs(220_903_200);

    fn bank(claims_in: ClaimsIn) -> StreamPlan {
        let input = PlanInput {
            rate: 10,
            horizon: SEVEN_YEARS,
            tier1_ttl: None,
            fp_rate: 0.0,
            slots: 0,
        };
        StreamPlan {
            name: "bank".into(),
            mode: Mode::Exact,
            tier1_ttl: SEVEN_YEARS,
            horizon: SEVEN_YEARS,
            rate: RateSource::PeakRate,
            claims_in,
            plan: make_plan(input, PlanMode::Exact).unwrap(),
        }
    }

    /// The labels of a stream's table rows, in order.
    fn row_labels(text: &str) -> Vec<String> {
        text.lines()
            .skip_while(|l| !l.trim_start().starts_with("rate"))
            .skip(2)
            .take_while(|l| !l.trim_start().starts_with('('))
            .map(|l| {
                let cells: Vec<&str> = l.split("  ").filter(|c| !c.trim().is_empty()).collect();
                cells
                    .first()
                    .map_or(String::new(), |c| c.trim().to_string())
            })
            .collect()
    }

    #[test]
    fn a_stream_leads_with_the_figures_of_the_store_its_claims_live_in() {
        let on_disk = stream(&bank(ClaimsIn::Postgres));
        assert_eq!(
            row_labels(&on_disk),
            ["claims", "postgres disk", "or redis memory"],
            "{on_disk}"
        );
        assert!(on_disk.contains("402.0 GB") && on_disk.contains("128.1 GB"));
        let in_memory = stream(&bank(ClaimsIn::Redis));
        assert_eq!(
            row_labels(&in_memory),
            ["tier-1 keys", "tier-1 memory", "total", "or postgres disk"],
            "{in_memory}"
        );
    }

    #[test]
    fn seven_years_are_printed_in_seconds_days_and_years() {
        assert_eq!(seconds(SEVEN_YEARS), "220903200 s (2556d18h, 7y)");
        assert_eq!(seconds(Duration::from_secs(3_600)), "3600 s (1h)");
        let text = stream(&bank(ClaimsIn::Postgres));
        assert!(
            text.contains("tier-1 ttl  220903200 s (2556d18h, 7y)"),
            "{text}"
        );
    }

    #[test]
    fn both_without_a_tier1_ttl_ends_with_what_the_tiered_figures_need() {
        let input = PlanInput {
            rate: 40_000,
            horizon: Duration::from_secs(43_200),
            tier1_ttl: None,
            fp_rate: 0.001,
            slots: 2,
        };
        let text = plan(&make_plan(input, PlanMode::Both).unwrap());
        let last = text.lines().last().unwrap_or_default();
        assert!(last.starts_with("tiered: add --tier1-ttl"), "{text}");
        let exact = plan(&make_plan(input, PlanMode::Exact).unwrap());
        assert!(!exact.contains("--tier1-ttl"), "{exact}");
    }

    #[test]
    fn counts_and_bytes_are_written_as_people_read_them() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_728_000_000), "1,728,000,000");
        assert_eq!(human_bytes(195), "195 B");
        assert_eq!(human_bytes(336_960_000_000), "337.0 GB");
        assert_eq!(human_bytes(56_160_000_000), "56.2 GB");
    }

    #[test]
    fn the_scenario_prints_both_columns_with_their_totals() {
        let input = PlanInput {
            rate: 40_000,
            horizon: Duration::from_secs(43_200),
            tier1_ttl: Some(Duration::from_secs(7_200)),
            fp_rate: 0.001,
            slots: 2,
        };
        let text = plan(&make_plan(input, PlanMode::Both).unwrap());
        for expected in [
            "exact",
            "tiered",
            "1,728,000,000",
            "100.2 GB",
            "288,000,000",
            "16.7 GB",
            "14.38",
            "3.1 GB (1,728,000,000 keys)",
            "6.2 GB (2 generations)",
        ] {
            assert!(text.contains(expected), "{expected:?} missing:\n{text}");
        }
    }
}
