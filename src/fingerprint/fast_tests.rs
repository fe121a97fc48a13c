//! The fast path against the reference: same hash, digest and error for
//! every input, valid or not.

use super::json::{Json, Num};
use super::*;
use super::{canonical, fast_normalise, fast_scan, normalise};
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

mod generate;
use generate::*;

const LIMIT: usize = 1 << 20;

const HEADERS: &[(&str, Option<&[u8]>)] = &[("x-idempotency-key", Some(b"key-1"))];

const KEY: Option<&[u8]> = Some(b"key-1");

fn profiles() -> Vec<Profile> {
    let named = |name| Profile::resolve(name, None, None).unwrap();
    let fields = |list| Profile::resolve("fields", Some(list), None).unwrap();
    // Paths among the generator's keys (`a.b` also names a key with a dot,
    // which a dotted path never reaches), nested and not.
    let ignore = |profile: Profile, paths: &[&str]| {
        let paths: Vec<String> = paths.iter().map(|p| p.to_string()).collect();
        profile.ignoring(&paths).unwrap()
    };
    vec![
        named("payload"),
        named("payload-raw"),
        named("header"),
        named("bank-txn"),
        named("spatial-job"),
        fields("a.b.c:decimal,a.x:round:2,s:upper,t:lower,o:object,n"),
        fields("amount:decimal,ts:timestamp,box:round:3,n:lower"),
        // Nested paths: always the reference's.
        fields("a:object,a.b.c"),
        fields("a.b.c,a"),
        named("record-key"),
        ignore(named("payload"), &["a", "s", "o.n", "z.z", "a.b"]),
        ignore(named("header"), &["a.b", "t", "é"]),
        ignore(named("record-key"), &["b", "a.b.c", "a", "n"]),
        ignore(
            fields("s:upper,a.x:round:2,n"),
            &["a.b", "o", "t", "amount"],
        ),
        ignore(named("bank-txn"), &["s", "o.n", "x"]),
    ]
}

