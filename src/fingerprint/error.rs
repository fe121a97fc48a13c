//! Why a record has no source hash. Each such record is decided `invalid`
//! and goes to the audit topic with the reason, so the message must let an
//! operator find the offending field or header without the payload at hand.

/// How much of an offending value an error quotes: enough to recognise it,
/// not so much that a megabyte field ends up in an audit header.
const QUOTE_LIMIT: usize = 64;

/// Why no hash can be computed. Every variant names the field or header (or
/// the payload); messages are lowercase with no trailing period.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    /// The record (key, headers and payload, as the reader measures it; the
    /// payload alone, as the fingerprint does) is over the stream's size
    /// limit: checked before any parsing, so an oversized record costs
    /// nothing.
    #[error("record is {size} bytes, over the limit of {limit}")]
    TooLarge { size: usize, limit: usize },
    /// The profile needs JSON and the payload is not.
    #[error("payload is not json: {reason}")]
    NotJson { reason: String },
    /// The `fields` profile needs a JSON object at the top.
    #[error("payload is not a json object")]
    NotObject,
    /// A listed field is absent or null.
    #[error("field `{field}` is missing or null")]
    MissingField { field: String },
    /// A listed field (or an object on its dotted path) has a type its
    /// normaliser does not take.
    #[error("field `{field}`: expected {expected}, found {found}")]
    WrongType {
        field: String,
        expected: &'static str,
        found: &'static str,
    },
    /// A `decimal` or `round:N` field's text is not a decimal number (JSON
    /// number grammar, leading zeros allowed).
    #[error("field `{field}`: `{value}` is not a decimal number")]
    BadDecimal { field: String, value: String },
    /// A `decimal` or `round:N` field holds a decimal (a JSON number or a
    /// string) that rust_decimal cannot hold exactly: more than 28 decimal
    /// places, or past its 96-bit range (±79228162514264337593543950335);
    /// for `round:N`, a value whose rounding is past that range. Rounding
    /// it to fit would give it the hash of another amount (docs/design.md
    /// §3), so it is refused.
    #[error(
        "field `{field}`: `{value}` cannot be held exactly as a decimal (at most 28 decimal places and 96 bits, about 28 digits)"
    )]
    InexactDecimal { field: String, value: String },
    /// A `timestamp` field is not an RFC 3339 timestamp.
    #[error("field `{field}`: `{value}` is not an rfc 3339 timestamp")]
    BadTimestamp { field: String, value: String },
    /// The key header is absent (or present without a value).
    #[error("header `{name}` is missing")]
    MissingHeader { name: String },
    /// The key header's value is not UTF-8 text.
    #[error("header `{name}` is not valid utf-8")]
    HeaderNotUtf8 { name: String },
    /// A header's *name* is not UTF-8 (shown with U+FFFD): the record's
    /// headers cannot be written out as they came, so it goes to audit.
    #[error("a header name is not valid utf-8: `{name}`")]
    HeaderNameNotUtf8 { name: String },
    /// The key header is present but empty: hashing it would make every such
    /// record a duplicate of the first.
    #[error("header `{name}` is empty")]
    EmptyHeader { name: String },
    /// The `record-key` profile and a record without a key: hashing nothing
    /// would make every keyless record a duplicate of the first.
    #[error("record has no key")]
    MissingKey,
    /// The `record-key` profile and a record whose key is empty.
    #[error("record key is empty")]
    EmptyKey,
    /// The profile reads the payload and there is none (a tombstone) or it is
    /// empty: hashing nothing would make every such record a duplicate.
    #[error("payload is empty")]
    EmptyPayload,
    /// The payload gives a key on the identity's path more than once in one
    /// object: a listed field, an object on its path or a key inside its
    /// value (under `payload`, any key outside the ignored paths). JSON
    /// readers disagree on which value wins, so hashing the one serde_json
    /// keeps could dedupe another event than a downstream reader sees
    /// (docs/design.md §10). `key` is the dotted path, `[]` for an array's
    /// items.
    #[error("key `{key}` is given more than once in its object: readers disagree on its value")]
    DuplicateKey { key: String },
    /// A `fields` profile with no fields would give every record one hash;
    /// refusing each record fails safe (to the audit topic) instead of
    /// suppressing the stream.
    #[error("profile lists no fields")]
    NoFields,
}

