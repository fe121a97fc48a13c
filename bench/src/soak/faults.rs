//! The fault schedule and what applying it took. Faults are spread over the
//! soak's window while the producer writes; each starts at its planned
//! second or, if the one before is still running (a long freeze), right
//! after it, and the time actually applied is what the report shows.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Result;
use serde::Serialize;

use super::store::{SoakStore, StoreKind};
use super::world::{Broker, Replicas};

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
    /// SIGTERM the broker (a controlled shutdown), start it again on the
    /// same ports and log.
    RestartBroker,
}

impl Fault {
    pub fn describe(&self) -> String {
        match self {
            Fault::Kill(n) => format!("SIGKILL replica {n}, restart at once"),
            Fault::Term(n) => format!("SIGTERM replica {n}, restart on exit"),
            Fault::FreezeStore(kind, s) => kind.describe_freeze(*s),
            Fault::RestartStore(kind, s) => kind.describe_restart(*s),
            Fault::RestartBroker => {
                "broker SIGTERM (controlled shutdown), restart on its own log".into()
            }
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
    pub took_s: f64,
    pub note: String,
}

/// The schedule over a window of `window` seconds.
pub(crate) fn schedule(
    window: f64,
    freeze: f64,
    store_down: f64,
    store: StoreKind,
) -> Vec<(f64, Fault)> {
    let at = |fraction: f64| window * fraction;
    vec![
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
    ]
}

/// What faults act on.
pub(crate) struct Targets<'a> {
    pub replicas: &'a mut Replicas,
    pub store: &'a mut SoakStore,
    pub broker: &'a mut Broker,
    /// Held while the broker restarts: the producer writes no chunk then.
    pub producer_gate: Arc<Mutex<()>>,
    pub start: Instant,
}

pub(crate) fn utc_now() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// Applies one fault; watches the replicas while it waits.
pub(crate) fn apply(fault: &Fault, t: &mut Targets<'_>) -> Result<Applied> {
    let began = Instant::now();
    let at_s = t.start.elapsed().as_secs_f64();
    let at_utc = utc_now();
    let wait = |t: &mut Targets<'_>, seconds: f64| {
        let until = Instant::now() + Duration::from_secs_f64(seconds);
        while Instant::now() < until {
            t.replicas.watch(t.start.elapsed().as_secs_f64());
            std::thread::sleep(Duration::from_millis(100));
        }
    };
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
                "controlled shutdown {:.1} s, start {:.1} s (serving metadata again); the log kept; the soak's producer held off meanwhile",
                took.shutdown.as_secs_f64(),
                took.start.as_secs_f64()
            )
        }
    };
    Ok(Applied {
        fault: fault.describe(),
        at_s,
        at_utc,
        took_s: began.elapsed().as_secs_f64(),
        note,
    })
}
