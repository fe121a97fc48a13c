//! Records of finished runs (docs/design.md §7): what a commit's metadata
//! names where its runs do not fit in it. Written under unique names,
//! read back whole, their expiry moved on, deleted by their writer, and
//! gone with a store that lost its state.

use idemgate::store::RunsName;

use super::*;

fn named(partition: i32, writer: OwnerToken, sequence: u64) -> RunsName {
    RunsName {
        stream: EXACT,
        topic: topic(),
        partition,
        writer,
        sequence,
    }
}

pub async fn a_record_of_runs_reads_back_whole_under_its_name_until_its_writer_deletes_it(
    h: &dyn Harness,
) {
    let store = h.open(streams()).await;
    // Five thousand runs, as the compact list a commit's metadata would
    // carry: far past what a commit's metadata holds.
    let content: Vec<u8> = (0..5000)
        .map(|i| format!("{i:x}.1"))
        .collect::<Vec<_>>()
        .join(",")
        .into_bytes();
    let first = named(PARTITION, TOKEN, 1);
    let second = named(PARTITION, TOKEN, 2);
    // Same content, other names: another writer, another partition.
    let stranger = named(PARTITION, OTHER, 1);
    let beside = named(PARTITION + 1, TOKEN, 1);
    for name in [&first, &second, &stranger, &beside] {
        assert_eq!(store.get_runs(name, T0).await.unwrap(), None, "{name:?}");
        assert!(!store.refresh_runs(name, T0).await.unwrap(), "{name:?}");
    }
    store.put_runs(&first, &content, T0).await.unwrap();
    store.put_runs(&second, b"0.1", T0).await.unwrap();
    store.put_runs(&stranger, &content, T0).await.unwrap();
    store.put_runs(&beside, &content, T0).await.unwrap();
    // A retry of the first write (its answer lost) changes nothing.
    store.put_runs(&first, &content, T0).await.unwrap();

    // Another connection reads it an hour later.
    let other = h.open(streams()).await;
    let read = |name| {
        let other = other.clone();
        async move { other.get_runs(&name, T0 + HOUR).await.unwrap() }
    };
    assert_eq!(read(first).await.as_deref(), Some(&content[..]));
    assert_eq!(read(second).await.as_deref(), Some(&b"0.1"[..]));
    assert!(other.refresh_runs(&first, T0 + HOUR).await.unwrap());

    // The writer's later commit is known committed: its earlier record
    // goes, and nothing of anyone else's.
    store.delete_runs(&[first]).await.unwrap();
    assert_eq!(read(first).await, None);
    assert!(!other.refresh_runs(&first, T0 + HOUR).await.unwrap());
    assert_eq!(read(stranger).await.as_deref(), Some(&content[..]));
    assert_eq!(read(beside).await.as_deref(), Some(&content[..]));
    // Deleting what is gone is no error.
    store.delete_runs(&[first, second]).await.unwrap();
    assert_eq!(read(second).await, None);

    // A store that lost its state lacks them: the reader calls that a
    // store loss (the worker's part), never an empty list.
    h.lose_state().await;
    assert_eq!(read(stranger).await, None);
    // Written again, it carries its expiry (on Redis every key must).
    store.put_runs(&first, &content, T0).await.unwrap();
    assert_eq!(read(first).await.as_deref(), Some(&content[..]));
}

/// The record lives the stream's watermark TTL (a week at least) from
/// the last commit that named it, on the store's clock (the memory store
/// and PostgreSQL age it on the caller's timestamps; Redis on its own
/// clock, so there only the TTL set is looked at).
pub async fn a_record_of_runs_expires_a_watermark_ttl_after_the_last_commit_naming_it(
    h: &dyn Harness,
) {
    let store = h.open(streams()).await;
    let name = named(PARTITION, TOKEN, 7);
    let week = streams()[EXACT.0].watermark_ttl().as_millis() as i64;
    store.put_runs(&name, b"0.1", T0).await.unwrap();
    assert!(store.refresh_runs(&name, T0 + week - MINUTE).await.unwrap());
    // Refreshed a minute before it lapsed: still there a week after the
    // first write.
    assert!(store
        .get_runs(&name, T0 + week + MINUTE)
        .await
        .unwrap()
        .is_some());
}
