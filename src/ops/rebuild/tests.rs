use super::*;
use crate::config::Config;
use crate::fingerprint::Fingerprint;

const HOUR: Millis = 3_600_000;
const NOW: Millis = 1_800_000_000_000;

fn config(stream: &str) -> Config {
    Config::parse(&format!(
        "[kafka]\n\"bootstrap.servers\" = \"b:9092\"\n\n[[streams]]\nname = \"bank\"\n\
         inputs = [\"raw.bank\", \"raw.bank2\"]\nclean = \"clean.bank\"\naudit = \"audit.bank\"\n\
         profile = \"payload\"\n{stream}\n"
    ))
    .expect("config")
}

fn exact() -> Config {
    config("mode = \"exact\"\nttl = { explicit = \"1h\" }")
}

fn print_of(config: &Config, payload: &[u8]) -> Fingerprint {
    let record = RecordView {
        key: None,
        payload: Some(payload),
        headers: &[],
    };
    let stream = &config.streams[0];
    fingerprint(&stream.profile, stream.max_record_bytes, &record).unwrap()
}

/// A clean output's headers as idemgate writes them.
fn headers(decision: &str, hash: &SourceHash, input: &str) -> crate::worker::HeaderList {
    [
        (DECISION, decision.to_string()),
        (SOURCE_HASH, hash.to_string()),
        (INPUT, input.to_string()),
    ]
    .into_iter()
    .map(|(n, v)| (n.to_string(), Some(v.into_bytes())))
    .collect()
}

fn add(
    rebuild: &mut Rebuild<'_>,
    headers: &[(String, Option<Vec<u8>>)],
    payload: &[u8],
    at: Millis,
) {
    rebuild.add(&CleanOutput {
        timestamp: Some(at),
        headers,
        key: None,
        payload: Some(payload),
    });
}

#[test]
fn a_novel_output_restores_its_inputs_settled_claim_with_the_digest_computed_again() {
    let config = exact();
    let payload = br#"{"amount":"10.50","id":7}"#;
    let print = print_of(&config, payload);
    let mut rebuild = Rebuild::new(StreamId(0), &config.streams[0], NOW);
    let at = NOW - 10 * 60_000;
    add(
        &mut rebuild,
        &headers("novel", &print.hash, "raw.bank2/2/17"),
        payload,
        at,
    );
    assert_eq!(
        rebuild.claims(),
        vec![Restored {
            stream: StreamId(0),
            hash: print.hash,
            digest: print.digest,
            holder: Coordinates {
                topic: TopicTag::of("raw.bank2"),
                partition: 2,
                offset: 17,
            },
            at,
            expires_at: at + HOUR,
        }]
    );
    assert!(
        rebuild.inserts().is_empty(),
        "an exact stream has no tier 2"
    );
    assert!(rebuild.skipped.is_empty());
    assert_eq!(rebuild.window_start(), NOW - HOUR);
}

#[test]
fn a_claim_is_dated_by_its_decision_not_by_its_inputs_old_timestamp() {
    // A batch re-sent from a file: its CreateTime is two days old, but it
    // was decided ten minutes ago, and its claim lives until then + 1h.
    let config = exact();
    let payload = br#"{"amount":"3.00","id":9}"#;
    let print = print_of(&config, payload);
    let mut rebuild = Rebuild::new(StreamId(0), &config.streams[0], NOW);
    let decided = NOW - 10 * 60_000;
    let mut written = headers("novel", &print.hash, "raw.bank/0/4");
    written.push((
        DECIDED_AT.to_string(),
        Some(decided.to_string().into_bytes()),
    ));
    add(&mut rebuild, &written, payload, NOW - 48 * HOUR);
    let claims = rebuild.claims();
    assert_eq!(
        claims
            .iter()
            .map(|c| (c.at, c.expires_at))
            .collect::<Vec<_>>(),
        vec![(decided, decided + HOUR)],
        "{:?}",
        rebuild.skipped
    );
}

#[test]
fn outputs_that_held_no_live_claim_restore_nothing_and_are_counted() {
    let config = exact();
    let payload = br#"{"id":1}"#;
    let hash = print_of(&config, payload).hash;
    let mut rebuild = Rebuild::new(StreamId(0), &config.streams[0], NOW);
    let recent = NOW - 60_000;
    add(
        &mut rebuild,
        &headers("unverified", &hash, "raw.bank/0/1"),
        payload,
        recent,
    );
    add(
        &mut rebuild,
        &headers("novel", &hash, "raw.other/0/1"),
        payload,
        recent,
    );
    add(
        &mut rebuild,
        &headers("novel", &hash, "raw.bank/0"),
        payload,
        recent,
    );
    add(
        &mut rebuild,
        &headers("novel", &hash, "raw.bank/0/1"),
        payload,
        NOW - 2 * HOUR,
    );
    let edited = br#"{"id":2}"#;
    add(
        &mut rebuild,
        &headers("novel", &hash, "raw.bank/0/2"),
        edited,
        recent,
    );
    rebuild.add(&CleanOutput {
        timestamp: None,
        headers: &headers("novel", &hash, "raw.bank/0/3"),
        key: None,
        payload: Some(payload),
    });
    assert!(rebuild.claims().is_empty());
    assert_eq!(rebuild.read, 6);
    assert_eq!(
        rebuild.skipped,
        BTreeMap::from([
            (Skip::NotNovel, 1),
            (Skip::OtherStream, 1),
            (Skip::Unreadable, 1),
            (Skip::NoTimestamp, 1),
            (Skip::ProfileChanged, 1),
            (Skip::Expired, 1),
        ])
    );
}

