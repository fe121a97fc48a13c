//! Canonical source hashes as a stream sees them (docs/design.md §3): what must
//! hash alike, what must not, and why a record is refused.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use idemgate::fingerprint::*;
use proptest::prelude::*;
use rust_decimal::Decimal;
use serde_json::{json, Value};
use time::format_description::well_known::Rfc3339;
use time::{OffsetDateTime, UtcOffset};

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
    fingerprint(profile, LIMIT, &RecordView { payload, headers })
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

// ----- properties --------------------------------------------------------

/// Any JSON value, nested a few levels, with strings that need escaping.
fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        (-1e9f64..1e9).prop_map(Value::from),
        "[a-zA-Z0-9 é\"\\\\\n]{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            arb_object(inner).prop_map(Value::Object),
        ]
    })
}

fn arb_object(
    values: impl Strategy<Value = Value>,
) -> impl Strategy<Value = serde_json::Map<String, Value>> {
    prop::collection::btree_map("[a-z_]{0,4}", values, 0..6)
        .prop_map(|map| map.into_iter().collect())
}

/// Render JSON with object keys in an order drawn from `seed` (at every
/// level) and whitespace that depends on it too, as a different sender
/// would.
fn render(value: &Value, seed: u64, out: &mut String) {
    let space = if seed.is_multiple_of(3) { " " } else { "" };
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by_key(|(key, _)| {
                let mut hasher = DefaultHasher::new();
                (seed, key.as_str()).hash(&mut hasher);
                hasher.finish()
            });
            out.push('{');
            for (index, (key, item)) in entries.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                out.push_str(space);
                out.push_str(&serde_json::to_string(key).unwrap());
                out.push_str(space);
                out.push(':');
                render(item, seed.rotate_left(7) ^ 0x9e37_79b9, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                    out.push_str(space);
                }
                render(item, seed.rotate_left(13) ^ 0x7f4a_7c15, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

fn rendered(value: &Value, seed: u64) -> String {
    let mut out = String::new();
    render(value, seed, &mut out);
    out
}

/// A bank transaction's listed values, each drawn independently so one can
/// be swapped for another's.
#[derive(Clone, Debug)]
struct Txn {
    account: String,
    txn_id: String,
    /// Amount = units / 10^scale; at most 15 significant digits, so a JSON
    /// number spelling survives `f64` exactly.
    units: i64,
    scale: u32,
    currency: String,
    posted_at: i64,
}

prop_compose! {
    fn arb_txn()(
        account in "[A-Za-z0-9-]{1,10}",
        txn_id in "[A-Za-z0-9-]{1,10}",
        units in -99_999_999_999i64..99_999_999_999,
        scale in 0u32..=4,
        currency in "[A-Z]{3}",
        posted_at in 0i64..4_000_000_000,
    ) -> Txn {
        Txn { account, txn_id, units, scale, currency, posted_at }
    }
}

/// How a sender happens to spell a transaction: amount as a number or a
/// string with extra trailing zeros, currency case, posting time offset,
/// unlisted fields.
#[derive(Clone, Debug)]
struct Spelling {
    amount_as_string: bool,
    extra_zeros: usize,
    lower_currency: bool,
    offset_minutes: i32,
    extras: serde_json::Map<String, Value>,
}

prop_compose! {
    fn arb_spelling()(
        amount_as_string in any::<bool>(),
        extra_zeros in 0usize..4,
        lower_currency in any::<bool>(),
        offset_minutes in -12 * 60..=14 * 60,
        extras in arb_object(arb_json()),
    ) -> Spelling {
        Spelling { amount_as_string, extra_zeros, lower_currency, offset_minutes, extras }
    }
}

impl Txn {
    fn amount(&self) -> Decimal {
        Decimal::new(self.units, self.scale)
    }

    /// The listed values as the hash should see them (`Decimal` compares
    /// numerically).
    fn listed(&self) -> (&str, &str, Decimal, &str, i64) {
        let amount = self.amount();
        (
            &self.account,
            &self.txn_id,
            amount,
            &self.currency,
            self.posted_at,
        )
    }

    fn to_json(&self, spelling: &Spelling) -> Value {
        let mut amount = self.amount().to_string();
        if spelling.extra_zeros > 0 {
            if !amount.contains('.') {
                amount.push('.');
            }
            amount.push_str(&"0".repeat(spelling.extra_zeros));
        }
        let amount = if spelling.amount_as_string {
            Value::String(amount)
        } else {
            serde_json::from_str(&amount).unwrap()
        };
        let currency = if spelling.lower_currency {
            self.currency.to_lowercase()
        } else {
            self.currency.clone()
        };
        let offset = UtcOffset::from_whole_seconds(spelling.offset_minutes * 60).unwrap();
        let posted_at = OffsetDateTime::from_unix_timestamp(self.posted_at)
            .unwrap()
            .to_offset(offset)
            .format(&Rfc3339)
            .unwrap();
        let mut object = spelling.extras.clone();
        object.insert("account_id".into(), json!(self.account));
        object.insert("bank_txn_id".into(), json!(self.txn_id));
        object.insert("amount".into(), amount);
        object.insert("currency".into(), json!(currency));
        object.insert("posted_at".into(), json!(posted_at));
        Value::Object(object)
    }
}

/// `txn` with listed field `field` (0..5) taken from `other`.
fn swap_field(txn: &Txn, other: &Txn, field: usize) -> Txn {
    let mut changed = txn.clone();
    match field {
        0 => changed.account.clone_from(&other.account),
        1 => changed.txn_id.clone_from(&other.txn_id),
        2 => (changed.units, changed.scale) = (other.units, other.scale),
        3 => changed.currency.clone_from(&other.currency),
        _ => changed.posted_at = other.posted_at,
    }
    changed
}

fn number_text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>()
            .prop_filter("finite", |x| x.is_finite())
            .prop_map(|x| serde_json::Number::from_f64(x).unwrap().to_string()),
    ]
}

