//! Decisions (docs/design.md §2): what happens to a record, where it goes, and
//! the headers that say why. Pure functions over plain data.

use crate::fingerprint::{Invalid, SourceHash};
use crate::store::{Coordinates, Tier};

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
    /// The store is unreachable and the stream fails open.
    Unverified,
}

impl Decision {
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Decision::Novel => "novel",
            Decision::Duplicate { .. } => "duplicate",
            Decision::Conflict { .. } => "conflict",
            Decision::Invalid(_) => "invalid",
            Decision::Unverified => "unverified",
        }
    }

    pub(crate) fn route(&self) -> Route {
        match self {
            Decision::Novel | Decision::Unverified => Route::Clean,
            Decision::Duplicate { .. } | Decision::Conflict { .. } | Decision::Invalid(_) => {
                Route::Audit
            }
        }
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

/// The headers written on an output, beside the record's own. `topic_name`
/// turns a stored topic tag back into a name.
pub(crate) fn headers(
    decision: &Decision,
    hash: Option<&SourceHash>,
    topic_name: &dyn Fn(&Coordinates) -> String,
) -> Vec<(&'static str, String)> {
    let mut out = vec![(DECISION, decision.label().to_string())];
    if let Some(hash) = hash {
        out.push((SOURCE_HASH, hash.to_string()));
    }
    let first_seen = |c: &Coordinates| format!("{}/{}/{}", topic_name(c), c.partition, c.offset);
    match decision {
        Decision::Novel => {}
        Decision::Duplicate {
            tier,
            first_seen: holder,
        } => {
            out.push((TIER, tier.as_str().to_string()));
            match holder {
                Some(holder) => {
                    out.push((FIRST_SEEN, first_seen(holder)));
                    out.push((REASON, "hash already claimed and delivered".into()));
                }
                None => out.push((
                    REASON,
                    "hash found in the long-tail filter (false-positive rate applies)".into(),
                )),
            }
        }
        Decision::Conflict { first_seen: holder } => {
            out.push((TIER, Tier::Exact.as_str().to_string()));
            out.push((FIRST_SEEN, first_seen(holder)));
            out.push((
                REASON,
                "idempotency key reused with a different payload".into(),
            ));
        }
        Decision::Invalid(invalid) => {
            out.push((REASON, format!("{}: {invalid}", invalid.code())));
        }
        Decision::Unverified => {
            out.push((REASON, "claim store unreachable, stream fails open".into()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::TopicTag;

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
    fn a_duplicate_names_its_first_seen_record() {
        let decision = Decision::Duplicate {
            tier: Tier::Exact,
            first_seen: Some(coords()),
        };
        let hash = SourceHash([1; 32]);
        let headers = headers(&decision, Some(&hash), &|_| "raw.bank".into());
        assert!(headers.contains(&(DECISION, "duplicate".into())));
        assert!(headers.contains(&(TIER, "exact".into())));
        assert!(headers.contains(&(FIRST_SEEN, "raw.bank/2/41".into())));
        assert!(headers.contains(&(SOURCE_HASH, hash.to_string())));
    }

    #[test]
    fn an_invalid_record_carries_its_reason() {
        let decision = Decision::Invalid(Invalid::MissingField {
            field: "amount".into(),
        });
        let headers = headers(&decision, None, &|_| String::new());
        let reason = headers.iter().find(|(k, _)| *k == REASON).unwrap();
        assert!(reason.1.starts_with("missing-field"), "{}", reason.1);
        assert!(reason.1.contains("amount"), "{}", reason.1);
    }
}
