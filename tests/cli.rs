//! The `idemgate` command line as a user types it: what it prints, and
//! what it refuses (with the flag named) instead of silently ignoring;
//! the operator's commands where no server is needed (`plan` figures and
//! refusals, `horizon` refusals, `check --offline`); and its logs.

use std::io::Write;
use std::process::{Command, Output, Stdio};

#[path = "cli/hash_and_env.rs"]
mod hash_and_env;
#[path = "cli/plan_and_check.rs"]
mod plan_and_check;

fn idemgate(args: &[&str], stdin: &str) -> Output {
    idemgate_with(args, &[], stdin)
}

/// `idemgate` with these variables set and every other `IDEMGATE_*` one
/// idemgate reads unset.
fn idemgate_with(args: &[&str], vars: &[(&str, &str)], stdin: &str) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_idemgate"));
    for name in [
        "IDEMGATE_KAFKA_BROKERS",
        "IDEMGATE_REDIS_URL",
        "IDEMGATE_REDIS_NODES",
        "IDEMGATE_CONFIG",
        "IDEMGATE_LOG_FORMAT",
    ] {
        command.env_remove(name);
    }
    let mut child = command
        .args(args)
        .envs(vars.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running idemgate");
    let written = child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes());
    // A command refused before it reads stdin may have exited already.
    if let Err(error) = written {
        assert_eq!(
            error.kind(),
            std::io::ErrorKind::BrokenPipe,
            "writing stdin: {error}"
        );
    }
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

