//! JSON numbers from their literal text (docs/design.md §3): what must hash
//! apart, what must agree, what is refused, and the hashes that must not
//! move.

use idemgate::fingerprint::*;
use proptest::prelude::*;
use rust_decimal::Decimal;

use super::{bank_txn, hash, profile, run, LIMIT};

/// A record whose hash and digest were computed by the fingerprint before
/// numbers were read from their literal text (commit b45fa6a).
struct Pin {
    profile: &'static str,
    fields: Option<&'static str>,
    payload: &'static str,
    hash: &'static str,
    digest: &'static str,
}

/// Ordinary amounts, coordinates and parameters: numbers whose serde_json
/// text was already their exact value. Their claims live in stores today,
/// so a new build must hash them exactly as the old one did.
const PINS: &[Pin] = &[
    Pin {
        profile: "payload",
        fields: None,
        payload: r#"{"amount":100.5,"n":[12,-3.25,0.1,1e2,100.50,1.0,-0.0,0,1E-7,123456789012345678,18446744073709551615,-9223372036854775808,0.30000000000000004,1.5e300,2.5e-8,1234567.125,100000000000000000000000,-5e-324]}"#,
        hash: "32faa0081f7ddd13a00bfc4177a0cbeae96fe53202910f83ba4935c6bfcd50ed",
        digest: "9dafc85d8ed6690a",
    },
    Pin {
        profile: "bank-txn",
        fields: None,
        payload: r#"{"account_id":"ACC-1","bank_txn_id":"BTX-1","amount":100.5,"currency":"eur","posted_at":"2026-01-01T00:00:00Z","fee":0.25}"#,
        hash: "ef8072dc9c5163a9eb406f23f9d64b42618921a77246ce569a7e545d6544baa5",
        digest: "0e5b4df6234256c4",
    },
    Pin {
        profile: "bank-txn",
        fields: None,
        payload: r#"{"account_id":"ACC-1","bank_txn_id":"BTX-1","amount":12,"currency":"eur","posted_at":"2026-01-01T00:00:00Z","fee":0.25}"#,
        hash: "68aa68d9311fb992b86eb1c6b1ff5afd3bb33e02cf08f33abc4e18ee4b8f9982",
        digest: "ed143b983101a18c",
    },
    Pin {
        profile: "bank-txn",
        fields: None,
        payload: r#"{"account_id":"ACC-1","bank_txn_id":"BTX-1","amount":-3.25,"currency":"eur","posted_at":"2026-01-01T00:00:00Z","fee":0.25}"#,
        hash: "73c01319ceecb74e343034efc42134f5e13beea5addaed3eda25cede134014b8",
        digest: "8fce57e9766e1a32",
    },
    Pin {
        profile: "bank-txn",
        fields: None,
        payload: r#"{"account_id":"ACC-1","bank_txn_id":"BTX-1","amount":0.1,"currency":"eur","posted_at":"2026-01-01T00:00:00Z","fee":0.25}"#,
        hash: "5224438b183cfa64f835afdc554cab695f50b4aad44831d39200469ee8a9b04e",
        digest: "3af8edced90411f9",
    },
    Pin {
        profile: "bank-txn",
        fields: None,
        payload: r#"{"account_id":"ACC-1","bank_txn_id":"BTX-1","amount":1e2,"currency":"eur","posted_at":"2026-01-01T00:00:00Z","fee":0.25}"#,
        hash: "641ffe515b5e6808819e596301394d1c6ea02dc2b4a467f0bad4b1ea6aca5c90",
        digest: "a4c60fa68659d62f",
    },
    Pin {
        profile: "bank-txn",
        fields: None,
        payload: r#"{"account_id":"ACC-1","bank_txn_id":"BTX-1","amount":100.50,"currency":"eur","posted_at":"2026-01-01T00:00:00Z","fee":0.25}"#,
        hash: "ef8072dc9c5163a9eb406f23f9d64b42618921a77246ce569a7e545d6544baa5",
        digest: "0e5b4df6234256c4",
    },
    Pin {
        profile: "bank-txn",
        fields: None,
        payload: r#"{"account_id":"ACC-1","bank_txn_id":"BTX-1","amount":"100.50","currency":"eur","posted_at":"2026-01-01T00:00:00Z","fee":0.25}"#,
        hash: "ef8072dc9c5163a9eb406f23f9d64b42618921a77246ce569a7e545d6544baa5",
        digest: "0e5b4df6234256c4",
    },
    Pin {
        profile: "bank-txn",
        fields: None,
        payload: r#"{"account_id":"ACC-1","bank_txn_id":"BTX-1","amount":123456789012345678,"currency":"eur","posted_at":"2026-01-01T00:00:00Z","fee":0.25}"#,
        hash: "fbf3e12f65663e8b325bb9db69ed3cdc5863e1362d2b7934ccbacecd1427bb17",
        digest: "d52d5afb19d374fa",
    },
    Pin {
        profile: "bank-txn",
        fields: None,
        payload: r#"{"account_id":"ACC-1","bank_txn_id":"BTX-1","amount":1234567.89,"currency":"eur","posted_at":"2026-01-01T00:00:00Z","fee":0.25}"#,
        hash: "720270aa3fb1d91e84b7b00e3b1c27fd7e6640293ff2f8fda5892f61e28a154c",
        digest: "3e782a6d4adb2762",
    },
    Pin {
        profile: "spatial-job",
        fields: None,
        payload: r#"{"bbox":[-74.5,40.1,-73.9,40.9],"crs":"epsg:4326","params":{"res":10,"scale":0.5,"t":1.0}}"#,
        hash: "a8fe0d231773be166f450e364b36ecef2f086775df0efd7a5f31ffaa588b330b",
        digest: "5f5a1e8d3fb27226",
    },
    Pin {
        profile: "spatial-job",
        fields: None,
        payload: r#"{"bbox":[-74.0059731,40.7127753,-73.9,40.1234565],"crs":"EPSG:3857","params":{}}"#,
        hash: "c91c1a5322a7e914303fc016efce0d485ec89f1112bd50596b0bf05e3af207e4",
        digest: "a8339b8bad12bd2b",
    },
    Pin {
        profile: "fields",
        fields: Some("o:object,v:round:2"),
        payload: r#"{"o":{"x":1e2,"y":-0.0,"z":1.0,"w":[0.1,2]},"v":2.675}"#,
        hash: "0429028b382463ecf03e43ced36d65259a84c5bdfb265f07c2bfeb4e28f69ab9",
        digest: "f0bde0e1957b4afc",
    },
    Pin {
        profile: "header",
        fields: None,
        payload: r#"{"job":7,"w":0.5,"big":1e23}"#,
        hash: "e7b3d2f045281b75e3ebb76d87dc666a4b763252ea7abe6c824edfc05b897d39",
        digest: "69b7eb57d055f91a",
    },
];

