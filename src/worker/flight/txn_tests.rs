//! Exactly once in the flight: deliveries wait for their transaction, the
//! transaction's offsets and metadata, a new owner's settling of what the
//! last one's transaction listed (docs/design.md §7).

use std::time::Instant;

use super::tests::print;
use super::*;
use crate::store::{ClaimOutcome, RoundAnswer, Watermark};

const TOKEN: OwnerToken = OwnerToken(0x0200);
const WON: ClaimOutcome = ClaimOutcome::Won { fresh: true };

fn tp() -> Tp {
    ("raw".into(), 0)
}

/// A record of partition 0.
fn input(offset: i64) -> Input {
    super::tests::input(0, offset)
}

/// A transactional flight owning partition 0, resumed as `resume` says,
/// its watermark read as `watermark`.
fn flight(resume: Resume, watermark: i64) -> Flight {
    settling(super::Settle::WithTransaction, resume, watermark)
}

/// The same, settling as `settle` says.
fn settling(settle: super::Settle, resume: Resume, watermark: i64) -> Flight {
    let mut flight = Flight::new(settle);
    flight.assign(tp(), 0, resume);
    let round = flight
        .take_round(Instant::now(), 100, TOKEN)
        .expect("a round reads the watermark");
    let answer = RoundAnswer {
        raised: round.publish.raises.iter().map(|r| r.end).collect(),
        watermarks: vec![Watermark {
            stream: StreamId(0),
            topic: TopicTag::of("raw"),
            partition: 0,
            below: watermark,
        }],
        ..RoundAnswer::default()
    };
    flight.answered(round, answer, Instant::now(), |_| true);
    flight
}

fn stage(flight: &Flight, offset: i64) -> Stage {
    flight.record(&tp(), offset).expect("record").stage
}

/// One round, every claim answered with `outcomes`, every write accepted.
fn round(flight: &mut Flight, outcomes: Vec<ClaimOutcome>) -> Publish {
    let round = flight
        .take_round(Instant::now(), 100, TOKEN)
        .expect("round");
    let publish = round.publish.clone();
    let answer = RoundAnswer {
        raised: round.publish.raises.iter().map(|r| r.end).collect(),
        done: vec![true; round.publish.done.len()],
        released: vec![true; round.publish.releases.len()],
        outcomes,
        ..RoundAnswer::default()
    };
    flight.answered(round, answer, Instant::now(), |_| true);
    publish
}

fn deliver_all(flight: &mut Flight) -> Vec<i64> {
    let mut sent = Vec::new();
    for (tp, offset) in flight.take_sends(Instant::now()) {
        let epoch = flight.record(&tp, offset).unwrap().epoch;
        flight.reported(&tp, offset, epoch, Ok(()), Instant::now());
        sent.push(offset);
    }
    sent
}

#[test]
fn a_delivery_settles_only_after_its_transaction_commits() {
    let mut f = flight(Resume::default(), 0);
    for offset in 0..3 {
        assert_eq!(
            f.arrive(input(offset), 0, print(offset as u8), 1),
            Arrived::Kept
        );
    }
    round(&mut f, vec![WON; 3]);
    assert_eq!(deliver_all(&mut f), vec![0, 1, 2]);
    assert_eq!(stage(&f, 0), Stage::Produced);
    // Inside the open transaction: no raise covers them, no done flag.
    let before = f.take_round(Instant::now(), 100, TOKEN);
    assert!(
        before.as_ref().is_none_or(|r| r.publish.is_empty()),
        "settled before the transaction committed: {:?}",
        before.map(|r| r.publish)
    );
    // Tier-2 inserts go before the commit, once.
    let inserts = f.take_txn_inserts();
    assert_eq!(inserts.inserts.len(), 3);
    assert!(f.take_txn_inserts().inserts.is_empty());
    let offsets = f.txn_offsets(false);
    assert_eq!(offsets.len(), 1);
    assert_eq!((offsets[0].offset, offsets[0].done.clone()), (3, vec![]));
    assert!(offsets[0].gap_free);
    assert!(f.txn_offsets(false).is_empty(), "nothing moved since");
    assert_eq!(f.txn_offsets(true).len(), 1, "unless asked for all");
    f.seal_txn();
    f.txn_committed();
    assert_eq!(stage(&f, 0), Stage::Delivered);
    let publish = round(&mut f, vec![]);
    assert_eq!(publish.raises.len(), 1);
    assert_eq!((publish.raises[0].start, publish.raises[0].end), (0, 3));
    assert!(publish.inserts.is_empty(), "inserted before the commit");
    assert_eq!(stage(&f, 2), Stage::Finished);
}

