//! Canonical source hashes as a stream sees them (docs/design.md §3): what must
//! hash alike, what must not, and why a record is refused.

mod numbers;
mod properties;

use idemgate::fingerprint::*;

/// The per-record size limit used throughout: 1 MiB.
const LIMIT: usize = 1 << 20;

fn profile(name: &str) -> Profile {
    Profile::resolve(name, None, None).expect("known profile")
}

fn run(profile: &Profile, payload: &str) -> Result<Fingerprint, Invalid> {
    run_with(profile, payload.as_bytes(), &[])
}

fn run_with(
    profile: &Profile,
    payload: &[u8],
    headers: &[(&str, Option<&[u8]>)],
) -> Result<Fingerprint, Invalid> {
    let payload = Some(payload);
    fingerprint(
        profile,
        LIMIT,
        &RecordView {
            key: None,
            payload,
            headers,
        },
    )
}

fn hash(profile: &Profile, payload: &str) -> SourceHash {
    run(profile, payload).expect("valid record").hash
}

fn bank_txn(account: &str, txn: &str, amount: &str) -> String {
    format!(
        r#"{{"account_id":"{account}","bank_txn_id":"{txn}","amount":{amount},"currency":"EUR","posted_at":"2026-01-01T00:00:00Z"}}"#
    )
}

// ----- spatial-job -------------------------------------------------------

#[test]
fn spatial_job_ignores_bbox_precision_crs_case_and_param_order() {
    let spatial = profile("spatial-job");
    let a = r#"{"bbox":[-74.5,40.1,-73.9,40.9],"crs":"epsg:4326","params":{"res":"10m","op":"intersects"}}"#;
    let b = r#"{"bbox":[-74.500000,40.100000,-73.900000,40.900000],"crs":"EPSG:4326","params":{"op":"intersects","res":"10m"}}"#;
    assert_eq!(hash(&spatial, a), hash(&spatial, b));
}

#[test]
fn spatial_job_with_another_area_or_params_hashes_apart() {
    let spatial = profile("spatial-job");
    let base = hash(
        &spatial,
        r#"{"bbox":[-74.5,40.1,-73.9,40.9],"crs":"EPSG:4326","params":{"res":"10m"}}"#,
    );
    let moved = hash(
        &spatial,
        r#"{"bbox":[-74.500001,40.1,-73.9,40.9],"crs":"EPSG:4326","params":{"res":"10m"}}"#,
    );
    let other_params = hash(
        &spatial,
        r#"{"bbox":[-74.5,40.1,-73.9,40.9],"crs":"EPSG:4326","params":{"res":"20m"}}"#,
    );
    assert_ne!(base, moved);
    assert_ne!(base, other_params);
}

// ----- bank-txn ----------------------------------------------------------

