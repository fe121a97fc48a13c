//! Unit tests of the `record-key` profile and of `ignore`: what the key
//! hashes to, what a keyless record is, and what an ignored field can and
//! cannot change.

use super::*;
use proptest::prelude::*;

const LIMIT: usize = 1 << 20;

fn json_record(payload: &str) -> RecordView<'_> {
    RecordView {
        key: None,
        payload: Some(payload.as_bytes()),
        headers: &[],
    }
}

fn keyed<'a>(key: Option<&'a [u8]>, payload: Option<&'a [u8]>) -> RecordView<'a> {
    RecordView {
        key,
        payload,
        headers: &[],
    }
}

fn ignoring(name: &str, fields: Option<&str>, paths: &[&str]) -> Profile {
    let paths: Vec<String> = paths.iter().map(|p| p.to_string()).collect();
    Profile::resolve(name, fields, None)
        .unwrap()
        .ignoring(&paths)
        .unwrap()
}

#[test]
fn record_key_profile_hashes_the_key_bytes_and_digests_the_payload() {
    let profile = Profile::resolve("record-key", None, None).unwrap();
    let a = fingerprint(&profile, LIMIT, &keyed(Some(b"evt-1"), Some(br#"{"n":1}"#))).unwrap();
    let b = fingerprint(
        &profile,
        LIMIT,
        &keyed(Some(b"evt-1"), Some(br#"{ "n": 2 }"#)),
    )
    .unwrap();
    let expected: [u8; 32] = Sha256::digest(b"idemgate/v1/record-key\0evt-1").into();
    assert_eq!(a.hash, SourceHash(expected));
    assert_eq!(a.hash, b.hash, "one key, one claim");
    assert_ne!(a.digest, b.digest, "another payload under it is a conflict");
    let spaced = fingerprint(
        &profile,
        LIMIT,
        &keyed(Some(b"evt-1"), Some(br#"{ "n":1 }"#)),
    )
    .unwrap();
    assert_eq!(a, spaced, "the digest sees canonical json: a duplicate");

    // Binary keys are taken as bytes; a tombstone under a key is valid.
    let binary = fingerprint(&profile, LIMIT, &keyed(Some(&[0xff, 0x00]), None)).unwrap();
    let expected: [u8; 32] = Sha256::digest(b"idemgate/v1/record-key\0\xff\x00").into();
    assert_eq!(binary.hash, SourceHash(expected));
    let empty: [u8; 32] = Sha256::digest(b"").into();
    assert_eq!(binary.digest.0, empty[..8]);
}

#[test]
fn a_record_without_a_key_is_invalid_under_record_key() {
    let profile = Profile::resolve("record-key", None, None).unwrap();
    let run = |key| fingerprint(&profile, LIMIT, &keyed(key, Some(b"{}")));
    assert_eq!(run(None), Err(Invalid::MissingKey));
    assert_eq!(run(Some(b"")), Err(Invalid::EmptyKey));
    assert_eq!(Invalid::MissingKey.code(), "missing-key");
    assert_eq!(Invalid::MissingKey.to_string(), "record has no key");
    // Other profiles never read the key.
    let payload = Profile::resolve("payload", None, None).unwrap();
    assert_eq!(
        fingerprint(&payload, LIMIT, &keyed(None, Some(b"{}"))),
        fingerprint(&payload, LIMIT, &keyed(Some(b"k"), Some(b"{}")))
    );
}

#[test]
fn a_record_key_never_shares_a_hash_with_a_header_of_the_same_bytes() {
    let headers: &[(&str, Option<&[u8]>)] = &[("x-idempotency-key", Some(b"k-1"))];
    let view = RecordView {
        key: Some(b"k-1"),
        payload: Some(b"{}"),
        headers,
    };
    let header = Profile::resolve("header", None, None).unwrap();
    let key = Profile::resolve("record-key", None, None).unwrap();
    let by_header = fingerprint(&header, LIMIT, &view).unwrap();
    let by_key = fingerprint(&key, LIMIT, &view).unwrap();
    assert_ne!(by_header.hash, by_key.hash);
    assert_eq!(by_header.digest, by_key.digest);
}

#[test]
fn a_webhook_retry_differing_only_in_ignored_fields_is_a_duplicate() {
    let first = br#"{"id":"wh-1","amount":5,"attempt":1,"meta":{"status":"pending","src":"a"}}"#;
    let retry = br#"{"meta":{"src":"a","status":"retrying"},"attempt":2,"amount":5,"id":"wh-1"}"#;
    let edited = br#"{"id":"wh-1","amount":6,"attempt":2,"meta":{"status":"retrying","src":"a"}}"#;
    let headers: &[(&str, Option<&[u8]>)] = &[("x-idempotency-key", Some(b"wh-1"))];
    let view = |payload| RecordView {
        key: Some(b"wh-1"),
        payload: Some(payload),
        headers,
    };
    for name in ["header", "record-key"] {
        let plain = Profile::resolve(name, None, None).unwrap();
        let retried = ignoring(name, None, &["attempt", "meta.status"]);
        let print =
            |profile: &Profile, payload| fingerprint(profile, LIMIT, &view(payload)).unwrap();
        assert_ne!(
            print(&plain, first).digest,
            print(&plain, retry).digest,
            "{name}: a conflict without ignore"
        );
        assert_eq!(
            print(&retried, first),
            print(&retried, retry),
            "{name}: a duplicate with it"
        );
        assert_ne!(
            print(&retried, first).digest,
            print(&retried, edited).digest,
            "{name}: an edit is still a conflict"
        );
        assert_eq!(
            print(&plain, first).hash,
            print(&retried, first).hash,
            "{name}: the hash is the key's"
        );
    }
    let fields = ignoring(
        "fields",
        Some("id,amount:decimal"),
        &["attempt", "meta.status"],
    );
    let plain = Profile::resolve("fields", Some("id,amount:decimal"), None).unwrap();
    let print = |profile: &Profile, payload| fingerprint(profile, LIMIT, &view(payload)).unwrap();
    assert_eq!(print(&fields, first), print(&fields, retry));
    assert_eq!(
        print(&fields, first).hash,
        print(&plain, first).hash,
        "fields: the hash is unchanged"
    );
    assert_ne!(print(&plain, first).digest, print(&plain, retry).digest);
}

#[test]
fn under_payload_ignored_fields_leave_the_hash_too() {
    let profile = ignoring("payload", None, &["attempt"]);
    let run = |payload: &str| fingerprint(&profile, LIMIT, &json_record(payload)).unwrap();
    let first = run(r#"{"id":"a","attempt":1}"#);
    assert_eq!(first, run(r#"{"attempt":2,"id":"a"}"#));
    assert_eq!(first, run(r#"{"id":"a","attempt":null}"#));
    assert_ne!(first.hash, run(r#"{"id":"b","attempt":1}"#).hash);
    let expected: [u8; 32] = Sha256::digest(b"idemgate/v1/payload\0{\"id\":\"a\"}").into();
    assert_eq!(
        first.hash,
        SourceHash(expected),
        "the tag and form of a payload without it"
    );
}

#[test]
fn a_payload_without_the_ignored_fields_fingerprints_as_before() {
    let payloads = [
        r#"{"account_id":"A","bank_txn_id":"B","amount":"1.50","currency":"eur","posted_at":"2026-01-01T00:00:00Z","note":{"x":1}}"#,
        r#"{"id":"a","n":[1,2.50,{"z":null}]}"#,
        "[1,2]",
        "\"text\"",
        "not json",
    ];
    let headers: &[(&str, Option<&[u8]>)] = &[("x-idempotency-key", Some(b"k"))];
    for (name, fields) in [
        ("header", None),
        ("record-key", None),
        ("payload", None),
        ("bank-txn", None),
        ("fields", Some("id")),
    ] {
        let plain = Profile::resolve(name, fields, None).unwrap();
        let ignored = ignoring(name, fields, &["attempt", "note.y", "meta.status"]);
        for payload in payloads {
            let view = RecordView {
                key: Some(b"k"),
                payload: Some(payload.as_bytes()),
                headers,
            };
            assert_eq!(
                fingerprint(&plain, LIMIT, &view),
                fingerprint(&ignored, LIMIT, &view),
                "{name} {payload}"
            );
        }
    }
}

proptest! {
    /// Whatever an ignored field holds, and wherever it sits among the
    /// others, neither the digest nor (under `payload`) the hash sees it;
    /// a change to any other field is always seen.
    #[test]
    fn an_ignored_field_never_changes_the_fingerprint(
        others in prop::collection::btree_map("[a-z]{1,3}", -1000i64..1000, 0..5),
        attempt in r#"(-?(0|[1-9][0-9]{0,3})(\.[0-9]{1,3})?|"[a-z]{0,5}"|null|true|\[([0-9],){0,3}[0-9]\]|\{"s":[0-9]\})"#,
        status in "[a-z]{0,6}",
        at_start in any::<bool>(),
    ) {
        let body: Vec<String> = others
            .iter()
            .filter(|(k, _)| *k != "attempt" && *k != "meta")
            .map(|(k, v)| format!("\"{k}\":{v}"))
            .collect();
        let with = |attempt: &str, status: &str| {
            let ignored = format!("\"attempt\":{attempt},\"meta\":{{\"status\":\"{status}\",\"src\":\"s\"}}");
            let mut parts = body.clone();
            if at_start { parts.insert(0, ignored) } else { parts.push(ignored) }
            format!("{{{}}}", parts.join(","))
        };
        let bare = with("0", "");
        let changed = with(&attempt, &status);
        for name in ["header", "record-key", "payload"] {
            let profile = ignoring(name, None, &["attempt", "meta.status"]);
            let view = |payload: &str| fingerprint(&profile, LIMIT, &RecordView {
                key: Some(b"k"),
                payload: Some(payload.as_bytes()),
                headers: &[("x-idempotency-key", Some(b"k"))],
            }).map(|print| (print.hash, print.digest));
            prop_assert_eq!(view(&bare), view(&changed), "{} {}", name, changed);
            if let Some((key, value)) = others.iter().find(|(k, _)| *k != "attempt" && *k != "meta") {
                let edited = changed.replacen(&format!("\"{key}\":{value}"), &format!("\"{key}\":{}", value + 1), 1);
                prop_assert_ne!(view(&changed).unwrap().1, view(&edited).unwrap().1, "{} {}", name, edited);
            }
        }
    }
}
