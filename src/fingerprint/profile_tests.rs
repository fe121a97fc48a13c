//! Profile resolution: names, field lists, presets and the refusals that
//! name the setting at fault.

use super::profile::{bank_txn, spatial_job, spec};
use super::*;

/// The identity a profile resolves to.
fn resolve(
    name: &str,
    fields: Option<&str>,
    header: Option<&str>,
) -> Result<Identity, ProfileError> {
    Profile::resolve(name, fields, header).map(|profile| profile.identity)
}

#[test]
fn field_list_parses_every_normaliser_and_defaults_to_string() {
    let profile = resolve(
        "fields",
        Some("account_id, amount:decimal,bbox:round:6,crs:upper,code:lower,at:timestamp,params:object,s:string"),
        None,
    )
    .unwrap();
    assert_eq!(
        profile,
        Identity::Fields(vec![
            spec("account_id", Normaliser::String),
            spec("amount", Normaliser::Decimal),
            spec("bbox", Normaliser::Round(6)),
            spec("crs", Normaliser::Upper),
            spec("code", Normaliser::Lower),
            spec("at", Normaliser::Timestamp),
            spec("params", Normaliser::Object),
            spec("s", Normaliser::String),
        ])
    );
}

#[test]
fn dotted_paths_are_accepted() {
    let profile = resolve("fields", Some("job.area.crs:upper"), None).unwrap();
    assert_eq!(
        profile,
        Identity::Fields(vec![spec("job.area.crs", Normaliser::Upper)])
    );
}

#[test]
fn presets_resolve_to_their_field_lists() {
    assert_eq!(
        resolve("bank-txn", None, None).unwrap(),
        Identity::Fields(bank_txn())
    );
    assert_eq!(
        resolve("spatial-job", None, None).unwrap(),
        Identity::Fields(spatial_job())
    );
    assert_eq!(
        resolve("payload", None, None).unwrap(),
        Identity::Payload { raw: false }
    );
    assert_eq!(
        resolve("payload-raw", None, None).unwrap(),
        Identity::Payload { raw: true }
    );
}

#[test]
fn header_profile_defaults_and_overrides_its_name() {
    assert_eq!(
        resolve("header", None, None).unwrap(),
        Identity::Header {
            name: "x-idempotency-key".into()
        }
    );
    assert_eq!(
        resolve("header", None, Some("x-job-id")).unwrap(),
        Identity::Header {
            name: "x-job-id".into()
        }
    );
    assert_eq!(
        resolve("header", None, Some("")),
        Err(ProfileError::EmptyHeaderName)
    );
}

#[test]
fn unknown_profile_is_refused() {
    let err = resolve("bank", None, None).unwrap_err();
    assert_eq!(
        err,
        ProfileError::UnknownProfile {
            name: "bank".into()
        }
    );
    assert!(err.to_string().starts_with("unknown profile `bank`"));
}

#[test]
fn settings_a_profile_would_ignore_are_refused() {
    assert_eq!(
        resolve("bank-txn", Some("a"), None),
        Err(ProfileError::FieldsNotAllowed {
            profile: "bank-txn".into()
        })
    );
    assert_eq!(
        resolve("payload", None, Some("x")),
        Err(ProfileError::HeaderNotAllowed {
            profile: "payload".into()
        })
    );
    assert_eq!(
        resolve("fields", None, None),
        Err(ProfileError::FieldsRequired)
    );
}

#[test]
fn bad_field_specs_are_refused_naming_the_spec() {
    for (list, spec) in [
        ("", ""),
        ("a,,b", ""),
        ("a,", ""),
        (":decimal", ":decimal"),
        ("a..b", "a..b"),
        (".a", ".a"),
        ("a b", "a b"),
        ("x:round", "x:round"),
        ("x:round:", "x:round:"),
        ("x:round:-1", "x:round:-1"),
        ("x:round:+6", "x:round:+6"),
        ("x:round:29", "x:round:29"),
        ("x:round:six", "x:round:six"),
        ("x:decimal:2", "x:decimal:2"),
        ("x:round:6:7", "x:round:6:7"),
    ] {
        match resolve("fields", Some(list), None) {
            Err(ProfileError::BadFieldSpec { spec: named, .. }) => {
                assert_eq!(named, spec, "list {list:?}")
            }
            other => panic!("list {list:?}: expected BadFieldSpec, got {other:?}"),
        }
    }
}

#[test]
fn round_accepts_zero_to_twenty_eight_places() {
    assert_eq!(
        resolve("fields", Some("x:round:0,y:round:28"), None).unwrap(),
        Identity::Fields(vec![
            spec("x", Normaliser::Round(0)),
            spec("y", Normaliser::Round(28))
        ])
    );
}

#[test]
fn unknown_normaliser_is_refused_naming_it() {
    let err = resolve("fields", Some("amount:money"), None).unwrap_err();
    assert_eq!(
        err,
        ProfileError::UnknownNormaliser {
            spec: "amount:money".into(),
            normaliser: "money".into()
        }
    );
    assert!(err.to_string().contains("`money`"));
}

#[test]
fn a_field_listed_twice_is_refused() {
    assert_eq!(
        resolve("fields", Some("a:upper,b,a:lower"), None),
        Err(ProfileError::DuplicateField { field: "a".into() })
    );
}