#[test]
fn bank_txn_amounts_with_trailing_zeros_hash_alike() {
    let bank = profile("bank-txn");
    let padded = hash(&bank, &bank_txn("acc-1", "t-1", r#""100.5000""#));
    assert_eq!(
        hash(&bank, &bank_txn("acc-1", "t-1", r#""100.50""#)),
        padded
    );
    assert_eq!(hash(&bank, &bank_txn("acc-1", "t-1", "100.5")), padded);
}

#[test]
fn bank_txn_amounts_a_cent_apart_hash_apart() {
    let bank = profile("bank-txn");
    assert_ne!(
        hash(&bank, &bank_txn("acc-1", "t-1", r#""100.50""#)),
        hash(&bank, &bank_txn("acc-1", "t-1", r#""100.51""#))
    );
}

#[test]
fn bank_txn_another_txn_id_on_the_same_account_does_not_collide() {
    let bank = profile("bank-txn");
    assert_ne!(
        hash(&bank, &bank_txn("acc-1", "t-1", r#""100.50""#)),
        hash(&bank, &bank_txn("acc-1", "t-2", r#""100.50""#))
    );
}

#[test]
fn bank_txn_posting_time_in_another_offset_is_the_same_instant() {
    let bank = profile("bank-txn");
    let utc = bank_txn("acc-1", "t-1", "1");
    let paris = utc.replace("2026-01-01T00:00:00Z", "2026-01-01T01:00:00+01:00");
    assert_eq!(hash(&bank, &utc), hash(&bank, &paris));
}

#[test]
fn bank_txn_preset_equals_the_same_field_list() {
    let listed = Profile::resolve(
        "fields",
        Some("account_id,bank_txn_id,amount:decimal,currency:upper,posted_at:timestamp"),
        None,
    )
    .unwrap();
    let record = bank_txn("acc-1", "t-1", "\"9.99\"");
    assert_eq!(hash(&listed, &record), hash(&profile("bank-txn"), &record));
}

#[test]
fn a_reused_key_with_another_payload_keeps_the_hash_but_not_the_digest() {
    let bank = profile("bank-txn");
    let first = run(&bank, &bank_txn("acc-1", "t-1", "1")).unwrap();
    let memo = bank_txn("acc-1", "t-1", "1").replace('}', r#","memo":"edited"}"#);
    let second = run(&bank, &memo).unwrap();
    assert_eq!(first.hash, second.hash);
    assert_ne!(first.digest, second.digest);
}

// ----- payload and header ------------------------------------------------

#[test]
fn payload_key_order_and_whitespace_do_not_change_the_hash() {
    let payload = profile("payload");
    assert_eq!(
        run(&payload, r#"{"a":1,"b":{"d":[1,2],"c":null}}"#),
        run(
            &payload,
            "{ \"b\" : { \"c\" : null , \"d\" : [ 1 , 2 ] } ,\n\t\"a\" : 1 }"
        )
    );
}

#[test]
fn string_123_and_number_123_hash_apart() {
    let payload = profile("payload");
    assert_ne!(hash(&payload, "123"), hash(&payload, r#""123""#));
    let object = Profile::resolve("fields", Some("params:object"), None).unwrap();
    assert_ne!(
        hash(&object, r#"{"params":{"n":123}}"#),
        hash(&object, r#"{"params":{"n":"123"}}"#)
    );
}

#[test]
fn header_profile_collapses_a_job_sent_twice_with_different_bodies() {
    let header = profile("header");
    let key: &[(&str, Option<&[u8]>)] = &[("x-idempotency-key", Some(b"job-42"))];
    let sync = run_with(&header, br#"{"mode":"sync"}"#, key).unwrap();
    let replay = run_with(&header, br#"{"mode":"async"}"#, key).unwrap();
    assert_eq!(sync.hash, replay.hash);
    assert_ne!(sync.digest, replay.digest);
}

// ----- invalid records ---------------------------------------------------

#[test]
fn a_two_megabyte_record_is_too_large() {
    let record = format!(r#"{{"pad":"{}"}}"#, "x".repeat(2 * 1024 * 1024));
    let err = run(&profile("payload"), &record).unwrap_err();
    assert_eq!(
        err,
        Invalid::TooLarge {
            size: record.len(),
            limit: LIMIT
        }
    );
    assert_eq!(err.code(), "too-large");
}

#[test]
fn a_payload_that_is_not_json_is_not_json() {
    let err = run(&profile("bank-txn"), "account_id=acc-1&amount=1").unwrap_err();
    assert!(matches!(err, Invalid::NotJson { .. }), "{err:?}");
    assert_eq!(err.code(), "not-json");
    assert!(err.to_string().starts_with("payload is not json"));
}

#[test]
fn a_missing_field_is_named() {
    let record = bank_txn("acc-1", "t-1", "1").replace(r#""currency":"EUR","#, "");
    let err = run(&profile("bank-txn"), &record).unwrap_err();
    assert_eq!(
        err,
        Invalid::MissingField {
            field: "currency".into()
        }
    );
    assert_eq!(err.code(), "missing-field");
    assert!(err.to_string().contains("`currency`"));
}

#[test]
fn a_null_field_counts_as_missing() {
    let record = bank_txn("acc-1", "t-1", "null");
    assert_eq!(
        run(&profile("bank-txn"), &record),
        Err(Invalid::MissingField {
            field: "amount".into()
        })
    );
}

#[test]
fn a_bad_decimal_is_named_with_its_value() {
    let record = bank_txn("acc-1", "t-1", r#""1O0.50""#);
    let err = run(&profile("bank-txn"), &record).unwrap_err();
    assert_eq!(
        err,
        Invalid::BadDecimal {
            field: "amount".into(),
            value: "1O0.50".into()
        }
    );
    assert_eq!(err.code(), "bad-decimal");
}

#[test]
fn a_bad_timestamp_is_named_with_its_value() {
    let record = bank_txn("acc-1", "t-1", "1").replace("2026-01-01T00:00:00Z", "01/01/2026");
    let err = run(&profile("bank-txn"), &record).unwrap_err();
    assert_eq!(
        err,
        Invalid::BadTimestamp {
            field: "posted_at".into(),
            value: "01/01/2026".into()
        }
    );
    assert_eq!(err.code(), "bad-timestamp");
}

#[test]
fn a_header_that_is_not_utf8_is_named() {
    let headers: &[(&str, Option<&[u8]>)] = &[("x-idempotency-key", Some(&[0xff, 0xfe, 0x41]))];
    let err = run_with(&profile("header"), b"{}", headers).unwrap_err();
    assert_eq!(
        err,
        Invalid::HeaderNotUtf8 {
            name: "x-idempotency-key".into()
        }
    );
    assert_eq!(err.code(), "header-not-utf8");
    assert!(err.to_string().contains("`x-idempotency-key`"));
}

#[test]
fn a_wrong_type_names_the_field_and_both_types() {
    let err = run(&profile("bank-txn"), &bank_txn("acc-1", "t-1", "true")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "field `amount`: expected string or number, found boolean"
    );
    assert_eq!(err.code(), "wrong-type");
}

#[test]
fn a_copy_that_only_spells_listed_fields_differently_keeps_its_digest() {
    let profile = Profile::resolve("bank-txn", None, None).unwrap();
    let print = |payload: &str| {
        let view = RecordView {
            key: None,
            payload: Some(payload.as_bytes()),
            headers: &[],
        };
        fingerprint(&profile, 1 << 20, &view).unwrap()
    };
    let first = print(
        r#"{"account_id":"A1","bank_txn_id":"T1","amount":"100.50","currency":"USD","posted_at":"2026-01-01T00:00:00Z","memo":"rent"}"#,
    );
    let reprocessed = print(
        r#"{"memo":"rent","currency":"usd","amount":"100.5000","posted_at":"2026-01-01T01:00:00+01:00","bank_txn_id":"T1","account_id":"A1"}"#,
    );
    let edited = print(
        r#"{"account_id":"A1","bank_txn_id":"T1","amount":"100.50","currency":"USD","posted_at":"2026-01-01T00:00:00Z","memo":"rent (corrected)"}"#,
    );
    assert_eq!(first.hash, reprocessed.hash);
    assert_eq!(first.digest, reprocessed.digest);
    assert_eq!(first.hash, edited.hash);
    assert_ne!(first.digest, edited.digest);
}
