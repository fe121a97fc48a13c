//! What the gateway wrote, judged against the plan. Every output is mapped
//! back to its input by the `x-test-id` header (outputs keep the input's
//! headers), so "each input has exactly one output" and "this extra copy in
//! clean comes from a replayed input" are checked per record, not guessed
//! from totals. Every violation is collected before the test fails, so one
//! run shows the whole picture.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use idemgate::decision::{FIRST_SEEN, REASON, SOURCE_HASH, TIER};

use crate::kafka::{Landed, Out, Topics};
use crate::workload::{Kind, Planned};

/// How strict the verdict is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// No crash, store up or fail-closed: every input exactly one output,
    /// every event exactly once in clean (its first copy, when all its
    /// copies share a partition), every other copy a duplicate (or
    /// conflict) naming the one in clean.
    Exact,
    /// A replica was killed: an input whose work was not committed is
    /// processed again and may have two outputs, with the same decision.
    /// Still every event reaches clean through exactly one input.
    Replays,
    /// Fail-open outage: each input exactly one output; events with an
    /// `unverified` record may reach clean more than once, all others are
    /// held to `Exact`.
    Open,
    /// A tiered stream: as `Exact`, but a copy may also be suppressed by the
    /// filter (tier `filter`), which knows hashes, not holders, so names no
    /// first copy; such a copy holds tier 1's claim after it, so a later
    /// copy may name it instead of the one in clean.
    Filtered,
}

/// Counts for the test's report.
#[derive(Debug, Default)]
pub struct Summary {
    pub inputs: usize,
    pub outputs: usize,
    pub events: usize,
    pub decisions: BTreeMap<String, usize>,
    /// Clean outputs beyond one per event.
    pub extra_clean: usize,
    /// Inputs with more than one output.
    pub replayed_inputs: usize,
    /// Events that reached clean through more than one input (open mode).
    pub events_through_two_inputs: usize,
    /// Copies the filter suppressed (`Expect::Filtered`).
    pub filter_duplicates: usize,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} inputs, {} outputs, {} events; decisions {:?}; extra clean copies {}, replayed inputs {}, events in clean through 2+ inputs {}, filter duplicates {}",
            self.inputs,
            self.outputs,
            self.events,
            self.decisions,
            self.extra_clean,
            self.replayed_inputs,
            self.events_through_two_inputs,
            self.filter_duplicates
        )
    }
}

const CLEAN_DECISIONS: [&str; 2] = ["novel", "unverified"];
const AUDIT_DECISIONS: [&str; 3] = ["duplicate", "conflict", "invalid"];

/// Judges the outputs; panics with every violation found.
pub fn check(
    plan: &[Planned],
    landed: &HashMap<String, Landed>,
    topics: &Topics,
    outs: &[Out],
    expect: Expect,
) -> Summary {
    judge(plan, landed, topics, outs, expect).unwrap_or_else(|verdict| panic!("{verdict}"))
}

