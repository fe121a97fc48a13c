//! Canonical JSON: one byte string per JSON value, whatever the key order or
//! whitespace of the text it came from.
//!
//! The form: objects with keys sorted by their UTF-8 bytes, no whitespace,
//! strings escaped exactly as serde_json escapes them, numbers in
//! serde_json's own representation where that is exact, else in an exact
//! form of their literal text (`number.rs`). Keys are sorted here rather
//! than relying on the tree's map order.
//!
//! Numbers keep serde_json's representation, which is not a numeric
//! normal form: `1` and `1.0` differ, `1e2` and `100.0` agree (both are the
//! same `f64`). A number no `f64` or integer holds exactly
//! (`1.000000000000000001`, `18446744073709551617`) is written exactly
//! (`1.000000000000000001E0`), so it never shares a form with another
//! value. Fields that need numeric equality use the `decimal` or `round:N`
//! normalisers. This is deliberately not RFC 8785 (JCS), whose number form
//! would change what `1` versus `1.0` means.

use super::json::{Json, Num};
use super::number;

/// Append the canonical form of `value` to `out`. Recursion depth is bounded
/// by serde_json's parser (128 levels), so this cannot overflow the stack on
/// a parsed payload.
pub(crate) fn write_value(out: &mut String, value: &Json) {
    match value {
        Json::Null => out.push_str("null"),
        Json::Bool(true) => out.push_str("true"),
        Json::Bool(false) => out.push_str("false"),
        Json::Number(number) => write_number(out, number),
        Json::String(text) => write_string(out, text),
        Json::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Json::Object(map) => write_object(out, map.iter()),
    }
}

/// Append a canonical object with these entries, sorting them by key. A key
/// given twice keeps its last value, as a JSON parser would.
pub(crate) fn write_object<'a>(
    out: &mut String,
    entries: impl IntoIterator<Item = (&'a String, &'a Json)>,
) {
    let mut sorted: Vec<(&String, &Json)> = entries.into_iter().collect();
    // Stable sort: among equal keys, input order is kept, so the last wins
    // below.
    sorted.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    out.push('{');
    let mut first = true;
    for (index, (key, value)) in sorted.iter().enumerate() {
        let superseded = sorted
            .get(index + 1)
            .is_some_and(|(next, _)| next.as_bytes() == key.as_bytes());
        if superseded {
            continue;
        }
        if !first {
            out.push(',');
        }
        first = false;
        write_string(out, key);
        out.push(':');
        write_value(out, value);
    }
    out.push('}');
}

/// The canonical form of a value as a new string.
pub(crate) fn to_canonical(value: &Json) -> String {
    let mut out = String::new();
    write_value(&mut out, value);
    out
}

/// serde_json's text of the number (`Number`'s Display: itoa for integers,
/// the shortest round trip for floats) when that is exactly the literal's
/// value, else the literal's exact form (`number.rs`).
fn write_number(out: &mut String, number: &Num) {
    let shown = number.parsed.to_string();
    out.push_str(&number::canonical(&number.literal, &shown));
}

/// Escape as serde_json does: `"` and `\` with a backslash, the short forms
/// for \b \t \n \f \r, other control characters below 0x20 as `\u00xx`
/// (lowercase hex), everything else (DEL and non-ASCII included) as is.
pub(crate) fn write_string(out: &mut String, text: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push('"');
    for ch in text.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{08}' => out.push_str("\\b"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\u{0c}' => out.push_str("\\f"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 => {
                let byte = c as u32;
                out.push_str("\\u00");
                for nibble in [byte >> 4, byte & 0xf] {
                    if let Some(&digit) = HEX.get(nibble as usize) {
                        out.push(char::from(digit));
                    }
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fingerprint::json::{from_value, parse};
    use proptest::prelude::*;
    use serde_json::json;

    fn canon(text: &str) -> String {
        to_canonical(&parse(text.as_bytes()).unwrap())
    }

    #[test]
    fn keys_are_sorted_recursively_and_whitespace_dropped() {
        assert_eq!(
            canon(r#"{ "b": [ {"z":1, "a":2} ], "a" : {"y": null, "x": true} }"#),
            r#"{"a":{"x":true,"y":null},"b":[{"a":2,"z":1}]}"#
        );
    }

    #[test]
    fn keys_sort_by_utf8_bytes() {
        assert_eq!(
            canon(r#"{"é":1,"z":2,"Z":3,"":4}"#),
            r#"{"":4,"Z":3,"z":2,"é":1}"#
        );
    }

    #[test]
    fn numbers_keep_serde_json_representation() {
        assert_eq!(
            canon("[1, 1.0, -74.500000, 1e2, 1E-7, -0.0]"),
            "[1,1.0,-74.5,100.0,1e-7,-0.0]"
        );
    }

    #[test]
    fn strings_and_numbers_stay_distinct() {
        assert_ne!(canon("123"), canon(r#""123""#));
    }

    #[test]
    fn control_characters_are_escaped_like_serde_json() {
        let text = "q\"b\\s/\u{08}\u{0c}\n\r\t\u{01}\u{1f}\u{7f}é😀";
        let mut out = String::new();
        write_string(&mut out, text);
        assert_eq!(out, serde_json::to_string(text).unwrap());
        assert_eq!(
            out,
            "\"q\\\"b\\\\s/\\b\\f\\n\\r\\t\\u0001\\u001f\u{7f}é😀\""
        );
    }

    #[test]
    fn a_key_given_twice_keeps_the_last_value() {
        let (a, b) = ("a".to_owned(), "b".to_owned());
        let (one, two) = (from_value(&json!(1)), from_value(&json!(2)));
        let mut out = String::new();
        write_object(&mut out, [(&b, &one), (&a, &one), (&b, &two)]);
        assert_eq!(out, r#"{"a":1,"b":2}"#);
    }

    proptest! {
        #[test]
        fn string_escaping_matches_serde_json(text in any::<String>()) {
            let mut out = String::new();
            write_string(&mut out, &text);
            prop_assert_eq!(out, serde_json::to_string(&text).unwrap());
        }

        #[test]
        fn canonical_form_is_a_fixed_point(
            text in r#"\{("[a-c]{0,2}": ?(-?(0|[1-9][0-9]{0,2})(\.[0-9]{1,3})?|"[a-z]{0,2}"|null|\[\]), ?){0,4}"z": 0\}"#
        ) {
            let once = canon(&text);
            prop_assert_eq!(canon(&once), once.clone());
        }
    }
}
