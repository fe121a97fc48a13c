//! Records no hash can be computed for: each goes to audit as `invalid` with
//! its reason, and the records behind it on the same partition flow on.

use std::time::{Duration, Instant};

use idemgate::app::Replica;
use idemgate::decision::{REASON, SOURCE_HASH};
use idemgate::fingerprint::{fingerprint, Profile, RecordView};
use idemgate_testkit::check::{check, Expect};
use idemgate_testkit::kafka::{read_inputs, send_with_raw_header_name, Landed, Producer, Topics};
use idemgate_testkit::say;
use idemgate_testkit::workload::{Kind, Planned};

use super::support::{count, start_assigned, stop, Options, Setup, BANK_STREAM};

/// Raised so a 2 MB record can be produced, stored, fetched and produced
/// again to audit (librdkafka's defaults stop at 1 MB).
const BIG: &[(&str, &str)] = &[
    ("message.max.bytes", "4194304"),
    ("fetch.message.max.bytes", "4194304"),
];
/// The payments stream's `max_record_bytes` in this test.
const MAX_BYTES: usize = 1 << 20;
const IDEMPOTENCY_KEY: &str = "x-idempotency-key";
const BAD_KEY: &[u8] = &[0x6a, 0x6f, 0x62, 0xff, 0xfe];

/// What the library makes of a record under `profile`: its source hash, or
/// the code of why it has none.
fn verdict(profile: &Profile, record: &Planned) -> Result<String, &'static str> {
    let headers: Vec<(&str, Option<&[u8]>)> = record
        .headers
        .iter()
        .map(|(name, value)| (name.as_str(), Some(value.as_slice())))
        .collect();
    let view = RecordView {
        key: Some(&record.key),
        payload: record.payload.as_deref(),
        headers: &headers,
    };
    fingerprint(profile, MAX_BYTES, &view)
        .map(|print| print.hash.to_string())
        .map_err(|invalid| invalid.code())
}

/// A record on partition 0 of account ACC-1, of event `event` (`None` for
/// poison), its expected hash the library's.
fn on_partition_0(
    id: &str,
    key: &[u8],
    payload: &[u8],
    headers: Vec<(String, Vec<u8>)>,
    (event, kind): (Option<usize>, Kind),
    profile: &Profile,
) -> Planned {
    let mut record = Planned::custom(id, key, Some(payload), kind, Err("unset"));
    record.event = event;
    record.partition = Some(0);
    record.headers = headers;
    record.hash = verdict(profile, &record);
    record
}

fn good(id: &str, txn: &str, event: (Option<usize>, Kind), profile: &Profile) -> Planned {
    let payload = format!(
        r#"{{"account_id":"ACC-1","bank_txn_id":"{txn}","amount":"12.50","currency":"EUR","posted_at":"2024-03-01T10:00:00Z"}}"#
    );
    on_partition_0(id, b"ACC-1", payload.as_bytes(), Vec::new(), event, profile)
}

fn poison(id: &str, payload: &[u8], profile: &Profile) -> Planned {
    let kind = (None, Kind::Malformed);
    on_partition_0(id, b"ACC-1", payload, Vec::new(), kind, profile)
}

fn job(id: &str, key: &[u8], payload: &str, event: (Option<usize>, Kind)) -> Planned {
    let profile = Profile::resolve("header", None, Some(IDEMPOTENCY_KEY)).expect("header profile");
    let headers = vec![(IDEMPOTENCY_KEY.to_string(), key.to_vec())];
    on_partition_0(id, b"jobs", payload.as_bytes(), headers, event, &profile)
}