/// The summary, or the violations (the first 25) with it.
pub fn judge(
    plan: &[Planned],
    landed: &HashMap<String, Landed>,
    topics: &Topics,
    outs: &[Out],
    expect: Expect,
) -> Result<Summary, String> {
    let mut bad: Vec<String> = Vec::new();
    let planned: HashMap<&str, &Planned> = plan.iter().map(|p| (p.id.as_str(), p)).collect();
    let coords = |id: &str| -> String {
        let at = landed[id];
        format!("{}/{}/{}", topics.input, at.partition, at.offset)
    };
    let mut by_input: HashMap<&str, Vec<&Out>> = HashMap::new();
    let mut summary = Summary {
        inputs: plan.len(),
        outputs: outs.len(),
        ..Summary::default()
    };

    for out in outs {
        let id = out.test_id();
        let Some(input) = planned.get(id) else {
            bad.push(format!(
                "output {}/{}/{} maps to no planned input {id}",
                out.topic, out.partition, out.offset
            ));
            continue;
        };
        if let Some(at) = landed.get(id) {
            let from = format!("{}/{}/{}", topics.input, at.partition, at.offset);
            if out.header(idemgate::decision::INPUT) != Some(from.as_str()) {
                bad.push(format!(
                    "output {}/{}/{} of {id} names its input {:?}, not {from}",
                    out.topic,
                    out.partition,
                    out.offset,
                    out.header(idemgate::decision::INPUT)
                ));
            }
        }
        if out
            .header(idemgate::decision::DECIDED_AT)
            .and_then(|at| at.parse::<i64>().ok())
            .is_none()
        {
            bad.push(format!(
                "output {}/{}/{} of {id} says not when it was decided: {:?}",
                out.topic,
                out.partition,
                out.offset,
                out.header(idemgate::decision::DECIDED_AT)
            ));
        }
        by_input.entry(id).or_default().push(out);
        *summary
            .decisions
            .entry(out.decision().to_string())
            .or_default() += 1;
        check_output(out, input, topics, expect, &mut bad);
    }

    for input in plan {
        let outputs = by_input
            .get(input.id.as_str())
            .map_or(&[][..], Vec::as_slice);
        match (outputs.len(), expect) {
            (0, _) => bad.push(format!(
                "{} ({:?}) was lost: no output",
                input.id, input.kind
            )),
            (1, _) => {}
            (n, Expect::Replays) => {
                summary.replayed_inputs += 1;
                let first = (outputs[0].decision(), outputs[0].header(FIRST_SEEN));
                if outputs
                    .iter()
                    .any(|o| (o.decision(), o.header(FIRST_SEEN)) != first)
                {
                    bad.push(format!(
                        "{} was replayed ({n} outputs) with different decisions: {:?}",
                        input.id,
                        outputs
                            .iter()
                            .map(|o| (o.decision(), o.header(FIRST_SEEN)))
                            .collect::<Vec<_>>()
                    ));
                }
            }
            (n, _) => bad.push(format!(
                "{} ({:?}) has {n} outputs, expected exactly one: {:?}",
                input.id,
                input.kind,
                outputs
                    .iter()
                    .map(|o| format!("{}:{}/{}", o.decision(), o.topic, o.offset))
                    .collect::<Vec<_>>()
            )),
        }
    }

    let mut events: BTreeMap<usize, Vec<&Planned>> = BTreeMap::new();
    for input in plan {
        if let Some(event) = input.event {
            events.entry(event).or_default().push(input);
        }
    }
    summary.events = events.len();
    for (event, inputs) in &events {
        let outputs = |p: &Planned| by_input.get(p.id.as_str()).map_or(&[][..], Vec::as_slice);
        let clean_inputs: BTreeSet<&str> = inputs
            .iter()
            .filter(|p| outputs(p).iter().any(|o| o.topic == topics.clean))
            .map(|p| p.id.as_str())
            .collect();
        let clean_outputs: usize = inputs
            .iter()
            .map(|p| {
                outputs(p)
                    .iter()
                    .filter(|o| o.topic == topics.clean)
                    .count()
            })
            .sum();
        summary.extra_clean += clean_outputs.saturating_sub(1);
        if clean_inputs.len() > 1 {
            summary.events_through_two_inputs += 1;
        }
        if clean_inputs.is_empty() {
            bad.push(format!(
                "event {event} never reached clean (inputs {:?})",
                ids(inputs)
            ));
            continue;
        }
        let unverified = inputs
            .iter()
            .any(|p| outputs(p).iter().any(|o| o.decision() == "unverified"));
        if expect == Expect::Open && unverified {
            // Unchecked records may pass twice; a suppressed copy must still
            // name a record of this event that did reach clean.
            for p in inputs {
                for o in outputs(p).iter().filter(|o| o.topic == topics.audit) {
                    let named = o.header(FIRST_SEEN).unwrap_or_default();
                    if !clean_inputs.iter().any(|id| coords(id) == named) {
                        bad.push(format!("event {event}: {} suppressed naming {named}, not a clean record of the event", p.id));
                    }
                }
            }
            continue;
        }
        let original = inputs
            .iter()
            .find(|p| p.kind == Kind::Original)
            .expect("every event has its original");
        if clean_inputs.len() != 1 {
            bad.push(format!(
                "event {event} reached clean through {} inputs {:?}: a second copy let through",
                clean_inputs.len(),
                clean_inputs
            ));
            continue;
        }
        let winner = planned[clean_inputs.iter().next().expect("one clean input")];
        // Copies in the original's partition come after it, so it must win;
        // a copy elsewhere may be read first, and then it is the one.
        let together = inputs
            .iter()
            .all(|p| landed[&p.id].partition == landed[&original.id].partition);
        if together && winner.id != original.id {
            bad.push(format!(
                "event {event} reached clean through {}, expected its first copy {}",
                winner.id, original.id
            ));
        }
        for o in outputs(winner).iter().filter(|o| o.decision() != "novel") {
            bad.push(format!(
                "event {event}: {} reached clean decided {}, expected novel",
                winner.id,
                o.decision()
            ));
        }
        let first_seen = coords(&winner.id);
        // A copy the filter suppressed holds tier 1's claim from then on
        // (its own, written with the round): later copies name it.
        let filter_holders: BTreeSet<String> = inputs
            .iter()
            .filter(|p| {
                expect == Expect::Filtered
                    && outputs(p).iter().any(|o| {
                        o.decision() == "duplicate"
                            && o.header(TIER) == Some("filter")
                            && o.header(FIRST_SEEN).is_none()
                    })
            })
            .map(|p| coords(&p.id))
            .collect();
        for p in inputs.iter().filter(|p| p.id != winner.id) {
            // Conflict records carry another payload (the same one among
            // themselves): a conflict against the winner when they differ.
            let want = if (p.kind == Kind::Conflict) != (winner.kind == Kind::Conflict) {
                "conflict"
            } else {
                "duplicate"
            };
            for o in outputs(p) {
                let by_filter = expect == Expect::Filtered
                    && o.decision() == "duplicate"
                    && o.header(TIER) == Some("filter")
                    && o.header(FIRST_SEEN).is_none();
                if by_filter {
                    summary.filter_duplicates += 1;
                    continue;
                }
                let named = o.header(FIRST_SEEN).unwrap_or_default();
                let holder = named == first_seen || filter_holders.contains(named);
                if o.decision() != want || !holder {
                    bad.push(format!(
                        "event {event}: {} ({:?}) decided {} first-seen {:?}, expected {want} naming {first_seen} ({})",
                        p.id,
                        p.kind,
                        o.decision(),
                        o.header(FIRST_SEEN),
                        winner.id
                    ));
                }
            }
        }
    }

    if bad.is_empty() {
        return Ok(summary);
    }
    let shown: Vec<&str> = bad.iter().take(25).map(String::as_str).collect();
    Err(format!(
        "{} violations ({summary}); first {}:\n  {}",
        bad.len(),
        shown.len(),
        shown.join("\n  ")
    ))
}

