//! Which record a commit names and which it supersedes (`runs.rs`).

use super::*;

const TOKEN: OwnerToken = OwnerToken(0x0001_2a01);

fn tp(partition: i32) -> Tp {
    (Arc::from("raw.bank"), partition)
}

fn commit(partition: i32, offset: i64, runs: usize) -> Commit {
    Commit {
        tp: tp(partition),
        offset,
        gap_free: true,
        done: (0..runs as i64)
            .map(|i| (offset + 1 + 2 * i, offset + 2 + 2 * i))
            .collect(),
    }
}

fn prepare(records: &mut Records, c: &Commit) -> Prepared {
    records.prepare("Ab", StreamId(0), TOKEN, c)
}

/// What the metadata names, read back as the next owner reads it.
fn named(prepared: &Prepared) -> Option<RunsRef> {
    match metadata::parse("Ab", &prepared.text).unwrap().unwrap().runs {
        Runs::Stored(stored) => Some(stored),
        Runs::Inline(_) => None,
    }
}

#[test]
fn runs_that_fit_go_inline_and_need_no_store() {
    let mut records = Records::default();
    let c = commit(0, 100, 20);
    let prepared = prepare(&mut records, &c);
    assert_eq!(prepared.write, None);
    assert!(prepared.superseded.is_empty());
    let read = metadata::parse("Ab", &prepared.text).unwrap().unwrap();
    assert_eq!(read.runs, Runs::Inline(c.done));
}

#[test]
fn five_thousand_runs_are_written_to_a_record_the_metadata_names_with_its_digest() {
    let mut records = Records::default();
    let c = commit(3, 4_000_000_000, 5000);
    let prepared = prepare(&mut records, &c);
    assert!(prepared.text.len() < 200, "{}", prepared.text);
    let stored = named(&prepared).expect("a reference");
    let Some(Write::Put(name, content)) = &prepared.write else {
        panic!("a put: {:?}", prepared.write);
    };
    assert_eq!(
        (name.writer, name.partition, name.topic),
        (TOKEN, 3, TopicTag::of("raw.bank"))
    );
    assert_eq!((stored.writer, stored.sequence), (TOKEN.0, name.sequence));
    assert_eq!(stored.digest, metadata::digest(content));
    let text = std::str::from_utf8(content).unwrap();
    assert_eq!(
        metadata::parse_runs(text),
        Ok(c.done),
        "every run, none dropped"
    );
}

#[test]
fn a_record_is_superseded_by_the_next_commit_and_refreshed_while_its_content_stays() {
    let mut records = Records::default();
    let first = prepare(&mut records, &commit(0, 100, 5000));
    let Some(Write::Put(first_name, _)) = first.write.clone() else {
        panic!("a put");
    };
    // The same runs again (a transaction with every owned partition's
    // offsets): the same record, its expiry moved on.
    let again = prepare(&mut records, &commit(0, 100, 5000));
    assert!(matches!(again.write, Some(Write::Refresh(name, _)) if name == first_name));
    assert_eq!(named(&again), named(&first));
    assert!(again.superseded.is_empty());
    // Other runs: a new name, whatever the content; the first record is
    // needless once this commit is known committed.
    let second = prepare(&mut records, &commit(0, 102, 4999));
    let Some(Write::Put(second_name, _)) = second.write.clone() else {
        panic!("a put");
    };
    assert_ne!(second_name, first_name);
    assert_eq!(second.superseded, vec![first_name]);
    // Another partition's records are its own.
    let beside = prepare(&mut records, &commit(1, 100, 5000));
    assert!(beside.superseded.is_empty());
    assert!(
        matches!(beside.write, Some(Write::Put(name, _)) if name.sequence > second_name.sequence)
    );
    // The runs fit again: the last record is needless too.
    let inline = prepare(&mut records, &commit(0, 9000, 3));
    assert_eq!(inline.write, None);
    assert_eq!(inline.superseded, vec![second_name]);
}

#[test]
fn a_partition_that_went_leaves_its_last_record_to_the_next_owner() {
    let mut records = Records::default();
    let first = prepare(&mut records, &commit(0, 100, 5000));
    assert!(first.write.is_some());
    records.forget(&tp(0));
    // Assigned again later: nothing of before is deleted by this writer.
    let after = prepare(&mut records, &commit(0, 100, 3));
    assert!(after.superseded.is_empty());
}
