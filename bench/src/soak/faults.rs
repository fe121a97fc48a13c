//! The fault schedule and what applying it took. Faults are spread over the
//! soak's window while the producer writes; each starts at its planned
//! second or, if the one before is still running (a long freeze), right
//! after it, and the time actually applied is what the report shows.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Result;
use serde::Serialize;

use idemgate_testkit::link::Link;

use super::config::Guarantee;
use super::store::{SoakStore, StoreKind};
use super::world::{Broker, FaultPoint, Replicas};

/// How many passes of its step with work an armed replica makes before
/// its fault point fires: past its first seals after joining (which may
/// hold only `invalid` records' outputs), so the SIGKILL lands mid-stream
/// with claims in hand.
pub(crate) const SEAL_FAULT_SKIP: u32 = 5;

/// How long an armed replica has to join, take partitions and reach its
/// step; then the fault is reported as not landed.
const SEAL_FAULT_BOUND: Duration = Duration::from_secs(120);

#[derive(Clone, Debug, Serialize)]
pub(crate) enum Fault {
    /// SIGKILL a replica, start it again at once (a supervisor's restart).
    Kill(usize),
    /// SIGTERM a replica, wait for its exit, start it again.
    Term(usize),
    /// SIGSTOP the store's server for this many seconds, then SIGCONT
    /// (PostgreSQL: the postmaster and every child).
    FreezeStore(StoreKind, f64),
    /// Stop the store's server keeping its data (Redis: `SHUTDOWN SAVE`;
    /// PostgreSQL: `pg_ctl stop -m fast`), down this many seconds, start it
    /// again on that data.
    RestartStore(StoreKind, f64),
    /// SIGKILL the broker (a crash), start it again on the same ports and
    /// log (`world::Broker::restart` says why not a controlled shutdown).
    RestartBroker,
    /// Cut the replicas' link to the store (`idemgate_testkit::link`: the
    /// packets dropped both ways, the sockets kept open) for this many
    /// seconds, then restore it.
    CutStoreLink(StoreKind, f64),
    /// Exactly once: SIGTERM a replica, start it again with the fault point
    /// at this step of its seal armed (`IDEMGATE_FAULT_AT`, action `kill`,
    /// `SEAL_FAULT_SKIP` passes first), wait for the SIGKILL it gives
    /// itself there, start it again without it.
    KillInSeal(usize, &'static str),
}

impl Fault {
    pub fn describe(&self) -> String {
        match self {
            Fault::Kill(n) => format!("SIGKILL replica {n}, restart at once"),
            Fault::Term(n) => format!("SIGTERM replica {n}, restart on exit"),
            Fault::FreezeStore(kind, s) => kind.describe_freeze(*s),
            Fault::RestartStore(kind, s) => kind.describe_restart(*s),
            Fault::RestartBroker => {
                "broker SIGKILL (a crash), restart on its own log".into()
            }
            Fault::CutStoreLink(kind, s) => format!(
                "replicas' {} link cut for {s:.0} s (packets dropped both ways, sockets open), then restored",
                kind.name()
            ),
            Fault::KillInSeal(n, step) => format!(
                "SIGKILL of replica {n} inside a seal, at `{step}` (fault point, {SEAL_FAULT_SKIP} passes skipped), then restarted without it"
            ),
        }
    }
}

/// One fault as applied.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Applied {
    pub fault: String,
    /// Seconds after the soak's start it began, and UTC.
    pub at_s: f64,
    pub at_utc: String,
    /// Its start in ms since the epoch, to set beside decision times.
    pub at_unix_ms: i64,
    pub took_s: f64,
    pub note: String,
    /// False when the fault did not happen as described (a fault point
    /// not reached, or not by its SIGKILL): the report's failures name it.
    pub landed: bool,
    /// The longest stop of decisions that began while it was the latest
    /// fault (`pauses.rs`), filled in once the outputs are read.
    pub pause: Option<super::pauses::Pause>,
}

/// How long faults last, in seconds.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Lengths {
    pub freeze: f64,
    pub store_down: f64,
    pub link_cut: f64,
}

