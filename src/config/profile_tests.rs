//! A stream's profile settings (`profile`, `fields`, `header`, `ignore`):
//! what they resolve to, and refusals that name the setting at fault.

use super::tests::brokers;
use super::*;
use crate::fingerprint::Identity;

fn stream(settings: &str) -> String {
    format!(
        r#"
[[streams]]
name = "hooks"
inputs = ["raw.hooks"]
clean = "clean.hooks"
audit = "audit.hooks"
mode = "exact"
ttl = {{ explicit = "24h" }}
{settings}
"#
    )
}

fn refused(settings: &str) -> String {
    match Config::parse_with_vars(&stream(settings), brokers) {
        Ok(_) => panic!("accepted: {settings}"),
        Err(error) => error.to_string(),
    }
}

#[test]
fn a_record_key_stream_with_ignored_fields_is_accepted() {
    let text = stream("profile = \"record-key\"\nignore = [\"attempt\", \"meta.status\"]");
    let config = Config::parse_with_vars(&text, brokers).unwrap();
    let profile = &config.streams[0].profile;
    assert_eq!(profile.identity(), &Identity::RecordKey);
    assert_eq!(profile.ignored(), ["attempt", "meta.status"]);
}

#[test]
fn no_ignore_list_ignores_nothing() {
    let text = stream("profile = \"header\"");
    let config = Config::parse_with_vars(&text, brokers).unwrap();
    assert!(config.streams[0].profile.ignored().is_empty());
}

#[test]
fn profile_refusals_name_the_setting_at_fault() {
    for (settings, field, words) in [
        ("profile = \"key\"", "profile", "unknown profile `key`"),
        (
            "profile = \"payload-raw\"\nignore = [\"attempt\"]",
            "ignore",
            "no fields to ignore",
        ),
        (
            "profile = \"payload\"\nignore = [\"a..b\"]",
            "ignore",
            "bad ignore path `a..b`",
        ),
        (
            "profile = \"payload\"\nignore = [\"a\", \"a\"]",
            "ignore",
            "`a` is ignored twice",
        ),
        (
            "profile = \"fields\"\nfields = \"id,amount:decimal\"\nignore = [\"amount\"]",
            "ignore",
            "listed field `amount`",
        ),
        (
            "profile = \"record-key\"\nfields = \"id\"",
            "fields",
            "takes no field list",
        ),
        (
            "profile = \"fields\"\nfields = \"a:money\"",
            "fields",
            "`money`",
        ),
        (
            "profile = \"record-key\"\nheader = \"h\"",
            "header",
            "takes no header name",
        ),
    ] {
        let error = refused(settings);
        assert!(
            error.starts_with(&format!("streams[0].{field}: ")),
            "{settings}: {error}"
        );
        assert!(error.contains(words), "{settings}: {error}");
    }
}

#[test]
fn an_ignore_list_must_be_a_list_of_strings() {
    let error = refused("profile = \"payload\"\nignore = \"attempt\"");
    assert!(error.contains("ignore"), "{error}");
}