/// Produces one record with `BIG` limits (the kit's producer, told them):
/// where it landed.
async fn produce_big(brokers: &str, topic: &str, record: &Planned) -> anyhow::Result<Landed> {
    let (brokers, topic, record) = (brokers.to_string(), topic.to_string(), record.clone());
    let landed = tokio::task::spawn_blocking(move || {
        Producer::with_properties(&brokers, BIG).send(&topic, &[record], 1, Duration::ZERO)
    })
    .await?;
    landed
        .into_values()
        .next()
        .ok_or_else(|| anyhow::anyhow!("the big record was not delivered"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn poison_records_go_to_audit_with_their_reason_and_the_partition_keeps_flowing(
) -> anyhow::Result<()> {
    const TEST: &str = "poison";
    let started = Instant::now();
    let setup = Setup::new(TEST, 2);
    let jobs = Topics::create_on_mock(&setup.kafka, "poison-jobs", 2, 2);
    let jobs_stream = format!(
        r#"profile = "header"
header = "{IDEMPOTENCY_KEY}"
mode = "exact"
ttl = {{ explicit = "1h" }}
"#
    );
    let stream = format!("{BANK_STREAM}\nmax_record_bytes = {MAX_BYTES}");
    let config = setup.config(&Options {
        kafka: BIG,
        stream: &stream,
        more: &[(&jobs, &jobs_stream)],
        ..Options::default()
    });
    let store = setup.store(&config);

    let bank = Profile::resolve("bank-txn", None, None)?;
    let huge = format!(
        r#"{{"account_id":"ACC-1","bank_txn_id":"T-huge","amount":"1.00","currency":"EUR","posted_at":"2024-03-01T10:00:00Z","memo":"{}"}}"#,
        "x".repeat(2 << 20)
    );
    let new = |event| (Some(event), Kind::Original);
    // Everything on partition 0, a poison record between good ones.
    let bank_inputs = vec![
        good("bank-0", "T-1", new(0), &bank),
        poison("bank-1", b"{\"account_id\": \"ACC-1\", \"amount\": ", &bank),
        good("bank-2", "T-2", new(1), &bank),
        poison(
            "bank-3",
            br#"{"account_id":"ACC-1","bank_txn_id":"T-3","currency":"EUR","posted_at":"2024-03-01T10:00:00Z"}"#,
            &bank,
        ),
        good("bank-4", "T-4", new(2), &bank),
        poison("bank-5", huge.as_bytes(), &bank),
        good("bank-6", "T-6", new(3), &bank),
        good("bank-7", "T-1", (Some(0), Kind::Copy), &bank),
        good("bank-8", "T-8", new(4), &bank),
        // A small payload under a header that makes the record too large:
        // the whole record counts, or its output would be refused later.
        {
            let mut record = good("bank-9", "T-9", (None, Kind::Malformed), &bank);
            record.headers = vec![("x-trace".into(), vec![b't'; 3 << 19])];
            record.hash = Err("too-large");
            record
        },
    ];
    let job_inputs = vec![
        job("job-0", b"job-1", r#"{"bbox":[1,2,3,4]}"#, new(0)),
        job(
            "job-1",
            BAD_KEY,
            r#"{"bbox":[5,6,7,8]}"#,
            (None, Kind::Malformed),
        ),
        job("job-2", b"job-2", r#"{"bbox":[9,9,9,9]}"#, new(1)),
        job(
            "job-3",
            b"job-1",
            r#"{"bbox":[1,2,3,4]}"#,
            (Some(0), Kind::Copy),
        ),
        job("job-4", b"job-3", r#"{"bbox":[0,0,0,0]}"#, new(2)),
    ];
    let replica = Replica::start(&config, store.clone()).await?;
    // In order on partition 0; the 2 MB record by a producer of its own.
    let input = &setup.topics.input;
    let (before, after) = (&bank_inputs[..5], &bank_inputs[6..9]);
    let mut bank_landed = setup.produce(input, before, 10, Duration::ZERO).await?;
    let huge = &bank_inputs[5];
    bank_landed.insert(
        huge.id.clone(),
        produce_big(&setup.brokers, input, huge).await?,
    );
    bank_landed.extend(setup.produce(input, after, 10, Duration::ZERO).await?);
    let heavy = &bank_inputs[9];
    bank_landed.insert(
        heavy.id.clone(),
        produce_big(&setup.brokers, input, heavy).await?,
    );
    let job_landed = setup
        .produce(&jobs.input, &job_inputs, 10, Duration::ZERO)
        .await?;
    assert!(bank_landed
        .values()
        .chain(job_landed.values())
        .all(|at| at.partition == 0));

    let bank_outputs = setup.read(&setup.topics, bank_inputs.len()).await?;
    let job_outputs = setup.read(&jobs, job_inputs.len()).await?;
    stop(replica).await?;

    let bank_summary = check(
        &bank_inputs,
        &bank_landed,
        &setup.topics,
        &bank_outputs,
        Expect::Exact,
    );
    let job_summary = check(&job_inputs, &job_landed, &jobs, &job_outputs, Expect::Exact);
    for (summary, expected) in [(&bank_summary, (5, 1, 4)), (&job_summary, (3, 1, 1))] {
        assert_eq!(
            (
                count(summary, &["novel"]),
                count(summary, &["duplicate"]),
                count(summary, &["invalid"])
            ),
            expected,
            "(novel, duplicate, invalid): {summary}"
        );
    }

    let expect_invalid = [
        (
            &bank_outputs,
            &bank_inputs,
            "bank-1",
            "not-json",
            "payload is not json",
        ),
        (
            &bank_outputs,
            &bank_inputs,
            "bank-3",
            "missing-field",
            "`amount`",
        ),
        (
            &bank_outputs,
            &bank_inputs,
            "bank-5",
            "too-large",
            "over the limit of 1048576",
        ),
        (
            &bank_outputs,
            &bank_inputs,
            "bank-9",
            "too-large",
            "over the limit of 1048576",
        ),
        (
            &job_outputs,
            &job_inputs,
            "job-1",
            "header-not-utf8",
            "`x-idempotency-key`",
        ),
    ];
    for (outputs, inputs, id, code, detail) in expect_invalid {
        let output = outputs
            .iter()
            .find(|o| o.test_id() == id)
            .unwrap_or_else(|| panic!("no output for poison input {id}"));
        let audit = if id.starts_with("job") {
            &jobs.audit
        } else {
            &setup.topics.audit
        };
        assert_eq!(&output.topic, audit, "poison input {id}");
        assert_eq!(output.decision(), "invalid", "poison input {id}");
        let reason = output.header(REASON).unwrap_or_default();
        assert!(
            reason.starts_with(&format!("{code}: ")) && reason.contains(detail),
            "poison input {id}: reason {reason:?}, expected {code} naming {detail}"
        );
        assert_eq!(
            output.header(SOURCE_HASH),
            None,
            "an invalid record has no hash"
        );
        // The payload byte for byte (checked for every output above, said
        // again here for the 2 MB one).
        let input = inputs.iter().find(|p| p.id == id).unwrap();
        assert_eq!(output.payload, input.payload, "payload of {id}");
    }
    // The non-UTF-8 key header travels on unchanged too.
    let bad_key = job_outputs.iter().find(|o| o.test_id() == "job-1").unwrap();
    assert!(bad_key
        .headers
        .iter()
        .any(|(k, v)| k == IDEMPOTENCY_KEY && v.as_deref() == Some(BAD_KEY)));

    // The partition flowed past every poison record: the group committed
    // the end of both inputs.
    for (topics, landed) in [(&setup.topics, &bank_landed), (&jobs, &job_landed)] {
        let end = landed.values().map(|at| at.offset + 1).max();
        let committed = setup.committed(topics).await?;
        assert_eq!(committed[0], end, "committed offsets of {}", topics.input);
    }
    say(
        TEST,
        format!(
            "bank: {bank_summary}; jobs: {job_summary}; took {:?}",
            started.elapsed()
        ),
    );
    Ok(())
}

/// A header *name* that is not UTF-8 (rdkafka's own header iterator panics
/// on one): the record goes to audit as `invalid`, named, with its payload,
/// and the records around it on the same partition flow on. For every
/// distinct event: exactly one copy in clean, nothing lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_header_name_that_is_not_utf8_goes_to_audit_and_never_stops_the_worker(
) -> anyhow::Result<()> {
    const TEST: &str = "header-name";
    let setup = Setup::new(TEST, 1);
    let config = setup.config(&Options::default());
    let store = setup.store(&config);
    let bank = Profile::resolve("bank-txn", None, None)?;
    let new = |event| (Some(event), Kind::Original);
    let before = vec![good("name-0", "T-1", new(0), &bank)];
    let mut odd = good("name-1", "T-2", (None, Kind::Malformed), &bank);
    odd.hash = Err("header-name-not-utf8");
    let after = vec![
        good("name-2", "T-3", new(1), &bank),
        good("name-3", "T-1", (Some(0), Kind::Copy), &bank),
    ];
    let replica = start_assigned(&config, &store).await?;
    setup
        .produce(&setup.topics.input, &before, 10, Duration::ZERO)
        .await?;
    let (brokers, topic, raw) = (
        setup.brokers.clone(),
        setup.topics.input.clone(),
        odd.clone(),
    );
    tokio::task::spawn_blocking(move || {
        send_with_raw_header_name(&brokers, &topic, &raw, b"trace-\xff\xfe-id", b"t-1")
    })
    .await?;
    setup
        .produce(&setup.topics.input, &after, 10, Duration::ZERO)
        .await?;
    let plan: Vec<Planned> = before.into_iter().chain([odd]).chain(after).collect();
    let outputs = setup.read(&setup.topics, plan.len()).await?;
    stop(replica).await?;

    let (brokers, topic) = (setup.brokers.clone(), setup.topics.input.clone());
    let inputs = plan.len();
    let landed =
        tokio::task::spawn_blocking(move || read_inputs(&brokers, &topic, 1, inputs)).await?;
    let summary = check(&plan, &landed, &setup.topics, &outputs, Expect::Exact);
    say(TEST, &summary);
    let odd = outputs
        .iter()
        .find(|o| o.test_id() == "name-1")
        .expect("an output for the record with the odd header name");
    assert_eq!(odd.topic, setup.topics.audit);
    assert_eq!(odd.decision(), "invalid");
    let reason = odd.header(REASON).unwrap_or_default();
    assert!(
        reason.starts_with("header-name-not-utf8") && reason.contains("trace-"),
        "reason {reason:?}"
    );
    assert_eq!(count(&summary, &["novel"]), 2, "{summary}");
    Ok(())
}

/// A record whose payload fits the stream's limit but whose headers take
/// it past it (and past the producer's `message.max.bytes`): the whole
/// record counts, so it is `too-large` before any produce, and goes to
/// audit without its payload (key and headers kept), never refused by the
/// producer first; its partition flows on. For every distinct event:
/// exactly one copy in clean, nothing lost. (A refusal by the broker, for
/// a topic limit below the producer's, is the timeouts tests'.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_record_whose_headers_take_it_past_the_limit_is_too_large_before_any_produce(
) -> anyhow::Result<()> {
    const TEST: &str = "refused";
    const LIMIT: usize = 100 * 1024;
    let setup = Setup::new(TEST, 1);
    let producer_limit = (LIMIT + 64 * 1024).to_string();
    let stream = format!("{BANK_STREAM}\nmax_record_bytes = {LIMIT}");
    let config = setup.config(&Options {
        kafka: &[("message.max.bytes", producer_limit.as_str())],
        stream: &stream,
        ..Options::default()
    });
    let store = setup.store(&config);
    let bank = Profile::resolve("bank-txn", None, None)?;
    let new = |event| (Some(event), Kind::Original);
    let memo = "m".repeat(90 * 1024);
    let payload = format!(
        r#"{{"account_id":"ACC-1","bank_txn_id":"T-big","amount":"1.00","currency":"EUR","posted_at":"2024-03-01T10:00:00Z","memo":"{memo}"}}"#
    );
    let mut big = on_partition_0(
        "refused-1",
        b"ACC-1",
        payload.as_bytes(),
        vec![("x-attachment".into(), vec![b'a'; 80 * 1024])],
        (None, Kind::Malformed),
        &bank,
    );
    assert!(
        big.hash.is_ok(),
        "the big record is a valid bank transaction"
    );
    big.kind = Kind::Malformed;
    let plan = vec![
        good("refused-0", "T-1", new(0), &bank),
        big,
        good("refused-2", "T-2", new(1), &bank),
        good("refused-3", "T-1", (Some(0), Kind::Copy), &bank),
    ];
    let replica = start_assigned(&config, &store).await?;
    let landed = setup
        .produce(&setup.topics.input, &plan, 10, Duration::ZERO)
        .await?;
    let outputs = setup.read(&setup.topics, plan.len()).await?;
    stop(replica).await?;
    let summary = check(&plan, &landed, &setup.topics, &outputs, Expect::Exact);
    say(TEST, &summary);
    let refused = outputs
        .iter()
        .find(|o| o.test_id() == "refused-1")
        .expect("an output for the refused record");
    assert_eq!(refused.topic, setup.topics.audit);
    assert_eq!(refused.decision(), "invalid");
    assert!(
        refused.payload.is_none(),
        "the audit record kept the payload"
    );
    assert_eq!(
        refused.header("x-attachment").map(str::len),
        Some(80 * 1024),
        "its headers are kept"
    );
    let reason = refused.header(REASON).unwrap_or_default();
    assert!(
        reason.starts_with("too-large: record is ") && reason.contains(&LIMIT.to_string()),
        "reason {reason:?}"
    );
    assert_eq!(count(&summary, &["novel"]), 2, "{summary}");
    Ok(())
}

/// The guarantee: a record too large for the stream is decided `invalid`
/// with reason `too-large` before anything is produced, and when it is
/// also too large for the producer (librdkafka's default
/// `message.max.bytes`, 1,000,000) it goes to audit without its payload,
/// key and headers kept, never refused first and then called
/// `undeliverable`. The records behind it flow on; nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_record_too_large_for_the_producer_is_too_large_in_audit_without_its_payload(
) -> anyhow::Result<()> {
    const TEST: &str = "too-large-default";
    let setup = Setup::new(TEST, 1);
    let config = setup.config(&Options::default());
    let store = setup.store(&config);
    let bank = Profile::resolve("bank-txn", None, None)?;
    let huge = format!(
        r#"{{"account_id":"ACC-1","bank_txn_id":"T-huge","amount":"1.00","currency":"EUR","posted_at":"2024-03-01T10:00:00Z","memo":"{}"}}"#,
        "x".repeat(2 << 20)
    );
    let new = |event| (Some(event), Kind::Original);
    let mut oversized = poison("big-1", huge.as_bytes(), &bank);
    oversized.headers = vec![("x-trace".into(), b"kept".to_vec())];
    let inputs = vec![
        good("big-0", "T-1", new(0), &bank),
        oversized,
        good("big-2", "T-2", new(1), &bank),
    ];
    let replica = start_assigned(&config, &store).await?;
    let input = &setup.topics.input;
    let mut landed = setup
        .produce(input, &inputs[..1], 10, Duration::ZERO)
        .await?;
    landed.insert(
        inputs[1].id.clone(),
        produce_big(&setup.brokers, input, &inputs[1]).await?,
    );
    landed.extend(
        setup
            .produce(input, &inputs[2..], 10, Duration::ZERO)
            .await?,
    );
    let outputs = setup.read(&setup.topics, inputs.len()).await?;
    stop(replica).await?;

    let summary = check(&inputs, &landed, &setup.topics, &outputs, Expect::Exact);
    say(TEST, &summary);
    let big = outputs
        .iter()
        .find(|o| o.test_id() == "big-1")
        .expect("an output for the oversized record");
    assert_eq!(big.topic, setup.topics.audit);
    let reason = big.header(REASON).unwrap_or_default();
    assert!(
        reason.starts_with("too-large: "),
        "the oversized record's reason: {reason:?}"
    );
    assert_eq!(big.payload, None, "an output the producer could not send");
    assert_eq!(big.key.as_deref(), Some(&b"ACC-1"[..]), "its key is kept");
    assert_eq!(big.header("x-trace"), Some("kept"), "its headers are kept");
    Ok(())
}
