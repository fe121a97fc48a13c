//! Unit tests of the normalisers: each one's canonical output and each of
//! its errors, which must name the field.

use super::*;
use crate::fingerprint::json::{from_value, parse};
use serde_json::{json, Value};

fn norm(normaliser: Normaliser, value: Value) -> Result<Json, Invalid> {
    normalise("f", &normaliser, &from_value(&value))
}

fn text(normaliser: Normaliser, value: Value) -> String {
    match norm(normaliser, value) {
        Ok(Json::String(text)) => text,
        other => panic!("expected a string, got {other:?}"),
    }
}

fn wrong(expected: &'static str, found: &'static str) -> Result<Json, Invalid> {
    Err(Invalid::WrongType {
        field: "f".into(),
        expected,
        found,
    })
}

fn bad_decimal(value: &str) -> Result<Json, Invalid> {
    Err(Invalid::BadDecimal {
        field: "f".into(),
        value: value.into(),
    })
}

fn inexact(value: &str) -> Result<Json, Invalid> {
    Err(Invalid::InexactDecimal {
        field: "f".into(),
        value: value.into(),
    })
}

/// Normalise a JSON number (or any value) given as JSON text, so that a
/// number reaches the normaliser with its literal text.
fn from_text(normaliser: Normaliser, text: &str) -> Result<Json, Invalid> {
    normalise("f", &normaliser, &parse(text.as_bytes()).unwrap())
}

fn text_from_text(normaliser: Normaliser, text: &str) -> String {
    match from_text(normaliser, text) {
        Ok(Json::String(text)) => text,
        other => panic!("expected a string, got {other:?}"),
    }
}

#[test]
fn decimal_agrees_across_trailing_zeros_strings_and_numbers() {
    for value in [
        json!("100.50"),
        json!("100.5000"),
        json!(100.5),
        json!("100.5"),
        json!(100.50),
    ] {
        assert_eq!(text(Normaliser::Decimal, value), "100.5");
    }
    assert_eq!(text(Normaliser::Decimal, json!("100")), "100");
    assert_eq!(text(Normaliser::Decimal, json!(100)), "100");
    assert_eq!(text(Normaliser::Decimal, json!("100.00")), "100");
    assert_eq!(text(Normaliser::Decimal, json!(100.0)), "100");
    assert_eq!(text(Normaliser::Decimal, json!("007.50")), "7.5");
}

#[test]
fn decimal_keeps_distinct_values_distinct() {
    assert_ne!(
        text(Normaliser::Decimal, json!("100.50")),
        text(Normaliser::Decimal, json!("100.51"))
    );
    assert_ne!(
        text(Normaliser::Decimal, json!("-1")),
        text(Normaliser::Decimal, json!("1"))
    );
}

#[test]
fn decimal_reads_exponents_and_sends_negative_zero_to_zero() {
    assert_eq!(
        text(Normaliser::Decimal, json!(1e20)),
        "100000000000000000000"
    );
    assert_eq!(text(Normaliser::Decimal, json!(1e-7)), "0.0000001");
    assert_eq!(text(Normaliser::Decimal, json!("1.5E+3")), "1500");
    assert_eq!(text(Normaliser::Decimal, json!("12.50e-2")), "0.125");
    assert_eq!(text(Normaliser::Decimal, json!("-0.00")), "0");
    assert_eq!(text(Normaliser::Decimal, json!(-0.0)), "0");
    assert_eq!(text(Normaliser::Decimal, json!("0e999999")), "0");
}

#[test]
fn decimal_takes_the_full_rust_decimal_range_exactly() {
    assert_eq!(
        text(Normaliser::Decimal, json!("79228162514264337593543950335")),
        "79228162514264337593543950335"
    );
    assert_eq!(
        text(Normaliser::Decimal, json!("0.0000000000000000000000000001")),
        "0.0000000000000000000000000001"
    );
    assert_eq!(
        text(
            Normaliser::Decimal,
            json!("1.50000000000000000000000000000000000")
        ),
        "1.5"
    );
}

#[test]
fn decimal_refuses_text_that_is_not_a_plain_decimal_naming_the_field() {
    for value in [
        "", " 1", "1 ", "+1", ".5", "5.", "1_000", "1,5", "NaN", "inf", "0x10", "1e", "1e+-5",
        "--1", "1.2.3", "abc",
    ] {
        assert_eq!(
            norm(Normaliser::Decimal, json!(value)),
            bad_decimal(value),
            "{value:?}"
        );
    }
}

