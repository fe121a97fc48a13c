//! The short fault soak, in the normal test suite: 20,000 records through
//! three replicas while replicas are killed and terminated, Redis is frozen
//! and restarted, the replicas' link to it is cut and the broker is
//! restarted on its own disk, in every guarantee this build takes (under
//! exactly once, replicas are also SIGKILLed inside a seal). `idemgate-bench soak --short` fails on any
//! must-be-zero figure and on a run that does not drain; this test fails
//! with its output. Needs Apache Kafka's jars (`IDEMGATE_TEST_KAFKA_LIBS`,
//! from scripts/test-services.sh; the soak starts brokers of its own) and
//! redis-server; the PostgreSQL soak needs PostgreSQL's server binaries
//! (`initdb`, `pg_ctl`; the soak starts a cluster of its own).

use std::process::Command;
use std::sync::Mutex;
use std::time::Instant;

/// One soak at a time: each runs three replicas and a broker of its own.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

#[test]
fn a_short_fault_soak_loses_nothing_and_lets_no_second_copy_through() {
    short_soak("redis", &[], &["## at-least-once", "## exactly-once"]);
}

/// Both streams exact on PostgreSQL, which is frozen and restarted (a fast
/// shutdown, a start on the same data) in Redis's place.
#[test]
fn a_short_fault_soak_on_postgres_loses_nothing_and_lets_no_second_copy_through() {
    let report = short_soak(
        "postgres",
        &["--store", "postgres"],
        &[
            "## PostgreSQL: at-least-once",
            "## PostgreSQL: exactly-once",
        ],
    );
    assert!(
        report.contains("`pg_ctl stop -m fast`") && report.contains("the data directory kept"),
        "no PostgreSQL restart:\n{report}"
    );
}

/// Runs `soak --short` with `extra` arguments; fails with its output unless
/// it passed and every run among `headings` restarted its broker. Returns
/// SOAK.md.
fn short_soak(name: &str, extra: &[&str], headings: &[&str]) -> String {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let kafka_libs = std::env::var("IDEMGATE_TEST_KAFKA_LIBS").unwrap_or_else(|_| {
        panic!("IDEMGATE_TEST_KAFKA_LIBS is not set: run the suite with scripts/test.sh, which starts the servers")
    });
    let dir =
        std::env::temp_dir().join(format!("idemgate-soak-test-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("the soak's directory");
    let started = Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_idemgate-bench"))
        .args(["soak", "--short", "--kafka-libs", &kafka_libs])
        .args(extra)
        .arg("--out-dir")
        .arg(&dir)
        .arg("--work-dir")
        .arg(dir.join("work"))
        .output()
        .expect("running idemgate-bench soak");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    eprintln!("{stderr}");
    assert!(
        output.status.success(),
        "the short soak failed ({}) after {:.0}s; logs under {}",
        output.status,
        started.elapsed().as_secs_f64(),
        dir.display()
    );
    let report = std::fs::read_to_string(dir.join("SOAK.md")).expect("SOAK.md written");
    assert!(report.contains("events missing from clean (must be 0)"));
    // Each guarantee run restarted its broker (a restart that fails fails
    // the soak; none is skipped).
    let runs = report.lines().filter(|l| headings.contains(l)).count();
    assert!(runs > 0, "no guarantee ran:\n{report}");
    assert_eq!(
        report.matches("the log kept").count(),
        runs,
        "a run without its broker restart:\n{report}"
    );
    // Each cut its store link; each exactly-once run SIGKILLed a replica
    // inside a seal twice, by its fault point (one that does not fire
    // fails the soak; this checks the report says so), on either store.
    assert_eq!(
        report.matches("link cut for").count(),
        runs,
        "a run without its store link cut:\n{report}"
    );
    // Each broker restart's row says how long decisions stopped after it
    // (the outputs carry their decision time): a figure, never "none",
    // since records arrive on every partition all through the window.
    for row in report.lines().filter(|l| l.contains("the log kept")) {
        let stop = row
            .trim_end_matches(" |")
            .rsplit(" | ")
            .next()
            .unwrap_or_default();
        let seconds: f64 = stop
            .split(' ')
            .next()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("a broker restart without its stop figure: {row}"));
        assert!(seconds > 0.0, "{row}");
    }
    let exactly_once = report
        .lines()
        .filter(|l| headings.contains(l) && l.ends_with("exactly-once"))
        .count();
    assert_eq!(
        report.matches("killed by its SIGKILL").count(),
        2 * exactly_once,
        "an exactly-once run without its two SIGKILLs inside a seal:\n{report}"
    );
    println!(
        "short soak passed in {:.0}s",
        started.elapsed().as_secs_f64()
    );
    let _ = std::fs::remove_dir_all(&dir);
    report
}
