//! The reference's parsed payload: serde_json's own parse, so what it
//! accepts and every error it names are serde_json's, into a tree that
//! differs from `serde_json::Value` in one way: a number keeps its literal
//! text beside serde_json's reading of it. `Value` holds a number as a
//! `u64`, an `i64` or an `f64` (this build leaves serde_json's
//! `arbitrary_precision` feature off, see `number.rs`), so `Value` has
//! already lost the last digit of `1.000000000000000001`.
//!
//! serde_json hands a visitor a number's value, never its text. But it
//! visits values in document order, so the visitor takes the texts, in the
//! same order, from a scan of the payload that only has to skip strings:
//! everything serde_json has visited before a number is valid JSON, and
//! outside strings only a number starts with `-` or a digit.

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Number;

/// A JSON object: keys in byte order (Rust's `String` order), the last of
/// equal keys kept, as a parser keeps it.
pub(crate) type Object = BTreeMap<String, Json>;

/// A parsed JSON value whose numbers keep their text.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Json {
    Null,
    Bool(bool),
    Number(Num),
    String(String),
    Array(Vec<Json>),
    Object(Object),
}

/// A JSON number as written, and as serde_json reads it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Num {
    /// The literal text, which alone is exact.
    pub(crate) literal: String,
    /// serde_json's reading (an integer, or the nearest `f64` by its own
    /// parser): its text is the canonical form of every number it reads
    /// exactly, as it was before numbers were read from their text.
    pub(crate) parsed: Number,
}

/// Parses a payload as `serde_json::from_slice::<Value>` does, with the
/// same errors.
#[cfg(test)]
pub(crate) fn parse(payload: &[u8]) -> Result<Json, serde_json::Error> {
    parse_noting_duplicates(payload).map(|parsed| parsed.value)
}

/// A parsed payload, and every key an object of it gives more than once.
pub(crate) struct Parsed {
    /// The tree, the last of equal keys kept, as serde_json keeps it.
    pub(crate) value: Json,
    /// The path of each key given twice (or more) in its object, from the
    /// root: object keys, and [`ARRAY_STEP`] for a step into an array.
    /// Readers disagree on which of the values wins (docs/design.md §10), so
    /// a key on an identity's path is refused, never hashed on one of them.
    pub(crate) duplicates: Vec<Vec<String>>,
}

/// The step into an array's items in a [`Parsed::duplicates`] path: a dot
/// cannot be a segment of a dotted field path, so it never matches one.
pub(crate) const ARRAY_STEP: &str = ".";

/// [`parse`], noting the keys given twice.
pub(crate) fn parse_noting_duplicates(payload: &[u8]) -> Result<Parsed, serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_slice(payload);
    let mut literals = Literals {
        input: payload,
        pos: 0,
        path: Vec::new(),
        duplicates: Vec::new(),
    };
    let value = Seed {
        literals: &mut literals,
    }
    .deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(Parsed {
        value,
        duplicates: literals.duplicates,
    })
}

/// The JSON type of a value, as named in `WrongType` errors.
pub(crate) fn type_name(value: &Json) -> &'static str {
    match value {
        Json::Null => "null",
        Json::Bool(_) => "boolean",
        Json::Number(_) => "number",
        Json::String(_) => "string",
        Json::Array(_) => "array",
        Json::Object(_) => "object",
    }
}

/// The number tokens of a payload, in document order; and, as the parse
/// walks the tree, where it is and which keys it met twice.
struct Literals<'a> {
    input: &'a [u8],
    pos: usize,
    /// The keys (and array steps) from the root to the value being read:
    /// each key is moved in while its value is read, then moved back out.
    path: Vec<String>,
    duplicates: Vec<Vec<String>>,
}