#[test]
fn decimal_refuses_values_rust_decimal_cannot_hold_exactly() {
    for value in [
        "79228162514264337593543950336",
        "1e29",
        "1e9999999999999999999",
        "0.00000000000000000000000000001",
        "1.0000000000000000000000000000001",
    ] {
        assert_eq!(
            norm(Normaliser::Decimal, json!(value)),
            inexact(value),
            "{value:?}"
        );
        if serde_json::from_str::<Value>(value).is_ok() {
            assert_eq!(
                from_text(Normaliser::Decimal, value),
                inexact(value),
                "{value:?} as a number"
            );
        }
    }
    assert_eq!(
        from_text(Normaliser::Decimal, "1.5e300"),
        inexact("1.5e300")
    );
}

#[test]
fn decimal_reads_a_number_from_its_literal_text() {
    for (literal, value) in [
        ("1.000000000000000001", "1.000000000000000001"),
        ("1.000000000000000002", "1.000000000000000002"),
        ("18446744073709551617", "18446744073709551617"),
        ("-9223372036854775809", "-9223372036854775809"),
        (
            "123456789.123456789012345678",
            "123456789.123456789012345678",
        ),
        ("1.5000000000000000000000000000000000000", "1.5"),
        (
            "0.000000000000000000000000001",
            "0.000000000000000000000000001",
        ),
        ("100.50", "100.5"),
        ("1e2", "100"),
        ("-0", "0"),
    ] {
        assert_eq!(
            text_from_text(Normaliser::Decimal, literal),
            value,
            "{literal}"
        );
        // The same text as a string agrees.
        let quoted = format!("\"{literal}\"");
        assert_eq!(
            text_from_text(Normaliser::Decimal, &quoted),
            value,
            "{quoted}"
        );
    }
}

#[test]
fn decimal_refuses_a_number_past_28_digits_naming_it() {
    // Thirty significant digits: rust_decimal would have to round it.
    let literal = "1234567.89012345678901234567891";
    let error = from_text(Normaliser::Decimal, literal).unwrap_err();
    assert_eq!(error, inexact(literal).unwrap_err());
    assert_eq!(error.code(), "inexact-decimal");
    assert!(error.to_string().contains(literal), "{error}");
}

#[test]
fn decimal_quotes_at_most_the_start_of_a_huge_bad_value() {
    let huge = "9".repeat(10_000);
    for text in [
        format!("\"{huge}x\""),
        format!("\"{huge}\""),
        format!("0.{huge}"),
    ] {
        match from_text(Normaliser::Decimal, &text) {
            Err(
                Invalid::BadDecimal { field, value } | Invalid::InexactDecimal { field, value },
            ) => {
                assert_eq!(field, "f");
                assert!(value.chars().count() < 100);
            }
            other => panic!("expected BadDecimal or InexactDecimal, got {other:?}"),
        }
    }
}

#[test]
fn decimal_refuses_other_types() {
    assert_eq!(
        norm(Normaliser::Decimal, json!(true)),
        wrong("string or number", "boolean")
    );
    assert_eq!(
        norm(Normaliser::Decimal, json!([1])),
        wrong("string or number", "array")
    );
    assert_eq!(
        norm(Normaliser::Decimal, json!({})),
        wrong("string or number", "object")
    );
}

#[test]
fn string_is_kept_byte_for_byte_and_must_be_a_string() {
    assert_eq!(text(Normaliser::String, json!(" Acc-1 ")), " Acc-1 ");
    assert_eq!(text(Normaliser::String, json!("")), "");
    assert_eq!(
        norm(Normaliser::String, json!(123)),
        wrong("string", "number")
    );
}

#[test]
fn upper_and_lower_change_case_and_must_be_strings() {
    assert_eq!(text(Normaliser::Upper, json!("epsg:4326")), "EPSG:4326");
    assert_eq!(text(Normaliser::Upper, json!("eur")), "EUR");
    assert_eq!(text(Normaliser::Lower, json!("EUR")), "eur");
    assert_eq!(text(Normaliser::Lower, json!("ÉTÉ")), "été");
    assert_eq!(norm(Normaliser::Upper, json!(1)), wrong("string", "number"));
    assert_eq!(
        norm(Normaliser::Lower, json!(false)),
        wrong("string", "boolean")
    );
}