#[test]
fn ordinary_numbers_keep_the_hashes_and_digests_they_had() {
    let headers: &[(&str, Option<&[u8]>)] = &[("x-idempotency-key", Some(b"job-1"))];
    for pin in PINS {
        let profile = Profile::resolve(pin.profile, pin.fields, None).unwrap();
        let view = RecordView {
            key: None,
            payload: Some(pin.payload.as_bytes()),
            headers,
        };
        for print in [
            fingerprint(&profile, LIMIT, &view),
            fingerprint_reference(&profile, LIMIT, &view),
        ] {
            let print = print.unwrap();
            assert_eq!(print.hash.to_string(), pin.hash, "{}", pin.payload);
            assert_eq!(print.digest.to_string(), pin.digest, "{}", pin.payload);
        }
    }
}

// ----- amounts past f64 --------------------------------------------------

fn bank(amount: &str) -> Result<Fingerprint, Invalid> {
    run(&profile("bank-txn"), &bank_txn("acc-1", "t-1", amount))
}

#[test]
fn two_18_decimal_amounts_a_unit_apart_hash_apart() {
    // Token amounts with 18 decimals, sent as JSON numbers: an f64 holds
    // 15 to 17 digits, so both used to read as 1.0 and the second was a
    // duplicate of the first.
    for (a, b) in [
        ("1.000000000000000001", "1.000000000000000002"),
        (
            "123456789.123456789012345678",
            "123456789.123456789012345679",
        ),
        // Minor units past u64.
        ("98765432109876543210", "98765432109876543211"),
    ] {
        let (a_print, b_print) = (bank(a).unwrap(), bank(b).unwrap());
        assert_ne!(a_print.hash, b_print.hash, "{a} vs {b}");
        assert_ne!(a_print.digest, b_print.digest, "{a} vs {b}");
        let payload = profile("payload");
        assert_ne!(hash(&payload, a), hash(&payload, b), "{a} vs {b}");
    }
}

#[test]
fn an_amount_past_28_significant_digits_is_invalid_naming_it() {
    // Thirty significant digits: a decimal would have to round it, and a
    // rounded amount would take another transaction's hash.
    let amount = "1234567.89012345678901234567891";
    let err = bank(amount).unwrap_err();
    assert_eq!(
        err,
        Invalid::InexactDecimal {
            field: "amount".into(),
            value: amount.into()
        }
    );
    assert_eq!(err.code(), "inexact-decimal");
    assert!(err
        .to_string()
        .starts_with("field `amount`: `1234567.89012345678901234567891`"));
    // As a string too.
    assert_eq!(bank(&format!("\"{amount}\"")).unwrap_err(), err);
}

#[test]
fn a_long_amount_hashes_as_its_string_does() {
    let number = bank("1.000000000000000001").unwrap();
    for spelling in [
        r#""1.000000000000000001""#,
        r#""1.0000000000000000010""#,
        "1.0000000000000000010",
        "1000000000000000001e-18",
    ] {
        assert_eq!(bank(spelling).unwrap().hash, number.hash, "{spelling}");
    }
}

