//! Settling at least once (docs/design.md §4.3): a record delivered above
//! outputs still in flight waits for the raise their reports bring; above
//! any longer hole, and at a handover's last round, it gets its done flag.

use std::time::Instant;

use super::tests::{answer_all, flight, input, print, stage, tp, TOKEN};
use super::*;
use crate::store::ClaimOutcome;
use crate::worker::record::Failure;

const WON: ClaimOutcome = ClaimOutcome::Won { fresh: true };

/// Partition 0 with records 0, 1 and 2 claimed and sent; the reports of
/// 1 and 2 in, 0's still out.
fn two_of_three_delivered() -> Flight {
    let mut f = flight(None);
    for offset in 0..3 {
        f.arrive(input(0, offset), 0, print(offset as u8 + 1), 1);
    }
    answer_all(&mut f, vec![WON, WON, WON]);
    let sent = f.take_sends(Instant::now());
    assert_eq!(sent.len(), 3);
    for offset in [1, 2] {
        report(&mut f, offset, Ok(()));
    }
    f
}

/// The offsets whose done flags a round sets.
fn flagged(round: &Round) -> Vec<i64> {
    round
        .publish
        .done
        .iter()
        .map(|held| held.holder.offset)
        .collect()
}

fn report(f: &mut Flight, offset: i64, outcome: Result<(), Failure>) {
    let epoch = f.record(&tp(0), offset).expect("record").epoch;
    f.reported(&tp(0), offset, epoch, outcome, Instant::now());
}

#[test]
fn a_record_delivered_above_outputs_in_flight_waits_for_their_raise() {
    let mut f = two_of_three_delivered();
    assert!(
        f.take_round(Instant::now(), 100, TOKEN).is_none(),
        "no done flag while only record 0's report is out"
    );
    assert_eq!(stage(&f, 0, 1), Stage::Delivered);
    report(&mut f, 0, Ok(()));
    let round = answer_all(&mut f, vec![]);
    assert!(round.publish.done.is_empty());
    assert_eq!(round.publish.raises.len(), 1);
    assert_eq!(
        (round.publish.raises[0].start, round.publish.raises[0].end),
        (0, 3)
    );
    for offset in 0..3 {
        assert_eq!(stage(&f, 0, offset), Stage::Finished);
    }
}

#[test]
fn a_record_delivered_above_a_failed_output_gets_its_done_flag_at_once() {
    let mut f = two_of_three_delivered();
    report(&mut f, 0, Err(Failure::Retry("timed out".into())));
    assert!(matches!(stage(&f, 0, 0), Stage::Backoff { .. }));
    let round = answer_all(&mut f, vec![]);
    assert_eq!(flagged(&round), vec![1, 2]);
    assert_eq!(stage(&f, 0, 2), Stage::Finished);
}

#[test]
fn a_handovers_last_round_flags_every_record_left_above_the_watermark() {
    let mut f = two_of_three_delivered();
    let round = f
        .take_last_round(Instant::now(), TOKEN)
        .expect("the done flags of records 1 and 2");
    assert!(round.claims.is_empty());
    assert_eq!(flagged(&round), vec![1, 2]);
}