/// Asserts fast == reference for one payload under one profile; `true`
/// when the fast path decided.
fn check(profile: &Profile, payload: &[u8]) -> bool {
    let view = RecordView {
        key: KEY,
        payload: Some(payload),
        headers: HEADERS,
    };
    let reference = fingerprint_reference(profile, LIMIT, &view);
    let quick = fast::fingerprint(profile, LIMIT, &view);
    if let Some(quick) = &quick {
        assert_eq!(
            quick,
            &reference,
            "profile {profile:?}, payload {:?}",
            String::from_utf8_lossy(payload)
        );
    }
    assert_eq!(fingerprint(profile, LIMIT, &view), reference);
    quick.is_some()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn fast_path_matches_the_reference(seed in any::<u64>()) {
        let (payload, damaged) = payload(seed);
        let profiles = profiles();
        let decided = check(&profiles[0], &payload);
        // JSON the generator meant to be valid (some numbers are out of
        // range) is taken by the fast path, under `payload` at least, unless
        // an object gives a key twice (the reference decides those).
        let twice = json::parse_noting_duplicates(&payload)
            .is_ok_and(|parsed| !parsed.duplicates.is_empty());
        if !damaged && !twice && serde_json::from_slice::<serde_json::Value>(&payload).is_ok() {
            prop_assert!(decided, "{}", String::from_utf8_lossy(&payload));
        }
        for profile in &profiles[1..] {
            check(profile, &payload);
        }
    }

    #[test]
    fn fast_path_matches_the_reference_on_arbitrary_bytes(
        payload in proptest::collection::vec(any::<u8>(), 0..64)
    ) {
        for profile in &profiles() {
            check(profile, &payload);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    /// Numbers of every length, as amounts, coordinates, parameters and
    /// payloads: the fast path writes and normalises them as the reference
    /// does, and decides every one serde_json reads (under `payload`).
    #[test]
    fn fast_path_matches_the_reference_on_numbers(seed in any::<u64>()) {
        let mut rng = StdRng::seed_from_u64(seed);
        let (a, b) = (number(&mut rng), number(&mut rng));
        let payload = format!(
            r#"{{"amount":{a},"a":{{"b":{{"c":{b}}},"x":[{a},{b}]}},"box":[{b}],"o":{{"n":[{a}]}},"s":"S","t":"T","n":"N","ts":"2026-01-01T00:00:00Z","account_id":"A","bank_txn_id":"B","currency":"eur","posted_at":"2026-01-01T00:00:00Z","bbox":[{a},{b}],"crs":"x","params":{{"r":{b}}}}}"#
        );
        let profiles = profiles();
        let decided = check(&profiles[0], payload.as_bytes());
        let read = |n: &str| serde_json::from_str::<serde_json::Number>(n).is_ok();
        if read(&a) && read(&b) {
            prop_assert!(decided, "{}", payload);
        }
        for profile in &profiles[1..] {
            check(profile, payload.as_bytes());
        }
    }
}

/// How often each profile's generated, undamaged records take the fast
/// path: the generators must exercise it, not just the fallback. A record
/// whose objects give a key twice is the reference's (`duplicate-key`), so
/// only records without one are counted.
#[test]
fn generated_records_mostly_take_the_fast_path() {
    let profiles = profiles();
    let mut rng = StdRng::seed_from_u64(7);
    type Make = fn(&mut StdRng) -> String;
    let cases: [(usize, Make); 10] = [
        (3, bank_txn),
        (4, spatial_job),
        (5, fielded),
        (6, fielded),
        (9, fielded),
        (10, fielded),
        (11, fielded),
        (12, fielded),
        (13, fielded),
        (14, bank_txn),
    ];
    for (profile, make) in cases {
        let decided = std::iter::repeat_with(|| make(&mut rng))
            .filter(|record| {
                json::parse_noting_duplicates(record.as_bytes())
                    .map_or(true, |parsed| parsed.duplicates.is_empty())
            })
            .take(500)
            .filter(|record| check(&profiles[profile], record.as_bytes()))
            .count();
        eprintln!("{profile}: {decided} of 500 on the fast path");
        assert!(
            decided > 100,
            "{:?}: only {decided} of 500 on the fast path",
            profiles[profile]
        );
    }
}

#[test]
fn feed_records_take_the_fast_path() {
    let profile = Profile::resolve("bank-txn", None, None).unwrap();
    let workload = idemgate_testkit::feed::Workload::generate(300, 0.3, 1000.0, 1_700_000_000_000);
    let mut count = 0;
    for planned in workload.records.iter() {
        let (_, payload) = workload.render(planned);
        assert!(
            check(&profile, &payload),
            "{}",
            String::from_utf8_lossy(&payload)
        );
        assert!(check(
            &Profile::from(Identity::Payload { raw: false }),
            &payload
        ));
        count += 1;
    }
    assert!(count > 0);
}

#[test]
fn nesting_around_the_depth_limits_matches() {
    for depth in [1, 99, 100, 101, 126, 127, 128, 129, 200] {
        for (open, close) in [("[", "]"), ("{\"a\":", "}")] {
            let text = format!("{}1{}", open.repeat(depth), close.repeat(depth));
            for profile in &profiles() {
                check(profile, text.as_bytes());
            }
        }
    }
}

#[test]
fn edge_cases_match() {
    let cases: &[&[u8]] = &[
        b"",
        b" ",
        b"{}",
        b"[]",
        b"null",
        b"-0",
        b"-",
        b"01",
        b"1.",
        b".5",
        b"1e",
        b"+1",
        b"\"\\ud83d\\ude00\"",
        b"\"\\ud83d\"",
        b"\"\\ude00\"",
        b"\"\\ud83d\\u0041\"",
        b"\"\\u00e9\\/\\n\"",
        b"\"\xc3\xa9\"",
        b"\"\xc3\"",
        b"\"\xed\xa0\x80\"",
        b"\"a\x01\"",
        b"\"a\x7f\"",
        b"{\"a\":1,\"a\":2}",
        b"{\"a\":1,\"\\u0061\":2}",
        b"{\"b\":1,\"a\":{\"y\":1,\"x\":[1,2,{\"k\":\"v\"}]}}",
        b"{\"a\":1,}",
        b"[1,]",
        b"{\"a\" 1}",
        b"[1 2]",
        b"\xef\xbb\xbf{}",
        b"{}x",
        b"{} ",
        b"\x0c{}",
        b"{\"s\":\"x\",\"t\":\"Y\",\"n\":\"z\",\"o\":{},\"a\":{\"b\":{\"c\":\"1.50\"},\"x\":1.005}}",
        b"{\"s\":\"\xc3\x9f\",\"t\":\"\xce\xa3A\",\"n\":\"z\",\"o\":[],\"a\":{\"b\":{\"c\":1e2},\"x\":[1.005,2]}}",
        b"{\"account_id\":\"A\",\"bank_txn_id\":\"B\",\"amount\":\"100.50\",\"currency\":\"eur\",\"posted_at\":\"2024-01-01T00:00:00+02:00\"}",
        b"{\"account_id\":\"A\",\"bank_txn_id\":\"B\",\"amount\":100.50,\"currency\":\"eur\",\"posted_at\":\"2024-01-01T00:00:00Z\",\"amount\":\"7\"}",
        b"{\"account_id\":\"A\",\"bank_txn_id\":\"B\",\"amount\":1e40,\"currency\":\"eur\",\"posted_at\":\"2024-01-01T00:00:00Z\"}",
    ];
    for payload in cases {
        for profile in &profiles() {
            check(profile, payload);
        }
    }
    // Tombstones and the size limit.
    for profile in &profiles() {
        let view = RecordView {
            key: KEY,
            payload: None,
            headers: HEADERS,
        };
        assert_eq!(
            fingerprint(profile, LIMIT, &view),
            fingerprint_reference(profile, LIMIT, &view)
        );
        let view = RecordView {
            key: KEY,
            payload: Some(b"{\"a\":1}"),
            headers: HEADERS,
        };
        assert_eq!(
            fingerprint(profile, 3, &view),
            fingerprint_reference(profile, 3, &view)
        );
    }
}

fn reference_normalised(normaliser: &Normaliser, value: &Json) -> Option<String> {
    normalise::normalise("f", normaliser, value)
        .ok()
        .map(|v| canonical::to_canonical(&v))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20000))]

    #[test]
    fn quick_normalisers_match_normalise(seed in any::<u64>()) {
        let mut rng = StdRng::seed_from_u64(seed);
        let text = decimal_text(&mut rng);
        let mut out = Vec::new();
        if fast_normalise::decimal(&mut out, text.as_bytes()).is_some() {
            let expected = reference_normalised(&Normaliser::Decimal, &Json::String(text.clone()));
            prop_assert_eq!(Some(String::from_utf8(out.clone()).unwrap()), expected, "decimal {}", text);
        }
        if let Ok(number) = serde_json::from_str::<serde_json::Number>(&text) {
            // A number as written: its literal text is what both read.
            let places = if rng.gen_bool(0.2) { 28 } else { rng.gen_range(0..12) };
            out.clear();
            if fast_normalise::round(&mut out, text.as_bytes(), places).is_some() {
                let literal = Json::Number(Num { literal: text.clone(), parsed: number });
                let expected = reference_normalised(&Normaliser::Round(places), &literal);
                prop_assert_eq!(Some(String::from_utf8(out.clone()).unwrap()), expected, "round:{} {}", places, text);
            }
        }
        let at = timestamp(&mut rng);
        out.clear();
        if fast_normalise::timestamp(&mut out, at.as_bytes()).is_some() {
            let expected = reference_normalised(&Normaliser::Timestamp, &Json::String(at.clone()));
            prop_assert_eq!(Some(String::from_utf8(out).unwrap()), expected, "timestamp {}", at);
        }
    }
}

