//! `plan` as the README shows it and from a config, and `check --offline`
//! as an operator reads it: figures of the store a stream uses first, at
//! the stream's `peak_rate`, long retentions in years.

use super::{ok, refused};

/// A config file written for one test, removed when dropped.
struct ConfigFile(std::path::PathBuf);

impl ConfigFile {
    fn new(test: &str, text: &str) -> ConfigFile {
        let path =
            std::env::temp_dir().join(format!("idemgate-cli-{test}-{}.toml", std::process::id()));
        std::fs::write(&path, text).expect("writing a config");
        ConfigFile(path)
    }

    fn path(&self) -> String {
        self.0.to_string_lossy().into_owned()
    }
}

impl Drop for ConfigFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A row of a plan's table, its cells joined by one space.
fn row(text: &str, label: &str) -> String {
    text.lines()
        .map(str::trim_start)
        .find(|l| l.starts_with(label))
        .unwrap_or_else(|| panic!("no {label} row:\n{text}"))
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

const SCENARIO: [&str; 9] = [
    "plan",
    "--rate",
    "40000",
    "--horizon",
    "12h",
    "--tier1-ttl",
    "2h",
    "--fp-rate",
    "0.001",
];

#[test]
fn plan_puts_exact_and_tiered_side_by_side() {
    let text = ok(&SCENARIO, "");
    let row = |label: &str| row(&text, label);
    assert!(
        text.lines()
            .nth(1)
            .is_some_and(|l| l.contains("exact") && l.contains("tiered")),
        "{text}"
    );
    assert_eq!(row("tier-1 keys"), "tier-1 keys 1,728,000,000 288,000,000");
    assert_eq!(row("tier-1 memory"), "tier-1 memory 100.2 GB 16.7 GB");
    assert_eq!(row("tier-2 bits per key"), "tier-2 bits per key - 14.38");
    assert_eq!(
        row("tier-2 generation"),
        "tier-2 generation - 3.1 GB (1,728,000,000 keys)"
    );
    assert_eq!(
        row("tier-2 memory"),
        "tier-2 memory - 6.2 GB (2 generations)"
    );
    assert_eq!(row("total"), "total 100.2 GB 22.9 GB");
    // 1,728,000,000 claims at 182 B on PostgreSQL's disk; tiered needs Redis.
    assert_eq!(row("or postgres disk"), "or postgres disk 314.5 GB -");

    let exact = ok(
        &[
            "plan",
            "--rate",
            "40000",
            "--horizon",
            "12h",
            "--mode",
            "exact",
        ],
        "",
    );
    assert!(
        exact.contains("100.2 GB") && !exact.contains("tiered"),
        "{exact}"
    );
}

#[test]
fn plan_refuses_what_the_config_would_refuse_naming_the_flag() {
    let with = |flag: &str, value: &str| {
        let mut args = SCENARIO.to_vec();
        match args.iter().position(|a| *a == flag) {
            Some(i) => args[i + 1] = value,
            None => args.extend([flag, value]),
        }
        refused(&args, "")
    };
    assert!(with("--rate", "0").contains("--rate: must be above zero"));
    assert!(with("--tier1-ttl", "12h").contains("--tier1-ttl: must be shorter than the horizon"));
    assert!(with("--fp-rate", "0.7").contains("--fp-rate:"));
    assert!(with("--slots", "1").contains("--slots:"));
    assert!(with("--horizon", "12 hours").contains("--horizon"));
    let untiered = refused(
        &[
            "plan",
            "--rate",
            "10",
            "--horizon",
            "1h",
            "--mode",
            "tiered",
        ],
        "",
    );
    assert!(untiered.contains("--tier1-ttl: needed"), "{untiered}");
    let nothing = refused(&["plan"], "");
    assert!(nothing.contains("--rate and --horizon"), "{nothing}");
    let mixed = refused(
        &["plan", "--config", "config/example.toml", "--horizon", "1h"],
        "",
    );
    assert!(mixed.contains("--horizon"), "{mixed}");
}

#[test]
fn plan_from_a_config_sizes_tiered_streams_at_their_peak_rate() {
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/config/example.toml");
    let text = ok(&["plan", "--config", config], "");
    // telemetry: 5,000/s over 24 h, the worked example of docs/design.md §5.
    assert!(text.contains("stream telemetry (tiered)"), "{text}");
    assert!(text.contains("5,000 events/s (peak_rate)"), "{text}");
    assert!(text.contains("776.4 MB (432,000,000 keys)"), "{text}");
    // example.toml's exact streams set no peak_rate.
    assert!(text.contains("stream bank (exact)"), "{text}");
    assert!(text.contains("figures per event/s"), "{text}");
    let rated = ok(&["plan", "--config", config, "--rate", "200"], "");
    assert!(rated.contains("200 events/s (--rate)"), "{rated}");
}

#[test]
fn check_warns_that_a_shadow_stream_suppresses_nothing() {
    let config = ConfigFile::new(
        "shadow",
        "[kafka]\n\"bootstrap.servers\" = \"127.0.0.1:1\"\n[store]\nkind = \"memory\"\n[metrics]\nlisten = \"127.0.0.1:0\"\n\n[[streams]]\nname = \"bank\"\ninputs = [\"raw.bank\"]\nclean = \"clean.bank\"\naudit = \"audit.bank\"\nprofile = \"bank-txn\"\nmode = \"exact\"\nttl = { explicit = \"1h\" }\nshadow = true\n",
    );
    let report = ok(&["check", "--config", &config.path(), "--offline"], "");
    let line = report
        .lines()
        .find(|l| l.contains("streams[0].shadow"))
        .unwrap_or_else(|| panic!("no shadow finding: {report}"));
    assert!(line.starts_with("warn"), "{line}");
    assert!(
        line.contains("bank: shadow mode") && line.contains("clean.bank"),
        "{line}"
    );
}

#[test]
fn plan_as_the_readme_shows_it_plans_exact_and_says_what_tiered_needs() {
    let text = ok(&["plan", "--rate", "40000", "--horizon", "12h"], "");
    assert_eq!(row(&text, "tier-1 memory"), "tier-1 memory 100.2 GB");
    assert!(!text.contains("tier-2"), "{text}");
    let last = text.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("tiered: add --tier1-ttl"),
        "the last line says how to get the tiered figures:\n{text}"
    );
    let exact = ok(
        &[
            "plan",
            "--rate",
            "40000",
            "--horizon",
            "12h",
            "--mode",
            "exact",
        ],
        "",
    );
    assert!(
        !exact.contains("--tier1-ttl"),
        "exact was asked for:\n{exact}"
    );
}