#[test]
fn a_long_coordinate_rounds_from_its_exact_value() {
    let spatial = profile("spatial-job");
    let job = |x: &str| format!(r#"{{"bbox":[{x},40.1],"crs":"EPSG:4326","params":{{}}}}"#);
    // serde_json read the first as 0.1234565, which rounds up to 0.123457.
    assert_eq!(
        hash(&spatial, &job("0.12345649999999999999")),
        hash(&spatial, &job("0.123456"))
    );
    assert_ne!(
        hash(&spatial, &job("0.12345649999999999999")),
        hash(&spatial, &job("0.1234565"))
    );
}

// ----- properties --------------------------------------------------------

/// An amount of up to 28 significant digits and 18 places: what a
/// decimal holds exactly.
fn amount() -> impl Strategy<Value = Decimal> {
    (-(10i128.pow(28) - 1)..10i128.pow(28), 0u32..=18, 0u32..28).prop_map(|(units, scale, cut)| {
        // Fewer digits as often as many.
        Decimal::from_i128_with_scale(units / 10i128.pow(cut), scale)
    })
}

/// A JSON number literal of any length that serde_json reads.
fn literal() -> impl Strategy<Value = String> {
    r"-?(0|[1-9][0-9]{0,40})(\.[0-9]{1,40})?([eE][+-]?[0-9]{1,2})?"
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn amounts_that_differ_hash_apart(a in amount(), b in amount()) {
        prop_assume!(a != b);
        let (a, b) = (a.to_string(), b.to_string());
        prop_assert_ne!(bank(&a).unwrap().hash, bank(&b).unwrap().hash, "{} vs {}", a, b);
    }

    #[test]
    fn an_amount_hashes_alike_as_a_number_and_as_a_string(
        amount in amount(),
        zeros in 0usize..4,
    ) {
        let plain = amount.to_string();
        let padded = if plain.contains('.') {
            format!("{plain}{}", "0".repeat(zeros))
        } else {
            plain.clone()
        };
        // The digits as one integer and the point as an exponent.
        let (units, scale) = (amount.mantissa(), amount.scale());
        let spellings = [
            plain.clone(),
            format!("\"{plain}\""),
            padded.clone(),
            format!("\"{padded}\""),
            format!("{units}e-{scale}"),
            format!("\"{units}0E-{}\"", scale + 1),
        ];
        let first = bank(&spellings[0]).unwrap().hash;
        for spelling in &spellings[1..] {
            prop_assert_eq!(bank(spelling).unwrap().hash, first, "{} vs {}", spelling, plain);
        }
    }

    #[test]
    fn numbers_that_differ_in_one_digit_hash_apart(
        text in literal(),
        at in any::<prop::sample::Index>(),
        bump in 1u8..10,
    ) {
        let mantissa: Vec<usize> = text
            .bytes()
            .enumerate()
            .take_while(|&(_, b)| b != b'e' && b != b'E')
            .filter(|(_, b)| b.is_ascii_digit())
            .map(|(i, _)| i)
            .collect();
        let i = mantissa[at.index(mantissa.len())];
        let mut other = text.clone().into_bytes();
        other[i] = b'0' + (other[i] - b'0' + bump) % 10;
        let other = String::from_utf8(other).unwrap();
        // A leading zero followed by digits is not JSON.
        prop_assume!(serde_json::from_str::<serde_json::Value>(&other).is_ok());
        let payload = profile("payload");
        let object = Profile::resolve("fields", Some("params:object"), None).unwrap();
        let params = |n: &str| format!(r#"{{"params":{{"n":[{n}]}}}}"#);
        prop_assert_ne!(hash(&payload, &text), hash(&payload, &other), "{} vs {}", text, other);
        prop_assert_ne!(hash(&object, &params(&text)), hash(&object, &params(&other)));
        // Under `decimal`: two amounts, or refused.
        match (bank(&text), bank(&other)) {
            (Ok(a), Ok(b)) => prop_assert_ne!(a.hash, b.hash, "{} vs {}", text, other),
            (a, b) => prop_assert!(a.is_err() || b.is_err()),
        }
    }

    #[test]
    fn the_fast_path_and_the_reference_agree_on_numbers(a in literal(), b in literal()) {
        let profiles = [
            profile("payload"),
            profile("bank-txn"),
            profile("spatial-job"),
            Profile::resolve("fields", Some("amount:decimal,x:round:2,o:object"), None).unwrap(),
        ];
        let record = format!(
            r#"{{"account_id":"A","bank_txn_id":"B","amount":{a},"currency":"eur","posted_at":"2026-01-01T00:00:00Z","bbox":[{a},{b}],"crs":"c","params":{{"p":{b}}},"x":[{b},{a}],"o":[{a}]}}"#
        );
        let view = RecordView { key: None, payload: Some(record.as_bytes()), headers: &[] };
        for profile in &profiles {
            prop_assert_eq!(
                fingerprint(profile, LIMIT, &view),
                fingerprint_reference(profile, LIMIT, &view),
                "{:?} {}", profile, record
            );
        }
    }
}
