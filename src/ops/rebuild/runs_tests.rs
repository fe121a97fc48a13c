//! A lost record of finished runs made again from the outputs
//! (`runs.rs`).

use super::*;

const KEY_ID: &str = "Ab";

fn committed(offset: i64, metadata: String) -> Committed {
    Committed {
        topic: "raw.bank".into(),
        partition: 1,
        offset,
        metadata,
    }
}

/// 5,000 single-record runs above `offset`: far past what fits inline.
fn runs_above(offset: i64) -> Vec<(i64, i64)> {
    (0..5000)
        .map(|i| (offset + 1 + 2 * i, offset + 2 + 2 * i))
        .collect()
}

/// The metadata a writer's commit at `offset` carries for `runs`.
fn named_commit(offset: i64, runs: &[(i64, i64)]) -> Named {
    let content = metadata::runs_text(runs).into_bytes();
    let text = metadata::encode(
        KEY_ID,
        &Metadata {
            gap_free: true,
            runs: Runs::Stored(RunsRef {
                writer: 0x00ab_cd01,
                sequence: 7,
                digest: metadata::digest(&content),
            }),
            marks: vec![3, 4],
        },
    );
    let mut found = named(StreamId(0), KEY_ID, &[committed(offset, text)]);
    assert_eq!(found.len(), 1);
    found.remove(0)
}

/// Every output of the inputs in `runs`, with other partitions', other
/// streams' and older inputs' outputs among them.
fn read_back(missing: &Named, runs: &[(i64, i64)]) -> Finished {
    let mut finished = Finished::new(std::slice::from_ref(missing));
    finished.add(Some("raw.bank/1/3"));
    finished.add(Some("raw.bank/0/150"));
    finished.add(Some("raw.other/1/150"));
    finished.add(None);
    for &(from, to) in runs.iter().rev() {
        for offset in from..to {
            finished.add(Some(&format!("raw.bank/1/{offset}")));
        }
    }
    finished
}

#[test]
fn only_commits_that_name_a_record_are_looked_at() {
    let inline = metadata::encode(KEY_ID, &Metadata::bare(true));
    let other = "idemgate/3 Cd gaps r=1.1.00".to_string();
    let found = named(
        StreamId(0),
        KEY_ID,
        &[
            committed(5, inline),
            committed(5, other),
            committed(5, String::new()),
        ],
    );
    assert!(found.is_empty(), "{found:?}");
    let missing = named_commit(100, &runs_above(100));
    assert_eq!(missing.name.writer, OwnerToken(0x00ab_cd01));
    assert_eq!((missing.name.sequence, missing.name.partition), (7, 1));
    assert_eq!(missing.name.topic, TopicTag::of("raw.bank"));
}

#[test]
fn a_record_with_another_digest_is_not_held() {
    let runs = runs_above(100);
    let missing = named_commit(100, &runs);
    let content = metadata::runs_text(&runs).into_bytes();
    assert!(holds(&missing.reference, Some(&content)));
    assert!(!holds(&missing.reference, Some(b"1.1")));
    assert!(!holds(&missing.reference, None));
}

#[test]
fn outputs_that_give_the_named_runs_write_the_record_back_under_its_name() {
    let runs = runs_above(100);
    let missing = named_commit(100, &runs);
    let finished = read_back(&missing, &runs);
    assert_eq!(finished.runs("raw.bank", 1), runs);
    let made = recreate(
        KEY_ID,
        &missing,
        &finished.runs("raw.bank", 1),
        OwnerToken(9),
        1,
    );
    let Recreate::AsNamed { name, content } = made else {
        panic!("written back as named: {made:?}");
    };
    assert_eq!(name, missing.name);
    assert!(holds(&missing.reference, Some(&content)));
}

#[test]
fn outputs_past_the_named_runs_go_into_a_new_record_and_commit() {
    let runs = runs_above(100);
    let missing = named_commit(100, &runs);
    // At least once: one more output, delivered after the last commit.
    let mut more = runs.clone();
    more.push((20_000, 20_001));
    let finished = read_back(&missing, &more);
    let made = recreate(
        KEY_ID,
        &missing,
        &finished.runs("raw.bank", 1),
        OwnerToken(9),
        4,
    );
    let Recreate::Recommit {
        record: Some((name, content)),
        metadata: text,
    } = made
    else {
        panic!("a record of the rebuild's own: {made:?}");
    };
    assert_eq!((name.writer, name.sequence), (OwnerToken(9), 4));
    assert_eq!((name.topic, name.partition), (missing.name.topic, 1));
    let read = metadata::parse(KEY_ID, &text).unwrap().unwrap();
    assert!(read.gap_free);
    let Runs::Stored(reference) = read.runs else {
        panic!("a reference: {text}");
    };
    assert_eq!((reference.writer, reference.sequence), (9, 4));
    assert_eq!(
        read.marks,
        vec![3, 4],
        "the commit's progress marks carried"
    );
    assert!(holds(&reference, Some(&content)));
    let back = metadata::parse_runs(std::str::from_utf8(&content).unwrap()).unwrap();
    assert_eq!(back, more);
}

#[test]
fn runs_that_fit_go_inline_into_the_new_commit() {
    let missing = named_commit(100, &runs_above(100));
    let finished = read_back(&missing, &[(101, 150), (160, 161)]);
    let made = recreate(
        KEY_ID,
        &missing,
        &finished.runs("raw.bank", 1),
        OwnerToken(9),
        4,
    );
    let Recreate::Recommit {
        record: None,
        metadata: text,
    } = made
    else {
        panic!("inline: {made:?}");
    };
    let read = metadata::parse(KEY_ID, &text).unwrap().unwrap();
    assert_eq!(read.runs, Runs::Inline(vec![(101, 150), (160, 161)]));
    assert_eq!(
        read.marks,
        vec![3, 4],
        "the commit's progress marks carried"
    );
}