/// A short demo: what it prints (stdout) and its log lines (stderr, at
/// RUST_LOG=info).
fn demo(format: &str) -> (String, String) {
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
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn demo_logs(format: &str) -> String {
    demo(format).1
}

#[test]
fn the_demo_says_first_what_runs_and_last_what_to_try_next() {
    let (printed, _) = demo("text");
    let first = printed.lines().next().unwrap_or_default();
    for part in [
        "2 replicas",
        "librdkafka's in-process mock cluster",
        "memory store",
        "streams bank (exact",
        "telemetry (tiered",
    ] {
        assert!(
            first.contains(part),
            "{part:?} not in the first line: {printed}"
        );
    }
    let last: Vec<&str> = printed.lines().rev().take(4).collect();
    for part in [
        "docs/getting-started.md",
        "idemgate check --config",
        "docs/",
    ] {
        assert!(
            last.iter().any(|l| l.contains(part)),
            "{part:?} not in the last lines: {printed}"
        );
    }
    assert!(
        printed.contains("every distinct event reached its clean topic exactly once"),
        "{printed}"
    );
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

#[test]
fn horizon_on_stdin_needs_the_unit_of_numeric_times_and_some_deliveries() {
    let log = "{\"delivery_id\":\"d\",\"sender\":\"a\",\"received_at\":\"2024-03-01T00:00:00Z\"}\n\
               {\"delivery_id\":\"d\",\"sender\":\"a\",\"received_at\":1709251260}\n";
    let error = refused(&["horizon"], log);
    assert!(
        error.contains("line 2: received_at:") && error.contains("--numeric-times"),
        "{error}"
    );
    assert_eq!(
        ok(&["horizon", "--numeric-times", "s"], log),
        "a\t60\nmax\t60\n"
    );
    let ms = log.replace("1709251260", "1709251260000");
    assert_eq!(
        ok(&["horizon", "--numeric-times", "ms"], &ms),
        "a\t60\nmax\t60\n"
    );

    let empty = refused(&["horizon"], "\n\n");
    assert!(empty.contains("no deliveries in stdin"), "{empty}");
}

#[test]
fn horizon_on_a_topic_refuses_bad_flags_before_reaching_a_broker() {
    // Nobody listens on port 9: each refusal comes before any connection.
    let topic = ["horizon", "--brokers", "127.0.0.1:9", "--topic", "t"];
    let with = |extra: &[&str]| refused(&[&topic[..], extra].concat(), "");
    assert!(with(&["--from", "yesterday"]).contains("--from:"));
    let backwards = with(&[
        "--from",
        "2024-03-02T00:00:00Z",
        "--to",
        "2024-03-01T00:00:00Z",
    ]);
    assert!(
        backwards.contains("--to: must be after --from"),
        "{backwards}"
    );
    assert!(with(&["--quiet", "1h"]).contains("--quiet:"));
    assert!(with(&["--numeric-times", "ms"]).contains("--numeric-times"));
    assert!(with(&["--id-field", "id", "--id-header", "x-id"]).contains("--id-field"));
    assert!(with(&["--kafka", "no-equals-sign"]).contains("--kafka"));
    let no_brokers = refused(&["horizon", "--topic", "t"], "");
    assert!(no_brokers.contains("--brokers"), "{no_brokers}");
}

#[test]
fn check_offline_refuses_a_config_it_cannot_read_naming_the_file() {
    let out = idemgate(
        &["check", "--config", "/nonexistent/gate.toml", "--offline"],
        "",
    );
    assert!(!out.status.success());
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        report.starts_with("FAIL  config  cannot read config file /nonexistent/gate.toml"),
        "{report}"
    );
}

#[test]
fn reset_refuses_bad_flags_and_unknown_streams_before_reaching_a_broker() {
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/config/example.toml");
    let base = ["reset", "--config", config, "--stream", "bank"];
    let with = |more: &[&'static str]| -> Vec<&str> { base.iter().chain(more).copied().collect() };
    let text = refused(&with(&["--to-offset", "raw.bank:x=1"]), "");
    assert!(text.contains("--to-offset"), "{text}");
    let text = refused(&with(&["--to-earliest", "--skipped", "lost"]), "");
    assert!(
        text.contains("--skipped") && text.contains("lost"),
        "{text}"
    );
    let text = refused(&with(&["--to-time", "yesterday"]), "");
    assert!(text.contains("--to-time"), "{text}");
    // Exactly one scenario, as Kafka's tool: clap names both flags.
    let text = refused(&with(&[]), "");
    assert!(
        text.contains("--shift-by") && text.contains("--from-file"),
        "{text}"
    );
    for pair in [
        ["--to-earliest", "--to-offset=5"],
        ["--to-latest", "--by-duration=PT1H"],
        ["--shift-by=-3", "--from-file=plan.csv"],
    ] {
        let text = refused(&with(&pair), "");
        assert!(text.contains("cannot be used with"), "{pair:?}: {text}");
    }
    // As Kafka's tool: a plan or its execution, not both.
    let text = refused(&with(&["--to-earliest", "--dry-run", "--execute"]), "");
    assert!(
        text.contains("--dry-run") && text.contains("--execute"),
        "{text}"
    );
    let text = refused(&with(&["--to-time", "2026-03-01T09:00:00"]), "");
    assert!(
        text.contains("--to-time") && text.contains("YYYY-MM-DDTHH:mm:SS.sss"),
        "{text}"
    );
    let text = refused(&with(&["--by-duration", "P1Y"]), "");
    assert!(
        text.contains("--by-duration") && text.contains("ISO-8601"),
        "{text}"
    );
    let text = refused(&with(&["--from-file", "/nonexistent/plan.csv"]), "");
    assert!(text.contains("--from-file /nonexistent/plan.csv"), "{text}");
    let text = refused(
        &[
            "reset",
            "--config",
            config,
            "--stream",
            "nope",
            "--to-earliest",
        ],
        "",
    );
    assert!(text.contains("--stream") && text.contains("nope"), "{text}");
    // A memory store lives inside each replica: nothing to record a reset in.
    let memory =
        std::env::temp_dir().join(format!("idemgate-cli-reset-{}.toml", std::process::id()));
    std::fs::write(
        &memory,
        "[kafka]\n\"bootstrap.servers\" = \"127.0.0.1:1\"\n[store]\nkind = \"memory\"\n\n[[streams]]\nname = \"bank\"\ninputs = [\"raw.bank\"]\nclean = \"clean.bank\"\naudit = \"audit.bank\"\nprofile = \"bank-txn\"\nmode = \"exact\"\nttl = { explicit = \"1h\" }\n",
    )
    .expect("writing a config");
    let path = memory.to_string_lossy().into_owned();
    let text = refused(
        &[
            "reset",
            "--config",
            &path,
            "--stream",
            "bank",
            "--to-earliest",
        ],
        "",
    );
    let _ = std::fs::remove_file(&memory);
    assert!(text.contains("store.kind"), "{text}");
}

#[test]
fn rebuild_refuses_unknown_streams_and_a_memory_store_before_reaching_a_broker() {
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/config/example.toml");
    let text = refused(&["rebuild", "--config", config, "--stream", "nope"], "");
    assert!(text.contains("--stream") && text.contains("nope"), "{text}");
    refused(&["rebuild", "--config", config], "");
    // A memory store starts empty in each replica: nothing to rebuild.
    let memory =
        std::env::temp_dir().join(format!("idemgate-cli-rebuild-{}.toml", std::process::id()));
    std::fs::write(
        &memory,
        "[kafka]\n\"bootstrap.servers\" = \"127.0.0.1:1\"\n[store]\nkind = \"memory\"\n\n[[streams]]\nname = \"bank\"\ninputs = [\"raw.bank\"]\nclean = \"clean.bank\"\naudit = \"audit.bank\"\nprofile = \"bank-txn\"\nmode = \"exact\"\nttl = { explicit = \"1h\" }\n",
    )
    .expect("writing a config");
    let path = memory.to_string_lossy().into_owned();
    let text = refused(&["rebuild", "--config", &path, "--stream", "bank"], "");
    let _ = std::fs::remove_file(&memory);
    assert!(text.contains("store.kind"), "{text}");
}

/// Every line `run` writes with `--log-format json` is a JSON object: its
/// fatal line (the error chain as a field) as much as its start-up line,
/// whose settings are fields of their own, secrets left out.
#[test]
fn json_logs_of_run_keep_the_fatal_line_and_the_settings_as_json_fields() {
    let out = idemgate(
        &[
            "--log-format",
            "json",
            "run",
            "--config",
            "/nonexistent/gate.toml",
        ],
        "",
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines = json_lines(&stderr);
    let fatal = lines.last().expect("a fatal line");
    assert_eq!(fatal["level"], "ERROR", "{stderr}");
    assert!(
        fatal["error"]
            .as_str()
            .is_some_and(|e| e.contains("/nonexistent/gate.toml")),
        "{stderr}"
    );

    // A config that starts: brokers nobody listens on (the replica keeps
    // trying to reach them), so the test reads its first lines and stops it.
    let dir = std::env::temp_dir().join(format!("idemgate-cli-json-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let config = dir.join("gate.toml");
    let demo = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/config/demo.toml"))
        .expect("config/demo.toml");
    std::fs::write(
        &config,
        demo.replace(
            "[kafka]\n",
            "[kafka]\n\"bootstrap.servers\" = \"127.0.0.1:9\"\n\"sasl.password\" = \"s3cret\"\n",
        ),
    )
    .expect("writing the config");
    let mut child = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["--log-format", "json", "run", "--config"])
        .arg(&config)
        .env_remove("IDEMGATE_KAFKA_BROKERS")
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running idemgate");
    let stderr = child.stderr.take().expect("stderr");
    let (lines_tx, lines_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let starting = loop {
        let line = lines_rx
            .recv_timeout(std::time::Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("no start-up line within 30s; saw {seen:?}"));
        let value: serde_json::Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
        seen.push(line);
        if value["message"] == "starting" {
            break value;
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(starting["brokers"], "127.0.0.1:9", "{starting}");
    assert_eq!(starting["guarantee"], "at-least-once", "{starting}");
    assert_eq!(starting["store"], "memory (event time)", "{starting}");
    assert_eq!(starting["streams"], "bank,telemetry", "{starting}");
    assert!(
        !seen.concat().contains("s3cret"),
        "a secret in the logs: {seen:?}"
    );
}

/// Every non-empty line of `text`, parsed as JSON; panics on one that is not.
fn json_lines(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"))
        })
        .collect()
}
