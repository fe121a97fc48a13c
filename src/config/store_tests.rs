//! `[store]`: a field the store's kind does not read is refused, named,
//! never ignored.

use super::tests::{refused, STREAM};

fn store(fields: &str) -> String {
    format!("[store]\n{fields}\n{STREAM}")
}

#[test]
fn a_url_without_a_kind_is_refused_not_run_on_the_memory_store() {
    let error = refused(&store("url = \"redis://cache:6379\""));
    assert!(
        error.contains("store.url")
            && error.contains("only for kind = \"redis\" or \"postgres\"")
            && error.contains("the store is memory"),
        "{error}"
    );
}

#[test]
fn each_backend_refuses_the_fields_of_another() {
    for (fields, field) in [
        (
            "kind = \"cluster\"\nnodes = [\"redis://a:7000\"]\nurl = \"redis://b:6379\"",
            "store.url",
        ),
        (
            "kind = \"redis\"\nurl = \"redis://b:6379\"\nnodes = [\"redis://a:7000\"]",
            "store.nodes",
        ),
        (
            "kind = \"redis\"\nurl = \"redis://b:6379\"\nschema = \"x\"",
            "store.schema",
        ),
        (
            "kind = \"postgres\"\nurl = \"postgres://u@db/x\"\nfilter = \"bitmap\"",
            "store.filter",
        ),
        (
            "kind = \"postgres\"\nurl = \"postgres://u@db/x\"\nkey_prefix = \"a:\"",
            "store.key_prefix",
        ),
        ("password = \"s3cret\"", "store.password"),
    ] {
        let error = refused(&store(fields));
        assert!(
            error.contains(field) && error.contains("only for kind"),
            "{fields}: {error}"
        );
    }
    let error = refused(&store(
        "kind = \"postgres\"\nurl = \"postgres://db/x\"\nusername = \"u\"",
    ));
    assert!(error.contains("takes the user from the url"), "{error}");
    let error = refused(&store(
        "kind = \"redis\"\nurl = \"redis://b:6379\"\nclock = \"event\"",
    ));
    assert!(
        error.contains("store.clock") && error.contains("wall clock"),
        "{error}"
    );
}

#[test]
fn what_a_backend_reads_is_accepted() {
    for fields in [
        "clock = \"event\"",
        "kind = \"redis\"\nurl = \"rediss://b:6379\"\nusername = \"u\"\npassword = \"p\"\nkey_prefix = \"a:\"\nfilter = \"bitmap\"\ntls = { ca_file = \"/ca.pem\" }",
        "kind = \"postgres\"\nurl = \"postgres://u@db/x\"\npassword = \"p\"\nschema = \"s\"\npool_size = 2",
    ] {
        super::tests::parse(&store(fields)).unwrap_or_else(|e| panic!("{fields}: {e}"));
    }
}
