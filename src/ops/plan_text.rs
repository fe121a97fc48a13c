//! A plan as an operator reads it: exact and tiered in columns, counts with
//! thousands separators, bytes in decimal units (GB = 10^9 bytes).

use std::fmt::Write;
use std::time::Duration;

use super::plan::{Plan, RateSource, StreamPlan, POSTGRES_BYTES_PER_CLAIM, TIER1_BYTES_PER_KEY};
use crate::store::Mode;
use crate::ttl::format_duration;

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

/// Seconds first, for scripts; then as a config writes it.
pub fn seconds(d: Duration) -> String {
    format!("{} s ({})", d.as_secs(), format_duration(d))
}

/// The plan's inputs on one line, then its table.
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
    out.push_str(&table(plan));
    out
}

/// Rows of figures, one column per mode planned.
fn table(plan: &Plan) -> String {
    let mut columns: Vec<(&str, Vec<String>)> = Vec::new();
    let dash = || "-".to_string();
    if let Some(exact) = &plan.exact {
        columns.push((
            "exact",
            vec![
                thousands(exact.keys),
                human_bytes(exact.bytes),
                dash(),
                dash(),
                dash(),
                human_bytes(exact.bytes),
                human_bytes(exact.disk_bytes),
            ],
        ));
    }
    if let Some(tiered) = &plan.tiered {
        columns.push((
            "tiered",
            vec![
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
            ],
        ));
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
    let widths: Vec<usize> = columns
        .iter()
        .map(|(name, cells)| {
            cells
                .iter()
                .map(String::len)
                .chain([name.len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = format!("{:<20}", "");
    for ((name, _), width) in columns.iter().zip(&widths) {
        let _ = write!(out, "  {name:>width$}");
    }
    out.push('\n');
    for (row, label) in labels.iter().enumerate() {
        if plan.tiered.is_none() && (2..5).contains(&row) {
            continue;
        }
        if plan.exact.is_none() && row == 6 {
            continue;
        }
        let _ = write!(out, "{label:<20}");
        for ((_, cells), width) in columns.iter().zip(&widths) {
            let _ = write!(out, "  {:>width$}", cells[row]);
        }
        out.push('\n');
    }
    let _ = write!(out, "(tier 1 at {TIER1_BYTES_PER_KEY} B a key in Redis");
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

/// A configured stream: its TTLs, where its rate came from, its plan.
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
    let rate = thousands(stream.plan.input.rate);
    let _ = writeln!(
        out,
        "  rate        {}",
        match stream.rate {
            RateSource::PeakRate => format!("{rate} events/s (peak_rate)"),
            RateSource::Given => format!("{rate} events/s (--rate)"),
            RateSource::PerEventPerSecond => {
                "none in the config: figures per event/s (plan --rate N for yours)".into()
            }
        }
    );
    for line in table(&stream.plan).lines() {
        let _ = writeln!(out, "  {line}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::plan::{plan as make_plan, PlanInput, PlanMode};
    use super::*;

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
            "281.7 GB",
            "288,000,000",
            "46.9 GB",
            "14.38",
            "3.1 GB (1,728,000,000 keys)",
            "6.2 GB (2 generations)",
        ] {
            assert!(text.contains(expected), "{expected:?} missing:\n{text}");
        }
    }
}