impl Invalid {
    /// Short stable machine reason for headers and metric labels
    /// (`idemgate-reason`): kebab case, never changes once released.
    pub fn code(&self) -> &'static str {
        match self {
            Invalid::TooLarge { .. } => "too-large",
            Invalid::NotJson { .. } => "not-json",
            Invalid::NotObject => "not-object",
            Invalid::MissingField { .. } => "missing-field",
            Invalid::WrongType { .. } => "wrong-type",
            Invalid::BadDecimal { .. } => "bad-decimal",
            Invalid::InexactDecimal { .. } => "inexact-decimal",
            Invalid::BadTimestamp { .. } => "bad-timestamp",
            Invalid::MissingHeader { .. } => "missing-header",
            Invalid::HeaderNotUtf8 { .. } => "header-not-utf8",
            Invalid::HeaderNameNotUtf8 { .. } => "header-name-not-utf8",
            Invalid::EmptyHeader { .. } => "empty-header",
            Invalid::MissingKey => "missing-key",
            Invalid::EmptyKey => "empty-key",
            Invalid::EmptyPayload => "empty-payload",
            Invalid::NoFields => "no-fields",
            Invalid::DuplicateKey { .. } => "duplicate-key",
        }
    }
}

/// The first [`QUOTE_LIMIT`] characters of an offending value, marked when
/// cut.
pub(crate) fn quote(value: &str) -> String {
    match value.char_indices().nth(QUOTE_LIMIT) {
        Some((cut, _)) => format!("{}…", value.get(..cut).unwrap_or_default()),
        None => value.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_variant() -> Vec<Invalid> {
        let field = || "f".to_owned();
        vec![
            Invalid::TooLarge { size: 2, limit: 1 },
            Invalid::NotJson {
                reason: "expected value at line 1 column 1".into(),
            },
            Invalid::NotObject,
            Invalid::MissingField { field: field() },
            Invalid::WrongType {
                field: field(),
                expected: "string",
                found: "number",
            },
            Invalid::BadDecimal {
                field: field(),
                value: "x".into(),
            },
            Invalid::InexactDecimal {
                field: field(),
                value: "1e-29".into(),
            },
            Invalid::BadTimestamp {
                field: field(),
                value: "x".into(),
            },
            Invalid::MissingHeader { name: field() },
            Invalid::HeaderNotUtf8 { name: field() },
            Invalid::HeaderNameNotUtf8 { name: field() },
            Invalid::EmptyHeader { name: field() },
            Invalid::MissingKey,
            Invalid::EmptyKey,
            Invalid::EmptyPayload,
            Invalid::NoFields,
        ]
    }

    #[test]
    fn codes_are_distinct_kebab_case() {
        let codes: Vec<_> = every_variant().iter().map(Invalid::code).collect();
        let mut unique = codes.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), codes.len());
        for code in codes {
            assert!(code
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b == b'-' || b.is_ascii_digit()));
        }
    }

    #[test]
    fn messages_are_lowercase_without_trailing_period() {
        for invalid in every_variant() {
            let message = invalid.to_string();
            assert!(!message.ends_with('.'), "{message}");
            assert_eq!(
                message.chars().next().map(char::is_lowercase),
                Some(true),
                "{message}"
            );
        }
    }

    #[test]
    fn messages_name_the_field_or_header() {
        let message = Invalid::WrongType {
            field: "amount".into(),
            expected: "string or number",
            found: "boolean",
        }
        .to_string();
        assert_eq!(
            message,
            "field `amount`: expected string or number, found boolean"
        );
        assert_eq!(
            Invalid::HeaderNotUtf8 {
                name: "x-idempotency-key".into()
            }
            .to_string(),
            "header `x-idempotency-key` is not valid utf-8"
        );
    }

    #[test]
    fn long_values_are_quoted_cut_on_a_char_boundary() {
        assert_eq!(quote("short"), "short");
        let long = "é".repeat(100);
        let quoted = quote(&long);
        assert_eq!(quoted.chars().count(), QUOTE_LIMIT + 1);
        assert!(quoted.ends_with('…'));
        assert_eq!(quote(&"a".repeat(QUOTE_LIMIT)), "a".repeat(QUOTE_LIMIT));
    }
}
