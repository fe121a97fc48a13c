//! `hash` as an operator predicts a stream's decisions with it (the
//! digest, `record-key`, `ignore`), and flags from `IDEMGATE_*` variables.

use super::{idemgate_with, ok, refused};

/// `hash --digest` for one payload: the hash and the digest columns.
fn hash_and_digest(args: &[&str], payload: &str) -> (String, String) {
    let line = ok(&[&["hash", "--digest"], args].concat(), payload);
    let (hash, digest) = line
        .strip_suffix('\n')
        .and_then(|l| l.split_once('\t'))
        .unwrap_or_else(|| panic!("not `hash<TAB>digest`: {line:?}"));
    assert_eq!(hash.len(), 64, "{line}");
    assert_eq!(digest.len(), 16, "{line}");
    (hash.to_owned(), digest.to_owned())
}

#[test]
fn hash_prints_the_hash_alone_and_the_digest_after_a_tab_when_asked() {
    let record = r#"{"id":"a","n":1}"#;
    let alone = ok(&["hash", "--profile", "payload"], record);
    assert_eq!(alone.len(), 65, "{alone:?}");
    assert!(alone.ends_with('\n') && !alone.contains('\t'), "{alone:?}");
    let (hash, _) = hash_and_digest(&["--profile", "payload"], record);
    assert_eq!(format!("{hash}\n"), alone);
}

#[test]
fn hash_predicts_duplicate_and_conflict_for_a_keyed_webhook_retry() {
    let first = r#"{"id":"wh-1","amount":5,"attempt":1,"meta":{"status":"pending"}}"#;
    let retry = r#"{"id":"wh-1","amount":5,"attempt":2,"meta":{"status":"retrying"}}"#;
    let edited = r#"{"id":"wh-1","amount":6,"attempt":2,"meta":{"status":"retrying"}}"#;
    let keyed = ["--profile", "record-key", "--key", "wh-1"];
    let ignoring = [&keyed[..], &["--ignore", "attempt,meta.status"]].concat();
    let (hash, digest) = hash_and_digest(&ignoring, first);
    assert_eq!(
        hash_and_digest(&ignoring, retry),
        (hash.clone(), digest.clone()),
        "a duplicate"
    );
    let (edited_hash, edited_digest) = hash_and_digest(&ignoring, edited);
    assert_eq!(edited_hash, hash, "one key, one claim");
    assert_ne!(edited_digest, digest, "a conflict");
    // Without --ignore the retry is a conflict.
    let (plain_hash, plain_digest) = hash_and_digest(&keyed, retry);
    assert_eq!(plain_hash, hash);
    assert_ne!(plain_digest, digest);
    // Another key is another claim.
    let (other, _) = hash_and_digest(&["--profile", "record-key", "--key", "wh-2"], first);
    assert_ne!(other, hash);
}

#[test]
fn hash_refuses_a_keyless_record_under_record_key_and_ignore_under_payload_raw() {
    let error = refused(&["hash", "--profile", "record-key"], "{}");
    assert!(error.contains("record has no key"), "{error}");
    let error = refused(&["hash", "--profile", "record-key", "--key", ""], "{}");
    assert!(error.contains("record key is empty"), "{error}");
    let error = refused(
        &["hash", "--profile", "payload-raw", "--ignore", "attempt"],
        "{}",
    );
    assert!(error.contains("no fields to ignore"), "{error}");
}

#[test]
fn the_config_flag_comes_from_idemgate_config_and_the_flag_wins() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/config/example.toml");
    // Read from the variable: the stream is looked up in that file.
    let out = idemgate_with(
        &["rebuild", "--stream", "nope"],
        &[("IDEMGATE_CONFIG", example)],
        "",
    );
    assert!(!out.status.success());
    let error = String::from_utf8_lossy(&out.stderr);
    assert!(
        error.contains("nope") && error.contains("--stream"),
        "{error}"
    );
    // `check` names the file it read: the flag's, over the variable's.
    for (vars, read) in [
        (
            &[("IDEMGATE_CONFIG", "/nonexistent/env.toml")][..],
            "/nonexistent/env.toml",
        ),
        (&[][..], "/nonexistent/flag.toml"),
    ] {
        let flagged = read.ends_with("flag.toml");
        let args: &[&str] = if flagged {
            &["check", "--offline", "--config", "/nonexistent/flag.toml"]
        } else {
            &["check", "--offline"]
        };
        let out = idemgate_with(args, vars, "");
        let report = String::from_utf8_lossy(&out.stdout);
        assert!(
            report.starts_with(&format!("FAIL  config  cannot read config file {read}")),
            "{report}"
        );
    }
    let out = idemgate_with(
        &["check", "--offline", "--config", "/nonexistent/flag.toml"],
        &[("IDEMGATE_CONFIG", "/nonexistent/env.toml")],
        "",
    );
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        report.contains("/nonexistent/flag.toml") && !report.contains("env.toml"),
        "{report}"
    );
    // Neither: the flag is asked for by name.
    let error = refused(&["check", "--offline"], "");
    assert!(error.contains("--config"), "{error}");
}

#[test]
fn the_log_format_comes_from_idemgate_log_format_and_the_flag_wins() {
    let fail = [
        "reset",
        "--config",
        "/nonexistent/gate.toml",
        "--stream",
        "s",
        "--to-earliest",
    ];
    let json = idemgate_with(&fail, &[("IDEMGATE_LOG_FORMAT", "json")], "");
    assert!(!json.status.success());
    let line = String::from_utf8_lossy(&json.stderr);
    let parsed: serde_json::Value = serde_json::from_str(line.trim())
        .unwrap_or_else(|e| panic!("not one JSON line ({e}): {line}"));
    assert!(
        parsed["error"]
            .as_str()
            .is_some_and(|e| e.contains("/nonexistent/gate.toml")),
        "{line}"
    );
    let flagged = [&["--log-format", "text"][..], &fail].concat();
    let text = idemgate_with(&flagged, &[("IDEMGATE_LOG_FORMAT", "json")], "");
    let line = String::from_utf8_lossy(&text.stderr);
    assert!(line.starts_with("idemgate: "), "{line}");
    let bad = idemgate_with(&fail, &[("IDEMGATE_LOG_FORMAT", "yaml")], "");
    let error = String::from_utf8_lossy(&bad.stderr);
    assert!(!bad.status.success() && error.contains("yaml"), "{error}");
}
