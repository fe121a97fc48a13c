//! A stream keyed by the Kafka record key (`profile = "record-key"`) with
//! a webhook's retry counter left out of the digest (`ignore`): the key the
//! worker reads from each message is the claim, a retry differing only in
//! the ignored field is a duplicate, another body under the key a
//! conflict, and a record without a key is `invalid` (`missing-key`) while
//! the records behind it flow on.

use std::time::Duration;

use idemgate::decision::REASON;
use idemgate_testkit::kafka::{send_keyless, Out};
use idemgate_testkit::workload::{Kind, Planned};

use super::support::{start_assigned, stop, Options, Setup};

const STREAM: &str = r#"profile = "record-key"
ignore = ["attempt", "meta.status"]
mode = "exact"
ttl = { explicit = "1h" }
fail_mode = "closed""#;

fn hook(id: &str, key: &[u8], payload: &str) -> Planned {
    let mut record = Planned::custom(
        id,
        key,
        Some(payload.as_bytes()),
        Kind::Original,
        Err("unset"),
    );
    record.partition = Some(0);
    record
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn record_keys_are_the_claims_and_ignored_fields_leave_the_digest() -> anyhow::Result<()> {
    const TEST: &str = "record-key";
    let setup = Setup::new(TEST, 1);
    let config = setup.config(&Options {
        stream: STREAM,
        ..Options::default()
    });
    let store = setup.store(&config);
    let before = vec![
        hook(
            "key-0",
            b"wh-1",
            r#"{"id":"wh-1","amount":5,"attempt":1,"meta":{"status":"pending"}}"#,
        ),
        hook(
            "key-1",
            b"wh-1",
            r#"{"meta":{"status":"retrying"},"attempt":2,"amount":5,"id":"wh-1"}"#,
        ),
        hook(
            "key-2",
            b"wh-1",
            r#"{"id":"wh-1","amount":6,"attempt":3,"meta":{"status":"retrying"}}"#,
        ),
        // The same body under another key is another event.
        hook(
            "key-3",
            b"wh-2",
            r#"{"id":"wh-1","amount":5,"attempt":1,"meta":{"status":"pending"}}"#,
        ),
    ];
    let keyless = hook("key-4", b"", r#"{"id":"wh-3","amount":1,"attempt":1}"#);
    let after = vec![hook(
        "key-5",
        b"wh-2",
        r#"{"id":"wh-1","amount":5,"attempt":4,"meta":{"status":"done"}}"#,
    )];
    let replica = start_assigned(&config, &store).await?;
    let input = setup.topics.input.clone();
    setup.produce(&input, &before, 10, Duration::ZERO).await?;
    let (brokers, topic, record) = (setup.brokers.clone(), input.clone(), keyless.clone());
    tokio::task::spawn_blocking(move || send_keyless(&brokers, &topic, 0, &record)).await?;
    setup.produce(&input, &after, 10, Duration::ZERO).await?;

    let outputs = setup.read(&setup.topics, 6).await?;
    stop(replica).await?;
    let output = |id: &str| -> &Out {
        let found: Vec<&Out> = outputs.iter().filter(|o| o.test_id() == id).collect();
        assert_eq!(found.len(), 1, "outputs of {id}: {found:?}");
        found[0]
    };
    for (id, decision, topic) in [
        ("key-0", "novel", &setup.topics.clean),
        ("key-1", "duplicate", &setup.topics.audit),
        ("key-2", "conflict", &setup.topics.audit),
        ("key-3", "novel", &setup.topics.clean),
        ("key-4", "invalid", &setup.topics.audit),
        ("key-5", "duplicate", &setup.topics.audit),
    ] {
        let out = output(id);
        assert_eq!((out.decision(), &out.topic), (decision, topic), "{id}");
    }
    let reason = output("key-4").header(REASON).unwrap_or_default();
    assert_eq!(reason, "missing-key: record has no key");
    // A novel output keeps its key, so `rebuild` finds its claim again.
    assert_eq!(output("key-0").key.as_deref(), Some(&b"wh-1"[..]));
    Ok(())
}
