//! The fault schedule and what applying it took. Faults are spread over the
//! soak's window while the producer writes; each starts at its planned
//! second or, if the one before is still running (a long freeze), right
//! after it, and the time actually applied is what the report shows.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Result;
use idemgate_testkit::servers::RedisServer;
use serde::Serialize;

use super::world::{Broker, Replicas};

#[derive(Clone, Debug, Serialize)]
pub(crate) enum Fault {
    /// SIGKILL a replica, start it again after a pause.
    Kill(usize),
    /// SIGTERM a replica, wait for its exit, start it again.
    Term(usize),
    /// SIGSTOP Redis for this many seconds, then SIGCONT.
    FreezeRedis(f64),
    /// `SHUTDOWN SAVE`, down this many seconds, start from the dump.
    RestartRedis(f64),
    /// SIGTERM the broker and start it again on its storage.
    RestartBroker,
}

impl Fault {
    pub fn describe(&self) -> String {
        match self {
            Fault::Kill(n) => format!("SIGKILL replica {n}, restart once its session expired"),
            Fault::Term(n) => format!("SIGTERM replica {n}, restart on exit"),
            Fault::FreezeRedis(s) => format!("Redis SIGSTOP for {s:.0} s, then SIGCONT"),
            Fault::RestartRedis(s) => {
                format!("Redis SHUTDOWN SAVE, down {s:.0} s, restart from its dump")
            }
            Fault::RestartBroker => "broker SIGTERM and restart on the same storage".into(),
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
pub(crate) fn schedule(window: f64, freeze: f64, redis_down: f64) -> Vec<(f64, Fault)> {
    let at = |fraction: f64| window * fraction;
    vec![
        (at(0.06), Fault::Kill(0)),
        (at(0.14), Fault::Term(1)),
        (at(0.22), Fault::FreezeRedis(freeze)),
        (at(0.40), Fault::Kill(2)),
        (at(0.48), Fault::RestartRedis(redis_down)),
        (at(0.60), Fault::RestartBroker),
        (at(0.70), Fault::Term(0)),
        (at(0.78), Fault::Kill(1)),
        (at(0.86), Fault::FreezeRedis((freeze / 3.0).max(3.0))),
        (at(0.94), Fault::Term(2)),
    ]
}

/// What faults act on.
pub(crate) struct Targets<'a> {
    pub replicas: &'a mut Replicas,
    pub redis: &'a mut RedisServer,
    pub broker: &'a mut Broker,
    /// Held while the broker restarts: the producer writes no chunk then.
    pub producer_gate: Arc<Mutex<()>>,
    pub start: Instant,
    /// Seconds between a SIGKILL and the replica's restart.
    pub restart_after: f64,
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
            t.replicas.kill(*n);
            // After the killed member's 6 s session: a new member joining
            // while the broker still counts the dead one makes two
            // rebalances back to back, after which Tansu's group has been
            // seen never to settle again (an artefact of the broker).
            wait(t, t.restart_after);
            t.replicas.spawn(*n);
            format!("restarted {:.0} s later", t.restart_after)
        }
        Fault::Term(n) => {
            let (took, status) = t.replicas.terminate(*n, Duration::from_secs(90));
            t.replicas.spawn(*n);
            format!(
                "exited ({status}) {:.1} s after SIGTERM; restarted",
                took.as_secs_f64()
            )
        }
        Fault::FreezeRedis(seconds) => {
            t.redis.freeze();
            wait(t, *seconds);
            t.redis.thaw();
            "thawed".to_string()
        }
        Fault::RestartRedis(seconds) => {
            t.redis.shutdown_save();
            wait(t, *seconds);
            t.redis.restart();
            "restarted from dump.rdb".to_string()
        }
        Fault::RestartBroker => {
            let gate = t.producer_gate.clone();
            let _held = gate.lock().expect("producer gate");
            match t.broker.restart() {
                Ok(down) => format!(
                    "broker back after {:.1} s (storage {:?}); the producer held off meanwhile",
                    down.as_secs_f64(),
                    t.broker.storage
                ),
                Err(error) => format!("SKIPPED: {error:#}"),
            }
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
