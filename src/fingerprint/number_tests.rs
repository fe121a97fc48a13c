//! Unit tests of numbers' canonical forms: ordinary numbers keep the form
//! they always had, the others are written exactly, and no two values share
//! a form.

use super::*;
use crate::fingerprint::normalise::parse_text;
use proptest::prelude::*;
use serde_json::Number;

/// The canonical form of a literal, as the reference writes it.
fn canon(literal: &str) -> String {
    let shown = serde_json::from_str::<Number>(literal)
        .unwrap_or_else(|error| panic!("{literal}: {error}"))
        .to_string();
    canonical(literal, &shown).into_owned()
}

fn exact(literal: &str) -> String {
    let mut out = Vec::new();
    write_exact(&mut out, literal.as_bytes()).unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn ordinary_numbers_keep_serde_jsons_text() {
    for (literal, form) in [
        ("100.50", "100.5"),
        ("100.5", "100.5"),
        ("12", "12"),
        ("-3.25", "-3.25"),
        ("0.1", "0.1"),
        ("1.0", "1.0"),
        ("1e2", "100.0"),
        ("1E+2", "100.0"),
        ("-0", "-0.0"),
        ("0", "0"),
        ("0e5", "0.0"),
        ("1E-7", "1e-7"),
        ("1.5e300", "1.5e+300"),
        ("5e-324", "5e-324"),
        ("0.30000000000000004", "0.30000000000000004"),
        ("123456789012345678", "123456789012345678"),
        ("18446744073709551615", "18446744073709551615"),
        ("-9223372036854775808", "-9223372036854775808"),
        ("100000000000000000000000", "1e+23"),
        ("9007199254740993", "9007199254740993"),
    ] {
        assert_eq!(canon(literal), form, "{literal}");
    }
}

#[test]
fn numbers_serde_json_cannot_read_exactly_are_written_exactly() {
    for (literal, form) in [
        ("1.000000000000000001", "1.000000000000000001E0"),
        ("1.000000000000000002", "1.000000000000000002E0"),
        ("1.0000000000000000010", "1.000000000000000001E0"),
        ("18446744073709551616", "1.8446744073709551616E19"),
        ("-18446744073709551617", "-1.8446744073709551617E19"),
        ("9223372036854775807.5", "9.2233720368547758075E18"),
        (
            "123456789012345678901234567890",
            "1.2345678901234567890123456789E29",
        ),
        ("0.000123456789012345678901", "1.23456789012345678901E-4"),
        ("1e-400", "1E-400"),
        ("-2.5e-400", "-2.5E-400"),
    ] {
        assert_eq!(canon(literal), form, "{literal}");
    }
}

#[test]
fn a_number_serde_json_reads_a_step_off_takes_the_text_of_its_nearest_f64() {
    for (literal, misread, form) in [
        ("1e-30", "9.999999999999999e-31", "1e-30"),
        ("140130e93", "1.4013000000000002e+98", "1.4013e+98"),
    ] {
        let shown = serde_json::from_str::<Number>(literal).unwrap().to_string();
        assert_eq!(shown, misread, "{literal}");
        assert_eq!(canon(literal), form, "{literal}");
        // The text it was misread as is another number, with its own form.
        assert_eq!(canon(misread), misread);
    }
}

#[test]
fn exponents_past_i64_are_written_exactly() {
    for (literal, form) in [
        ("1e-99999999999999999999", "1E-99999999999999999999"),
        ("12.5e-99999999999999999999", "1.25E-99999999999999999998"),
        ("0.001e-1000000000000000000", "1E-1000000000000000003"),
        // A borrow through every high digit.
        ("10e-1000000000000000000", "1E-999999999999999999"),
        // A carry through every high digit.
        ("0.01e-999999999999999999999", "1E-1000000000000000000001"),
        ("1e-00000000000000000000000000001", "1E-1"),
    ] {
        assert_eq!(exact(literal), form, "{literal}");
    }
    assert_eq!(canon("1e-99999999999999999999"), "1E-99999999999999999999");
}

#[test]
fn shown_exactly_compares_values_not_texts() {
    for (literal, shown, exact) in [
        ("100.5", "100.5", true),
        ("100.50", "100.5", true),
        ("100.5000", "100.5", true),
        ("100.5e0", "100.5", true),
        ("1005e-1", "100.5", true),
        ("0.0001005e6", "100.5", true),
        ("100.51", "100.5", false),
        ("100.50e1", "100.5", false),
        ("-100.50", "100.5", false),
        ("1.00", "1.0", true),
        ("1e2", "100.0", true),
        ("1E+2", "100.0", true),
        ("120", "12", false),
        ("1.5e300", "1.5e+300", true),
        ("1.50e300", "1.5e+300", true),
        ("1.5e3000", "1.5e+300", false),
        ("-0", "-0.0", true),
        ("0e99999999999999999999", "0.0", true),
        ("1e-99999999999999999999", "0.0", false),
        ("1.000000000000000001", "1.0", false),
        ("1.000000000000000000000000000", "1.0", true),
    ] {
        assert_eq!(
            shown_exactly(literal.as_bytes(), shown.as_bytes()),
            exact,
            "{literal} vs {shown}"
        );
    }
}

#[test]
fn zero_is_always_ordinary() {
    for literal in ["0", "-0", "0.000", "-0.0e-99999999999999999999", "0e7"] {
        assert!(!canon(literal).contains('E'), "{literal}");
    }
}

#[test]
fn text_that_is_not_a_json_number_has_no_exact_form() {
    for text in ["", "-", "01", "1.", ".5", "1e", "+1", "1e+-1", "1_0", "1 "] {
        assert_eq!(
            write_exact(&mut Vec::new(), text.as_bytes()),
            None,
            "{text:?}"
        );
        assert!(!shown_exactly(text.as_bytes(), b"1"), "{text:?}");
    }
}

/// Random JSON number literals: long mantissas, exponents of every size
/// serde_json reads.
fn literal() -> impl Strategy<Value = String> {
    prop_oneof![
        r"-?(0|[1-9][0-9]{0,40})(\.[0-9]{1,40})?([eE][+-]?[0-9]{1,3})?",
        r"-?(0|[1-9][0-9]{0,3})(\.[0-9]{1,3})?([eE][+-]?[0-9]{1,2})?",
        any::<f64>()
            .prop_map(|x| Number::from_f64(x).map_or_else(|| "0".to_owned(), |n| n.to_string())),
        any::<i64>().prop_map(|n| n.to_string()),
    ]
    .prop_filter("serde_json reads it", |text| {
        serde_json::from_str::<Number>(text).is_ok()
    })
}

/// The value of a literal by the decimal normaliser's own reader: sign,
/// digits without leading or trailing zeros, exponent; zero as one value.
fn value(text: &str) -> (bool, String, i64) {
    let parsed = parse_text(text).unwrap();
    if parsed.digits.is_empty() {
        return (false, String::new(), 0);
    }
    (parsed.negative, parsed.digits, parsed.exponent)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(5000))]

    #[test]
    fn the_canonical_form_has_the_literals_value(text in literal()) {
        let form = canon(&text);
        prop_assert_eq!(value(&form), value(&text), "{} -> {}", text, form);
    }

    #[test]
    fn the_form_is_serde_jsons_text_if_exact_else_the_nearest_f64s_else_exact(
        text in literal()
    ) {
        let shown = serde_json::from_str::<Number>(&text).unwrap().to_string();
        let nearest = text
            .parse::<f64>()
            .ok()
            .and_then(Number::from_f64)
            .map(|n| n.to_string());
        let form = canon(&text);
        if value(&shown) == value(&text) {
            prop_assert_eq!(form, shown);
        } else if let Some(nearest) = nearest.filter(|n| value(n) == value(&text)) {
            prop_assert_eq!(form, nearest);
        } else {
            prop_assert!(form.contains('E'), "{} -> {}", text, form);
        }
    }

    #[test]
    fn two_values_never_share_a_form(a in literal(), b in literal()) {
        if value(&a) != value(&b) {
            prop_assert_ne!(canon(&a), canon(&b));
        }
    }

    #[test]
    fn a_number_differing_in_one_digit_has_another_form(
        text in r"-?[1-9][0-9]{0,40}(\.[0-9]{1,40})?([eE]-?[0-9]{1,2})?",
        at in any::<prop::sample::Index>(),
        bump in 1u8..10,
    ) {
        let digits: Vec<usize> = text
            .bytes()
            .enumerate()
            .take_while(|&(_, b)| b != b'e' && b != b'E')
            .filter(|&(_, b)| b.is_ascii_digit())
            .map(|(i, _)| i)
            .collect();
        let i = digits[at.index(digits.len())];
        let mut other = text.clone().into_bytes();
        other[i] = b'0' + (other[i] - b'0' + bump) % 10;
        let other = String::from_utf8(other).unwrap();
        // A leading digit turned to zero is no longer a JSON number.
        prop_assume!(serde_json::from_str::<Number>(&other).is_ok());
        prop_assert_ne!(canon(&text), canon(&other), "{} vs {}", text, other);
    }

    #[test]
    fn exact_forms_are_fixed_points(text in literal()) {
        let form = canon(&text);
        prop_assert_eq!(canon(&form), form.clone());
    }

    #[test]
    fn spellings_of_one_value_agree(
        digits in "[1-9]([0-9]{0,39}[1-9])?",
        point in any::<prop::sample::Index>(),
        shift in -3i64..=3,
        zeros in 0usize..4,
    ) {
        // digits × 10^-point, written with the point `places` from the
        // right, trailing zeros added, and the exponent that makes up for it.
        let spell = |places: usize, exponent: i64| {
            let (int, fraction) = digits.split_at(digits.len() - places);
            let int = if int.is_empty() { "0" } else { int };
            format!("{int}.{fraction}{}e{exponent}", "0".repeat(zeros + 1))
        };
        let point = point.index(digits.len() + 1);
        let moved = (point as i64 + shift).clamp(0, digits.len() as i64);
        let a = spell(point, 0);
        let b = spell(moved as usize, moved - point as i64);
        prop_assert_eq!(value(&a), value(&b));
        prop_assert_eq!(canon(&a), canon(&b), "{} vs {}", a, b);
        if digits.len() >= 18 {
            // No f64 prints 18 significant digits.
            prop_assert!(canon(&a).contains('E'));
        }
    }

    #[test]
    fn long_exponents_add_as_integers_do(
        magnitude in "[1-9][0-9]{18,36}",
        delta in -(1i64 << 40)..(1i64 << 40),
    ) {
        let mut out = Vec::new();
        add_small(&mut out, magnitude.as_bytes(), delta).unwrap();
        let expected = magnitude.parse::<i128>().unwrap() + i128::from(delta);
        prop_assert_eq!(String::from_utf8(out).unwrap(), expected.to_string());
    }
}
