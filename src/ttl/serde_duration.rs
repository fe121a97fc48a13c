//! Serde helper for `Duration` fields written as human durations.
//!
//! Use it as `#[serde(with = "crate::ttl::serde_duration")]`. It reads
//! `"12h"`, `"9h20m"` or a non-negative integer number of seconds (what older
//! configs and Redis `EX` arguments use), and writes the compact string of
//! [`format_duration`](super::format_duration), so a config written back out
//! reads the way an operator would write it.
//!
//! Reading relies on a self-describing format (TOML, JSON, YAML): the value
//! may be a string or an integer, so the deserializer is asked what it holds.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Visitor};
use serde::{Deserializer, Serializer};

use super::duration::{format_duration, parse_duration};

/// Write the duration as a compact string such as `"9h20m"`.
pub fn serialize<S: Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&format_duration(*duration))
}

/// Read a duration string or a non-negative integer number of seconds.
pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    deserializer.deserialize_any(DurationVisitor)
}

struct DurationVisitor;

impl Visitor<'_> for DurationVisitor {
    type Value = Duration;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a duration such as \"12h\" or \"9h20m\", or a whole number of seconds")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Duration, E> {
        parse_duration(text).map_err(E::custom)
    }

    fn visit_u64<E: de::Error>(self, secs: u64) -> Result<Duration, E> {
        Ok(Duration::from_secs(secs))
    }

    fn visit_i64<E: de::Error>(self, secs: i64) -> Result<Duration, E> {
        u64::try_from(secs).map(Duration::from_secs).map_err(|_| {
            E::custom(format!(
                "negative duration `{secs}`: ttls and windows cannot be negative"
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde::{Deserialize, Serialize};

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Stream {
        #[serde(with = "crate::ttl::serde_duration")]
        ttl: Duration,
    }

    #[test]
    fn reads_strings_and_integer_seconds() {
        let from_text: Stream = toml::from_str(r#"ttl = "9h20m""#).unwrap();
        assert_eq!(from_text.ttl, Duration::from_secs(33_600));
        let from_int: Stream = toml::from_str("ttl = 900").unwrap();
        assert_eq!(from_int.ttl, Duration::from_secs(900));
        let from_json: Stream = serde_json::from_str(r#"{"ttl": 60}"#).unwrap();
        assert_eq!(from_json.ttl, Duration::from_secs(60));
    }

    #[test]
    fn refuses_negative_integers_bad_text_and_other_types() {
        let negative = toml::from_str::<Stream>("ttl = -5")
            .unwrap_err()
            .to_string();
        assert!(negative.contains("negative duration `-5`"), "{negative}");
        let unknown = toml::from_str::<Stream>(r#"ttl = "5x""#)
            .unwrap_err()
            .to_string();
        assert!(
            unknown.contains("unknown unit `x` in duration `5x`"),
            "{unknown}"
        );
        assert!(toml::from_str::<Stream>("ttl = 1.5").is_err());
        assert!(toml::from_str::<Stream>("ttl = true").is_err());
    }

    #[test]
    fn writes_the_compact_form() {
        let stream = Stream {
            ttl: Duration::from_secs(43_200),
        };
        assert_eq!(toml::to_string(&stream).unwrap().trim(), r#"ttl = "12h""#);
    }
}
