//! Field lookup and the per-field normalisers of the `fields` profile.
//!
//! Each normaliser maps every spelling of one value to one JSON value, typed:
//! strings stay strings. Decimals (from `decimal` and `round:N`) come out as
//! strings of their exact normalised text, because a JSON number would pass
//! through `f64` and lose what rust_decimal kept. A JSON number is read from
//! its literal text, never from serde_json's `f64` (docs/design.md §3); a
//! value rust_decimal cannot hold exactly is refused (`InexactDecimal`), not
//! rounded into another amount's hash.

use rust_decimal::{Decimal, RoundingStrategy};
use time::format_description::well_known::Rfc3339;
use time::macros::format_description;
use time::{OffsetDateTime, UtcOffset};

use super::error::{quote, Invalid};
use super::json::{type_name, Json, Object};
use super::profile::{Normaliser, MAX_ROUND_PLACES};

/// The value at a dotted path (`a.b` is key `b` of the object at key `a`).
/// Absent and null are both `MissingField` naming the whole path; a
/// non-object on the way is `WrongType` naming the path up to it.
pub(crate) fn lookup<'a>(root: &'a Object, path: &str) -> Result<&'a Json, Invalid> {
    let missing = || Invalid::MissingField {
        field: path.to_owned(),
    };
    let mut object = root;
    let mut consumed = 0;
    let mut segments = path.split('.').peekable();
    while let Some(segment) = segments.next() {
        consumed += segment.len();
        let value = match object.get(segment) {
            None | Some(Json::Null) => return Err(missing()),
            Some(value) => value,
        };
        if segments.peek().is_none() {
            return Ok(value);
        }
        object = match value {
            Json::Object(inner) => inner,
            other => {
                return Err(Invalid::WrongType {
                    field: path.get(..consumed).unwrap_or(path).to_owned(),
                    expected: "object",
                    found: type_name(other),
                })
            }
        };
        consumed += 1; // the dot
    }
    Err(missing())
}

/// Normalise the value of `field` (already looked up, never null).
pub(crate) fn normalise(
    field: &str,
    normaliser: &Normaliser,
    value: &Json,
) -> Result<Json, Invalid> {
    let wrong = |expected, found: &Json| Invalid::WrongType {
        field: field.to_owned(),
        expected,
        found: type_name(found),
    };
    match (normaliser, value) {
        (Normaliser::Decimal, Json::String(text)) => decimal(field, text),
        (Normaliser::Decimal, Json::Number(number)) => decimal(field, &number.literal),
        (Normaliser::Decimal, other) => Err(wrong("string or number", other)),
        (Normaliser::String, Json::String(text)) => Ok(Json::String(text.clone())),
        (Normaliser::Upper, Json::String(text)) => Ok(Json::String(text.to_uppercase())),
        (Normaliser::Lower, Json::String(text)) => Ok(Json::String(text.to_lowercase())),
        (Normaliser::Timestamp, Json::String(text)) => timestamp(field, text),
        (Normaliser::String | Normaliser::Upper | Normaliser::Lower, other) => {
            Err(wrong("string", other))
        }
        (Normaliser::Timestamp, other) => Err(wrong("rfc 3339 string", other)),
        (Normaliser::Round(places), Json::Number(number)) => {
            round(field, &number.literal, *places).map(Json::String)
        }
        (Normaliser::Round(places), Json::Array(items)) => items
            .iter()
            .map(|item| match item {
                Json::Number(number) => round(field, &number.literal, *places).map(Json::String),
                other => Err(Invalid::WrongType {
                    field: field.to_owned(),
                    expected: "number or array of numbers",
                    found: array_containing(other),
                }),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Json::Array),
        (Normaliser::Round(_), other) => Err(wrong("number or array of numbers", other)),
        // Canonicalised when the whole form is written.
        (Normaliser::Object, value) => Ok(value.clone()),
    }
}

/// `found` for an array with a non-number element, so the message says what
/// is wrong inside the array rather than that it is one.
fn array_containing(element: &Json) -> &'static str {
    match element {
        Json::Null => "array containing null",
        Json::Bool(_) => "array containing boolean",
        Json::Number(_) => "array containing number",
        Json::String(_) => "array containing string",
        Json::Array(_) => "array containing array",
        Json::Object(_) => "array containing object",
    }
}

/// Why a text gives a `decimal` or `round:N` field no value.
#[derive(Debug, PartialEq)]
enum Unfit {
    /// Not a decimal number at all.
    NotDecimal,
    /// A decimal rust_decimal cannot hold exactly.
    Inexact,
}

fn refused(field: &str, text: &str, unfit: Unfit) -> Invalid {
    let (field, value) = (field.to_owned(), quote(text));
    match unfit {
        Unfit::NotDecimal => Invalid::BadDecimal { field, value },
        Unfit::Inexact => Invalid::InexactDecimal { field, value },
    }
}

fn decimal(field: &str, text: &str) -> Result<Json, Invalid> {
    parse_decimal(text, None)
        .map(|value| Json::String(value.normalize().to_string()))
        .map_err(|unfit| refused(field, text, unfit))
}

