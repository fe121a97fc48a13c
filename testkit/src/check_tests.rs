//! The judge judged: a faithful gateway's outputs, fabricated from the
//! plan, pass; each kind of fault the scenarios hunt for is caught. No
//! servers needed.

use std::collections::HashMap;
use std::time::Instant;

use idemgate::decision::{DECISION, FIRST_SEEN, REASON, SOURCE_HASH, TIER};

use crate::check::{judge, Expect};
use crate::kafka::{Landed, Out, Topics};
use crate::workload::{Bank, Kind, Planned};
use crate::TEST_ID;

fn topics() -> Topics {
    Topics {
        input: "raw".into(),
        clean: "clean".into(),
        audit: "audit".into(),
        input_partitions: 1,
        output_partitions: 1,
    }
}

/// What a correct gateway writes for `plan`, read back in order.
fn faithful(plan: &[Planned]) -> (HashMap<String, Landed>, Vec<Out>) {
    let landed: HashMap<String, Landed> = plan
        .iter()
        .enumerate()
        .map(|(offset, p)| {
            let at = Landed {
                partition: 0,
                offset: offset as i64,
            };
            (p.id.clone(), at)
        })
        .collect();
    let mut first: HashMap<usize, String> = HashMap::new();
    let mut outs = Vec::new();
    for p in plan {
        let mut headers = vec![(TEST_ID.to_string(), Some(p.id.clone().into_bytes()))];
        let mut add = |k: &str, v: String| headers.push((k.to_string(), Some(v.into_bytes())));
        add(
            idemgate::decision::INPUT,
            format!("raw/0/{}", landed[&p.id].offset),
        );
        add(idemgate::decision::DECIDED_AT, "1800000000000".into());
        let topic = match (&p.kind, p.event) {
            (Kind::Original, Some(event)) => {
                first.insert(event, format!("raw/0/{}", landed[&p.id].offset));
                add(DECISION, "novel".into());
                add(SOURCE_HASH, p.hash.clone().unwrap());
                "clean"
            }
            (Kind::Copy | Kind::Conflict, Some(event)) => {
                let decision = if p.kind == Kind::Copy {
                    "duplicate"
                } else {
                    "conflict"
                };
                add(DECISION, decision.into());
                add(SOURCE_HASH, p.hash.clone().unwrap());
                add(TIER, "exact".into());
                add(FIRST_SEEN, first[&event].clone());
                "audit"
            }
            _ => {
                add(DECISION, "invalid".into());
                add(REASON, format!("{}: why", p.hash.clone().unwrap_err()));
                "audit"
            }
        };
        outs.push(Out {
            topic: topic.into(),
            partition: 0,
            offset: outs.len() as i64,
            key: Some(p.key.clone()),
            payload: p.payload.clone(),
            headers,
            timestamp: None,
            seen: Instant::now(),
        });
    }
    (landed, outs)
}

fn plan() -> Vec<Planned> {
    let mut bank = Bank::new("oracle", 4);
    bank.copy_rate = (0.9, 0.5);
    bank.conflict_rate = 0.3;
    bank.phase(40, 0, 8)
}

fn fails(plan: &[Planned], outs: &[Out], landed: &HashMap<String, Landed>, expect: Expect) -> bool {
    judge(plan, landed, &topics(), outs, expect).is_err()
}

#[test]
fn a_faithful_gateway_passes_every_verdict() {
    let plan = plan();
    let (landed, outs) = faithful(&plan);
    for expect in [
        Expect::Exact,
        Expect::Replays,
        Expect::Open,
        Expect::Filtered,
    ] {
        assert!(!fails(&plan, &outs, &landed, expect), "{expect:?}");
    }
}

#[test]
fn a_lost_record_fails_every_verdict() {
    let plan = plan();
    let (landed, mut outs) = faithful(&plan);
    outs.remove(outs.len() / 2);
    for expect in [
        Expect::Exact,
        Expect::Replays,
        Expect::Open,
        Expect::Filtered,
    ] {
        assert!(fails(&plan, &outs, &landed, expect), "{expect:?}");
    }
}

