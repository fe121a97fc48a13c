//! Readiness, per stream: whether this replica serves it and, where not,
//! why. `/readyz` answers 200 `ready` when every stream is ready, else 503
//! with a line per stream that is not:
//!
//! ```text
//! not ready: stream=bank cause=store-identity-lost
//! not ready: stream=telemetry cause=not-assigned,store-unreachable
//! ```
//!
//! and `idemgate_not_ready{stream, cause}` is 1 for each cause that holds,
//! 0 for the others. The causes and their names are declared once, in
//! `causes!` below: a new one (a store restored from an older snapshot,
//! say) is one line there; the compiler then asks for the arm of
//! `causes_of` that says when it holds, from what [`Observed`] carries.

/// Declares [`Cause`]: each variant with its stable kebab-case name.
macro_rules! causes {
    ($($(#[$doc:meta])* $variant:ident => $name:literal,)*) => {
        /// Why a stream is not ready. The name is stable: the `cause=` of
        /// `/readyz` and the `cause` label of `idemgate_not_ready`.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
        pub enum Cause {
            $($(#[$doc])* $variant,)*
        }

        impl Cause {
            /// Every cause, in the order a body lists them.
            pub const ALL: &'static [Cause] = &[$(Cause::$variant,)*];
            /// Every name, in the same order (the gauge's series at zero).
            pub const NAMES: &'static [&'static str] = &[$($name,)*];

            pub const fn name(self) -> &'static str {
                match self {
                    $(Cause::$variant => $name,)*
                }
            }
        }
    };
}

causes! {
    /// The replica owns no input partition: starting, waiting for the
    /// group, or one replica more than the partitions.
    NotAssigned => "not-assigned",
    /// The store did not answer its last look (every 5 s).
    StoreUnreachable => "store-unreachable",
    /// A round found the stream's store identity missing or changed: the
    /// store lost its claims (docs/design.md §8.2); ready again after
    /// `idemgate rebuild` and a restart.
    StoreIdentityLost => "store-identity-lost",
}

/// What readiness is judged from, as the replica last saw it.
#[derive(Clone, Debug)]
pub(crate) struct Observed<'a> {
    /// The replica owns some input partition (of any stream).
    pub(crate) assigned: bool,
    /// The store answered its last look.
    pub(crate) store_answers: bool,
    /// Per stream, in stream order: its store lost its state.
    pub(crate) identity_lost: &'a [bool],
}

/// A stream and what keeps it from being ready (never empty).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NotReady<'a> {
    pub(crate) stream: &'a str,
    pub(crate) causes: Vec<Cause>,
}

/// Pure: the causes that hold for `stream`, the `index`th.
fn causes_of(observed: &Observed<'_>, index: usize) -> Vec<Cause> {
    Cause::ALL
        .iter()
        .copied()
        .filter(|cause| match cause {
            Cause::NotAssigned => !observed.assigned,
            Cause::StoreUnreachable => !observed.store_answers,
            Cause::StoreIdentityLost => observed.identity_lost.get(index) == Some(&true),
        })
        .collect()
}

/// Pure: every stream of `streams` with the causes that hold for it, in
/// stream order (an empty list of causes: ready).
pub(crate) fn judge<'a>(
    streams: &'a [String],
    observed: &Observed<'_>,
) -> Vec<(&'a str, Vec<Cause>)> {
    streams
        .iter()
        .enumerate()
        .map(|(index, stream)| (stream.as_str(), causes_of(observed, index)))
        .collect()
}

/// Pure: the streams that are not ready.
pub(crate) fn not_ready<'a>(judged: &[(&'a str, Vec<Cause>)]) -> Vec<NotReady<'a>> {
    judged
        .iter()
        .filter(|(_, causes)| !causes.is_empty())
        .map(|(stream, causes)| NotReady {
            stream,
            causes: causes.clone(),
        })
        .collect()
}

/// The `/readyz` body: `ready`, or a line per stream that is not.
pub(crate) fn body(not_ready: &[NotReady<'_>]) -> String {
    if not_ready.is_empty() {
        return "ready\n".to_string();
    }
    not_ready
        .iter()
        .map(|n| {
            let causes: Vec<&str> = n.causes.iter().map(|c| c.name()).collect();
            format!(
                "not ready: stream={} cause={}\n",
                n.stream,
                causes.join(",")
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn streams() -> Vec<String> {
        vec!["bank".into(), "telemetry".into()]
    }

    fn rendered(observed: &Observed<'_>) -> String {
        let streams = streams();
        body(&not_ready(&judge(&streams, observed)))
    }

    #[test]
    fn every_stream_ready_is_one_word() {
        let observed = Observed {
            assigned: true,
            store_answers: true,
            identity_lost: &[false, false],
        };
        assert_eq!(rendered(&observed), "ready\n");
    }

    #[test]
    fn a_stream_whose_store_lost_its_state_is_named_alone() {
        let observed = Observed {
            assigned: true,
            store_answers: true,
            identity_lost: &[true, false],
        };
        assert_eq!(
            rendered(&observed),
            "not ready: stream=bank cause=store-identity-lost\n"
        );
    }

    #[test]
    fn a_replica_wide_cause_names_every_stream_with_all_its_causes() {
        let observed = Observed {
            assigned: false,
            store_answers: false,
            identity_lost: &[false, true],
        };
        assert_eq!(
            rendered(&observed),
            "not ready: stream=bank cause=not-assigned,store-unreachable\n\
             not ready: stream=telemetry cause=not-assigned,store-unreachable,store-identity-lost\n"
        );
    }

    #[test]
    fn names_are_kebab_case_unique_and_in_declaration_order() {
        assert_eq!(Cause::ALL.len(), Cause::NAMES.len());
        for (cause, name) in Cause::ALL.iter().zip(Cause::NAMES) {
            assert_eq!(cause.name(), *name);
            assert!(
                name.chars().all(|c| c.is_ascii_lowercase() || c == '-'),
                "{name}"
            );
        }
        let mut names = Cause::NAMES.to_vec();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), Cause::ALL.len());
    }
}
