//! A key given twice in one object (docs/design.md §10): on the identity's
//! path it is `invalid` (`duplicate-key`), never hashed on the value one
//! parser keeps; elsewhere it changes nothing. The fast path leaves every
//! such record to the reference (`fast_tests` holds the two together on
//! generated payloads, a fifth of whose objects give a key twice).

use super::*;

const LIMIT: usize = 1 << 20;

fn record(payload: &str) -> RecordView<'_> {
    RecordView {
        key: None,
        payload: Some(payload.as_bytes()),
        headers: &[],
    }
}

fn fields(list: &str) -> Profile {
    Profile::resolve("fields", Some(list), None).unwrap()
}

/// `fingerprint` (the fast path first) and the reference, which must agree.
fn both(profile: &Profile, payload: &str) -> Result<Fingerprint, Invalid> {
    let reference = fingerprint_reference(profile, LIMIT, &record(payload));
    assert_eq!(fingerprint(profile, LIMIT, &record(payload)), reference);
    reference
}

fn refused(profile: &Profile, payload: &str) -> String {
    match both(profile, payload) {
        Err(error @ Invalid::DuplicateKey { .. }) => {
            assert_eq!(error.code(), "duplicate-key");
            match error {
                Invalid::DuplicateKey { key } => key,
                _ => unreachable!(),
            }
        }
        other => panic!("{payload}: expected duplicate-key, got {other:?}"),
    }
}

#[test]
fn an_identity_field_given_twice_is_invalid_whichever_value_comes_last() {
    let bank = Profile::resolve("bank-txn", None, None).unwrap();
    let base = r#""account_id":"acc-1","amount":"10.00","currency":"EUR","booked_at":"2026-12-07T09:00:00Z""#;
    for ids in [
        r#""bank_txn_id":"k2","bank_txn_id":"k3""#,
        r#""bank_txn_id":"k3","bank_txn_id":"k2""#,
        r#""bank_txn_id":"k2","bank_txn_id":"k2""#,
    ] {
        let payload = format!("{{{ids},{base}}}");
        assert_eq!(refused(&bank, &payload), "bank_txn_id");
    }
}

#[test]
fn a_key_given_twice_on_a_nested_identity_path_is_invalid() {
    let profile = fields("a.b.c:decimal");
    // The field itself, an object on its path, and its parent's object given
    // twice.
    assert_eq!(refused(&profile, r#"{"a":{"b":{"c":1,"c":2}}}"#), "a.b.c");
    assert_eq!(
        refused(&profile, r#"{"a":{"b":{"c":1},"b":{"c":1}}}"#),
        "a.b"
    );
    assert_eq!(
        refused(&profile, r#"{"a":{"b":{"c":1}},"a":{"b":{"c":1}}}"#),
        "a"
    );
    // A key inside an `object` field's value, in an array too.
    let object = fields("params:object");
    assert_eq!(refused(&object, r#"{"params":{"x":1,"x":2}}"#), "params.x");
    assert_eq!(
        refused(&object, r#"{"params":{"list":[{"y":1,"y":2}]}}"#),
        "params.list[].y"
    );
}

#[test]
fn a_key_given_twice_off_the_identity_path_changes_nothing() {
    let profile = fields("id,a.b:decimal");
    let twice = both(
        &profile,
        r#"{"id":"e1","a":{"b":1,"z":1,"z":2},"note":1,"note":2}"#,
    );
    let once = both(&profile, r#"{"id":"e1","a":{"b":1,"z":2},"note":2}"#);
    assert_eq!(
        twice.unwrap(),
        once.unwrap(),
        "the last value kept, as before"
    );
    // A sibling of a field's parent path is not on its path.
    assert!(both(&fields("a.b:decimal"), r#"{"a":{"b":1},"ab":1,"ab":2}"#).is_ok());
}

#[test]
fn under_payload_any_key_given_twice_is_invalid_but_in_an_ignored_path() {
    let payload = Profile::resolve("payload", None, None).unwrap();
    assert_eq!(refused(&payload, r#"{"n":1,"m":{"k":1,"k":2}}"#), "m.k");
    assert_eq!(refused(&payload, r#"[{"k":1,"k":1}]"#), "[].k");
    let ignoring = payload.ignoring(&["m".to_owned()]).unwrap();
    let twice = both(&ignoring, r#"{"n":1,"m":{"k":1,"k":2}}"#).unwrap();
    let other = both(&ignoring, r#"{"n":1,"m":{"k":3}}"#).unwrap();
    assert_eq!(twice.hash, other.hash, "an ignored field is not identity");
    // Profiles that do not hash the payload take it as before.
    let header = Profile::resolve("header", None, None).unwrap();
    let keyed = RecordView {
        key: None,
        payload: Some(br#"{"n":1,"n":2}"#),
        headers: &[("x-idempotency-key", Some(b"k"))],
    };
    assert!(fingerprint(&header, LIMIT, &keyed).is_ok());
}

#[test]
fn the_error_names_the_key_for_the_audit_header() {
    let error = both(&fields("id"), r#"{"id":1,"id":2}"#).unwrap_err();
    assert_eq!(
        error.to_string(),
        "key `id` is given more than once in its object: readers disagree on its value"
    );
}