proptest! {
    #[test]
    fn key_order_never_changes_a_payload_hash(
        object in arb_object(arb_json()),
        seed_a in any::<u64>(),
        seed_b in any::<u64>(),
    ) {
        let value = Value::Object(object);
        let payload = profile("payload");
        let a = run(&payload, &rendered(&value, seed_a)).unwrap();
        let b = run(&payload, &rendered(&value, seed_b)).unwrap();
        prop_assert_eq!(a, b);
    }

    #[test]
    fn key_order_never_changes_a_bank_txn_hash(
        txn in arb_txn(),
        spelling in arb_spelling(),
        seed_a in any::<u64>(),
        seed_b in any::<u64>(),
    ) {
        let value = txn.to_json(&spelling);
        let bank = profile("bank-txn");
        let a = run(&bank, &rendered(&value, seed_a)).unwrap();
        let b = run(&bank, &rendered(&value, seed_b)).unwrap();
        prop_assert_eq!(a, b);
    }

    #[test]
    fn spelling_never_changes_a_bank_txn_hash(
        txn in arb_txn(),
        spelling_a in arb_spelling(),
        spelling_b in arb_spelling(),
    ) {
        let bank = profile("bank-txn");
        prop_assert_eq!(
            hash(&bank, &txn.to_json(&spelling_a).to_string()),
            hash(&bank, &txn.to_json(&spelling_b).to_string())
        );
    }

    #[test]
    fn a_change_in_any_listed_field_changes_a_bank_txn_hash(
        txn in arb_txn(),
        other in arb_txn(),
        field in 0usize..5,
        spelling_a in arb_spelling(),
        spelling_b in arb_spelling(),
    ) {
        let changed = swap_field(&txn, &other, field);
        prop_assume!(changed.listed() != txn.listed());
        let bank = profile("bank-txn");
        prop_assert_ne!(
            hash(&bank, &txn.to_json(&spelling_a).to_string()),
            hash(&bank, &changed.to_json(&spelling_b).to_string())
        );
    }

    #[test]
    fn a_number_and_its_string_never_share_a_payload_hash(number in number_text()) {
        let payload = profile("payload");
        let quoted = format!("\"{number}\"");
        prop_assert_ne!(hash(&payload, &number), hash(&payload, &quoted));
        prop_assert_ne!(
            hash(&payload, &format!(r#"{{"n":{number}}}"#)),
            hash(&payload, &format!(r#"{{"n":{quoted}}}"#))
        );
    }

    #[test]
    fn a_number_and_its_string_never_share_an_object_hash(number in number_text()) {
        let object = Profile::resolve("fields", Some("params:object"), None).unwrap();
        let quoted = format!("\"{number}\"");
        prop_assert_ne!(
            hash(&object, &format!(r#"{{"params":{number}}}"#)),
            hash(&object, &format!(r#"{{"params":{quoted}}}"#))
        );
        prop_assert_ne!(
            hash(&object, &format!(r#"{{"params":{{"n":[{number}]}}}}"#)),
            hash(&object, &format!(r#"{{"params":{{"n":[{quoted}]}}}}"#))
        );
    }
}

#[test]
fn a_copy_that_only_spells_listed_fields_differently_keeps_its_digest() {
    let profile = Profile::resolve("bank-txn", None, None).unwrap();
    let print = |payload: &str| {
        let view = RecordView {
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
