//! Decisions (docs/design.md §2): what happens to a record, where it goes, and
//! the headers that say why. Pure functions over plain data.

use crate::coordinates::Coordinates;
use crate::fingerprint::{Invalid, SourceHash};
use crate::tier::Tier;

/// The one decision a record gets, carried on its output.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Decision {
    /// This record won the claim.
    Novel,
    /// Another record's claim on the hash is done.
    Duplicate {
        tier: Tier,
        first_seen: Option<Coordinates>,
    },
    /// Same idempotency key, different payload digest.
    Conflict { first_seen: Coordinates },
    /// No hash can be computed.
    Invalid(Invalid),
    /// The broker (or the producer) refused the record's output for its
    /// size or content: decided `invalid` (reason `undeliverable`) after
    /// its claim, and sent to audit with less of its input.
    Undeliverable(Refused),
    /// The store is unreachable and the stream fails open.
    Unverified,
}

impl Decision {
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Decision::Novel => "novel",
            Decision::Duplicate { .. } => "duplicate",
            Decision::Conflict { .. } => "conflict",
            Decision::Invalid(_) | Decision::Undeliverable(_) => "invalid",
            Decision::Unverified => "unverified",
        }
    }

    pub(crate) fn route(&self) -> Route {
        match self {
            Decision::Novel | Decision::Unverified => Route::Clean,
            Decision::Duplicate { .. }
            | Decision::Conflict { .. }
            | Decision::Invalid(_)
            | Decision::Undeliverable(_) => Route::Audit,
        }
    }

    /// The route on a stream: a `shadow = true` stream sends every output
    /// to clean, its decision headers saying what it would have done.
    pub(crate) fn route_on(&self, shadow: bool) -> Route {
        if shadow {
            Route::Clean
        } else {
            self.route()
        }
    }
}

/// An output the broker refused, and what its next attempt leaves out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Refused {
    /// The bytes of input the refused output carried.
    pub(crate) bytes: usize,
    /// What the broker or the producer said.
    pub(crate) reason: String,
    /// The input's key and headers are dropped too (its payload was
    /// refused already), not only its payload.
    pub(crate) bare: bool,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "output of {} bytes refused: {}", self.bytes, self.reason)
    }
}

/// Where an output goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    Clean,
    Audit,
}

pub const DECISION: &str = "idemgate-decision";
pub const SOURCE_HASH: &str = "idemgate-source-hash";
pub const TIER: &str = "idemgate-tier";
pub const FIRST_SEEN: &str = "idemgate-first-seen";
pub const REASON: &str = "idemgate-reason";
/// On a record produced again by a replay the operator asked to re-emit
/// (`idemgate reset --re-emit`), value `true`.
pub const REPLAY: &str = "idemgate-replay";
/// On every output, clean and audit alike: the input's own
/// `topic/partition/offset`, so a consumer can drop a repeat of the same
/// input itself, and `idemgate rebuild` can tell where a clean record came
/// from.
pub const INPUT: &str = "idemgate-input";
/// On every output: when its record was decided, in milliseconds since the
/// epoch (its claim's time). `idemgate rebuild` dates a claim by it: the
/// input's timestamp, which the output keeps, may be far older (a batch
/// re-sent from a file keeps its CreateTime).
pub const DECIDED_AT: &str = "idemgate-decided-at";

/// A decision header's value: most are fixed texts or the hash, written
/// without a heap allocation (the novel path writes two such headers per
/// record); the rest are formatted.
#[derive(Clone, Debug)]
pub(crate) enum Value {
    Static(&'static str),
    Hex([u8; 64]),
    Text(String),
}

impl Value {
    pub(crate) fn as_bytes(&self) -> &[u8] {
        match self {
            Value::Static(text) => text.as_bytes(),
            Value::Hex(hex) => hex,
            Value::Text(text) => text.as_bytes(),
        }
    }

