//! The claims bench on tiny sizes against the test services' Redis servers
//! (memory, standalone with bitmaps and RedisBloom, cluster): every figure
//! is computed and its outcomes checked, so the bench cannot rot between
//! full runs. A missing server fails it.

use std::process::Command;

#[test]
fn the_claims_bench_measures_every_backend_on_tiny_sizes() {
    let output = Command::new(env!("CARGO_BIN_EXE_idemgate-bench"))
        .args(["claims", "--smoke"])
        .output()
        .expect("running idemgate-bench");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the claims smoke run failed:\n{stderr}"
    );
    assert!(
        !stderr.contains("NOT MEASURED"),
        "a figure went unmeasured:\n{stderr}"
    );
}
