//! The soak's figures: every output judged against the workload's oracle
//! (which event each input is a copy of, which are conflicts or malformed,
//! the library's hash of each), every event looked for in clean, and the
//! doubles counted: distinct events twice in clean (another input let
//! through) apart from the same input twice in clean (a replay).

use std::collections::BTreeMap;

use idemgate_testkit::workload::Kind;
use serde::Serialize;

use super::collect::{Seen, CONFLICT, DECISIONS, DUPLICATE, INVALID, NOVEL, UNVERIFIED};
use super::plan::{Expected, STREAMS, TELEMETRY};

/// One stream's figures.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct Figures {
    pub stream: String,
    pub mode: String,
    pub fail_mode: String,
    /// Records written to the input topic.
    pub records_in: usize,
    /// Of them, read back from the log at the end (each once).
    pub read_back: usize,
    /// Input records the log holds twice (the soak's own producer).
    pub inputs_written_twice: usize,
    pub distinct_events: usize,
    pub outputs: usize,
    pub decisions: BTreeMap<String, usize>,
    /// Must be 0: inputs with no output at all.
    pub inputs_without_output: usize,
    /// The first few of them: input number, kind, where it is in the log.
    pub without_output_examples: Vec<String>,
    /// Must be 0: events none of whose inputs reached clean (filter false
    /// positives apart).
    pub events_missing_from_clean: usize,
    /// Events whose first copy the filter suppressed as a false positive
    /// (telemetry only; `duplicate` with tier `filter`), none in clean.
    pub events_lost_to_filter_false_positives: usize,
    /// Distinct events that reached clean through two or more inputs
    /// (must be 0 on the exact, fail-closed stream).
    pub events_twice_in_clean: usize,
    /// Inputs with two or more clean outputs: the same record replayed.
    pub inputs_twice_in_clean: usize,
    /// Clean outputs beyond the first of their input.
    pub extra_clean_copies_of_inputs: usize,
    /// Inputs with two or more outputs anywhere.
    pub inputs_replayed: usize,
    /// The first few of them: the input, where it is in the log, and each
    /// output's decision and place (clean or audit, partition/offset).
    pub replayed_examples: Vec<String>,
    /// Copies suppressed by the filter (correct; no holder named).
    pub filter_duplicates: usize,
    /// Copies that named, as holder, an earlier copy of their event which
    /// claimed the hash again once its tier-1 key had expired (and was
    /// itself suppressed by the filter): correct, the claim's holder.
    pub copies_naming_a_reclaim: usize,
    /// On an exact stream whose TTL the late re-sends outlive (telemetry on
    /// PostgreSQL): late re-sends decided `novel`, their event's claim
    /// having expired: correct past the horizon, and their event is then
    /// twice in clean (counted there too).
    pub late_copies_claimed_anew: usize,
    /// Outputs judged against the oracle, and those that disagree
    /// (must be 0).
    pub decisions_checked: usize,
    pub decision_mismatches: usize,
    pub mismatch_examples: Vec<String>,
}

/// How a stream is kept, as the judge needs it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Keeping {
    pub fail_open: bool,
    /// Exact claims whose TTL is shorter than the soak, so that the late
    /// re-sends may find their event's claim expired.
    pub expiring: bool,
}

