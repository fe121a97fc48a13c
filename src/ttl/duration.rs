//! Durations as operators write them in config files, CLI flags and logs.
//!
//! The grammar is deliberately small: one or more `<digits><unit>`
//! components, largest unit first, each unit at most once, with the units
//! `d`, `h`, `m`, `s`, `ms`, `us` (or `µs`) and `ns`. A bare integer alone is
//! seconds, because that is what every Redis `EX` argument and most existing
//! configs mean. There are no signs and no fractions: a TTL that could be
//! negative or a "1.5h" that could be read two ways is a TTL nobody can audit,
//! so "1h30m" is the one spelling. Repeated or out-of-order units ("1h1h",
//! "30m1h") are refused too: they are far more often a typo than an intent.
//!
//! [`format_duration`] writes the same grammar back, so anything it prints can
//! be pasted into a config file and means the same duration; [`format_years`]
//! adds, for people only, a long retention's length in years.
//!
//! Why this is not a crate: `humantime` (2.4, the usual choice) was checked
//! against this grammar. It reads every form above except the bare number,
//! but it also reads `5M` as five months of 30.44 days beside `5m` as five
//! minutes (a shifted key changes a TTL 43,830-fold), takes repeated and
//! out-of-order units (`1h1h`, `30m1h`), fractions and inner spaces, all of
//! which this grammar refuses as likely typos; it panics instead of refusing
//! one overflowing text (`18446744073709551615s1000ms`: an off-by-one in its
//! carry, humantime issue #66, open), and a config value must never crash
//! the process. Its formatter writes `9h 20m` and `1month 9days ...`, not
//! what a config file holds, so [`format_duration`] would stay here anyway.
//! `jiff`'s friendly format keeps unit order but refuses days (`2d`) in a
//! plain duration. Making either crate keep this grammar would take a
//! wrapper as long as the parser below.

use std::time::Duration;

/// Why a duration text was refused. Every variant carries the text as the
/// operator wrote it, so a config error points at the value to fix.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error(
        "empty duration `{text}`: write e.g. \"900s\", \"9h20m\" or a whole number of seconds"
    )]
    Empty { text: String },
    #[error("negative duration `{text}`: ttls and windows cannot be negative")]
    Negative { text: String },
    #[error("unknown unit `{unit}` in duration `{text}`: use d, h, m, s, ms, us or ns")]
    UnknownUnit { text: String, unit: String },
    #[error("number missing before `{unit}` in duration `{text}`")]
    MissingNumber { text: String, unit: String },
    #[error("number without a unit at the end of duration `{text}`: only a bare number on its own means seconds")]
    MissingUnit { text: String },
    #[error("unexpected `{found}` in duration `{text}`: write whole numbers with units, e.g. \"1h30m\" rather than \"1.5h\" or \"1h 30m\"")]
    UnexpectedChar { text: String, found: char },
    #[error("unit `{unit}` repeated or out of order in duration `{text}`: write each unit once, largest first, e.g. \"1h30m\"")]
    UnitOrder { text: String, unit: String },
    #[error("duration `{text}` is too large")]
    Overflow { text: String },
}

/// The units of the grammar, declared largest first so that the derived
/// ordering is the order components must appear in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Unit {
    Day,
    Hour,
    Minute,
    Second,
    Milli,
    Micro,
    Nano,
}

impl Unit {
    fn from_suffix(suffix: &str) -> Option<Unit> {
        Some(match suffix {
            "d" => Unit::Day,
            "h" => Unit::Hour,
            "m" => Unit::Minute,
            "s" => Unit::Second,
            "ms" => Unit::Milli,
            "us" | "µs" => Unit::Micro,
            "ns" => Unit::Nano,
            _ => return None,
        })
    }

    /// `count` of this unit, or `None` when it does not fit a `Duration`.
    fn times(self, count: u64) -> Option<Duration> {
        let secs = |per: u64| count.checked_mul(per).map(Duration::from_secs);
        match self {
            Unit::Day => secs(86_400),
            Unit::Hour => secs(3_600),
            Unit::Minute => secs(60),
            Unit::Second => Some(Duration::from_secs(count)),
            Unit::Milli => Some(Duration::from_millis(count)),
            Unit::Micro => Some(Duration::from_micros(count)),
            Unit::Nano => Some(Duration::from_nanos(count)),
        }
    }
}