/// The schedule over a window of `window` seconds: every guarantee's
/// faults, and under exactly once a SIGKILL inside a seal at its weakest
/// step (just after the commit, nothing settled) and one between the
/// offsets and the commit.
pub(crate) fn schedule(
    window: f64,
    lengths: Lengths,
    store: StoreKind,
    guarantee: Guarantee,
) -> Vec<(f64, Fault)> {
    let at = |fraction: f64| window * fraction;
    let Lengths {
        freeze,
        store_down,
        link_cut,
    } = lengths;
    let exactly_once = guarantee == Guarantee::ExactlyOnce;
    let mut faults = vec![
        (at(0.06), Fault::Kill(0)),
        (at(0.14), Fault::Term(1)),
        (at(0.22), Fault::FreezeStore(store, freeze)),
        (at(0.40), Fault::Kill(2)),
        (at(0.48), Fault::RestartStore(store, store_down)),
        (at(0.60), Fault::RestartBroker),
        (at(0.70), Fault::Term(0)),
        (at(0.78), Fault::Kill(1)),
        (at(0.86), Fault::FreezeStore(store, (freeze / 3.0).max(3.0))),
        (at(0.94), Fault::Term(2)),
    ];
    // In the window's first half, before the store's restart, the link cut
    // and the broker's restart push the rest later: the armed replica must
    // find records still coming to seal.
    faults.push((at(0.54), Fault::CutStoreLink(store, link_cut)));
    if exactly_once {
        faults.push((at(0.10), Fault::KillInSeal(2, "after-commit")));
        faults.push((at(0.30), Fault::KillInSeal(0, "after-offsets")));
    }
    faults.sort_by(|a, b| a.0.total_cmp(&b.0));
    faults
}

/// The note on a SIGKILL inside a seal: how the armed replica's first stop
/// went, and its fault point; and whether the fault landed (it logged the
/// step and died by SIGKILL).
pub(crate) fn seal_note(step: &str, stopped: &str, outcome: &FaultPoint) -> (String, bool) {
    let armed = format!("SIGTERM: exited ({stopped}); started with `{step}` armed");
    match outcome {
        FaultPoint::Fired {
            after,
            killed,
            status,
        } => (
            format!(
                "{armed}; fault point `{step}` reached {:.1} s later, {}; restarted without it",
                after.as_secs_f64(),
                if *killed {
                    "killed by its SIGKILL".to_string()
                } else {
                    format!("but it exited otherwise ({status})")
                }
            ),
            *killed,
        ),
        FaultPoint::ExitedFirst { after, status, .. } => (
            format!(
                "{armed}; it exited ({status}) {:.1} s later WITHOUT reaching `{step}`: no SIGKILL inside a seal; restarted without it",
                after.as_secs_f64()
            ),
            false,
        ),
        FaultPoint::NotReached { fired, status } => (
            format!(
                "{armed}; `{step}` {} within {:.0} s: no SIGKILL inside a seal; stopped ({status}), restarted without it",
                if *fired {
                    "reached but the replica NOT killed"
                } else {
                    "NOT reached"
                },
                SEAL_FAULT_BOUND.as_secs_f64()
            ),
            false,
        ),
        FaultPoint::NotRunning => (
            format!("{armed}; it was not running: no SIGKILL inside a seal"),
            false,
        ),
    }
}

/// What faults act on.
pub(crate) struct Targets<'a> {
    pub replicas: &'a mut Replicas,
    pub store: &'a mut SoakStore,
    pub broker: &'a mut Broker,
    /// The replicas' link to the store.
    pub link: &'a Link,
    /// Held while the broker restarts: the producer writes no chunk then.
    pub producer_gate: Arc<Mutex<()>>,
    pub start: Instant,
}

pub(crate) fn utc_now() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// Now, in ms since the epoch (the clock `idemgate-decided-at` is read
/// on: the replicas run on this machine).
pub(crate) fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