impl<'a> Literals<'a> {
    /// The next number token outside strings. Only called when serde_json
    /// has just read a number, so the text before it is valid JSON.
    fn next(&mut self) -> Option<&'a str> {
        let input = self.input;
        while let Some(&b) = input.get(self.pos) {
            match b {
                b'"' => {
                    self.pos += 1;
                    loop {
                        match *input.get(self.pos)? {
                            b'\\' => self.pos += 2,
                            b'"' => {
                                self.pos += 1;
                                break;
                            }
                            _ => self.pos += 1,
                        }
                    }
                }
                b'-' | b'0'..=b'9' => {
                    let start = self.pos;
                    while let Some(b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E') =
                        input.get(self.pos)
                    {
                        self.pos += 1;
                    }
                    return std::str::from_utf8(input.get(start..self.pos)?).ok();
                }
                _ => self.pos += 1,
            }
        }
        None
    }
}

/// Deserializes one value, taking its numbers' texts from `literals`.
struct Seed<'s, 'a> {
    literals: &'s mut Literals<'a>,
}

impl Seed<'_, '_> {
    fn number<E: de::Error>(self, parsed: Number) -> Result<Json, E> {
        let literal = self
            .literals
            .next()
            .ok_or_else(|| E::custom("the text of a number was not found"))?;
        Ok(Json::Number(Num {
            literal: literal.to_owned(),
            parsed,
        }))
    }
}

