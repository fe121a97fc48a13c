//! Unit tests of `fingerprint` itself: profile dispatch, digest, errors.

use super::*;
use proptest::prelude::*;

fn record<'a>(
    payload: Option<&'a [u8]>,
    headers: &'a [(&'a str, Option<&'a [u8]>)],
) -> RecordView<'a> {
    RecordView {
        key: None,
        payload,
        headers,
    }
}

fn json_record(payload: &str) -> RecordView<'_> {
    record(Some(payload.as_bytes()), &[])
}

fn fields(list: &str) -> Profile {
    Profile::resolve("fields", Some(list), None).unwrap()
}

const LIMIT: usize = 1 << 20;

#[test]
fn hash_and_digest_display_as_lowercase_hex() {
    let print = fingerprint(
        &Profile::from(Identity::Payload { raw: true }),
        LIMIT,
        &json_record("abc"),
    )
    .unwrap();
    let hash = print.hash.to_string();
    assert_eq!(hash.len(), 64);
    assert!(hash
        .bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
    assert_eq!(format!("{:?}", print.hash), hash);
    assert_eq!(print.digest.to_string().len(), 16);
    assert_eq!(format!("{:?}", print.digest), print.digest.to_string());
}

#[test]
fn raw_payload_hash_is_sha256_of_tag_and_bytes() {
    let print = fingerprint(
        &Profile::from(Identity::Payload { raw: true }),
        LIMIT,
        &json_record("abc"),
    )
    .unwrap();
    let expected: [u8; 32] = Sha256::digest(b"idemgate/v1/payload-raw\0abc").into();
    assert_eq!(print.hash, SourceHash(expected));
}

#[test]
fn fields_hash_is_sha256_of_tag_and_canonical_object() {
    let print = fingerprint(
        &fields("b:decimal,a:upper"),
        LIMIT,
        &json_record(r#"{"a":"x","b":1.50,"c":"ignored"}"#),
    )
    .unwrap();
    let expected: [u8; 32] =
        Sha256::digest(b"idemgate/v1/fields\0{\"a\":\"X\",\"b\":\"1.5\"}").into();
    assert_eq!(print.hash, SourceHash(expected));
}

#[test]
fn digest_is_over_canonical_json_or_raw_bytes() {
    let profile = Profile::from(Identity::Payload { raw: true });
    let spaced = fingerprint(&profile, LIMIT, &json_record(r#"{ "b":1, "a":2 }"#)).unwrap();
    let sorted = fingerprint(&profile, LIMIT, &json_record(r#"{"a":2,"b":1}"#)).unwrap();
    assert_ne!(spaced.hash, sorted.hash, "raw hash sees the bytes");
    assert_eq!(spaced.digest, sorted.digest, "digest sees canonical json");
    let full: [u8; 32] = Sha256::digest(br#"{"a":2,"b":1}"#).into();
    assert_eq!(sorted.digest.0, full[..8]);

    let binary = fingerprint(&profile, LIMIT, &record(Some(&[0xff, 0x00]), &[])).unwrap();
    let full: [u8; 32] = Sha256::digest([0xff, 0x00]).into();
    assert_eq!(binary.digest.0, full[..8]);
}

#[test]
fn header_profile_hashes_the_header_and_digests_the_payload() {
    let profile = Profile::resolve("header", None, None).unwrap();
    let headers: &[(&str, Option<&[u8]>)] = &[
        ("other", Some(b"zzz")),
        ("x-idempotency-key", Some(b"job-1")),
        ("x-idempotency-key", Some(b"job-2")),
    ];
    let a = fingerprint(&profile, LIMIT, &record(Some(br#"{"n":1}"#), headers)).unwrap();
    let b = fingerprint(&profile, LIMIT, &record(Some(br#"{"n":2}"#), headers)).unwrap();
    assert_eq!(a.hash, b.hash);
    assert_ne!(a.digest, b.digest);
    let expected: [u8; 32] = Sha256::digest(b"idemgate/v1/header\0job-1").into();
    assert_eq!(a.hash, SourceHash(expected), "the first header counts");

    let tombstone = fingerprint(&profile, LIMIT, &record(None, headers)).unwrap();
    let empty: [u8; 32] = Sha256::digest(b"").into();
    assert_eq!(tombstone.digest.0, empty[..8]);
}

#[test]
fn header_errors_name_the_header() {
    let profile = Profile::resolve("header", None, Some("x-key")).unwrap();
    let run = |headers: &[(&str, Option<&[u8]>)]| {
        fingerprint(&profile, LIMIT, &record(Some(b"{}"), headers)).unwrap_err()
    };
    let name = || "x-key".to_owned();
    assert_eq!(run(&[]), Invalid::MissingHeader { name: name() });
    assert_eq!(
        run(&[("X-Key", Some(b"a"))]),
        Invalid::MissingHeader { name: name() }
    );
    assert_eq!(
        run(&[("x-key", None)]),
        Invalid::MissingHeader { name: name() }
    );
    assert_eq!(
        run(&[("x-key", Some(&[0xc3, 0x28]))]),
        Invalid::HeaderNotUtf8 { name: name() }
    );
    assert_eq!(
        run(&[("x-key", Some(b""))]),
        Invalid::EmptyHeader { name: name() }
    );
}

#[test]
fn size_limit_is_checked_before_anything_else() {
    let payload = vec![b'x'; 11];
    let view = record(Some(&payload), &[]);
    for profile in [
        Profile::resolve("header", None, None).unwrap(),
        Profile::resolve("payload", None, None).unwrap(),
        fields("a"),
    ] {
        assert_eq!(
            fingerprint(&profile, 10, &view),
            Err(Invalid::TooLarge {
                size: 11,
                limit: 10
            })
        );
    }
    assert!(fingerprint(&Profile::from(Identity::Payload { raw: true }), 11, &view).is_ok());
}

#[test]
fn payload_profiles_refuse_empty_and_missing_payloads() {
    for profile in [
        Profile::from(Identity::Payload { raw: true }),
        Profile::from(Identity::Payload { raw: false }),
        fields("a"),
    ] {
        for payload in [None, Some(&b""[..])] {
            assert_eq!(
                fingerprint(&profile, LIMIT, &record(payload, &[])),
                Err(Invalid::EmptyPayload),
                "{profile:?} {payload:?}"
            );
        }
    }
}

#[test]
fn payload_profile_refuses_non_json_with_the_reason() {
    match fingerprint(
        &Profile::from(Identity::Payload { raw: false }),
        LIMIT,
        &json_record("{nope"),
    ) {
        Err(Invalid::NotJson { reason }) => assert!(reason.contains("line 1"), "{reason}"),
        other => panic!("expected NotJson, got {other:?}"),
    }
}

#[test]
fn fields_profile_needs_a_json_object() {
    for payload in ["[1]", "\"s\"", "1", "null"] {
        assert_eq!(
            fingerprint(&fields("a"), LIMIT, &json_record(payload)),
            Err(Invalid::NotObject),
            "{payload}"
        );
    }
}

#[test]
fn fields_profile_without_fields_refuses_every_record() {
    assert_eq!(
        fingerprint(
            &Profile::from(Identity::Fields(Vec::new())),
            LIMIT,
            &json_record("{}")
        ),
        Err(Invalid::NoFields)
    );
}

#[test]
fn fields_errors_name_the_field() {
    let profile = fields("acct,amount:decimal,at:timestamp,job.crs:upper");
    let run = |payload: &str| fingerprint(&profile, LIMIT, &json_record(payload)).unwrap_err();
    let ok = r#""acct":"a","amount":"1","at":"2026-01-01T00:00:00Z","job":{"crs":"x"}"#;
    assert!(fingerprint(&profile, LIMIT, &json_record(&format!("{{{ok}}}"))).is_ok());
    assert_eq!(
        run(r#"{"amount":"1","at":"2026-01-01T00:00:00Z","job":{"crs":"x"}}"#),
        Invalid::MissingField {
            field: "acct".into()
        }
    );
    assert_eq!(
        run(r#"{"acct":"a","amount":"1","at":"2026-01-01T00:00:00Z","job":{"crs":null}}"#),
        Invalid::MissingField {
            field: "job.crs".into()
        }
    );
    assert_eq!(
        run(r#"{"acct":7,"amount":"1","at":"2026-01-01T00:00:00Z","job":{"crs":"x"}}"#),
        Invalid::WrongType {
            field: "acct".into(),
            expected: "string",
            found: "number"
        }
    );
    assert_eq!(
        run(r#"{"acct":"a","amount":"1,00","at":"2026-01-01T00:00:00Z","job":{"crs":"x"}}"#),
        Invalid::BadDecimal {
            field: "amount".into(),
            value: "1,00".into()
        }
    );
    assert_eq!(
        run(r#"{"acct":"a","amount":"1","at":"yesterday","job":{"crs":"x"}}"#),
        Invalid::BadTimestamp {
            field: "at".into(),
            value: "yesterday".into()
        }
    );
}

#[test]
fn field_order_and_unlisted_fields_do_not_change_the_hash() {
    let profile = fields("a,b:decimal");
    let one = fingerprint(
        &profile,
        LIMIT,
        &json_record(r#"{"a":"x","b":"2.0","c":1}"#),
    )
    .unwrap();
    let two = fingerprint(&profile, LIMIT, &json_record(r#"{"b":2,"c":2,"a":"x"}"#)).unwrap();
    assert_eq!(one.hash, two.hash);
    assert_ne!(
        one.digest, two.digest,
        "the digest still sees the whole payload"
    );
}

#[test]
fn profile_kinds_never_share_a_hash_for_the_same_bytes() {
    let body = r#"{"k":"v"}"#;
    let headers: &[(&str, Option<&[u8]>)] = &[("x-idempotency-key", Some(body.as_bytes()))];
    let view = record(Some(body.as_bytes()), headers);
    let hashes: Vec<_> = [
        Profile::resolve("header", None, None).unwrap(),
        Profile::from(Identity::Payload { raw: false }),
        Profile::from(Identity::Payload { raw: true }),
    ]
    .iter()
    .map(|profile| fingerprint(profile, LIMIT, &view).unwrap().hash)
    .collect();
    assert_ne!(hashes[0], hashes[1]);
    assert_ne!(hashes[1], hashes[2]);
    assert_ne!(hashes[0], hashes[2]);
}

proptest! {
    #[test]
    fn fingerprint_never_panics_on_arbitrary_bytes(
        bytes in prop::collection::vec(any::<u8>(), 0..64),
        json in r#"\{("[a-z]{1,3}":(-?[0-9]{1,3}(\.[0-9]{1,2})?|"[a-zA-Z0-9:+. -]{0,24}"|\[[0-9.,]{0,8}\]|null|\{\}),)*"x":0\}"#,
        header in prop::option::of(prop::collection::vec(any::<u8>(), 0..8)),
    ) {
        let headers = [("x-idempotency-key", header.as_deref())];
        let profiles = ["header", "record-key", "payload", "payload-raw", "bank-txn", "spatial-job"]
            .map(|name| Profile::resolve(name, None, None).unwrap());
        let list = Profile::resolve("fields", Some("a:decimal,b:timestamp,c:round:2,d.e:lower"), None);
        for payload in [&bytes[..], json.as_bytes()] {
            let view = record(Some(payload), &headers);
            for profile in profiles.iter().chain(list.as_ref().ok()) {
                let _ = fingerprint(profile, LIMIT, &view);
            }
        }
    }
}