/// The runs noted before the inserts cover exactly the records whose hash
/// goes in, spanning only records no owner ever claims (an invalid one),
/// never a filter duplicate: should the transaction abort, the next owner
/// meets the late copy's own claim beside a hit that is another record's
/// (docs/design.md §4.4 rule 5). A duplicate naming its holder ends a run
/// too: once that holder's key expires, a later owner may claim it and
/// find it a filter duplicate.
#[test]
fn the_runs_noted_before_early_inserts_leave_out_every_record_not_inserted() {
    let mut f = flight(Resume::default(), 0);
    for offset in 0..8 {
        let print = if offset == 2 {
            Err(crate::fingerprint::Invalid::NotObject)
        } else {
            print(offset as u8)
        };
        assert_eq!(f.arrive(input(offset), 0, print, 1), Arrived::Kept);
    }
    let holder = Coordinates {
        topic: TopicTag::of("raw"),
        partition: 3,
        offset: 9,
    };
    let exact = ClaimOutcome::Duplicate {
        tier: crate::tier::Tier::Exact,
        holder: Some(holder),
    };
    let filter = ClaimOutcome::Duplicate {
        tier: crate::tier::Tier::Filter,
        holder: None,
    };
    // Offsets 0, 1, 3, 4, 5, 6, 7 claim; 2 is invalid.
    round(&mut f, vec![WON, WON, WON, exact, WON, filter, WON]);
    assert_eq!(deliver_all(&mut f).len(), 8);
    let EarlyInserts { runs, inserts } = f.take_txn_inserts();
    assert_eq!(inserts.len(), 5);
    let spans: Vec<_> = runs.iter().map(|r| (r.start, r.end)).collect();
    assert_eq!(
        spans,
        vec![(0, 4), (5, 6), (7, 8)],
        "4 is an exact duplicate, 6 the filter duplicate"
    );
    assert!(runs
        .iter()
        .all(|r| r.partition == 0 && r.topic == TopicTag::of("raw") && r.below == Some(0)));
    let again = f.take_txn_inserts();
    assert!(
        again.runs.is_empty() && again.inserts.is_empty(),
        "noted once"
    );
}

/// Two lanes: an output sent while the sealed transaction commits is the
/// next transaction's, even if its report comes first. The commit settles
/// only its own; the next transaction's offsets and inserts carry the rest.
#[test]
fn an_output_sent_after_the_seal_waits_for_the_next_transaction() {
    let mut f = flight(Resume::default(), 0);
    for offset in 0..2 {
        assert_eq!(
            f.arrive(input(offset), 0, print(offset as u8), 1),
            Arrived::Kept
        );
    }
    round(&mut f, vec![WON; 2]);
    assert_eq!(deliver_all(&mut f), vec![0, 1]);
    assert_eq!(f.take_txn_inserts().inserts.len(), 2);
    assert_eq!(f.txn_offsets(true)[0].offset, 2);
    f.seal_txn();
    // Committing off the loop: the next transaction's outputs go out and
    // are reported.
    for offset in 2..4 {
        assert_eq!(
            f.arrive(input(offset), 0, print(offset as u8), 1),
            Arrived::Kept
        );
    }
    round(&mut f, vec![WON; 2]);
    assert_eq!(deliver_all(&mut f), vec![2, 3]);
    f.txn_committed();
    assert_eq!(stage(&f, 1), Stage::Delivered);
    assert_eq!(
        stage(&f, 2),
        Stage::Produced,
        "settled by another transaction's commit"
    );
    let publish = round(&mut f, vec![]);
    assert_eq!((publish.raises[0].start, publish.raises[0].end), (0, 2));
    assert_eq!(stage(&f, 3), Stage::Produced);
    // The next transaction: its own inserts and offsets, then its commit.
    assert_eq!(f.take_txn_inserts().inserts.len(), 2);
    assert_eq!(f.txn_offsets(false)[0].offset, 4);
    f.seal_txn();
    f.txn_committed();
    assert_eq!(stage(&f, 3), Stage::Delivered);
}

