//! Progress marks on Redis (docs/design.md §8.2): a store that came back
//! older keeps its identity, and its marks tell it from a live one. The
//! restore is played by writing the marks back to what an earlier
//! snapshot held, and deleting what was claimed after it (what an RDB
//! snapshot taken between the two commits would bring back); the e2e test
//! `e2e::went_back` restarts a real server from a real snapshot.
//!
//! Guarantee checked: once a commit recorded marks, no replica judges a
//! claim on a store below them (every copy is answered `StoreLost`), a
//! replica does not start on it, and only a rebuild lets them on again.

use std::sync::Arc;

use async_trait::async_trait;
use idemgate::fingerprint::SourceHash;
use idemgate::store::redis::{RedisOptions, RedisStore, Tier1Layout};
use idemgate::store::{
    at_start, AtStart, Check, ClaimOutcome, ClaimStore, Marked, Publish, Refusal, StoreIdentity,
    StreamLost,
};

use super::conformance::{claim, claim_on, hash, on, streams, EXACT, T0};
use super::postgres_only::{admin, Postgres};
use super::{connections, Redis};

/// A store that can be set back: what the test needs of each backend.
#[async_trait]
trait Restorable: Send + Sync {
    async fn open(&self) -> Arc<dyn ClaimStore>;
    fn salt(&self) -> String;
    /// Sets the exact stream's marks back to `marks`, as a snapshot taken
    /// when they were so would bring them back; answers the places set
    /// back (on a cluster only the first node's tags).
    async fn write_back(&self, marks: &[u64]) -> Vec<u8>;
    /// The place a claim of `hash` falls in.
    fn place(&self, hash: &SourceHash) -> u8;
}

#[async_trait]
impl Restorable for Redis {
    async fn open(&self) -> Arc<dyn ClaimStore> {
        open(self).await
    }
    fn salt(&self) -> String {
        self.prefix.clone()
    }
    async fn write_back(&self, marks: &[u64]) -> Vec<u8> {
        write_marks_back(self, marks).await
    }
    fn place(&self, hash: &SourceHash) -> u8 {
        hash.0[16] & 0x3f
    }
}

#[async_trait]
impl Restorable for Postgres {
    async fn open(&self) -> Arc<dyn ClaimStore> {
        self.store(streams()).await
    }
    fn salt(&self) -> String {
        self.schema.clone()
    }
    async fn write_back(&self, marks: &[u64]) -> Vec<u8> {
        let key_id = &streams()[EXACT.0].key_id;
        let set = admin()
            .await
            .execute(
                &format!(
                    "UPDATE {}.identities SET identity = $1 WHERE stream = $2",
                    self.schema
                ),
                &[&marks[0].to_string(), &format!("{key_id}/m")],
            )
            .await
            .expect("mark set back");
        assert_eq!(set, 1, "the mark's row");
        vec![0]
    }
    fn place(&self, _: &SourceHash) -> u8 {
        0
    }
}

const WON: ClaimOutcome = ClaimOutcome::Won { fresh: true };

async fn open(r: &Redis) -> Arc<RedisStore> {
    let options = RedisOptions {
        filter_backend: Some(r.backend),
        tier1_layout: Some(Tier1Layout::Grouped),
        ..RedisOptions::new(r.target.clone(), r.prefix.clone())
    };
    Arc::new(
        RedisStore::connect(&options, streams())
            .await
            .expect("connect"),
    )
}

fn marks_of(marked: Marked) -> Vec<u64> {
    match marked {
        Marked::At(marks) => marks,
        other => panic!("marks expected, got {other:?}"),
    }
}

/// Sets the exact stream's marks to `marks` on the first node alone (on
/// one server, every tag; on a cluster, the tags that node serves), as a
/// snapshot taken when they were so would bring back on that node.
/// Answers the tags written back.
async fn write_marks_back(r: &Redis, marks: &[u64]) -> Vec<u8> {
    let key_id = &streams()[EXACT.0].key_id;
    let mut conn = connections(r).await.remove(0);
    let mut set = Vec::new();
    for (tag, mark) in marks.iter().enumerate() {
        let key = format!("{}{key_id}:m{{{tag:02x}}}", r.prefix);
        // On a cluster another node's slot answers MOVED.
        let answer: redis::RedisResult<()> = redis::cmd("SET")
            .arg(&key)
            .arg(mark)
            .query_async(&mut conn)
            .await;
        if answer.is_ok() {
            set.push(tag as u8);
        }
    }
    assert!(!set.is_empty(), "no tag written back");
    set
}

