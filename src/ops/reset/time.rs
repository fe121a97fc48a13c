//! `idemgate reset --to-time`: RFC 3339, or the format of Kafka's
//! `kafka-consumer-groups --reset-offsets --to-datetime`, so that an
//! operator's datetime works with either tool.
//!
//! Kafka's format is `YYYY-MM-DDTHH:mm:SS.sss` (the milliseconds
//! required) with an optional zone: `Z`, `+HH`, `+HHMM` or `+HH:MM` (or
//! `-`). Without a zone Kafka reads it as UTC, not local time: its
//! `Utils.getDateTime` appends `Z` to a value whose time part has no `+`,
//! `-` or `Z`, then parses `yyyy-MM-dd'T'HH:mm:ss.SSSXXX` (or `...SSSX`).
//! idemgate does the same: the same text names the same instant in both
//! tools, whatever the zone of the machine each runs on (checked against
//! Kafka 4.4's `Utils.getDateTime` in a JVM set to Asia/Tokyo).
//!
//! One difference, on a value Kafka's documentation does not allow: a
//! fraction of other than three digits with a zone (`09:00:00.25Z`) is
//! RFC 3339 here, 250 ms, where Java's `SSS` reads the digits as a count
//! of milliseconds, 25.

use time::format_description::well_known::Rfc3339;
use time::macros::format_description;
use time::{OffsetDateTime, PrimitiveDateTime, UtcOffset};

/// A `--to-time` that is neither form, with both forms and an example of
/// each (the hint).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{0}` is not a time: give RFC 3339 (2026-03-01T09:00:00Z, 2026-03-01T10:00:00+01:00) or \
     Kafka's --to-datetime format YYYY-MM-DDTHH:mm:SS.sss with an optional zone \
     (2026-03-01T10:00:00.000+01:00; 2026-03-01T09:00:00.000 is UTC, as Kafka reads it)"
)]
pub struct TimeError(pub String);

/// Milliseconds since the epoch of a `--to-time` value.
pub fn parse_time(text: &str) -> Result<i64, TimeError> {
    let at = OffsetDateTime::parse(text, &Rfc3339)
        .ok()
        .or_else(|| kafka_datetime(text))
        .ok_or_else(|| TimeError(text.to_string()))?;
    Ok(at.unix_timestamp() * 1_000 + i64::from(at.millisecond()))
}

/// Kafka's `--to-datetime`: `YYYY-MM-DDTHH:mm:SS.sss` then a zone or none
/// (UTC).
fn kafka_datetime(text: &str) -> Option<OffsetDateTime> {
    const LOCAL_LEN: usize = "YYYY-MM-DDTHH:mm:SS.sss".len();
    let (local, zone) = (text.get(..LOCAL_LEN)?, text.get(LOCAL_LEN..)?);
    let local = PrimitiveDateTime::parse(
        local,
        format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]"),
    )
    .ok()?;
    Some(local.assume_offset(zone_offset(zone)?))
}

/// `""` and `Z` are UTC; `±HH`, `±HHMM`, `±HH:MM` (Java's `X`, `XX`,
/// `XXX` patterns).
fn zone_offset(zone: &str) -> Option<UtcOffset> {
    if zone.is_empty() || zone == "Z" {
        return Some(UtcOffset::UTC);
    }
    if !zone.is_ascii() {
        return None;
    }
    let (sign, rest) = match zone.split_at(1) {
        ("+", rest) => (1, rest),
        ("-", rest) => (-1, rest),
        _ => return None,
    };
    let (hours, minutes) = match rest.len() {
        2 => (rest, "00"),
        4 => rest.split_at(2),
        5 if rest.as_bytes()[2] == b':' => (&rest[..2], &rest[3..]),
        _ => return None,
    };
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if !digits(hours) || !digits(minutes) {
        return None;
    }
    let (hours, minutes): (i8, i8) = (hours.parse().ok()?, minutes.parse().ok()?);
    if hours > 23 || minutes > 59 {
        return None;
    }
    UtcOffset::from_hms(sign * hours, sign * minutes, 0).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-03-01T09:00:00Z.
    const NINE: i64 = 1_772_355_600_000;

    #[test]
    fn rfc_3339_and_kafkas_datetime_name_the_same_instant() {
        for text in [
            "2026-03-01T09:00:00Z",
            "2026-03-01T10:00:00+01:00",
            "2026-03-01T04:00:00-05:00",
            "2026-03-01T09:00:00.000Z",
            // Kafka's forms: no zone is UTC, as Kafka reads it.
            "2026-03-01T09:00:00.000",
            "2026-03-01T10:00:00.000+01",
            "2026-03-01T10:00:00.000+0100",
            "2026-03-01T10:00:00.000+01:00",
            "2026-03-01T04:00:00.000-05:00",
            "2026-03-01T14:30:00.000+05:30",
        ] {
            assert_eq!(parse_time(text), Ok(NINE), "{text}");
        }
        assert_eq!(parse_time("2026-03-01T09:00:00.250"), Ok(NINE + 250));
        // RFC 3339's fraction (Kafka's tool would read 25 ms).
        assert_eq!(parse_time("2026-03-01T09:00:00.25Z"), Ok(NINE + 250));
    }

    #[test]
    fn anything_else_is_refused_with_both_forms_and_an_example() {
        for text in [
            "yesterday",
            "",
            "2026-03-01",
            // Kafka requires the milliseconds; RFC 3339 a zone.
            "2026-03-01T09:00:00",
            "2026-03-01T09:00:00.5",
            "2026-03-01 09:00:00.000",
            "2026-03-01T09:00:00.000+1",
            "2026-03-01T09:00:00.000+01:0",
            "2026-03-01T09:00:00.000+24:00",
            "2026-03-01T09:00:00.000 UTC",
            "2026-13-01T09:00:00.000",
            "2026-03-01T09:00:00.000+0a",
            "2026-03-01T09:00:00.000+aé0",
        ] {
            let error = parse_time(text).unwrap_err().to_string();
            assert!(
                error.starts_with(&format!("`{text}` is not a time")),
                "{error}"
            );
            for hint in [
                "RFC 3339",
                "2026-03-01T09:00:00Z",
                "YYYY-MM-DDTHH:mm:SS.sss",
                "2026-03-01T10:00:00.000+01:00",
                "2026-03-01T09:00:00.000 is UTC",
            ] {
                assert!(error.contains(hint), "{text}: {error} lacks {hint}");
            }
        }
    }
}