#[test]
fn the_later_of_two_outputs_of_one_hash_keeps_the_claim() {
    let config = exact();
    let payload = br#"{"id":1}"#;
    let hash = print_of(&config, payload).hash;
    let mut rebuild = Rebuild::new(StreamId(0), &config.streams[0], NOW);
    add(
        &mut rebuild,
        &headers("novel", &hash, "raw.bank/1/50"),
        payload,
        NOW - 60_000,
    );
    add(
        &mut rebuild,
        &headers("novel", &hash, "raw.bank/0/9"),
        payload,
        NOW - 120_000,
    );
    let claims = rebuild.claims();
    assert_eq!(claims.len(), 1);
    assert_eq!(
        (claims[0].holder.partition, claims[0].holder.offset),
        (1, 50)
    );
}

#[test]
fn a_tiered_stream_inserts_into_tier_2_beyond_its_tier1_ttl() {
    let config = config(
        "mode = \"tiered\"\nttl = { explicit = \"12h\" }\ntier1_ttl = \"2h\"\npeak_rate = 100",
    );
    let payload = br#"{"id":1}"#;
    let hash = print_of(&config, payload).hash;
    let mut rebuild = Rebuild::new(StreamId(0), &config.streams[0], NOW);
    add(
        &mut rebuild,
        &headers("novel", &hash, "raw.bank/0/1"),
        payload,
        NOW - 5 * HOUR,
    );
    assert!(rebuild.claims().is_empty(), "past its tier-1 ttl");
    let inserts = rebuild.inserts();
    assert_eq!(inserts.len(), 1);
    assert_eq!((inserts[0].hash, inserts[0].at), (hash, NOW - 5 * HOUR));
    // The window reaches back as far as a generation lives.
    assert!(rebuild.window_start() <= NOW - 24 * HOUR);
}

#[test]
fn only_idemgates_gap_free_commits_raise_watermarks() {
    let commit = |partition, metadata: &str| Committed {
        topic: "raw.bank".into(),
        partition,
        offset: 40,
        metadata: metadata.into(),
    };
    let found = watermarks(
        StreamId(0),
        "Ab",
        &[
            commit(0, "idemgate/2 Ab gap-free done=41-43"),
            commit(1, "idemgate/2 Ab gaps"),
            commit(2, ""),
            commit(3, "idemgate/2 Cd gap-free"),
        ],
    );
    let raised: Vec<Option<i64>> = found.iter().map(|w| w.raise.map(|r| r.end)).collect();
    assert_eq!(raised, vec![Some(40), None, None, None]);
    let raise = found[0].raise.unwrap();
    assert_eq!((raise.start, raise.topic), (0, TopicTag::of("raw.bank")));
}

#[test]
fn input_coordinates_are_read_from_the_right() {
    assert_eq!(parse_input("raw.bank/3/1200"), Some(("raw.bank", 3, 1200)));
    assert_eq!(parse_input("raw.bank/3"), None);
    assert_eq!(parse_input("/3/1"), None);
    assert_eq!(parse_input("raw/x/1"), None);
}

#[test]
fn a_record_key_stream_restores_claims_from_the_keys_its_outputs_keep() {
    let config = Config::parse(
        "[kafka]\n\"bootstrap.servers\" = \"b:9092\"\n\n[[streams]]\nname = \"hooks\"\n\
         inputs = [\"raw.hooks\"]\nclean = \"clean.hooks\"\naudit = \"audit.hooks\"\n\
         profile = \"record-key\"\nignore = [\"attempt\"]\nmode = \"exact\"\n\
         ttl = { explicit = \"1h\" }\n",
    )
    .expect("config");
    let stream = &config.streams[0];
    let payload = br#"{"id":7,"attempt":2}"#;
    let keyed = RecordView {
        key: Some(b"evt-7"),
        payload: Some(payload),
        headers: &[],
    };
    let print = fingerprint(&stream.profile, stream.max_record_bytes, &keyed).unwrap();
    let mut rebuild = Rebuild::new(StreamId(0), stream, NOW);
    let at = NOW - 10 * 60_000;
    for (key, input) in [
        (Some(&b"evt-7"[..]), "raw.hooks/0/3"),
        (None, "raw.hooks/0/4"),
    ] {
        rebuild.add(&CleanOutput {
            timestamp: Some(at),
            headers: &headers("novel", &print.hash, input),
            key,
            payload: Some(payload),
        });
    }
    let claims = rebuild.claims();
    assert_eq!(claims.len(), 1, "{claims:?}");
    assert_eq!(
        (claims[0].hash, claims[0].digest),
        (print.hash, print.digest)
    );
    assert_eq!(claims[0].holder.offset, 3);
    // The keyless copy cannot give the hash it carries.
    assert_eq!(rebuild.skipped, BTreeMap::from([(Skip::ProfileChanged, 1)]));
}
