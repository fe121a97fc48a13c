//! Field lookup and the per-field normalisers of the `fields` profile.
//!
//! Each normaliser maps every spelling of one value to one JSON value, typed:
//! strings stay strings. Decimals (from `decimal` and `round:N`) come out as
//! strings of their exact normalised text, because a JSON number would pass
//! through `f64` and lose what rust_decimal kept.

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
        (Normaliser::Decimal, Json::Number(number)) => decimal(field, &number.parsed.to_string()),
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
            round(field, &number.parsed.to_string(), *places).map(Json::String)
        }
        (Normaliser::Round(places), Json::Array(items)) => items
            .iter()
            .map(|item| match item {
                Json::Number(number) => {
                    round(field, &number.parsed.to_string(), *places).map(Json::String)
                }
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

fn decimal(field: &str, text: &str) -> Result<Json, Invalid> {
    parse_decimal(text, false)
        .map(|value| Json::String(value.normalize().to_string()))
        .ok_or_else(|| Invalid::BadDecimal {
            field: field.to_owned(),
            value: quote(text),
        })
}

/// Round half away from zero (the rule people apply by hand, and what
/// "6 places" means to a GIS user), then strip trailing zeros so -74.500000
/// and -74.5 agree.
fn round(field: &str, text: &str, places: u32) -> Result<String, Invalid> {
    parse_decimal(text, true)
        .map(|value| {
            value
                .round_dp_with_strategy(
                    places.min(MAX_ROUND_PLACES),
                    RoundingStrategy::MidpointAwayFromZero,
                )
                .normalize()
                .to_string()
        })
        .ok_or_else(|| Invalid::BadDecimal {
            field: field.to_owned(),
            value: quote(text),
        })
}

/// A decimal in its JSON text: sign, digits (no leading or trailing zeros;
/// empty for zero) and a power of ten, so value = ±digits × 10^exponent.
#[derive(Debug, PartialEq)]
struct DecimalText {
    negative: bool,
    digits: String,
    exponent: i64,
}

/// Parse JSON number grammar, except that leading zeros are allowed (a
/// string amount "007.50" is still 7.5): `-?d+(.d+)?([eE][+-]?d+)?`.
/// Anything else (spaces, `+1`, `.5`, `1_000`, `NaN`) is refused rather
/// than guessed at, since rust_decimal's own parser is more lenient.
fn parse_text(text: &str) -> Option<DecimalText> {
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
            let magnitude: i64 = magnitude.parse().ok()?;
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
/// `truncate_tiny` (for `round:N`) cuts digits past 28 decimal places toward
/// zero instead of refusing: with half-away-from-zero rounding to at most 27
/// places that cannot change the result, and at 28 places it is a fixed,
/// deterministic cut.
fn parse_decimal(text: &str, truncate_tiny: bool) -> Option<Decimal> {
    const MAX_SCALE: usize = 28;
    /// Digits of rust_decimal's largest value, 79228162514264337593543950335.
    const MAX_DIGITS: usize = 29;
    let parsed = parse_text(text)?;
    let mut digits: &str = &parsed.digits;
    if digits.is_empty() {
        return Some(Decimal::ZERO);
    }
    let sign = if parsed.negative { "-" } else { "" };
    let plain = if parsed.exponent >= 0 {
        let zeros = usize::try_from(parsed.exponent).ok()?;
        if digits.len().checked_add(zeros)? > MAX_DIGITS {
            return None;
        }
        format!("{sign}{digits}{}", "0".repeat(zeros))
    } else {
        let mut scale = usize::try_from(parsed.exponent.unsigned_abs()).ok()?;
        if scale > MAX_SCALE {
            if !truncate_tiny {
                return None;
            }
            let cut = scale - MAX_SCALE;
            if cut >= digits.len() {
                return Some(Decimal::ZERO);
            }
            digits = digits.get(..digits.len() - cut)?;
            scale = MAX_SCALE;
        }
        if digits.len() > scale {
            let (whole, fraction) = digits.split_at(digits.len() - scale);
            format!("{sign}{whole}.{fraction}")
        } else {
            format!("{sign}0.{}{digits}", "0".repeat(scale - digits.len()))
        }
    };
    Decimal::from_str_exact(&plain).ok()
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