    fn hash(hash: &SourceHash) -> Value {
        let mut out = [0u8; 64];
        // 32 bytes always fit 64 hex digits.
        let _ = hex::encode_to_slice(hash.0, &mut out);
        Value::Hex(out)
    }
}

/// The headers of one output, in order (at most six).
pub(crate) struct Headers {
    entries: [Option<(&'static str, Value)>; 6],
}

impl Headers {
    /// Marks a record produced again by a re-emitting replay.
    pub(crate) fn mark_replay(&mut self) {
        self.push(REPLAY, Value::Static("true"));
    }

    fn push(&mut self, name: &'static str, value: Value) {
        if let Some(slot) = self.entries.iter_mut().find(|e| e.is_none()) {
            *slot = Some((name, value));
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&'static str, &[u8])> {
        self.entries
            .iter()
            .flatten()
            .map(|(name, value)| (*name, value.as_bytes()))
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.iter().flatten().count()
    }
}

/// The headers written on an output, beside the record's own. `topic_name`
/// turns a stored topic tag back into a name.
pub(crate) fn headers(
    decision: &Decision,
    hash: Option<&SourceHash>,
    topic_name: &dyn Fn(&Coordinates) -> String,
) -> Headers {
    let mut out = Headers {
        entries: Default::default(),
    };
    out.push(DECISION, Value::Static(decision.label()));
    if let Some(hash) = hash {
        out.push(SOURCE_HASH, Value::hash(hash));
    }
    let first_seen =
        |c: &Coordinates| Value::Text(format!("{}/{}/{}", topic_name(c), c.partition, c.offset));
    match decision {
        Decision::Novel => {}
        Decision::Duplicate {
            tier,
            first_seen: holder,
        } => {
            out.push(TIER, Value::Static(tier.as_str()));
            match holder {
                Some(holder) => {
                    out.push(FIRST_SEEN, first_seen(holder));
                    out.push(REASON, Value::Static("hash already claimed and delivered"));
                }
                None => out.push(
                    REASON,
                    Value::Static(
                        "hash found in the long-tail filter (false-positive rate applies)",
                    ),
                ),
            }
        }
        Decision::Conflict { first_seen: holder } => {
            out.push(TIER, Value::Static(Tier::Exact.as_str()));
            out.push(FIRST_SEEN, first_seen(holder));
            out.push(
                REASON,
                Value::Static("idempotency key reused with a different payload"),
            );
        }
        Decision::Invalid(invalid) => {
            out.push(
                REASON,
                Value::Text(format!("{}: {invalid}", invalid.code())),
            );
        }
        Decision::Undeliverable(refused) => {
            out.push(REASON, Value::Text(format!("undeliverable: {refused}")));
        }
        Decision::Unverified => {
            out.push(
                REASON,
                Value::Static("claim store unreachable, stream fails open"),
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coordinates::TopicTag;

    fn texts(headers: &Headers) -> Vec<(&'static str, String)> {
        headers
            .iter()
            .map(|(k, v)| (k, String::from_utf8(v.to_vec()).unwrap()))
            .collect()
    }

    fn coords() -> Coordinates {
        Coordinates {
            topic: TopicTag::of("raw.bank"),
            partition: 2,
            offset: 41,
        }
    }

    #[test]
    fn suppressed_records_go_to_audit_and_unverified_to_clean() {
        assert_eq!(Decision::Novel.route(), Route::Clean);
        assert_eq!(Decision::Unverified.route(), Route::Clean);
        assert_eq!(Decision::Invalid(Invalid::NotObject).route(), Route::Audit);
        assert_eq!(
            Decision::Conflict {
                first_seen: coords()
            }
            .route(),
            Route::Audit
        );
    }

    #[test]
    fn a_shadow_stream_routes_every_decision_to_clean() {
        let all = [
            Decision::Novel,
            Decision::Unverified,
            Decision::Invalid(Invalid::NotObject),
            Decision::Duplicate {
                tier: Tier::Filter,
                first_seen: None,
            },
            Decision::Conflict {
                first_seen: coords(),
            },
        ];
        for decision in &all {
            assert_eq!(decision.route_on(true), Route::Clean, "{decision:?}");
            assert_eq!(decision.route_on(false), decision.route(), "{decision:?}");
        }
        assert_eq!(all[2].route_on(false), Route::Audit);
    }

    #[test]
    fn a_re_emitted_record_is_marked_as_a_replay() {
        let hash = SourceHash([1; 32]);
        let mut h = headers(&Decision::Novel, Some(&hash), &|_| String::new());
        h.mark_replay();
        let h = texts(&h);
        assert!(h.contains(&(DECISION, "novel".into())));
        assert!(h.contains(&(REPLAY, "true".into())));
        assert_eq!(h.len(), 3);
    }

    #[test]
    fn a_duplicate_names_its_first_seen_record() {
        let decision = Decision::Duplicate {
            tier: Tier::Exact,
            first_seen: Some(coords()),
        };
        let hash = SourceHash([1; 32]);
        let headers = texts(&headers(&decision, Some(&hash), &|_| "raw.bank".into()));
        assert!(headers.contains(&(DECISION, "duplicate".into())));
        assert!(headers.contains(&(TIER, "exact".into())));
        assert!(headers.contains(&(FIRST_SEEN, "raw.bank/2/41".into())));
        assert!(headers.contains(&(SOURCE_HASH, hash.to_string())));
        assert_eq!(headers.len(), 5);
    }

    #[test]
    fn an_invalid_record_carries_its_reason() {
        let decision = Decision::Invalid(Invalid::MissingField {
            field: "amount".into(),
        });
        let headers = texts(&headers(&decision, None, &|_| String::new()));
        let reason = headers.iter().find(|(k, _)| *k == REASON).unwrap();
        assert!(reason.1.starts_with("missing-field"), "{}", reason.1);
        assert!(reason.1.contains("amount"), "{}", reason.1);
    }

    #[test]
    fn a_refused_output_is_invalid_with_its_own_reason() {
        let decision = Decision::Undeliverable(Refused {
            bytes: 1_200_000,
            reason: "Broker: Message size too large".into(),
            bare: false,
        });
        assert_eq!(decision.label(), "invalid");
        assert_eq!(decision.route(), Route::Audit);
        let headers = texts(&headers(&decision, None, &|_| String::new()));
        let reason = headers.iter().find(|(k, _)| *k == REASON).unwrap();
        assert_eq!(
            reason.1,
            "undeliverable: output of 1200000 bytes refused: Broker: Message size too large"
        );
    }
}