fn ids(inputs: &[&Planned]) -> Vec<String> {
    inputs.iter().map(|p| p.id.clone()).collect()
}

/// What holds for every output on its own: where it went, byte-for-byte
/// payload and key, and decision headers that agree with the library's
/// fingerprint of the input.
fn check_output(
    out: &Out,
    input: &Planned,
    topics: &Topics,
    expect: Expect,
    bad: &mut Vec<String>,
) {
    let at = format!(
        "{} -> {}/{}/{}",
        input.id, out.topic, out.partition, out.offset
    );
    let decision = out.decision();
    let decisions = out
        .headers
        .iter()
        .filter(|(k, _)| k == idemgate::decision::DECISION)
        .count();
    if decisions != 1 {
        bad.push(format!("{at}: {decisions} decision headers"));
    }
    let routed = if CLEAN_DECISIONS.contains(&decision) {
        &topics.clean
    } else if AUDIT_DECISIONS.contains(&decision) {
        &topics.audit
    } else {
        bad.push(format!("{at}: unknown decision {decision:?}"));
        return;
    };
    if &out.topic != routed {
        bad.push(format!("{at}: decision {decision} in the wrong topic"));
    }
    // An output the broker refused goes to audit without its payload (and,
    // bare, without key and headers): the input's hash it may still name.
    let undeliverable = decision == "invalid"
        && out
            .header(REASON)
            .is_some_and(|r| r.starts_with("undeliverable"));
    if undeliverable {
        if out.payload.is_some() {
            bad.push(format!("{at}: refused output still carries its payload"));
        }
        if let (Some(shown), Ok(hash)) = (out.header(SOURCE_HASH), &input.hash) {
            if shown != hash {
                bad.push(format!("{at}: source hash {shown}, library says {hash}"));
            }
        }
        return;
    }
    // A record too large for the producer goes to audit without its
    // payload (or bare), decided `too-large` before any produce.
    let stripped_too_large = decision == "invalid"
        && out.payload.is_none()
        && out
            .header(REASON)
            .is_some_and(|r| r.starts_with("too-large"));
    if stripped_too_large {
        return;
    }
    if out.payload != input.payload {
        bad.push(format!(
            "{at}: payload changed: {:?} != {:?}",
            out.payload.as_deref().map(String::from_utf8_lossy),
            input.payload.as_deref().map(String::from_utf8_lossy)
        ));
    }
    if out.key.as_deref() != Some(input.key.as_slice()) {
        bad.push(format!("{at}: key changed"));
    }
    match &input.hash {
        Ok(hash) => {
            if out.header(SOURCE_HASH) != Some(hash.as_str()) {
                bad.push(format!(
                    "{at}: source hash {:?}, library says {hash}",
                    out.header(SOURCE_HASH)
                ));
            }
            if decision == "invalid" {
                bad.push(format!("{at}: invalid, but the library hashes it"));
            }
        }
        Err(code) => {
            if decision != "invalid" {
                bad.push(format!(
                    "{at}: decided {decision}, but the library finds it invalid ({code})"
                ));
            }
            if out.header(SOURCE_HASH).is_some() {
                bad.push(format!("{at}: an invalid record with a source hash"));
            }
            let reason = out.header(REASON).unwrap_or_default();
            if !reason.starts_with(code) {
                bad.push(format!(
                    "{at}: reason {reason:?}, expected it to start with {code}"
                ));
            }
        }
    }
    let filter_hit = expect == Expect::Filtered && out.header(TIER) == Some("filter");
    if decision == "duplicate" && out.header(TIER) != Some("exact") && !filter_hit {
        bad.push(format!(
            "{at}: duplicate with tier {:?} in exact mode",
            out.header(TIER)
        ));
    }
    if matches!(decision, "duplicate" | "conflict")
        && out.header(FIRST_SEEN).is_none()
        && !filter_hit
    {
        bad.push(format!("{at}: {decision} without {FIRST_SEEN}"));
    }
    if decision == "unverified" && out.header(REASON).is_none() {
        bad.push(format!("{at}: unverified without a reason"));
    }
}