/// Round half away from zero (the rule people apply by hand, and what
/// "6 places" means to a GIS user), then strip trailing zeros so -74.500000
/// and -74.5 agree.
///
/// Rounding half away from zero to N places reads the digit at place N + 1
/// and none after it, so the text is first cut (toward zero) after that
/// digit: the result is that of the exact value however long the literal.
/// At 28 places, rust_decimal's largest scale, the cut is at 28 itself, as
/// it always was: what lies below 1e-28 is dropped, not rounded.
fn round(field: &str, text: &str, places: u32) -> Result<String, Invalid> {
    let places = places.min(MAX_ROUND_PLACES);
    let cut = (places + 1).min(MAX_ROUND_PLACES);
    parse_decimal(text, Some(cut))
        .map(|value| {
            value
                .round_dp_with_strategy(places, RoundingStrategy::MidpointAwayFromZero)
                .normalize()
                .to_string()
        })
        .map_err(|unfit| refused(field, text, unfit))
}

/// A decimal in its JSON text: sign, digits (no leading or trailing zeros;
/// empty for zero) and a power of ten, so value = ±digits × 10^exponent.
#[derive(Debug, PartialEq)]
pub(super) struct DecimalText {
    pub(super) negative: bool,
    pub(super) digits: String,
    pub(super) exponent: i64,
}

/// Parse JSON number grammar, except that leading zeros are allowed (a
/// string amount "007.50" is still 7.5): `-?d+(.d+)?([eE][+-]?d+)?`.
/// Anything else (spaces, `+1`, `.5`, `1_000`, `NaN`) is refused rather
/// than guessed at, since rust_decimal's own parser is more lenient.
pub(super) fn parse_text(text: &str) -> Option<DecimalText> {
    let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let (negative, rest) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (mantissa, exponent) = match rest.split_once(['e', 'E']) {
        Some((mantissa, exponent)) => {
            let magnitude = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
            if !all_digits(magnitude) {
                return None;
            }
            // Saturated at 2^62: a payload has far fewer digits, so past
            // that the value is out of every normaliser's range (or rounds
            // to zero) exactly as with the exponent written.
            const SATURATED: i64 = 1 << 62;
            let magnitude = magnitude.trim_start_matches('0');
            let magnitude = if magnitude.len() > 18 {
                SATURATED
            } else {
                magnitude.parse::<i64>().unwrap_or(0).min(SATURATED)
            };
            let exponent = if exponent.starts_with('-') {
                -magnitude
            } else {
                magnitude
            };
            (mantissa, exponent)
        }
        None => (rest, 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if !all_digits(whole) || (mantissa.contains('.') && !all_digits(fraction)) {
        return None;
    }
    let mut exponent = exponent.checked_sub(i64::try_from(fraction.len()).ok()?)?;
    let joined = format!("{whole}{fraction}");
    let significant = joined.trim_start_matches('0');
    let trimmed = significant.trim_end_matches('0');
    exponent = exponent.checked_add(i64::try_from(significant.len() - trimmed.len()).ok()?)?;
    Some(DecimalText {
        negative,
        digits: trimmed.to_owned(),
        exponent,
    })
}

/// The exact decimal a number text denotes, if rust_decimal can hold it.
/// `cut` (for `round:N`, at most 28) cuts digits past that many decimal
/// places toward zero instead of refusing them.
fn parse_decimal(text: &str, cut: Option<u32>) -> Result<Decimal, Unfit> {
    const MAX_SCALE: usize = 28;
    /// Digits of rust_decimal's largest value, 79228162514264337593543950335.
    const MAX_DIGITS: usize = 29;
    let parsed = parse_text(text).ok_or(Unfit::NotDecimal)?;
    let mut digits: &str = &parsed.digits;
    if digits.is_empty() {
        return Ok(Decimal::ZERO);
    }
    let sign = if parsed.negative { "-" } else { "" };
    let plain = if parsed.exponent >= 0 {
        let zeros = usize::try_from(parsed.exponent).map_err(|_| Unfit::Inexact)?;
        if digits.len().saturating_add(zeros) > MAX_DIGITS {
            return Err(Unfit::Inexact);
        }
        format!("{sign}{digits}{}", "0".repeat(zeros))
    } else {
        let mut scale =
            usize::try_from(parsed.exponent.unsigned_abs()).map_err(|_| Unfit::Inexact)?;
        let limit = cut.map_or(MAX_SCALE, |cut| (cut as usize).min(MAX_SCALE));
        if scale > limit {
            if cut.is_none() {
                return Err(Unfit::Inexact);
            }
            let drop = scale - limit;
            if drop >= digits.len() {
                return Ok(Decimal::ZERO);
            }
            digits = digits.get(..digits.len() - drop).ok_or(Unfit::Inexact)?;
            scale = limit;
        }
        if digits.len() > scale {
            let (whole, fraction) = digits.split_at(digits.len() - scale);
            format!("{sign}{whole}.{fraction}")
        } else {
            format!("{sign}0.{}{digits}", "0".repeat(scale - digits.len()))
        }
    };
    // The text is plain decimal digits by now: an error means too many.
    Decimal::from_str_exact(&plain).map_err(|_| Unfit::Inexact)
}

/// RFC 3339 in, one fixed UTC form out (nanosecond precision, `Z`), so one
/// instant written with different offsets or precision agrees. An instant
/// whose UTC date falls outside years -9999 to 9999 is refused, not
/// panicked on.
fn timestamp(field: &str, text: &str) -> Result<Json, Invalid> {
    let fixed =
        format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:9]Z");
    OffsetDateTime::parse(text, &Rfc3339)
        .ok()
        .and_then(|at| at.checked_to_offset(UtcOffset::UTC))
        .and_then(|at| at.format(fixed).ok())
        .map(Json::String)
        .ok_or_else(|| Invalid::BadTimestamp {
            field: field.to_owned(),
            value: quote(text),
        })
}

#[cfg(test)]
#[path = "normalise_tests.rs"]
mod tests;