/// The loop does not wait for the reports before sealing: an output still
/// awaiting its report is in the sealed transaction (its commit waits for
/// the report), counts in its offsets and inserts, and its report, coming
/// while the commit runs, joins the sealed list, not the next one's.
#[test]
fn an_output_awaiting_its_report_at_the_seal_is_the_sealed_transactions() {
    let mut f = flight(Resume::default(), 0);
    for offset in 0..3 {
        assert_eq!(
            f.arrive(input(offset), 0, print(offset as u8), 1),
            Arrived::Kept
        );
    }
    round(&mut f, vec![WON; 3]);
    assert_eq!(f.take_sends(Instant::now()).len(), 3);
    let epoch = f.record(&tp(), 0).unwrap().epoch;
    f.reported(&tp(), 0, epoch, Ok(()), Instant::now());
    assert_eq!(
        f.take_txn_inserts().inserts.len(),
        3,
        "the unreported outputs' inserts too"
    );
    let offsets = f.txn_offsets(true);
    assert_eq!(
        offsets[0].offset, 3,
        "the unreported outputs are the sealed transaction's"
    );
    f.seal_txn();
    assert!(!f.sent_in_open_txn(&tp(), 1));
    f.reported(&tp(), 1, epoch, Ok(()), Instant::now());
    f.reported(&tp(), 2, epoch, Ok(()), Instant::now());
    f.txn_committed();
    for offset in 0..3 {
        assert_eq!(stage(&f, offset), Stage::Delivered, "offset {offset}");
    }
}

/// A sealed transaction whose commit was aborted: its outputs go again in
/// the next one, and its offsets with it.
#[test]
fn an_aborted_commit_sends_its_outputs_and_offsets_again() {
    let mut f = flight(Resume::default(), 0);
    for offset in 0..2 {
        assert_eq!(
            f.arrive(input(offset), 0, print(offset as u8), 1),
            Arrived::Kept
        );
    }
    round(&mut f, vec![WON; 2]);
    deliver_all(&mut f);
    assert_eq!(f.txn_offsets(false)[0].offset, 2);
    f.seal_txn();
    assert_eq!(f.sealed_aborted(), 2);
    assert_eq!(stage(&f, 0), Stage::Produce);
    assert_eq!(deliver_all(&mut f), vec![0, 1], "sent again");
    assert!(f.sent_in_open_txn(&tp(), 0));
    assert_eq!(
        f.txn_offsets(false)[0].offset,
        2,
        "the offsets go again too"
    );
    f.seal_txn();
    f.txn_committed();
    assert_eq!(stage(&f, 1), Stage::Delivered);
}

#[test]
fn the_transactions_metadata_lists_what_was_delivered_above_a_waiting_record() {
    let mut f = flight(Resume::default(), 0);
    for offset in 0..4 {
        f.arrive(input(offset), 0, print(offset as u8), 1);
    }
    let held = ClaimOutcome::Held {
        holder: Coordinates {
            topic: TopicTag::of("other"),
            partition: 3,
            offset: 7,
        },
    };
    round(&mut f, vec![WON, held, WON, WON]);
    deliver_all(&mut f);
    let offsets = f.txn_offsets(false);
    assert_eq!(offsets[0].offset, 1, "the waiting record holds the prefix");
    assert_eq!(offsets[0].done, vec![(2, 4)], "delivered above it");
}

#[test]
fn a_new_owner_settles_what_the_last_transaction_listed_and_sends_nothing_for_it() {
    // The last owner committed offset 5 with 6..8 and 10..12 delivered
    // above it, and crashed before their done flags.
    let resume = Resume {
        committed: Some(5),
        metadata_raise: Some(5),
        skip: vec![(6, 8), (10, 12)],
    };
    let mut f = flight(resume, 5);
    for offset in 5..9 {
        f.arrive(input(offset), 0, print(offset as u8), 1);
    }
    for offset in [6, 7] {
        assert!(f.record(&tp(), offset).unwrap().already_out);
    }
    // They meet their own unsettled claims: re-stamped, won.
    let own = ClaimOutcome::Won { fresh: false };
    round(&mut f, vec![own; 4]);
    assert_eq!(
        deliver_all(&mut f),
        vec![5, 8],
        "6 and 7 are not sent again"
    );
    assert_eq!(stage(&f, 6), Stage::Delivered);
    // Until the prefix passes them, every commit carries the last owner's
    // ranges forward, also the one not read yet.
    let offsets = f.txn_offsets(false);
    assert_eq!(offsets[0].offset, 9);
    assert_eq!(offsets[0].done, vec![(10, 12)]);
    f.seal_txn();
    f.txn_committed();
    let publish = round(&mut f, vec![]);
    assert!(
        publish.raises.iter().any(|r| r.end == 9),
        "the raise covers the settled records: {publish:?}"
    );
    for offset in 5..9 {
        assert_eq!(stage(&f, offset), Stage::Finished, "offset {offset}");
    }
}