/// Applies one fault; watches the replicas while it waits.
pub(crate) fn apply(fault: &Fault, t: &mut Targets<'_>) -> Result<Applied> {
    let began = Instant::now();
    let at_s = t.start.elapsed().as_secs_f64();
    let at_utc = utc_now();
    let at_unix_ms = unix_ms();
    let wait = |t: &mut Targets<'_>, seconds: f64| {
        let until = Instant::now() + Duration::from_secs_f64(seconds);
        while Instant::now() < until {
            t.replicas.watch(t.start.elapsed().as_secs_f64());
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let mut landed = true;
    let note = match fault {
        Fault::Kill(n) => {
            // Started again at once: the new member joins while the group
            // still counts the dead one (until its 6 s session expires),
            // and exactly-once's new producer fences the old one's open
            // transaction with the same `transactional.id`.
            t.replicas.kill(*n, at_s);
            t.replicas.spawn(*n);
            "restarted at once".to_string()
        }
        Fault::Term(n) => {
            let (took, status) = t.replicas.terminate(*n, Duration::from_secs(90));
            t.replicas.spawn(*n);
            format!(
                "exited ({status}) {:.1} s after SIGTERM; restarted",
                took.as_secs_f64()
            )
        }
        Fault::FreezeStore(_, seconds) => {
            t.store.freeze();
            wait(t, *seconds);
            t.store.thaw();
            "thawed".to_string()
        }
        Fault::RestartStore(_, seconds) => {
            let Targets {
                replicas,
                store,
                start,
                ..
            } = t;
            let start = *start;
            store.restart(*seconds, |down| {
                let until = Instant::now() + Duration::from_secs_f64(down);
                while Instant::now() < until {
                    replicas.watch(start.elapsed().as_secs_f64());
                    std::thread::sleep(Duration::from_millis(100));
                }
            })?
        }
        Fault::RestartBroker => {
            // The soak's own producer writes no chunk meanwhile: one it
            // could not deliver within its 30 s message timeout would end
            // the soak, and the restart is the gateway's to meet.
            let gate = t.producer_gate.clone();
            let _held = gate.lock().expect("producer gate");
            let took = t.broker.restart()?;
            t.replicas.watch(t.start.elapsed().as_secs_f64());
            format!(
                "killed in {:.1} s, start {:.1} s (serving metadata again); the log kept, recovered at start; the soak's producer held off meanwhile",
                took.shutdown.as_secs_f64(),
                took.start.as_secs_f64()
            )
        }
        Fault::CutStoreLink(_, seconds) => {
            // The store itself runs on; the replicas' requests meet
            // silence until their own timeouts, as on a broken network.
            t.link.cut();
            wait(t, *seconds);
            t.link.restore();
            "restored; what waited in the link delivered".to_string()
        }
        Fault::KillInSeal(n, step) => {
            let (took, status) = t.replicas.terminate(*n, Duration::from_secs(90));
            let stopped = format!("{status}, {:.1} s", took.as_secs_f64());
            t.replicas.spawn_with(
                *n,
                &[
                    ("IDEMGATE_FAULT_AT", step.to_string()),
                    ("IDEMGATE_FAULT_ACTION", "kill".to_string()),
                    ("IDEMGATE_FAULT_SKIP", SEAL_FAULT_SKIP.to_string()),
                ],
            );
            let reached = format!("fault point {step} reached");
            let outcome = t
                .replicas
                .await_fault_point(*n, &reached, SEAL_FAULT_BOUND, t.start);
            if let FaultPoint::ExitedFirst { tail, .. } = &outcome {
                t.replicas.unexpected_exits.push(format!(
                    "replica {n}, armed at `{step}`, exited before reaching it:\n{tail}"
                ));
            }
            let (note, fired) = seal_note(step, &stopped, &outcome);
            landed = fired;
            note
        }
    };
    Ok(Applied {
        fault: fault.describe(),
        at_s,
        at_utc,
        at_unix_ms,
        took_s: began.elapsed().as_secs_f64(),
        note,
        landed,
        pause: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const LENGTHS: Lengths = Lengths {
        freeze: 35.0,
        store_down: 8.0,
        link_cut: 20.0,
    };

    fn seal_kills(faults: &[(f64, Fault)]) -> Vec<(usize, &'static str)> {
        faults
            .iter()
            .filter_map(|(_, f)| match f {
                Fault::KillInSeal(n, step) => Some((*n, *step)),
                _ => None,
            })
            .collect()
    }

    fn link_cuts(faults: &[(f64, Fault)]) -> Vec<f64> {
        faults
            .iter()
            .filter_map(|(_, f)| match f {
                Fault::CutStoreLink(_, s) => Some(*s),
                _ => None,
            })
            .collect()
    }

    /// Exactly once gets every fault of at-least-once, plus a SIGKILL
    /// inside a seal just after the commit and one after the offsets;
    /// both get the store link cut for the seconds asked, on either store.
    #[test]
    fn exactly_once_adds_the_seal_kills_to_every_fault_of_at_least_once() {
        for store in [StoreKind::Redis, StoreKind::Postgres] {
            let alo = schedule(240.0, LENGTHS, store, Guarantee::AtLeastOnce);
            let eos = schedule(240.0, LENGTHS, store, Guarantee::ExactlyOnce);
            assert!(seal_kills(&alo).is_empty(), "{alo:?}");
            let kills: &[(usize, &str)] = &[(2, "after-commit"), (0, "after-offsets")];
            assert_eq!(seal_kills(&eos), kills, "{eos:?}");
            let cuts: &[f64] = &[20.0];
            assert_eq!(link_cuts(&alo), cuts);
            assert_eq!(link_cuts(&eos), cuts);
            let describe = |s: &[(f64, Fault)]| -> Vec<String> {
                s.iter().map(|(_, f)| f.describe()).collect()
            };
            let eos_faults = describe(&eos);
            for fault in describe(&alo) {
                assert!(eos_faults.contains(&fault), "{fault} missing: {eos:?}");
            }
            assert_eq!(eos.len(), alo.len() + kills.len());
            assert!(describe(&alo).iter().any(|d| d.contains("broker SIGKILL")));
        }
    }

    /// The schedule is in order and within the window, the seal kills in
    /// its first half, ahead of the long store faults (so the armed replica
    /// still has records to seal when it gets to them).
    #[test]
    fn the_schedule_is_ordered_within_the_window() {
        let eos = schedule(240.0, LENGTHS, StoreKind::Redis, Guarantee::ExactlyOnce);
        assert!(eos.windows(2).all(|w| w[0].0 <= w[1].0), "{eos:?}");
        assert!(eos.iter().all(|(at, _)| (0.0..240.0).contains(at)));
        for (at, fault) in &eos {
            if matches!(fault, Fault::KillInSeal(..)) {
                assert!(*at < 0.5 * 240.0, "{fault:?} at {at}");
            }
        }
    }

    /// A seal kill landed only when its step was reached and the replica
    /// died by SIGKILL there; each other outcome says so in the report.
    #[test]
    fn a_seal_kill_lands_only_by_its_sigkill_at_its_step() {
        let after = Duration::from_secs_f64(7.5);
        let fired = FaultPoint::Fired {
            after,
            killed: true,
            status: "signal: 9 (SIGKILL)".into(),
        };
        let (note, landed) = seal_note("after-commit", "exit status: 0, 1.2 s", &fired);
        assert!(landed);
        assert!(note.contains("`after-commit` reached 7.5 s later, killed by its SIGKILL"));
        let otherwise = FaultPoint::Fired {
            after,
            killed: false,
            status: "exit status: 1".into(),
        };
        let (note, landed) = seal_note("after-commit", "", &otherwise);
        assert!(!landed);
        assert!(note.contains("exited otherwise (exit status: 1)"), "{note}");
        let early = FaultPoint::ExitedFirst {
            after,
            status: "exit status: 1".into(),
            tail: String::new(),
        };
        let (note, landed) = seal_note("after-offsets", "", &early);
        assert!(!landed);
        assert!(note.contains("WITHOUT reaching `after-offsets`"), "{note}");
        let missed = FaultPoint::NotReached {
            fired: false,
            status: "exit status: 0".into(),
        };
        let (note, landed) = seal_note("after-offsets", "", &missed);
        assert!(!landed);
        assert!(note.contains("NOT reached within 120 s"), "{note}");
        let stuck = FaultPoint::NotReached {
            fired: true,
            status: "exit status: 0".into(),
        };
        let (note, landed) = seal_note("after-offsets", "", &stuck);
        assert!(!landed);
        assert!(
            note.contains("reached but the replica NOT killed"),
            "{note}"
        );
        assert!(!seal_note("after-commit", "", &FaultPoint::NotRunning).1);
    }
}