/// Seven years of a bank feed on PostgreSQL, one stream at its peak_rate,
/// one without.
const ON_POSTGRES: &str = "[kafka]\n\"bootstrap.servers\" = \"127.0.0.1:1\"\n\
[store]\nkind = \"postgres\"\nurl = \"postgres://idemgate@127.0.0.1:1/idemgate\"\n\
[metrics]\nlisten = \"127.0.0.1:0\"\n\n\
[[streams]]\nname = \"bank\"\ninputs = [\"raw.bank\"]\nclean = \"clean.bank\"\n\
audit = \"audit.bank\"\nprofile = \"bank-txn\"\nmode = \"exact\"\n\
ttl = { retention_years = 7 }\npeak_rate = 10\n\n\
[[streams]]\nname = \"ledger\"\ninputs = [\"raw.ledger\"]\nclean = \"clean.ledger\"\n\
audit = \"audit.ledger\"\nprofile = \"payload\"\nmode = \"exact\"\n\
ttl = { explicit = \"1h\" }\n";

#[test]
fn check_on_postgres_leads_with_the_disk_at_the_peak_rate_and_counts_years() {
    let config = ConfigFile::new("postgres-plan", ON_POSTGRES);
    let report = ok(&["check", "--config", &config.path(), "--offline"], "");
    let (bank, ledger) = report
        .split_once("stream ledger (exact)")
        .unwrap_or_else(|| panic!("no ledger stream:\n{report}"));
    assert!(
        bank.contains("tier-1 ttl  220903200 s (2556d18h, 7y)"),
        "{report}"
    );
    assert!(
        bank.contains("store       postgres: claims on its disk"),
        "{report}"
    );
    assert!(bank.contains("10 events/s (peak_rate)"), "{report}");
    // The table's first rows: the claims and their disk, Redis after.
    let table: Vec<String> = bank
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("rate"))
        .skip(2)
        .take(3)
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    assert_eq!(
        table,
        [
            "claims 2,209,032,000",
            "postgres disk 402.0 GB",
            "or redis memory 128.1 GB"
        ],
        "{report}"
    );
    assert!(!report.contains("tier-1 memory"), "{report}");
    assert!(ledger.contains("figures per event/s"), "{report}");
    assert_eq!(row(ledger, "claims"), "claims 3,600");

    // `plan --config` prints the same plan.
    let plan = ok(&["plan", "--config", &config.path()], "");
    assert_eq!(row(&plan, "postgres disk"), "postgres disk 402.0 GB");
    let rated = ok(&["plan", "--config", &config.path(), "--rate", "5"], "");
    assert!(rated.contains("10 events/s (peak_rate)"), "{rated}");
    assert!(rated.contains("5 events/s (--rate)"), "{rated}");
}