impl<'de> DeserializeSeed<'de> for Seed<'_, '_> {
    type Value = Json;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Json, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seed<'_, '_> {
    type Value = Json;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("any valid JSON value")
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> Result<Json, E> {
        Ok(Json::Bool(value))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Json, E> {
        self.number(Number::from(value))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Json, E> {
        self.number(Number::from(value))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Json, E> {
        // serde_json's parser refuses what does not fit a finite f64.
        let parsed = Number::from_f64(value).ok_or_else(|| E::custom("number is not finite"))?;
        self.number(parsed)
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<Json, E> {
        Ok(Json::String(value.to_owned()))
    }

    fn visit_string<E: de::Error>(self, value: String) -> Result<Json, E> {
        Ok(Json::String(value))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        let literals = self.literals;
        let mut items = Vec::new();
        literals.path.push(ARRAY_STEP.to_owned());
        while let Some(item) = seq.next_element_seed(Seed {
            literals: &mut *literals,
        })? {
            items.push(item);
        }
        literals.path.pop();
        Ok(Json::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        let literals = self.literals;
        let mut object = Object::new();
        while let Some(key) = map.next_key::<String>()? {
            literals.path.push(key);
            let value = map.next_value_seed(Seed {
                literals: &mut *literals,
            })?;
            let Some(key) = literals.path.pop() else {
                return Err(de::Error::custom("the parse lost its path"));
            };
            match object.entry(key) {
                Entry::Vacant(entry) => {
                    entry.insert(value);
                }
                Entry::Occupied(mut entry) => {
                    let mut at = literals.path.clone();
                    at.push(entry.key().clone());
                    literals.duplicates.push(at);
                    entry.insert(value);
                }
            }
        }
        Ok(Json::Object(object))
    }
}

/// A `serde_json::Value` as a tree, each number's literal being serde_json's
/// text of it: for tests that build values with `json!`.
#[cfg(test)]
pub(crate) fn from_value(value: &serde_json::Value) -> Json {
    use serde_json::Value;
    match value {
        Value::Null => Json::Null,
        Value::Bool(b) => Json::Bool(*b),
        Value::Number(n) => Json::Number(Num {
            literal: n.to_string(),
            parsed: n.clone(),
        }),
        Value::String(s) => Json::String(s.clone()),
        Value::Array(items) => Json::Array(items.iter().map(from_value).collect()),
        Value::Object(map) => Json::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), from_value(v)))
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::Value;

    fn literals(text: &str) -> Vec<String> {
        let mut out = Vec::new();
        collect(&parse(text.as_bytes()).unwrap(), &mut out);
        out
    }

    fn collect(value: &Json, out: &mut Vec<String>) {
        match value {
            Json::Number(n) => out.push(n.literal.clone()),
            Json::Array(items) => items.iter().for_each(|item| collect(item, out)),
            Json::Object(map) => map.values().for_each(|item| collect(item, out)),
            _ => {}
        }
    }

    #[test]
    fn type_names_cover_every_json_type() {
        let names: Vec<_> = ["null", "true", "1", "\"s\"", "[]", "{}"]
            .iter()
            .map(|text| type_name(&parse(text.as_bytes()).unwrap()))
            .collect();
        assert_eq!(
            names,
            ["null", "boolean", "number", "string", "array", "object"]
        );
    }

    #[test]
    fn numbers_keep_their_literal_text() {
        assert_eq!(
            literals(r#"[1.000000000000000001, -0, 1E+2, 18446744073709551616, 0.10]"#),
            [
                "1.000000000000000001",
                "-0",
                "1E+2",
                "18446744073709551616",
                "0.10"
            ]
        );
    }

    #[test]
    fn numbers_inside_strings_and_keys_are_skipped() {
        assert_eq!(
            literals(r#"{"a1": "2 -3 \"4\\", "-5": [6, "7\\\"", 8e1]}"#),
            ["6", "8e1"]
        );
    }

    #[test]
    fn a_key_given_twice_keeps_the_last_value_and_its_text() {
        assert_eq!(literals(r#"{"a": 1.10, "a": 2.20}"#), ["2.20"]);
    }

    #[test]
    fn errors_are_serde_jsons() {
        for text in [
            "",
            "{",
            "[1,]",
            "1e309",
            "-",
            "01",
            "\"\\ud800\"",
            "{} x",
            "[1 2]",
            "nul",
        ] {
            let ours = parse(text.as_bytes()).unwrap_err().to_string();
            let theirs = serde_json::from_str::<Value>(text).unwrap_err().to_string();
            assert_eq!(ours, theirs, "{text:?}");
        }
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert_eq!(
            parse(deep.as_bytes()).unwrap_err().to_string(),
            serde_json::from_str::<Value>(&deep)
                .unwrap_err()
                .to_string()
        );
    }

    proptest! {
        #[test]
        fn the_tree_is_serde_jsons_value_with_texts(
            text in r#"\{("[a-c\\"]{0,3}": ?(-?(0|[1-9][0-9]{0,25})(\.[0-9]{1,25})?([eE][+-]?[0-9]{1,3})?|"[0-9 ,\\-]{0,4}"|null|true|\[-?[0-9]{1,3}(, ?[0-9.e]{1,4})?\]), ?){0,5}"z": 0\}"#
        ) {
            let ours = parse(text.as_bytes());
            let theirs = serde_json::from_str::<Value>(&text);
            match (ours, theirs) {
                (Ok(mut ours), Ok(theirs)) => {
                    // Each text is its own number's...
                    prop_assert!(aligned(&ours), "{:?}", ours);
                    // ...and the texts aside, the trees agree.
                    let mut expected = from_value(&theirs);
                    strip(&mut expected);
                    strip(&mut ours);
                    prop_assert_eq!(ours, expected);
                }
                (Err(ours), Err(theirs)) => prop_assert_eq!(ours.to_string(), theirs.to_string()),
                (ours, theirs) => prop_assert!(false, "{:?} vs {:?}", ours, theirs),
            }
        }
    }

    fn aligned(value: &Json) -> bool {
        match value {
            Json::Number(n) => {
                serde_json::from_str::<Number>(&n.literal).ok() == Some(n.parsed.clone())
            }
            Json::Array(items) => items.iter().all(aligned),
            Json::Object(map) => map.values().all(aligned),
            _ => true,
        }
    }

    fn strip(value: &mut Json) {
        match value {
            Json::Number(n) => n.literal.clear(),
            Json::Array(items) => items.iter_mut().for_each(strip),
            Json::Object(map) => map.values_mut().for_each(strip),
            _ => {}
        }
    }
}
