//! `--by-duration`'s ISO-8601 duration, exactly as Kafka's
//! `kafka-consumer-groups --reset-offsets --by-duration` takes it: Java's
//! `java.time.Duration.parse`, `[±]P[±nD][T[±nH][±nM][±n[.f]S]]`.
//!
//! Written here rather than taken from a crate: the ISO-8601 crates read
//! the whole standard (years, months, weeks), which Java's `Duration`
//! refuses, and none takes Java's signed fields; an operator's duration
//! must mean here what it means to Kafka's tool, no more and no less. The
//! durations of idemgate's config (`9h20m`) are another syntax (`ttl`).

/// A signed duration in nanoseconds, as Java's `Duration` holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KafkaDuration {
    pub nanos: i128,
}

/// A `--by-duration` Kafka's tool would refuse too.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("`{text}` is not an ISO-8601 duration such as PT1H30M or P1DT12H ({problem})")]
    NotIso8601 { text: String, problem: Problem },
    #[error("out of range of a timestamp")]
    OutOfRange,
}

/// What is wrong with a duration's text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    #[error("it must start with P")]
    NoP,
    #[error("too large")]
    TooLarge,
    #[error("days")]
    Days,
    #[error("hours or minutes")]
    HoursOrMinutes,
    #[error("seconds")]
    Seconds,
    #[error("T must be followed by hours, minutes or seconds")]
    EmptyTime,
    #[error("`{0}` is left over")]
    LeftOver(String),
    #[error("no days, hours, minutes or seconds")]
    Nothing,
}

/// Java's `Duration` holds seconds in a `long`.
const MAX_SECONDS: i128 = i64::MAX as i128;

impl KafkaDuration {
    /// Parses `text` as Java's `Duration.parse` does (letters in either
    /// case, `.` or `,` before up to nine fraction digits of the seconds,
    /// a sign on the whole and on each field); refuses what it refuses.
    pub fn parse(text: &str) -> Result<KafkaDuration, DurationError> {
        let bad = |problem: Problem| DurationError::NotIso8601 {
            text: text.to_string(),
            problem,
        };
        let mut rest = text;
        let negated = take_sign(&mut rest);
        rest = rest
            .strip_prefix(['P', 'p'])
            .ok_or_else(|| bad(Problem::NoP))?;
        let mut total: i128 = 0;
        let mut any = false;
        let mut add = |amount: i128, unit: i128| -> Result<(), DurationError> {
            let nanos = amount
                .checked_mul(unit)
                .and_then(|n| total.checked_add(n))
                .filter(|n| (n / 1_000_000_000).abs() <= MAX_SECONDS)
                .ok_or_else(|| bad(Problem::TooLarge))?;
            total = nanos;
            Ok(())
        };
        if let Some((days, after)) = field(rest, &['D', 'd']) {
            add(
                number(days).ok_or_else(|| bad(Problem::Days))?,
                86_400 * NANOS,
            )?;
            rest = after;
            any = true;
        }
        if let Some(time) = rest.strip_prefix(['T', 't']) {
            rest = time;
            let mut in_time = false;
            for (letters, unit) in [(['H', 'h'], 3_600 * NANOS), (['M', 'm'], 60 * NANOS)] {
                if let Some((amount, after)) = field(rest, &letters) {
                    add(
                        number(amount).ok_or_else(|| bad(Problem::HoursOrMinutes))?,
                        unit,
                    )?;
                    rest = after;
                    in_time = true;
                }
            }
            if let Some((seconds, after)) = field(rest, &['S', 's']) {
                add(
                    self::seconds(seconds).ok_or_else(|| bad(Problem::Seconds))?,
                    1,
                )?;
                rest = after;
                in_time = true;
            }
            if !in_time {
                return Err(bad(Problem::EmptyTime));
            }
            any = true;
        }
        if !rest.is_empty() {
            return Err(bad(Problem::LeftOver(rest.to_string())));
        }
        if !any {
            return Err(bad(Problem::Nothing));
        }
        Ok(KafkaDuration {
            nanos: if negated { -total } else { total },
        })
    }

    /// The instant this long before `now_ms` (ms since the epoch), rounded
    /// down to the millisecond, as Kafka's tool computes
    /// `now.minus(duration).toEpochMilli()`.
    pub fn before(self, now_ms: i64) -> Result<i64, DurationError> {
        let at = i128::from(now_ms) * 1_000_000 - self.nanos;
        i64::try_from(at.div_euclid(1_000_000)).map_err(|_| DurationError::OutOfRange)
    }
}

const NANOS: i128 = 1_000_000_000;