/// Judges one stream. `coords` is where each input of the stream really is
/// (from reading the input back); `outputs` are this stream's outputs with
/// their topic index (clean 0, audit 1).
pub(crate) fn judge(
    stream: usize,
    expected: &[Expected],
    coords: &[Option<(i32, i64)>],
    outputs: &[(bool, &Seen)],
    keeping: Keeping,
) -> Figures {
    let Keeping {
        fail_open,
        expiring,
    } = keeping;
    let mut f = Figures {
        stream: STREAMS[stream].into(),
        records_in: expected.len(),
        outputs: outputs.len(),
        ..Figures::default()
    };
    let mut by_input: Vec<Vec<(bool, &Seen)>> = vec![Vec::new(); expected.len()];
    for &(clean, out) in outputs {
        *f.decisions
            .entry(DECISIONS[out.decision as usize].to_string())
            .or_default() += 1;
        match out.input {
            Some((_, n)) if (n as usize) < expected.len() => {
                by_input[n as usize].push((clean, out))
            }
            _ => bad(
                &mut f,
                format!("output {}/{} maps to no input", out.partition, out.offset),
            ),
        }
    }
    // What holds for every output on its own.
    for (n, outs) in by_input.iter().enumerate() {
        let want = &expected[n];
        if outs.is_empty() {
            f.inputs_without_output += 1;
            if f.without_output_examples.len() < 12 {
                f.without_output_examples.push(format!(
                    "{}{n} ({:?}, event {:?}) at {:?}",
                    &STREAMS[stream][..1],
                    want.kind,
                    want.event,
                    coords[n]
                ));
            }
        }
        let clean_count = outs.iter().filter(|(clean, _)| *clean).count();
        if clean_count >= 2 {
            f.inputs_twice_in_clean += 1;
            f.extra_clean_copies_of_inputs += clean_count - 1;
        }
        if outs.len() >= 2 {
            f.inputs_replayed += 1;
            if f.replayed_examples.len() < 12 {
                let each: Vec<String> = outs
                    .iter()
                    .map(|(clean, o)| {
                        format!(
                            "{} -> {} {}/{}",
                            DECISIONS[o.decision as usize],
                            if *clean { "clean" } else { "audit" },
                            o.partition,
                            o.offset
                        )
                    })
                    .collect();
                f.replayed_examples.push(format!(
                    "{}{n} at {:?}: {}",
                    &STREAMS[stream][..1],
                    coords[n],
                    each.join(", ")
                ));
            }
        }
        for &(clean, out) in outs {
            f.decisions_checked += 1;
            let at = format!(
                "input {}{n} -> {}/{}",
                &STREAMS[stream][..1],
                out.partition,
                out.offset
            );
            let routed_clean = matches!(out.decision, NOVEL | UNVERIFIED);
            if out.decision as usize >= 5 || out.decision_headers != 1 {
                bad(
                    &mut f,
                    format!(
                        "{at}: {} decision headers, decision {}",
                        out.decision_headers, DECISIONS[out.decision as usize]
                    ),
                );
                continue;
            }
            if routed_clean != clean {
                bad(
                    &mut f,
                    format!(
                        "{at}: {} in the wrong topic",
                        DECISIONS[out.decision as usize]
                    ),
                );
            }
            if out.digest != want.digest {
                bad(&mut f, format!("{at}: key or payload changed"));
            }
            match &want.hash {
                Ok(hash) => {
                    if out.hash.as_ref() != Some(hash) {
                        bad(
                            &mut f,
                            format!("{at}: source hash differs from the library's"),
                        );
                    }
                    if out.decision == INVALID {
                        bad(&mut f, format!("{at}: invalid, but the library hashes it"));
                    }
                }
                Err(code) => {
                    if out.decision != INVALID || out.reason.as_deref() != Some(code) {
                        bad(
                            &mut f,
                            format!(
                                "{at}: decided {} reason {:?}, the library says invalid ({code})",
                                DECISIONS[out.decision as usize], out.reason
                            ),
                        );
                    }
                }
            }
            if out.first_seen_unknown {
                bad(
                    &mut f,
                    format!("{at}: a first-seen header naming no input topic"),
                );
            }
            if out.decision == UNVERIFIED && !fail_open {
                bad(&mut f, format!("{at}: unverified on a fail-closed stream"));
            }
        }
    }
    // Events: the first input of each (its copies share its partition and
    // come after it) must be the one in clean, and every other copy must
    // name it.
    let mut events: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (n, want) in expected.iter().enumerate() {
        if let Some(event) = want.event {
            events.entry(event).or_default().push(n);
        }
    }
    f.distinct_events = events.len();
    for (event, inputs) in &events {
        let winner = inputs[0];
        let clean_inputs: Vec<usize> = inputs
            .iter()
            .copied()
            .filter(|n| by_input[*n].iter().any(|(clean, _)| *clean))
            .collect();
        if clean_inputs.len() >= 2 {
            f.events_twice_in_clean += 1;
        }
        let unverified = inputs
            .iter()
            .any(|n| by_input[*n].iter().any(|(_, o)| o.decision == UNVERIFIED));
        let filter_hit = |o: &Seen| {
            stream == TELEMETRY
                && o.decision == DUPLICATE
                && o.tier == Some("filter")
                && o.first_seen.is_none()
        };
        if clean_inputs.is_empty() {
            let winner_outs = &by_input[winner];
            if !winner_outs.is_empty() && winner_outs.iter().all(|(_, o)| filter_hit(o)) {
                f.events_lost_to_filter_false_positives += 1;
            } else {
                f.events_missing_from_clean += 1;
                bad(
                    &mut f,
                    format!("event {event} never reached clean (inputs {inputs:?})"),
                );
            }
        }
        let Some(holder) = coords[winner] else {
            bad(
                &mut f,
                format!("event {event}: its first input {winner} is not in the log"),
            );
            continue;
        };
        let holder = (stream as u8, holder.0, holder.1);
        let clean_coords: Vec<(u8, i32, i64)> = clean_inputs
            .iter()
            .filter_map(|n| coords[*n].map(|(p, o)| (stream as u8, p, o)))
            .collect();
        // Copies the filter suppressed after the tier-1 key expired: each
        // claimed the hash anew, so later copies name it as the holder. On
        // an expiring exact stream, late re-sends that claimed it anew.
        let claimed_anew = |m: usize| {
            expiring && expected[m].late && by_input[m].iter().any(|(_, o)| o.decision == NOVEL)
        };
        let reclaimers: Vec<(usize, (u8, i32, i64))> = inputs
            .iter()
            .filter(|m| {
                **m != winner
                    && (by_input[**m].iter().any(|(_, o)| filter_hit(o)) || claimed_anew(**m))
            })
            .filter_map(|m| coords[*m].map(|(p, o)| (*m, (stream as u8, p, o))))
            .collect();
        for &n in inputs {
            for &(_, out) in &by_input[n] {
                let at = format!(
                    "event {event}: input {}{n} ({:?})",
                    &STREAMS[stream][..1],
                    expected[n].kind
                );
                let d = out.decision;
                if n == winner {
                    let ok = d == NOVEL || (fail_open && d == UNVERIFIED) || filter_hit(out);
                    if !ok {
                        bad(&mut f, format!("{at}: its first input decided {} (first-seen {:?}), expected novel", DECISIONS[d as usize], out.first_seen));
                    }
                    continue;
                }
                let conflict = (expected[n].kind == Kind::Conflict)
                    != (expected[winner].kind == Kind::Conflict);
                let want = if conflict { CONFLICT } else { DUPLICATE };
                let names_holder =
                    out.first_seen == Some(holder) && (d == CONFLICT || out.tier == Some("exact"));
                if d == want && names_holder {
                    continue;
                }
                if filter_hit(out) && !conflict {
                    f.filter_duplicates += 1;
                    continue;
                }
                let names_reclaim = d == DUPLICATE
                    && out.tier == Some("exact")
                    && reclaimers
                        .iter()
                        .any(|(m, c)| *m < n && out.first_seen == Some(*c));
                if names_reclaim && !conflict {
                    f.copies_naming_a_reclaim += 1;
                    continue;
                }
                if expiring && expected[n].late && d == NOVEL && !conflict {
                    f.late_copies_claimed_anew += 1;
                    continue;
                }
                if fail_open && d == UNVERIFIED {
                    continue;
                }
                // In open mode an unverified first copy leaves the claim to
                // a later one, which other copies then name.
                let names_clean = out.first_seen.is_some_and(|c| clean_coords.contains(&c));
                if fail_open && unverified && (d == NOVEL || (d == want && names_clean)) {
                    continue;
                }
                bad(
                    &mut f,
                    format!(
                        "{at}: decided {} first-seen {:?} tier {:?}, expected {} naming {holder:?} (its first input decided {:?})",
                        DECISIONS[d as usize], out.first_seen, out.tier, DECISIONS[want as usize],
                        by_input[winner].iter().map(|(_, o)| DECISIONS[o.decision as usize]).collect::<Vec<_>>()
                    ),
                );
            }
        }
    }
    f
}

/// One disagreement with the oracle: counted, the first few kept.
fn bad(f: &mut Figures, line: String) {
    f.decision_mismatches += 1;
    if f.mismatch_examples.len() < 12 {
        f.mismatch_examples.push(line);
    }
}
