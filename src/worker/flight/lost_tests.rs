//! A stream whose store lost its state (docs/design.md §8.2), in the
//! flight: what a round answered `StoreLost` and every record after it.

use std::time::Instant;

use super::tests::{answer_all, deliver_all, flight, input, print, stage, tp, TOKEN};
use super::*;
use crate::store::{ClaimOutcome, RoundAnswer};

const WON: ClaimOutcome = ClaimOutcome::Won { fresh: true };
const LOST: ClaimOutcome = ClaimOutcome::StoreLost;

fn answer(f: &mut Flight, round: Round, outcomes: Vec<ClaimOutcome>) {
    let answer = RoundAnswer {
        outcomes,
        ..RoundAnswer::default()
    };
    f.answered(round, answer, Instant::now(), |_| false);
}

#[test]
fn a_fail_closed_stream_whose_store_lost_its_state_decides_nothing_more() {
    let mut f = flight(None);
    for offset in 0..3 {
        f.arrive(input(0, offset), 0, print(offset as u8 + 1), 1);
    }
    // The round in flight meets the loss: record 0's claim was judged
    // (another stream's identity, say), 1 and 2 met the loss.
    let round = f.take_round(Instant::now(), 100, TOKEN).expect("round");
    assert_eq!(round.claims.len(), 3);
    assert!(f.lose(0, false), "the first time");
    assert!(!f.lose(0, false), "said once");
    answer(&mut f, round, vec![WON, LOST, LOST]);
    assert_eq!(stage(&f, 0, 0), Stage::Produce);
    for offset in [1, 2] {
        assert_eq!(stage(&f, 0, offset), Stage::Claim, "undecided");
    }
    deliver_all(&mut f);
    f.arrive(input(0, 3), 0, print(9), 1);
    // What was decided before settles; nothing is claimed again.
    let round = answer_all(&mut f, vec![]);
    assert!(round.claims.is_empty(), "{:?}", round.claims);
    assert_eq!(stage(&f, 0, 0), Stage::Finished);
    let round = f.take_round(Instant::now(), 100, TOKEN);
    assert!(
        round.is_none_or(|r| r.claims.is_empty()),
        "a parked record is never claimed again"
    );
    assert_eq!(stage(&f, 0, 3), Stage::Claim);
    // Committed up to what was decided, not past it.
    let commits = f.commits(None);
    assert_eq!(commits.len(), 1);
    assert_eq!(commits[0].offset, 1);
    // Its partitions pause; the stream's other partition too.
    let mut stopped: Vec<i32> = f.stopped().map(|tp| tp.1).collect();
    stopped.sort_unstable();
    assert_eq!(stopped, vec![0, 1]);
}

#[test]
fn a_fail_open_stream_whose_store_lost_its_state_passes_records_unverified() {
    let mut f = flight(None);
    for offset in 0..2 {
        f.arrive(input(0, offset), 0, print(offset as u8 + 1), 1);
    }
    let round = f.take_round(Instant::now(), 100, TOKEN).expect("round");
    f.lose(0, true);
    answer(&mut f, round, vec![LOST, LOST]);
    for offset in [0, 1] {
        assert_eq!(stage(&f, 0, offset), Stage::Produce);
        let record = f.record(&tp(0), offset).unwrap();
        assert_eq!(record.decision, Some(Decision::Unverified));
        assert!(record.claim.is_none(), "nothing to settle");
    }
    f.arrive(input(0, 2), 0, print(7), 1);
    let round = f.take_round(Instant::now(), 100, TOKEN);
    assert!(round.is_none_or(|r| r.claims.is_empty()), "not claimed");
    assert_eq!(
        f.record(&tp(0), 2).unwrap().decision,
        Some(Decision::Unverified)
    );
    assert_eq!(f.stopped().count(), 0, "its partitions keep flowing");
    deliver_all(&mut f);
    let commits = f.commits(None);
    assert_eq!(
        commits[0].offset, 3,
        "unverified records finish at delivery"
    );
}

#[test]
fn a_waiting_record_of_a_lost_stream_is_not_claimed_again() {
    let mut f = flight(None);
    f.arrive(input(0, 0), 0, print(1), 1);
    let holder = Coordinates {
        topic: TopicTag::of("raw"),
        partition: 1,
        offset: 40,
    };
    answer_all(&mut f, vec![ClaimOutcome::Held { holder }]);
    assert!(matches!(stage(&f, 0, 0), Stage::Wait { .. }));
    f.lose(0, false);
    // Due after its backoff: parked, not claimed.
    let later = Instant::now() + std::time::Duration::from_secs(2);
    let round = f.take_round(later, 100, TOKEN);
    assert!(round.is_none_or(|r| r.claims.is_empty()));
    assert_eq!(stage(&f, 0, 0), Stage::Claim);
}

/// A record of finished runs the committed metadata names is missing
/// (docs/design.md §7): the stream is lost before its records arrive, and
/// an invalid record among them, which needs no claim, may be one the
/// record listed: parked, not sent to audit a second time. Fail-open, it
/// goes to audit as it would.
#[test]
fn an_invalid_record_of_a_stopped_stream_is_parked_not_sent_again() {
    use crate::fingerprint::Invalid;
    let mut f = flight(Some(0));
    assert!(f.lose(0, false));
    f.arrive(input(0, 0), 0, Err(Invalid::NotObject), 1);
    f.arrive(input(0, 1), 0, print(1), 1);
    assert_eq!(stage(&f, 0, 0), Stage::Claim, "parked");
    assert!(f.take_sends(Instant::now()).is_empty(), "nothing to send");
    assert!(f.commits(None).is_empty(), "nothing committed");

    let mut f = flight(Some(0));
    assert!(f.lose(0, true));
    f.arrive(input(0, 0), 0, Err(Invalid::NotObject), 1);
    assert_eq!(stage(&f, 0, 0), Stage::Produce, "fail-open: to audit");
}

/// The committed metadata names a record of finished runs the store lost
/// (docs/design.md §7): the partition is never committed over in this
/// process, under either guarantee, so `rebuild` still finds the name.
#[test]
fn a_partition_whose_record_of_runs_was_lost_is_never_committed_over() {
    let mut f = super::tests::assigned(Some(5), None);
    // Below the watermark (10): finished on arrival, so a commit would
    // move to 6.
    f.arrive(input(0, 5), 0, print(1), 1);
    assert_eq!(stage(&f, 0, 5), Stage::Finished);
    let mut g = super::tests::assigned(Some(5), None);
    g.arrive(input(0, 5), 0, print(1), 1);
    assert_eq!(g.commits(None).len(), 1, "without it, a commit");

    f.keep_commit(&tp(0));
    assert!(f.commits(None).is_empty(), "at least once");
    assert!(f.txn_offsets(true).is_empty(), "exactly once");
}