/// A fail-open stream whose store is down passes records `unverified`,
/// but never one the last owner's committed transaction already holds:
/// that would put a second copy of the same input in clean (seen in the
/// soak: a replica killed right after a commit, the store down while the
/// next owner took the partition back).
#[test]
fn a_store_outage_on_a_fail_open_stream_sends_nothing_the_last_transaction_holds() {
    let resume = Resume {
        committed: Some(5),
        metadata_raise: Some(5),
        skip: vec![(6, 8)],
    };
    let mut f = flight(resume, 5);
    for offset in 5..9 {
        f.arrive(input(offset), 0, print(offset as u8), 1);
    }
    // The breaker is open: the store is not asked.
    f.pass_unverified(|_| true);
    let mut sent: Vec<i64> = f
        .take_sends(Instant::now())
        .into_iter()
        .map(|(_, o)| o)
        .collect();
    assert_eq!(sent, vec![5, 8], "6 and 7 are in a committed transaction");
    // A round that fails: the same.
    let mut g = flight(
        Resume {
            committed: Some(5),
            metadata_raise: Some(5),
            skip: vec![(6, 8)],
        },
        5,
    );
    for offset in 5..9 {
        g.arrive(input(offset), 0, print(offset as u8), 1);
    }
    let round = g.take_round(Instant::now(), 100, TOKEN).expect("round");
    g.failed(round, |_| true);
    sent = g
        .take_sends(Instant::now())
        .into_iter()
        .map(|(_, o)| o)
        .collect();
    sent.sort_unstable();
    assert_eq!(sent, vec![5, 8]);
    assert!(g.record(&tp(), 6).unwrap().already_out);
}

#[test]
fn at_least_once_a_listed_range_is_finished_on_arrival() {
    let resume = Resume {
        committed: Some(5),
        metadata_raise: Some(5),
        skip: vec![(6, 8)],
    };
    let mut f = settling(super::Settle::OnDelivery, resume, 5);
    f.arrive(input(6), 0, print(6), 1);
    assert_eq!(stage(&f, 6), Stage::Finished);
}

#[test]
fn a_handover_drains_past_waits_on_holders_here_but_not_on_holders_elsewhere() {
    let mut f = flight(Resume::default(), 0);
    f.arrive(input(0), 0, print(1), 1);
    f.arrive(input(1), 0, print(1), 1);
    assert!(!f.drained(), "records to claim");
    let on = |partition| ClaimOutcome::Held {
        holder: Coordinates {
            topic: TopicTag::of("raw"),
            partition,
            offset: 0,
        },
    };
    // Offset 1 waits on offset 0 of this partition, which is here.
    round(&mut f, vec![WON, on(0)]);
    deliver_all(&mut f);
    f.seal_txn();
    f.txn_committed();
    round(&mut f, vec![]);
    assert_eq!(stage(&f, 0), Stage::Finished);
    assert!(
        !f.drained(),
        "a wait on a holder of an owned partition resolves: drained on"
    );
    // A wait on a partition another replica owns may take any time.
    let mut g = flight(Resume::default(), 0);
    g.arrive(input(0), 0, print(1), 1);
    round(&mut g, vec![on(9)]);
    assert!(g.drained());
}

#[test]
fn a_record_the_last_transaction_holds_is_parked_when_a_fail_open_streams_store_is_lost() {
    let resume = Resume {
        committed: Some(5),
        metadata_raise: Some(5),
        skip: vec![(6, 8)],
    };
    let mut f = flight(resume, 5);
    for offset in 5..9 {
        f.arrive(input(offset), 0, print(offset as u8), 1);
    }
    let taken = f.take_round(Instant::now(), 100, TOKEN).expect("round");
    assert_eq!(taken.claims.len(), 4);
    f.lose(0, true);
    let answer = RoundAnswer {
        outcomes: vec![ClaimOutcome::StoreLost; 4],
        ..RoundAnswer::default()
    };
    f.answered(taken, answer, Instant::now(), |_| false);
    for offset in [5, 8] {
        assert_eq!(stage(&f, offset), Stage::Produce);
        let record = f.record(&tp(), offset).unwrap();
        assert_eq!(record.decision, Some(Decision::Unverified));
    }
    // Their outputs are in the last owner's committed transaction: never
    // sent again, not even unverified.
    for offset in [6, 7] {
        assert_eq!(stage(&f, offset), Stage::Claim, "parked");
    }
}
