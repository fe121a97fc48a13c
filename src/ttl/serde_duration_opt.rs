//! Serde helper for `Option<Duration>` fields, the optional twin of
//! [`serde_duration`](super::serde_duration).
//!
//! Use it as
//! `#[serde(default, with = "crate::ttl::serde_duration_opt", skip_serializing_if = "Option::is_none")]`:
//! serde does not treat a `with` field as optional on its own, so without
//! `default` a missing key is an error rather than `None`, and TOML has no
//! null to write for `None`.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Visitor};
use serde::{Deserializer, Serializer};

use super::duration::format_duration;

/// Write `Some` as a compact duration string and `None` as the format's none.
pub fn serialize<S: Serializer>(
    duration: &Option<Duration>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match duration {
        Some(duration) => serializer.serialize_some(&format_duration(*duration)),
        None => serializer.serialize_none(),
    }
}

/// Read an absent/null value as `None`, anything else as
/// [`serde_duration`](super::serde_duration) reads it.
pub fn deserialize<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Duration>, D::Error> {
    deserializer.deserialize_option(OptionVisitor)
}

struct OptionVisitor;

impl<'de> Visitor<'de> for OptionVisitor {
    type Value = Option<Duration>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an optional duration such as \"12h\", or a whole number of seconds")
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        super::serde_duration::deserialize(deserializer).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde::{Deserialize, Serialize};

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Stream {
        #[serde(
            default,
            with = "crate::ttl::serde_duration_opt",
            skip_serializing_if = "Option::is_none"
        )]
        lease: Option<Duration>,
    }

    #[test]
    fn a_missing_or_null_value_is_none() {
        assert_eq!(toml::from_str::<Stream>("").unwrap().lease, None);
        let null: Stream = serde_json::from_str(r#"{"lease": null}"#).unwrap();
        assert_eq!(null.lease, None);
    }

    #[test]
    fn a_present_value_reads_like_a_plain_duration() {
        let text: Stream = toml::from_str(r#"lease = "30s""#).unwrap();
        assert_eq!(text.lease, Some(Duration::from_secs(30)));
        let int: Stream = toml::from_str("lease = 30").unwrap();
        assert_eq!(int.lease, Some(Duration::from_secs(30)));
        assert!(toml::from_str::<Stream>(r#"lease = "-1s""#).is_err());
    }

    #[test]
    fn round_trips_through_toml_and_json() {
        for lease in [None, Some(Duration::from_millis(1_500))] {
            let stream = Stream { lease };
            let toml_text = toml::to_string(&stream).unwrap();
            assert_eq!(toml::from_str::<Stream>(&toml_text).unwrap(), stream);
            let json_text = serde_json::to_string(&stream).unwrap();
            assert_eq!(serde_json::from_str::<Stream>(&json_text).unwrap(), stream);
        }
    }
}