#[test]
fn a_replayed_input_passes_only_when_replays_are_expected() {
    let plan = plan();
    let (landed, mut outs) = faithful(&plan);
    let novel = outs
        .iter()
        .find(|o| o.decision() == "novel")
        .unwrap()
        .clone();
    outs.push(novel);
    assert!(fails(&plan, &outs, &landed, Expect::Exact));
    assert!(fails(&plan, &outs, &landed, Expect::Open));
    assert!(!fails(&plan, &outs, &landed, Expect::Replays));
}

#[test]
fn a_second_input_of_an_event_in_clean_fails_even_with_replays() {
    let plan = plan();
    let (landed, mut outs) = faithful(&plan);
    let copy = outs
        .iter_mut()
        .find(|o| o.decision() == "duplicate")
        .unwrap();
    copy.topic = "clean".into();
    copy.headers
        .retain(|(k, _)| k != DECISION && k != TIER && k != FIRST_SEEN);
    copy.headers
        .push((DECISION.into(), Some(b"novel".to_vec())));
    for expect in [
        Expect::Exact,
        Expect::Replays,
        Expect::Open,
        Expect::Filtered,
    ] {
        assert!(fails(&plan, &outs, &landed, expect), "{expect:?}");
    }
}

#[test]
fn a_changed_payload_or_a_wrong_first_seen_fails() {
    let plan = plan();
    let (landed, outs) = faithful(&plan);
    let mut changed = outs.clone();
    let out = changed.iter_mut().find(|o| o.payload.is_some()).unwrap();
    out.payload.as_mut().unwrap().push(b' ');
    assert!(fails(&plan, &changed, &landed, Expect::Exact));
    let mut wrong = outs;
    let dup = wrong
        .iter_mut()
        .find(|o| o.decision() == "duplicate")
        .unwrap();
    for (k, v) in dup.headers.iter_mut() {
        if k == FIRST_SEEN {
            *v = Some(b"raw/0/999999".to_vec());
        }
    }
    assert!(fails(&plan, &wrong, &landed, Expect::Exact));
}

#[test]
fn a_copy_in_another_partition_may_win_but_one_beside_its_original_may_not() {
    let plan = plan();
    let (mut landed, outs) = faithful(&plan);
    let copy = plan.iter().find(|p| p.kind == Kind::Copy).unwrap();
    // The copy won: it went to clean, its original (and every other copy)
    // became a duplicate naming it.
    let named = |id: &str, landed: &HashMap<String, Landed>| {
        format!("raw/{}/{}", landed[id].partition, landed[id].offset)
    };
    let swap = |landed: &HashMap<String, Landed>| -> Vec<Out> {
        let mut outs = outs.clone();
        for out in outs.iter_mut() {
            let id = out.test_id().to_string();
            let Some(p) = plan.iter().find(|p| p.id == id) else {
                continue;
            };
            if p.event != copy.event {
                continue;
            }
            out.headers.retain(|(k, _)| {
                k == TEST_ID || k == SOURCE_HASH || k == idemgate::decision::DECIDED_AT
            });
            out.headers.push((
                idemgate::decision::INPUT.into(),
                Some(named(&p.id, landed).into_bytes()),
            ));
            if p.id == copy.id {
                out.topic = "clean".into();
                out.headers.push((DECISION.into(), Some(b"novel".to_vec())));
            } else {
                let decision = if p.kind == Kind::Conflict {
                    "conflict"
                } else {
                    "duplicate"
                };
                out.topic = "audit".into();
                out.headers
                    .push((DECISION.into(), Some(decision.as_bytes().to_vec())));
                out.headers.push((TIER.into(), Some(b"exact".to_vec())));
                out.headers.push((
                    FIRST_SEEN.into(),
                    Some(named(&copy.id, landed).into_bytes()),
                ));
            }
        }
        outs
    };
    assert!(fails(&plan, &swap(&landed), &landed, Expect::Exact));
    landed.get_mut(&copy.id).unwrap().partition = 1;
    assert!(!fails(&plan, &swap(&landed), &landed, Expect::Exact));
    assert!(!fails(&plan, &swap(&landed), &landed, Expect::Replays));
}