/// Parse a human duration such as `"900s"`, `"9h20m"`, `"1500ms"`, `"2d"` or
/// `"1h30m15s"`; a bare integer is seconds. Surrounding whitespace is
/// ignored. Empty, negative, fractional, unknown-unit and overflowing texts
/// are refused with a [`DurationError`] naming the text.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let owned = || text.to_owned();
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(DurationError::Empty { text: owned() });
    }
    if trimmed.starts_with('-') {
        return Err(DurationError::Negative { text: owned() });
    }

    let mut rest = trimmed;
    let mut total = Duration::ZERO;
    let mut previous: Option<Unit> = None;
    while !rest.is_empty() {
        let digits_end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (digits, after_digits) = rest.split_at(digits_end);
        let suffix_end = after_digits
            .find(|c: char| !c.is_alphabetic())
            .unwrap_or(after_digits.len());
        let (suffix, after_suffix) = after_digits.split_at(suffix_end);

        if let Some(found) = after_digits.chars().next().filter(|_| suffix.is_empty()) {
            return Err(DurationError::UnexpectedChar {
                text: owned(),
                found,
            });
        }
        if digits.is_empty() {
            return Err(DurationError::MissingNumber {
                text: owned(),
                unit: suffix.to_owned(),
            });
        }
        let unit = if suffix.is_empty() {
            // Only reached at the end of the text: "90" is seconds, but in
            // "1h30" the bare number is ambiguous (minutes? seconds?).
            if previous.is_some() {
                return Err(DurationError::MissingUnit { text: owned() });
            }
            Unit::Second
        } else {
            Unit::from_suffix(suffix).ok_or_else(|| DurationError::UnknownUnit {
                text: owned(),
                unit: suffix.to_owned(),
            })?
        };
        if previous.is_some_and(|previous| unit <= previous) {
            return Err(DurationError::UnitOrder {
                text: owned(),
                unit: suffix.to_owned(),
            });
        }
        // `digits` is non-empty ASCII digits, so the only failure is overflow.
        let part = digits
            .parse::<u64>()
            .ok()
            .and_then(|count| unit.times(count))
            .and_then(|part| total.checked_add(part))
            .ok_or_else(|| DurationError::Overflow { text: owned() })?;
        total = part;
        previous = Some(unit);
        rest = after_suffix;
    }
    Ok(total)
}

/// Format a duration compactly for logs, CLI output and config files:
/// `"9h20m"`, `"15m"`, `"1500ms"`, `"0s"`.
///
/// Days, hours and minutes are written as components; the seconds and any
/// sub-second part are written together in the coarsest unit that keeps them
/// exact, so 1.5 s reads `"1500ms"` rather than `"1s500ms"`. The result always
/// parses back to the same duration with [`parse_duration`].
pub fn format_duration(d: Duration) -> String {
    let secs = d.as_secs();
    let nanos = u64::from(d.subsec_nanos());
    let mut out = String::new();
    for (count, unit) in [
        (secs / 86_400, "d"),
        (secs / 3_600 % 24, "h"),
        (secs / 60 % 60, "m"),
    ] {
        if count > 0 {
            out.push_str(&count.to_string());
            out.push_str(unit);
        }
    }
    let seconds = secs % 60;
    let (count, unit) = if nanos == 0 {
        (seconds, "s")
    } else if nanos % 1_000_000 == 0 {
        (seconds * 1_000 + nanos / 1_000_000, "ms")
    } else if nanos % 1_000 == 0 {
        (seconds * 1_000_000 + nanos / 1_000, "us")
    } else {
        (seconds * 1_000_000_000 + nanos, "ns")
    };
    if count > 0 || out.is_empty() {
        out.push_str(&count.to_string());
        out.push_str(unit);
    }
    out
}

