//! `ignore`: payload fields left out of the digest (vector's dedupe calls
//! them `fields.ignore`), so a webhook retry that differs only in its
//! `attempt` or `status` is a `duplicate` of the first delivery, not a
//! `conflict`.
//!
//! Each entry is a dotted path into the payload object, as in `fields`. A
//! path that is absent (or runs into a non-object) removes nothing: a
//! retry may or may not carry the field. A JSON payload with the paths
//! removed is what the digest (and, under `payload`, the hash) sees; a
//! payload without any of them digests exactly as before, so adding
//! `ignore` to a live stream keeps its claims' digests. A payload that is
//! not JSON is digested as its bytes, with nothing to remove.

use std::collections::BTreeSet;

use super::json::{Json, Object};
use super::profile::{FieldSpec, ProfileError};

/// Checks an ignore list against the profile's listed fields: each path
/// well formed, none given twice, none a listed field or nested in one
/// (or holding one), since a field in the hash cannot be left out of the
/// digest.
pub(super) fn parse(paths: &[String], listed: &[FieldSpec]) -> Result<Vec<String>, ProfileError> {
    let mut seen = BTreeSet::new();
    for path in paths {
        let bad = |reason| ProfileError::BadIgnore {
            path: path.clone(),
            reason,
        };
        if path.is_empty() {
            return Err(bad("empty path"));
        }
        if path.split('.').any(str::is_empty) {
            return Err(bad("empty segment in dotted path"));
        }
        if path.chars().any(char::is_whitespace) {
            return Err(bad("whitespace in path"));
        }
        if !seen.insert(path.as_str()) {
            return Err(ProfileError::DuplicateIgnore { path: path.clone() });
        }
        if let Some(field) = listed
            .iter()
            .find(|spec| nests(path, &spec.name) || nests(&spec.name, path))
        {
            return Err(ProfileError::IgnoredField {
                path: path.clone(),
                field: field.name.clone(),
            });
        }
    }
    Ok(paths.to_vec())
}

/// `inner` is the dotted path `outer` or one below it.
pub(super) fn nests(outer: &str, inner: &str) -> bool {
    match inner.strip_prefix(outer) {
        Some("") => true,
        Some(rest) => rest.starts_with('.'),
        None => false,
    }
}

/// Removes every ignored path from a parsed payload (the reference's
/// side): a top-level value that is not an object has no fields to remove.
pub(super) fn remove(value: &mut Json, paths: &[String]) {
    if let Json::Object(root) = value {
        for path in paths {
            remove_at(root, path);
        }
    }
}

/// Removes the value (of any type, `null` included) at a dotted path; a
/// missing step or a non-object on the way removes nothing.
fn remove_at(root: &mut Object, path: &str) {
    let mut segments = path.split('.').peekable();
    let mut object = root;
    while let Some(segment) = segments.next() {
        if segments.peek().is_none() {
            object.remove(segment);
            return;
        }
        match object.get_mut(segment) {
            Some(Json::Object(inner)) => object = inner,
            _ => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::canonical::to_canonical;
    use super::super::json::parse as parse_json;
    use super::super::{Identity, Profile};
    use super::*;

    fn paths(list: &[&str]) -> Vec<String> {
        list.iter().map(|p| p.to_string()).collect()
    }

    fn ignoring(
        profile: &str,
        fields: Option<&str>,
        list: &[&str],
    ) -> Result<Profile, ProfileError> {
        Profile::resolve(profile, fields, None)?.ignoring(&paths(list))
    }

    #[test]
    fn record_key_resolves_and_takes_no_field_list_or_header() {
        assert_eq!(
            Profile::resolve("record-key", None, None).unwrap().identity,
            Identity::RecordKey
        );
        assert_eq!(
            Profile::resolve("record-key", Some("a"), None),
            Err(ProfileError::FieldsNotAllowed {
                profile: "record-key".into()
            })
        );
        assert_eq!(
            Profile::resolve("record-key", None, Some("h")),
            Err(ProfileError::HeaderNotAllowed {
                profile: "record-key".into()
            })
        );
    }

    #[test]
    fn every_profile_but_payload_raw_takes_an_ignore_list() {
        for name in ["header", "record-key", "payload", "bank-txn", "spatial-job"] {
            let profile = ignoring(name, None, &["attempt", "meta.status"]).unwrap();
            assert_eq!(profile.ignored(), ["attempt", "meta.status"], "{name}");
        }
        let fields = ignoring("fields", Some("id"), &["attempt"]).unwrap();
        assert_eq!(fields.ignored(), ["attempt"]);
        let error = ignoring("payload-raw", None, &["attempt"]).unwrap_err();
        assert_eq!(
            error,
            ProfileError::IgnoreNotAllowed {
                profile: "payload-raw".into()
            }
        );
        assert_eq!(error.field(), "ignore");
        // An empty list is no list, for every profile.
        assert!(ignoring("payload-raw", None, &[])
            .unwrap()
            .ignored()
            .is_empty());
    }

    #[test]
    fn bad_ignore_paths_are_refused_naming_the_path() {
        for bad in ["", "a..b", ".a", "a.", "a b"] {
            match ignoring("payload", None, &["ok", bad]) {
                Err(ProfileError::BadIgnore { path, .. }) => assert_eq!(path, bad),
                other => panic!("{bad:?}: expected BadIgnore, got {other:?}"),
            }
        }
        assert_eq!(
            ignoring("payload", None, &["a", "b", "a"]),
            Err(ProfileError::DuplicateIgnore { path: "a".into() })
        );
    }

    #[test]
    fn an_ignored_path_overlapping_a_listed_field_is_refused() {
        for (list, path, field) in [
            ("id,amount:decimal", "amount", "amount"),
            ("id,job.crs:upper", "job", "job.crs"),
            ("id,job:object", "job.attempt", "job"),
        ] {
            let error = ignoring("fields", Some(list), &["x", path]).unwrap_err();
            assert_eq!(
                error,
                ProfileError::IgnoredField {
                    path: path.into(),
                    field: field.into()
                },
                "{list} / {path}"
            );
            assert_eq!(error.field(), "ignore");
        }
        // The presets list their fields too.
        assert!(matches!(
            ignoring("bank-txn", None, &["amount"]),
            Err(ProfileError::IgnoredField { .. })
        ));
        // A sibling or a prefix that is not a path step is no overlap.
        assert!(ignoring(
            "fields",
            Some("job.crs,amount"),
            &["job.attempt", "amounts"]
        )
        .is_ok());
    }

    #[test]
    fn removal_takes_any_value_and_skips_what_is_not_there() {
        let run = |payload: &str, list: &[&str]| {
            let mut value = parse_json(payload.as_bytes()).unwrap();
            remove(&mut value, &paths(list));
            to_canonical(&value)
        };
        assert_eq!(
            run(
                r#"{"a":1,"attempt":null,"m":{"s":[1],"t":2},"z":{"s":3}}"#,
                &["attempt", "m.s", "nope", "a.b", "m.t.u"]
            ),
            r#"{"a":1,"m":{"t":2},"z":{"s":3}}"#
        );
        assert_eq!(run("[1,2]", &["a"]), "[1,2]");
        assert_eq!(run(r#"{"a":{"b":1}}"#, &["a.b", "a"]), "{}");
        assert_eq!(run(r#"{"a":{"b":1}}"#, &["a", "a.b"]), "{}");
    }

    #[test]
    fn nesting_is_by_whole_path_steps() {
        assert!(nests("a", "a"));
        assert!(nests("a", "a.b"));
        assert!(!nests("a", "ab"));
        assert!(!nests("a.b", "a"));
    }
}
