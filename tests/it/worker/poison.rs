//! Records no hash can be computed for: each goes to audit as `invalid` with
//! its reason, and the records behind it on the same partition flow on.

use std::time::Instant;

use idemgate::decision::SOURCE_HASH;

use super::support::{
    check_exactly_once, logs, produce, Options, Record, Replica, Setup, BANK_STREAM,
};

/// Raised so a 2 MB record can be produced, stored, fetched and produced
/// again to audit (librdkafka's defaults stop at 1 MB).
const BIG: &[(&str, &str)] = &[
    ("message.max.bytes", "4194304"),
    ("fetch.message.max.bytes", "4194304"),
];

fn bank(seq: usize, txn: &str, payload: String) -> Record {
    Record {
        seq,
        event: Some(format!("ACC-1/{txn}")),
        variant: 0,
        key: b"ACC-1".to_vec(),
        payload: payload.into_bytes(),
        headers: Vec::new(),
        partition: Some(0),
    }
}

fn good(seq: usize, txn: &str) -> Record {
    bank(
        seq,
        txn,
        format!(
            r#"{{"account_id":"ACC-1","bank_txn_id":"{txn}","amount":"12.50","currency":"EUR","posted_at":"2024-03-01T10:00:00Z"}}"#
        ),
    )
}

fn poison(seq: usize, payload: Vec<u8>) -> Record {
    Record {
        seq,
        event: None,
        variant: 0,
        key: b"ACC-1".to_vec(),
        payload,
        headers: Vec::new(),
        partition: Some(0),
    }
}

fn job(seq: usize, key: &[u8], payload: &str) -> Record {
    Record {
        seq,
        event: std::str::from_utf8(key).ok().map(str::to_string),
        variant: 0,
        key: b"jobs".to_vec(),
        payload: payload.as_bytes().to_vec(),
        headers: vec![("x-idempotency-key".into(), key.to_vec())],
        partition: Some(0),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn poison_records_go_to_audit_with_their_reason_and_the_partition_keeps_flowing() {
    logs();
    let started = Instant::now();
    let setup = Setup::new("poison", 2);
    let jobs = setup.more_topics("jobs");
    let more = format!(
        r#"[[streams]]
name = "{}-jobs"
inputs = ["{}"]
clean = "{}"
audit = "{}"
profile = "header"
header = "x-idempotency-key"
mode = "exact"
ttl = {{ explicit = "1h" }}
lease = "30s"
"#,
        setup.stream, jobs.raw, jobs.clean, jobs.audit
    );
    let stream = format!("{BANK_STREAM}\nmax_record_bytes = 1048576");
    let config = setup.config(&Options {
        kafka: BIG,
        stream: &stream,
        more: &more,
        ..Options::default()
    });
    let store = setup.store(&config);

    let huge = format!(
        r#"{{"account_id":"ACC-1","bank_txn_id":"T-huge","amount":"1.00","currency":"EUR","posted_at":"2024-03-01T10:00:00Z","memo":"{}"}}"#,
        "x".repeat(2 << 20)
    );
    // Everything on partition 0, a poison record between good ones.
    let bank_inputs = vec![
        good(0, "T-1"),
        poison(1, b"{\"account_id\": \"ACC-1\", \"amount\": ".to_vec()),
        good(2, "T-2"),
        poison(
            3,
            br#"{"account_id":"ACC-1","bank_txn_id":"T-3","currency":"EUR","posted_at":"2024-03-01T10:00:00Z"}"#.to_vec(),
        ),
        good(4, "T-4"),
        poison(5, huge.into_bytes()),
        good(6, "T-6"),
        good(7, "T-1"),
        good(8, "T-8"),
    ];
    let job_inputs = vec![
        job(100, b"job-1", r#"{"bbox":[1,2,3,4]}"#),
        job(
            101,
            &[0x6a, 0x6f, 0x62, 0xff, 0xfe],
            r#"{"bbox":[5,6,7,8]}"#,
        ),
        job(102, b"job-2", r#"{"bbox":[9,9,9,9]}"#),
        job(103, b"job-1", r#"{"bbox":[1,2,3,4]}"#),
        job(104, b"job-3", r#"{"bbox":[0,0,0,0]}"#),
    ];
    let replica = Replica::start(&config, store.clone()).await;
    let bank_sent = produce(&setup.brokers, &setup.topics.raw, &bank_inputs, BIG).await;
    let job_sent = produce(&setup.brokers, &jobs.raw, &job_inputs, BIG).await;
    assert!(bank_sent.iter().chain(&job_sent).all(|s| s.partition == 0));

    let bank_outputs = setup.read(bank_sent.len()).await;
    let job_outputs = setup.read_topics(&jobs, job_sent.len()).await;
    replica.stop().await;

    let bank_counts = check_exactly_once(&setup.topics, &bank_sent, &bank_outputs);
    assert_eq!(
        (
            bank_counts.novel,
            bank_counts.duplicate,
            bank_counts.invalid
        ),
        (5, 1, 3)
    );
    let job_counts = check_exactly_once(&jobs, &job_sent, &job_outputs);
    assert_eq!(
        (job_counts.novel, job_counts.duplicate, job_counts.invalid),
        (3, 1, 1)
    );

    let expect_invalid = [
        (&bank_outputs, 1, "not-json", "payload is not json"),
        (&bank_outputs, 3, "missing-field", "`amount`"),
        (&bank_outputs, 5, "too-large", "over the limit of 1048576"),
        (&job_outputs, 101, "header-not-utf8", "`x-idempotency-key`"),
    ];
    for (outputs, seq, code, detail) in expect_invalid {
        let output = outputs
            .iter()
            .find(|o| o.seq() == seq)
            .unwrap_or_else(|| panic!("no output for poison input {seq}"));
        let audit = if seq >= 100 {
            &jobs.audit
        } else {
            &setup.topics.audit
        };
        assert_eq!(&output.topic, audit, "poison input {seq}");
        assert_eq!(output.decision(), "invalid", "poison input {seq}");
        let reason = output.reason();
        assert!(
            reason.starts_with(&format!("{code}: ")) && reason.contains(detail),
            "poison input {seq}: reason {reason:?}, expected {code} naming {detail}"
        );
        assert_eq!(
            output.header(SOURCE_HASH),
            None,
            "an invalid record has no hash"
        );
        // The payload byte for byte (checked for every output above, said
        // again here for the 2 MB one).
        let input = bank_sent
            .iter()
            .chain(&job_sent)
            .find(|s| s.record.seq == seq)
            .unwrap();
        assert_eq!(
            output.payload.as_deref(),
            Some(input.record.payload.as_slice())
        );
    }
    // The non-UTF-8 key header travels on unchanged too.
    let bad_key = job_outputs.iter().find(|o| o.seq() == 101).unwrap();
    assert!(bad_key.headers.iter().any(|(k, v)| k == "x-idempotency-key"
        && v.as_deref() == Some(&[0x6a, 0x6f, 0x62, 0xff, 0xfe][..])));

    // The partition flowed past every poison record: the group committed
    // the end of both inputs.
    let ends = [
        (&setup.topics.raw, bank_sent.last().unwrap().offset + 1),
        (&jobs.raw, job_sent.last().unwrap().offset + 1),
    ];
    for (topic, end) in ends {
        let committed = setup.committed(topic).await;
        assert_eq!(committed[0], Some(end), "committed offsets of {topic}");
    }
    eprintln!(
        "{bank_counts:?} {job_counts:?}, took {:?}",
        started.elapsed()
    );
}