/// A leading `+` or `-`, taken off; true for `-`.
fn take_sign(text: &mut &str) -> bool {
    match text.as_bytes().first() {
        Some(b'-') => {
            *text = &text[1..];
            true
        }
        Some(b'+') => {
            *text = &text[1..];
            false
        }
        _ => false,
    }
}

/// The text before the first of `letters`, if what precedes it could be
/// this field's amount (a sign, digits, a fraction): `("12", rest)`.
fn field<'a>(text: &'a str, letters: &[char]) -> Option<(&'a str, &'a str)> {
    let end = text.find(|c: char| !(c.is_ascii_digit() || "+-.,".contains(c)))?;
    let letter = text[end..].chars().next()?;
    letters
        .contains(&letter)
        .then(|| (&text[..end], &text[end + letter.len_utf8()..]))
}

/// `[±]digits`, as a whole number.
fn number(text: &str) -> Option<i128> {
    let mut rest = text;
    let negative = take_sign(&mut rest);
    if rest.is_empty() || !rest.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let value: i128 = rest.parse().ok()?;
    Some(if negative { -value } else { value })
}

/// `[±]digits[(.|,)0-9 fraction digits]`, in nanoseconds; the fraction
/// takes the seconds' sign.
fn seconds(text: &str) -> Option<i128> {
    let (whole, fraction) = match text.find(['.', ',']) {
        Some(at) => (&text[..at], Some(&text[at + 1..])),
        None => (text, None),
    };
    let value = number(whole)?;
    let mut nanos = value.checked_mul(NANOS)?;
    if let Some(fraction) = fraction {
        if fraction.len() > 9 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let digits: i128 = format!("{fraction:0<9}").parse().ok()?;
        nanos += if whole.starts_with('-') {
            -digits
        } else {
            digits
        };
    }
    Some(nanos)
}

#[cfg(test)]
mod tests {
    use super::KafkaDuration;

    fn seconds(text: &str) -> f64 {
        let parsed = KafkaDuration::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        parsed.nanos as f64 / 1e9
    }

    /// What Java's `Duration.parse` answers for these (its documented
    /// examples among them).
    #[test]
    fn parses_what_javas_duration_parse_accepts_to_the_same_length() {
        assert_eq!(seconds("PT20.345S"), 20.345);
        assert_eq!(seconds("PT15M"), 900.0);
        assert_eq!(seconds("PT10H"), 36_000.0);
        assert_eq!(seconds("P2D"), 172_800.0);
        assert_eq!(seconds("P2DT3H4M"), 183_840.0);
        assert_eq!(seconds("PT-6H3M"), -21_420.0);
        assert_eq!(seconds("-PT6H3M"), -21_780.0);
        assert_eq!(seconds("-PT-6H+3M"), 21_420.0);
        assert_eq!(seconds("pt1h"), 3_600.0);
        assert_eq!(seconds("PT0,5S"), 0.5);
        assert_eq!(seconds("PT-0.5S"), -0.5);
        assert_eq!(seconds("PT1.S"), 1.0);
        assert_eq!(seconds("P0D"), 0.0);
        assert_eq!(seconds("PT0.000000001S"), 1e-9);
    }

    #[test]
    fn refuses_what_javas_duration_parse_refuses_with_an_example() {
        for bad in [
            "",
            "P",
            "PT",
            "1H",
            "PT1",
            "P1Y",
            "P1M",
            "P1W",
            "PT1H1D",
            "P1DT",
            "PT.5S",
            "PT1.0000000001S",
            "PT1H ",
            " PT1H",
            "PT1M1H",
            "PT1S1M",
            "P1D1D",
            "PTH",
            "P9999999999999999999D",
            "PT1.5M",
        ] {
            let error = KafkaDuration::parse(bad).expect_err(bad).to_string();
            assert!(error.contains("ISO-8601"), "{bad}: {error}");
        }
    }

    #[test]
    fn the_instant_before_now_rounds_down_to_the_millisecond_as_kafka_does() {
        let now = 1_772_355_600_000;
        let hour = KafkaDuration::parse("PT1H").unwrap();
        assert_eq!(hour.before(now), Ok(now - 3_600_000));
        // Instant.toEpochMilli floors: 0.5 ms earlier is the millisecond before.
        let half = KafkaDuration::parse("PT0.0005S").unwrap();
        assert_eq!(half.before(now), Ok(now - 1));
        let ahead = KafkaDuration::parse("-PT1S").unwrap();
        assert_eq!(ahead.before(now), Ok(now + 1_000));
    }
}
