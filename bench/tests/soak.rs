//! The short fault soak, in the normal test suite: 20,000 records through
//! three replicas while replicas are killed and terminated, Redis is frozen
//! and restarted and (where moto is installed) the broker is restarted, in
//! every guarantee this build takes. `idemgate-bench soak --short` fails on
//! any must-be-zero figure and on a run that does not drain; this test
//! fails with its output. Needs the test services' Tansu binary
//! (`IDEMGATE_TEST_TANSU`, from scripts/test-services.sh) and redis-server.

use std::process::Command;
use std::time::Instant;

#[test]
fn a_short_fault_soak_loses_nothing_and_lets_no_second_copy_through() {
    let tansu = std::env::var("IDEMGATE_TEST_TANSU").unwrap_or_else(|_| {
        panic!("IDEMGATE_TEST_TANSU is not set: run the suite with scripts/test.sh, which starts the servers")
    });
    let dir = std::env::temp_dir().join(format!("idemgate-soak-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("the soak's directory");
    let started = Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_idemgate-bench"))
        .args(["soak", "--short", "--tansu", &tansu])
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
    println!(
        "short soak passed in {:.0}s",
        started.elapsed().as_secs_f64()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
