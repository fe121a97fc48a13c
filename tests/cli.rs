//! The `idemgate` command line as a user types it: what it prints, and
//! what it refuses (with the flag named) instead of silently ignoring.

use std::io::Write;
use std::process::{Command, Output, Stdio};

fn idemgate(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running idemgate");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("writing stdin");
    child.wait_with_output().expect("idemgate output")
}

fn ok(args: &[&str], stdin: &str) -> String {
    let out = idemgate(args, stdin);
    assert!(
        out.status.success(),
        "idemgate {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn refused(args: &[&str], stdin: &str) -> String {
    let out = idemgate(args, stdin);
    assert!(
        !out.status.success(),
        "idemgate {args:?} should have been refused; it printed {}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn ttl_prints_seconds_then_the_duration_as_a_config_writes_it() {
    assert_eq!(
        ok(&["ttl", "--horizon", "9h20m", "--outage", "2h"], ""),
        "40800\t11h20m\n"
    );
    assert_eq!(
        ok(&["ttl", "--retention-years", "7"], ""),
        "220903200\t2556d18h\n"
    );
}

#[test]
fn a_negative_explicit_ttl_is_refused_as_a_value_not_read_as_a_flag() {
    let error = refused(&["ttl", "--explicit", "-5m"], "");
    assert!(error.contains("--explicit"), "{error}");
    assert!(!error.contains("unexpected argument"), "{error}");
}

#[test]
fn a_margin_without_a_job_policy_is_refused() {
    let error = refused(&["ttl", "--explicit", "1h", "--margin", "0.5"], "");
    assert!(error.contains("--margin"), "{error}");
}

#[test]
fn a_job_policy_needs_its_margin_as_the_config_does() {
    let error = refused(
        &[
            "ttl",
            "--p99",
            "40m",
            "--retry-ladder",
            "1m,5m",
            "--fallback",
            "1h",
        ],
        "",
    );
    assert!(error.contains("--margin"), "{error}");
    let ttl = ok(
        &[
            "ttl",
            "--p99",
            "40m",
            "--retry-ladder",
            "1m,5m",
            "--fallback",
            "1h",
            "--margin",
            "0",
        ],
        "",
    );
    assert_eq!(ttl, "6360\t1h46m\n");
}

#[test]
fn a_key_for_a_profile_that_reads_no_header_is_refused() {
    let record = r#"{"account_id":"a","bank_txn_id":"t","amount":"1.00","currency":"EUR","posted_at":"2024-03-01T00:00:00Z"}"#;
    let error = refused(&["hash", "--profile", "bank-txn", "--key", "k-1"], record);
    assert!(error.contains("--key"), "{error}");
    let hash = ok(&["hash", "--profile", "bank-txn"], record);
    assert_eq!(hash.trim().len(), 64, "{hash}");
    let keyed = ok(&["hash", "--profile", "header", "--key", "k-1"], "{}");
    assert_eq!(keyed.trim().len(), 64, "{keyed}");
}

/// A short demo: its log lines on stderr (RUST_LOG=info).
fn demo_logs(format: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args([
            "--log-format",
            format,
            "demo",
            "--transactions",
            "60",
            "--vehicles",
            "2",
            "--minutes",
            "5",
        ])
        .env("RUST_LOG", "info")
        .output()
        .expect("running the demo");
    assert!(
        out.status.success(),
        "demo failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn json_logs_are_one_object_a_line_and_text_logs_carry_no_colour_when_piped() {
    let json = demo_logs("json");
    let lines: Vec<&str> = json.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(!lines.is_empty(), "no log lines");
    for line in &lines {
        let value: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
        assert!(
            value["level"].is_string() && value["message"].is_string(),
            "{line}"
        );
    }
    let text = demo_logs("text");
    assert!(!text.contains('\u{1b}'), "ANSI codes in piped logs: {text}");
    assert!(text.contains("INFO"), "{text}");
}

#[test]
fn single_duplicates_are_not_logged_at_info_but_summed_up_per_stream() {
    let text = demo_logs("text");
    assert!(
        !text.contains("suppressed or marked"),
        "a line per non-novel decision at info:\n{text}"
    );
    let progress: Vec<&str> = text.lines().filter(|l| l.contains("progress")).collect();
    assert!(
        progress
            .iter()
            .any(|l| l.contains("stream=bank") && l.contains("duplicate=")),
        "no progress line for the bank stream:\n{text}"
    );
}