#[test]
fn timestamp_normalises_to_utc_in_one_fixed_form() {
    let utc = "2026-01-01T00:00:00.000000000Z";
    for value in [
        "2026-01-01T01:00:00+01:00",
        "2026-01-01T00:00:00Z",
        "2026-01-01T00:00:00.000Z",
        "2025-12-31T19:00:00-05:00",
        "2026-01-01t00:00:00z",
        "2026-01-01T00:00:00-00:00",
    ] {
        assert_eq!(text(Normaliser::Timestamp, json!(value)), utc, "{value}");
    }
    assert_eq!(
        text(
            Normaliser::Timestamp,
            json!("2026-03-04T05:06:07.123456789+00:00")
        ),
        "2026-03-04T05:06:07.123456789Z"
    );
    assert_ne!(
        text(
            Normaliser::Timestamp,
            json!("2026-01-01T00:00:00.000000001Z")
        ),
        utc
    );
}

#[test]
fn timestamp_refuses_non_rfc3339_naming_the_field() {
    for value in [
        "2026-01-01",
        "2026-01-01T00:00:00",
        "01/01/2026 00:00",
        "2026-13-01T00:00:00Z",
        "1767225600",
        "",
    ] {
        assert_eq!(
            norm(Normaliser::Timestamp, json!(value)),
            Err(Invalid::BadTimestamp {
                field: "f".into(),
                value: value.into()
            }),
            "{value:?}"
        );
    }
    assert_eq!(
        norm(Normaliser::Timestamp, json!(1767225600)),
        wrong("rfc 3339 string", "number")
    );
}

#[test]
fn timestamp_out_of_range_after_utc_conversion_is_refused_not_a_panic() {
    let value = "9999-12-31T23:59:59-01:00";
    assert_eq!(
        norm(Normaliser::Timestamp, json!(value)),
        Err(Invalid::BadTimestamp {
            field: "f".into(),
            value: value.into()
        })
    );
}

#[test]
fn round_rounds_half_away_from_zero_and_strips_trailing_zeros() {
    assert_eq!(text(Normaliser::Round(6), json!(-74.5)), "-74.5");
    assert_eq!(text(Normaliser::Round(6), json!(-74.500000)), "-74.5");
    assert_eq!(text(Normaliser::Round(6), json!(40.1234565)), "40.123457");
    assert_eq!(text(Normaliser::Round(6), json!(-40.1234565)), "-40.123457");
    assert_eq!(text(Normaliser::Round(6), json!(40.1234564)), "40.123456");
    assert_eq!(text(Normaliser::Round(2), json!(2.5)), "2.5");
    assert_eq!(text(Normaliser::Round(0), json!(2.5)), "3");
    assert_eq!(text(Normaliser::Round(0), json!(-2.5)), "-3");
    assert_eq!(text(Normaliser::Round(3), json!(7)), "7");
    assert_eq!(text(Normaliser::Round(6), json!(-0.0000001)), "0");
    assert_eq!(text(Normaliser::Round(6), json!(1e-300)), "0");
    assert_eq!(text(Normaliser::Round(28), json!(1.5e-29)), "0");
    assert_eq!(text(Normaliser::Round(6), json!(1.2e-6)), "0.000001");
}

#[test]
fn round_takes_arrays_of_numbers_elementwise() {
    assert_eq!(
        norm(Normaliser::Round(6), json!([-74.500000, 40.1, -73.9, 40.9])),
        Ok(from_value(&json!(["-74.5", "40.1", "-73.9", "40.9"])))
    );
    assert_eq!(
        norm(Normaliser::Round(6), json!([])),
        Ok(Json::Array(Vec::new()))
    );
    assert_ne!(
        norm(Normaliser::Round(6), json!([5])),
        norm(Normaliser::Round(6), json!(5))
    );
}

#[test]
fn round_refuses_non_numbers_naming_the_field() {
    let expected = "number or array of numbers";
    assert_eq!(
        norm(Normaliser::Round(6), json!("1.5")),
        wrong(expected, "string")
    );
    assert_eq!(
        norm(Normaliser::Round(6), json!([1.0, "2.0", 3.0])),
        wrong(expected, "array containing string")
    );
    assert_eq!(
        norm(Normaliser::Round(6), json!([1.0, [2.0]])),
        wrong(expected, "array containing array")
    );
    assert_eq!(
        norm(Normaliser::Round(6), json!([null])),
        wrong(expected, "array containing null")
    );
    assert_eq!(
        from_text(Normaliser::Round(6), "1.5e300"),
        inexact("1.5e300")
    );
}