#[test]
fn quick_normalisers_take_the_common_shapes() {
    let mut out = Vec::new();
    for (text, places, want) in [
        ("100.50", 2, "\"100.5\""),
        ("-74.5000005", 6, "\"-74.500001\""),
        ("0.0000004", 6, "\"0\""),
        ("-0.0000005", 6, "\"-0.000001\""),
        ("9.9999995", 6, "\"10\""),
        ("1.8446744073709552e19", 3, "\"18446744073709552000\""),
    ] {
        out.clear();
        fast_normalise::round(&mut out, text.as_bytes(), places).unwrap();
        assert_eq!(String::from_utf8(out.clone()).unwrap(), want, "{text}");
    }
    for at in [
        "2024-02-29T23:30:00.5-01:00",
        "1999-12-31T23:59:59Z",
        "2000-01-01T00:10:00+05:30",
    ] {
        out.clear();
        fast_normalise::timestamp(&mut out, at.as_bytes()).unwrap();
        assert_eq!(
            Some(String::from_utf8(out.clone()).unwrap()),
            reference_normalised(&Normaliser::Timestamp, &Json::String(at.into()))
        );
    }
}

proptest! {
    #[test]
    fn word_scan_flags_exactly_the_special_bytes(
        mut bytes in proptest::array::uniform8(any::<u8>()),
        plain in proptest::array::uniform8(0x20u8..0x80),
        mask in any::<u8>(),
    ) {
        // Mostly plain ASCII, some bytes from anywhere.
        for (i, b) in bytes.iter_mut().enumerate() {
            if mask & (1 << i) == 0 {
                *b = plain[i];
            }
        }
        let expected = bytes
            .iter()
            .any(|&b| b == b'"' || b == b'\\' || !(0x20..0x80).contains(&b));
        prop_assert_eq!(fast_scan::special(u64::from_le_bytes(bytes)), expected);
    }
}