/// A duration of a year or more in Julian years of 365.25 days, the years
/// `ttl = { retention_years = N }` counts in: `"7y"` for 7 x 365.25 days,
/// `"~1.1y"` for 400 days; `None` under a year. For people reading a
/// retention beside [`format_duration`]'s `2556d18h`, never for a config:
/// `y` is no unit of the grammar, so nothing pastes it back.
pub fn format_years(d: Duration) -> Option<String> {
    let year = super::policy::SECONDS_PER_YEAR;
    let secs = d.as_secs();
    if secs < year {
        return None;
    }
    Some(if secs.is_multiple_of(year) && d.subsec_nanos() == 0 {
        format!("{}y", secs / year)
    } else {
        format!("~{:.1}y", d.as_secs_f64() / year as f64)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn every_documented_form_parses() {
        assert_eq!(parse_duration("900s"), Ok(secs(900)));
        assert_eq!(parse_duration("9h20m"), Ok(secs(9 * 3_600 + 20 * 60)));
        assert_eq!(parse_duration("1h"), Ok(secs(3_600)));
        assert_eq!(parse_duration("30m"), Ok(secs(1_800)));
        assert_eq!(parse_duration("1500ms"), Ok(Duration::from_millis(1_500)));
        assert_eq!(parse_duration("2d"), Ok(secs(2 * 86_400)));
        assert_eq!(parse_duration("1h30m15s"), Ok(secs(5_415)));
        assert_eq!(parse_duration("90"), Ok(secs(90)));
        assert_eq!(parse_duration(" 12h "), Ok(secs(43_200)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("5us"), Ok(Duration::from_micros(5)));
        assert_eq!(parse_duration("5µs"), Ok(Duration::from_micros(5)));
        assert_eq!(parse_duration("7ns"), Ok(Duration::from_nanos(7)));
    }

    #[test]
    fn refusals_name_the_text_and_the_reason() {
        let err = |text: &str| parse_duration(text).unwrap_err();
        assert!(matches!(err(""), DurationError::Empty { .. }));
        assert!(matches!(err("   "), DurationError::Empty { .. }));
        assert!(matches!(err("-5s"), DurationError::Negative { .. }));
        assert_eq!(
            err("5x"),
            DurationError::UnknownUnit {
                text: "5x".into(),
                unit: "x".into()
            }
        );
        assert!(matches!(err("5H"), DurationError::UnknownUnit { .. }));
        // Not months, weeks or years: `5M` beside `5m` is a shifted key.
        for text in ["5M", "1w", "1y", "90min", "1hour"] {
            assert!(
                matches!(err(text), DurationError::UnknownUnit { .. }),
                "{text}"
            );
        }
        assert!(matches!(err("h"), DurationError::MissingNumber { .. }));
        assert!(matches!(err("1h30"), DurationError::MissingUnit { .. }));
        assert!(matches!(
            err("1.5h"),
            DurationError::UnexpectedChar { found: '.', .. }
        ));
        assert!(matches!(
            err("1h 30m"),
            DurationError::UnexpectedChar { found: ' ', .. }
        ));
        assert!(matches!(err("+5s"), DurationError::UnexpectedChar { .. }));
        assert!(matches!(err("1h1h"), DurationError::UnitOrder { .. }));
        assert!(matches!(err("30m1h"), DurationError::UnitOrder { .. }));
        assert!(matches!(
            err("99999999999999999999s"),
            DurationError::Overflow { .. }
        ));
        assert!(matches!(
            err("213503982334602d"),
            DurationError::Overflow { .. }
        ));
        assert!(matches!(
            err(&format!("{}s1000ms", u64::MAX)),
            DurationError::Overflow { .. }
        ));
    }

    #[test]
    fn messages_are_lowercase_quote_the_text_and_have_no_trailing_period() {
        for text in [
            "",
            "-5s",
            "5x",
            "h",
            "1h30",
            "1.5h",
            "1h1h",
            "99999999999999999999",
        ] {
            let message = parse_duration(text).unwrap_err().to_string();
            assert!(message.contains(&format!("`{text}`")), "{message}");
            assert!(!message.ends_with('.'), "{message}");
            assert!(message.starts_with(char::is_lowercase), "{message}");
        }
    }

    #[test]
    fn formatting_is_compact_and_exact() {
        assert_eq!(format_duration(Duration::ZERO), "0s");
        assert_eq!(format_duration(secs(33_600)), "9h20m");
        assert_eq!(format_duration(secs(900)), "15m");
        assert_eq!(format_duration(secs(59)), "59s");
        assert_eq!(format_duration(Duration::from_millis(1_500)), "1500ms");
        assert_eq!(format_duration(secs(2 * 86_400 + 1)), "2d1s");
        assert_eq!(format_duration(secs(5_415)), "1h30m15s");
        assert_eq!(format_duration(Duration::from_millis(60_500)), "1m500ms");
        assert_eq!(format_duration(Duration::from_micros(1_001)), "1001us");
        assert_eq!(format_duration(Duration::from_nanos(1)), "1ns");
    }

    #[test]
    fn seven_retention_years_read_as_seven_years_beside_their_days() {
        // `ttl --retention-years 7`: 7 x 365.25 days.
        let seven = secs(7 * 31_557_600);
        assert_eq!(format_duration(seven), "2556d18h");
        assert_eq!(format_years(seven).as_deref(), Some("7y"));
        assert_eq!(format_years(secs(31_557_600)).as_deref(), Some("1y"));
        assert_eq!(format_years(secs(400 * 86_400)).as_deref(), Some("~1.1y"));
        assert_eq!(format_years(secs(365 * 86_400)), None);
        assert_eq!(format_years(secs(43_200)), None);
    }

    #[test]
    fn the_largest_duration_formats_and_parses_back() {
        assert_eq!(
            parse_duration(&format_duration(Duration::MAX)),
            Ok(Duration::MAX)
        );
    }
}