async fn store_went_back_is_told_from_a_live_one(r: &dyn Restorable) {
    let salt = r.salt();
    let writer = r.open().await;
    let found = writer
        .write_identity(EXACT, StoreIdentity::random(), false)
        .await
        .unwrap();
    let AtStart::Adopt(identity) = at_start(&found) else {
        panic!("{found:?}")
    };
    writer.adopt_identity(EXACT, identity);

    // Two commits, each after its claims; the snapshot falls between.
    let before: Vec<_> = (0..20)
        .map(|n| claim(EXACT, hash(&salt, n), n as i64, T0))
        .collect();
    assert_eq!(writer.claim(&before).await.unwrap(), vec![WON; 20]);
    let snapshot = marks_of(writer.advance_marks(EXACT).await.unwrap());
    assert!(snapshot.len() == 64 || snapshot.len() == 1, "{snapshot:?}");
    assert!(snapshot.iter().all(|&m| m >= 1), "{snapshot:?}");
    let after: Vec<_> = (20..40)
        .map(|n| claim(EXACT, hash(&salt, n), n as i64, T0))
        .collect();
    assert_eq!(writer.claim(&after).await.unwrap(), vec![WON; 20]);
    let recorded = marks_of(writer.advance_marks(EXACT).await.unwrap());
    assert!(recorded.iter().zip(&snapshot).all(|(r, s)| r > s));
    assert_eq!(
        writer.check_marks(EXACT).await.unwrap(),
        Marked::At(recorded.clone()),
        "a live store: a check bumps nothing"
    );

    // The store comes back as the snapshot held it (on a cluster, one node
    // alone): the later claims on it gone.
    let back = r.write_back(&snapshot).await;
    let lost: Vec<_> = after
        .iter()
        .filter(|c| back.contains(&r.place(&c.hash)))
        .collect();
    assert!(
        lost.len() >= 2,
        "{} of the later claims on the node",
        lost.len()
    );
    let freed = Publish {
        releases: lost
            .iter()
            .map(|c| idemgate::store::Held::from(*c))
            .collect(),
        ..Publish::default()
    };
    let released = writer.publish(&freed).await.unwrap().released;
    assert!(released.iter().all(|r| *r), "{released:?}");

    // A replica that read the recorded marks from the commits (at its
    // start or an assignment) checks before its next round: a copy of a
    // lost event is not judged novel.
    let other = r.open().await;
    other.adopt_identity(EXACT, identity);
    other.raise_floors(EXACT, &recorded);
    let copy = claim_on(EXACT, lost[0].hash, on(9, 500), T0 + 1000);
    let answer = other
        .round(&Publish::default(), &[copy], &[])
        .await
        .unwrap();
    let behind = vec![StreamLost {
        stream: EXACT,
        how: Check::Behind,
    }];
    assert_eq!(answer.lost, behind);
    assert_eq!(answer.outcomes, vec![ClaimOutcome::StoreLost]);

    // Its finding is in the store: the writer's own rounds stop too,
    // whatever it knew, and so does its timed check.
    let copy = claim_on(EXACT, lost[1].hash, on(9, 501), T0 + 1000);
    let answer = writer
        .round(&Publish::default(), &[copy], &[])
        .await
        .unwrap();
    assert_eq!(answer.outcomes, vec![ClaimOutcome::StoreLost]);
    assert_eq!(writer.verify_identity(&[EXACT]).await.unwrap(), behind);
    // A bump below the floor is refused: nothing grows back over the loss.
    assert_eq!(writer.advance_marks(EXACT).await.unwrap(), Marked::Behind);

    // A replica starting now is refused, naming the cause.
    let fresh = r.open().await;
    let found = fresh.find_identity(EXACT).await.unwrap();
    assert_eq!(at_start(&found), AtStart::Refuse(Refusal::WentBack));

    // A rebuild raises the marks to the recorded ones and writes a new
    // identity: replicas start and decide again.
    fresh.restore_marks(EXACT, &recorded).await.unwrap();
    let rebuilt = StoreIdentity::random();
    let written = fresh.write_identity(EXACT, rebuilt, true).await.unwrap();
    assert_eq!(at_start(&written), AtStart::Adopt(rebuilt));
    fresh.adopt_identity(EXACT, rebuilt);
    fresh.raise_floors(EXACT, &recorded);
    // (On a cluster the tags of the nodes that did not go back were
    // bumped on by the refused bump: a live tag's mark moves on freely.)
    let now = marks_of(fresh.check_marks(EXACT).await.unwrap());
    assert!(now.iter().zip(&recorded).all(|(n, r)| n >= r), "{now:?}");
    let new = claim(EXACT, hash(&salt, 99), 99, T0 + 2000);
    let answer = fresh.round(&Publish::default(), &[new], &[]).await.unwrap();
    assert!(answer.lost.is_empty(), "{:?}", answer.lost);
    assert_eq!(answer.outcomes, vec![WON]);
}

#[tokio::test]
async fn a_store_that_went_back_is_told_from_a_live_one_on_one_server() {
    store_went_back_is_told_from_a_live_one(&Redis::new("bitmap", "marks-back")).await;
}

#[tokio::test]
async fn a_cluster_whose_nodes_went_back_is_told_from_a_live_one() {
    store_went_back_is_told_from_a_live_one(&Redis::new("cluster", "marks-back")).await;
}

#[tokio::test]
async fn a_postgres_that_went_back_is_told_from_a_live_one() {
    store_went_back_is_told_from_a_live_one(&Postgres::new("marks-back").await).await;
}