#[test]
fn round_reads_a_number_from_its_literal_text_exactly() {
    for (literal, places, value) in [
        // serde_json reads it as 0.1234565, which rounds up.
        ("0.12345649999999999999", 6, "0.123456"),
        ("0.12345650000000000000000000000000001", 6, "0.123457"),
        ("40.71277500000000145519152283668518066406", 6, "40.712775"),
        ("-74.0059731000000000000000000000001", 6, "-74.005973"),
        ("2.675", 2, "2.68"),
        ("1e-400", 6, "0"),
        ("1e-99999999999999999999", 6, "0"),
        (
            "123456789012345678901234567.5",
            0,
            "123456789012345678901234568",
        ),
        // At 28 places what lies below 1e-28 is cut, as it always was.
        ("5e-29", 28, "0"),
        ("1.00000000000000000000000000009", 28, "1"),
        (
            "1.0000000000000000000000000009",
            27,
            "1.000000000000000000000000001",
        ),
        (
            "1.0000000000000000000000000009",
            28,
            "1.0000000000000000000000000009",
        ),
    ] {
        assert_eq!(
            text_from_text(Normaliser::Round(places), literal),
            value,
            "{literal} round:{places}"
        );
    }
}

#[test]
fn round_refuses_a_number_whose_rounding_no_decimal_holds() {
    for literal in ["1e29", "79228162514264337593543950336.4", "-1e300"] {
        assert_eq!(
            from_text(Normaliser::Round(6), literal),
            inexact(literal),
            "{literal}"
        );
    }
}

#[test]
fn round_with_more_places_than_rust_decimal_holds_does_not_panic() {
    assert_eq!(text(Normaliser::Round(u32::MAX), json!(1.25)), "1.25");
}

#[test]
fn object_keeps_any_value_as_is_for_canonical_writing() {
    for value in [
        json!({"b": 1, "a": [true, null]}),
        json!("123"),
        json!(123),
        json!(null),
    ] {
        assert_eq!(
            norm(Normaliser::Object, value.clone()),
            Ok(from_value(&value))
        );
    }
}

fn object(value: Value) -> Object {
    match from_value(&value) {
        Json::Object(object) => object,
        other => panic!("expected an object, got {other:?}"),
    }
}

#[test]
fn lookup_follows_dotted_paths() {
    let root = object(json!({"a": {"b": {"c": 1}}, "x": 2, "a.b": 3}));
    assert_eq!(lookup(&root, "a.b.c"), Ok(&from_value(&json!(1))));
    assert_eq!(lookup(&root, "x"), Ok(&from_value(&json!(2))));
    assert_eq!(lookup(&root, "a.b"), Ok(&from_value(&json!({"c": 1}))));
}

#[test]
fn lookup_treats_absent_and_null_as_missing_naming_the_whole_path() {
    let root = object(json!({"a": {"b": null}, "n": null}));
    for path in ["z", "n", "a.b", "a.c", "n.x", "z.y"] {
        assert_eq!(
            lookup(&root, path),
            Err(Invalid::MissingField { field: path.into() }),
            "{path}"
        );
    }
}

#[test]
fn lookup_names_the_non_object_on_the_path() {
    let root = object(json!({"a": {"b": "text"}}));
    assert_eq!(
        lookup(&root, "a.b.c"),
        Err(Invalid::WrongType {
            field: "a.b".into(),
            expected: "object",
            found: "string"
        })
    );
}

#[test]
fn number_text_parses_to_digits_and_exponent() {
    let parsed = |t: &str| parse_text(t).map(|p| (p.negative, p.digits, p.exponent));
    assert_eq!(parsed("100.500"), Some((false, "1005".into(), -1)));
    assert_eq!(parsed("-0012.0e3"), Some((true, "12".into(), 3)));
    assert_eq!(parsed("1200"), Some((false, "12".into(), 2)));
    assert_eq!(parsed("0.000"), Some((false, String::new(), -3)));
    // Exponents past 2^62 saturate there.
    assert_eq!(
        parsed("1e-9223372036854775808"),
        Some((false, "1".into(), -(1 << 62)))
    );
    assert_eq!(
        parsed("12e+000099999999999999999999999"),
        Some((false, "12".into(), 1 << 62))
    );
}