/// A filter hit: tier `filter`, and no first copy named (the filter knows
/// hashes, not holders).
fn as_filter_hit(out: &mut Out) {
    out.headers.retain(|(k, _)| k != FIRST_SEEN && k != TIER);
    out.headers
        .push((TIER.to_string(), Some(b"filter".to_vec())));
}

#[test]
fn a_filter_duplicate_passes_only_for_a_tiered_stream() {
    let plan = plan();
    let (landed, mut outs) = faithful(&plan);
    let copy = outs
        .iter_mut()
        .find(|o| o.decision() == "duplicate")
        .expect("a duplicate");
    as_filter_hit(copy);
    assert!(fails(&plan, &outs, &landed, Expect::Exact));
    let summary = judge(&plan, &landed, &topics(), &outs, Expect::Filtered).unwrap();
    assert_eq!(summary.filter_duplicates, 1);
}

#[test]
fn a_copy_may_name_a_filter_suppressed_copy_only_for_a_tiered_stream() {
    let plan = plan();
    let (landed, mut outs) = faithful(&plan);
    // Two copies of one event after tier 1 forgot it: the first meets the
    // filter (and claims tier 1 for itself), the second names the first.
    let event_copies: Vec<usize> = {
        let copies = |event| {
            outs.iter()
                .enumerate()
                .filter(|(_, o)| {
                    plan.iter()
                        .any(|p| p.id == o.test_id() && p.event == event && p.kind == Kind::Copy)
                })
                .map(|(i, _)| i)
                .collect::<Vec<_>>()
        };
        plan.iter()
            .map(|p| copies(p.event))
            .find(|c| c.len() >= 2)
            .expect("an event with two copies")
    };
    let (first, second) = (event_copies[0], event_copies[1]);
    let first_at = outs[first]
        .header(idemgate::decision::INPUT)
        .unwrap()
        .to_string();
    as_filter_hit(&mut outs[first]);
    for (k, v) in outs[second].headers.iter_mut() {
        if k == FIRST_SEEN {
            *v = Some(first_at.clone().into_bytes());
        }
    }
    assert!(fails(&plan, &outs, &landed, Expect::Exact));
    judge(&plan, &landed, &topics(), &outs, Expect::Filtered).unwrap();
    // Naming a copy the filter did not suppress still fails.
    let mut exact = outs.clone();
    exact[first] = faithful(&plan).1[first].clone();
    assert!(fails(&plan, &exact, &landed, Expect::Filtered));
}

#[test]
fn a_filter_duplicate_of_an_event_that_never_reached_clean_fails() {
    let plan = plan();
    let (landed, mut outs) = faithful(&plan);
    // The event's clean output goes; its copy stays, "known to the filter".
    let novel = outs
        .iter()
        .position(|o| o.decision() == "novel")
        .expect("a novel output");
    let event = plan
        .iter()
        .find(|p| p.id == outs[novel].test_id())
        .and_then(|p| p.event);
    outs.remove(novel);
    for out in outs.iter_mut() {
        let of_event = plan
            .iter()
            .any(|p| p.id == out.test_id() && p.event == event && p.kind == Kind::Copy);
        if of_event {
            as_filter_hit(out);
        }
    }
    assert!(fails(&plan, &outs, &landed, Expect::Filtered));
}

#[test]
fn an_output_that_names_another_input_fails() {
    let plan = plan();
    let (landed, mut outs) = faithful(&plan);
    assert!(!fails(&plan, &outs, &landed, Expect::Exact));
    for (k, v) in outs[0].headers.iter_mut() {
        if k == idemgate::decision::INPUT {
            *v = Some(b"raw/0/999".to_vec());
        }
    }
    assert!(fails(&plan, &outs, &landed, Expect::Exact));
    outs[0]
        .headers
        .retain(|(k, _)| k != idemgate::decision::INPUT);
    assert!(
        fails(&plan, &outs, &landed, Expect::Exact),
        "without the header"
    );
}

#[test]
fn an_output_that_says_not_when_it_was_decided_fails() {
    let plan = plan();
    let (landed, mut outs) = faithful(&plan);
    outs[0]
        .headers
        .retain(|(k, _)| k != idemgate::decision::DECIDED_AT);
    assert!(fails(&plan, &outs, &landed, Expect::Exact));
}
