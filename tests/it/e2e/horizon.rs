//! `idemgate horizon --topic`: a recorded topic on Apache Kafka, each delivery
//! attempt produced with the Kafka timestamp it "arrived" at. The horizon
//! measured per sender must be the spread that was produced, whether the
//! id and sender are read from JSON fields or from headers, and a time
//! range must select records by timestamp.

use std::process::{Command, Output};
use std::time::Duration;

use futures::executor::block_on;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::ClientConfig;

use idemgate_testkit::kafka::create_topics;
use idemgate_testkit::{kafka_brokers, say, unique};

/// (sender, delivery id, seconds after the start) of every attempt: acme's
/// d1 retried out to 9h20m, d2 over 5 min; beta's x1 over an hour, x2 once.
const ATTEMPTS: [(&str, &str, i64); 8] = [
    ("acme", "d1", 0),
    ("acme", "d1", 60),
    ("acme", "d1", 33_600),
    ("acme", "d2", 100),
    ("acme", "d2", 400),
    ("beta", "x1", 10),
    ("beta", "x1", 3_610),
    ("beta", "x2", 20),
];

/// Produces every attempt with its timestamp: the payload and the headers
/// both carry the id and the sender.
fn record(topic: &str, start_ms: i64) {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", kafka_brokers())
        .set("message.timeout.ms", "30000")
        .create()
        .expect("producer");
    for (sender, id, secs) in ATTEMPTS {
        let payload = format!(r#"{{"delivery_id":"{id}","sender":"{sender}","body":{{}}}}"#);
        let headers = OwnedHeaders::new()
            .insert(Header {
                key: "x-delivery",
                value: Some(id),
            })
            .insert(Header {
                key: "x-sender",
                value: Some(sender),
            });
        let delivered = block_on(
            producer.send(
                FutureRecord::to(topic)
                    .key(id)
                    .payload(&payload)
                    .headers(headers)
                    .timestamp(start_ms + secs * 1000),
                Duration::from_secs(30),
            ),
        );
        if let Err((error, _)) = delivered {
            panic!("producing {sender}/{id}: {error}");
        }
    }
}

fn horizon(test: &str, args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .arg("horizon")
        .args(args)
        .output()
        .expect("running idemgate horizon");
    say(
        test,
        format!(
            "horizon {args:?}: exit {}\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    );
    out
}

fn rfc3339(ms: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .expect("a time")
        .format(&time::format_description::well_known::Rfc3339)
        .expect("formatted")
}

#[test]
fn a_recorded_topic_gives_each_senders_produced_spread() {
    const TEST: &str = "horizon-topic";
    let brokers = kafka_brokers();
    let topic = unique("horizon-recorded");
    create_topics(&brokers, &[(topic.as_str(), 2)]);
    // Whole seconds, a day ago: the recording is history.
    let now_s = time::OffsetDateTime::now_utc().unix_timestamp();
    let start_ms = (now_s - 86_400) * 1000;
    record(&topic, start_ms);

    let read = [
        "--brokers",
        brokers.as_str(),
        "--topic",
        topic.as_str(),
        "--quiet",
        "3s",
    ];
    let fields = horizon(TEST, &read);
    assert!(
        fields.status.success(),
        "{}",
        String::from_utf8_lossy(&fields.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&fields.stdout),
        "acme\t33600\nbeta\t3600\nmax\t33600\n"
    );
    assert!(
        String::from_utf8_lossy(&fields.stderr).contains("read 8 records from 2 partitions"),
        "{}",
        String::from_utf8_lossy(&fields.stderr)
    );

    let by_header = [
        &read[..],
        &["--id-header", "x-delivery", "--sender-header", "x-sender"],
    ]
    .concat();
    let headers = horizon(TEST, &by_header);
    assert!(
        headers.status.success(),
        "{}",
        String::from_utf8_lossy(&headers.stderr)
    );
    assert_eq!(headers.stdout, fields.stdout);

    // From 30 s in, up to (not including) 9h20m: d1 keeps one attempt, d2
    // both, x1 its second only.
    let (from, to) = (rfc3339(start_ms + 30_000), rfc3339(start_ms + 33_600_000));
    let ranged = [&read[..], &["--from", from.as_str(), "--to", to.as_str()]].concat();
    let ranged = horizon(TEST, &ranged);
    assert!(
        ranged.status.success(),
        "{}",
        String::from_utf8_lossy(&ranged.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&ranged.stdout),
        "acme\t300\nbeta\t0\nmax\t300\n"
    );

    // A range with nothing in it measures nothing, and says so.
    let (from, to) = (rfc3339(start_ms - 20_000), rfc3339(start_ms - 10_000));
    let empty = [&read[..], &["--from", from.as_str(), "--to", to.as_str()]].concat();
    let empty = horizon(TEST, &empty);
    assert!(!empty.status.success());
    assert!(
        String::from_utf8_lossy(&empty.stderr).contains("no deliveries in topic"),
        "{}",
        String::from_utf8_lossy(&empty.stderr)
    );
}

#[test]
fn a_record_without_the_named_field_is_refused_with_its_coordinates() {
    const TEST: &str = "horizon-missing";
    let brokers = kafka_brokers();
    let topic = unique("horizon-unnamed");
    create_topics(&brokers, &[(topic.as_str(), 1)]);
    record(&topic, 1_700_000_000_000);
    let out = horizon(
        TEST,
        &[
            "--brokers",
            &brokers,
            "--topic",
            &topic,
            "--quiet",
            "3s",
            "--id-field",
            "attempt.id",
        ],
    );
    assert!(!out.status.success());
    let error = String::from_utf8_lossy(&out.stderr);
    assert!(
        error.contains(&format!("{topic}/0/")) && error.contains("no field attempt.id"),
        "{error}"
    );
}
