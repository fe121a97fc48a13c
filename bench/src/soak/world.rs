//! What the soak owns and breaks: an Apache Kafka broker it restarts on its
//! own disk (SIGKILL, a crash, then a start on the same ports and the same
//! log, which it recovers; not a controlled shutdown: see `restart`), a
//! redis-server it can freeze and restart (from its own `SHUTDOWN SAVE`
//! dump), and the gateway replicas as child processes it
//! kills, terminates and starts again. Every process is a guard: dropping it
//! kills it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Result;
use idemgate_testkit::process::Logged;
use idemgate_testkit::servers::{signal, Kafka};

/// The soak's Kafka broker (the test kit's guard: one KRaft node, its log
/// under the run's directory), with the version the report names.
pub(crate) struct Broker {
    kafka: Kafka,
    pub brokers: String,
    pub version: String,
}

/// What a broker restart took.
pub(crate) struct Restarted {
    /// From SIGKILL until the process was gone.
    pub shutdown: Duration,
    /// From the new start until it served metadata as a broker again.
    pub start: Duration,
}

impl Broker {
    /// Formats a fresh log under `dir` and starts the broker from `libs`.
    pub fn start(libs: &Path, dir: &Path) -> Result<Broker> {
        let kafka = Kafka::start(libs, dir)?;
        Ok(Broker {
            brokers: kafka.brokers.clone(),
            version: crate::e2e::kafka_version(libs),
            kafka,
        })
    }

    /// SIGKILL; then a start on the same ports and log, until it serves
    /// metadata. Clients have no broker for the sum of the two.
    ///
    /// Not a controlled shutdown: on this one-node cluster that takes every
    /// partition's leader away while the transaction coordinator still
    /// sends its markers, and Apache Kafka 4.4 skips a marker for a
    /// partition without a leader as if it were deleted (`Couldn't find
    /// leader endpoint ... can be skipped` in the broker's log) while the
    /// transaction completes: its outputs stay undecided for good and
    /// read_committed readers stop there (docs/design.md §12).
    pub fn restart(&mut self) -> Result<Restarted> {
        let began = Instant::now();
        self.kafka.kill()?;
        let shutdown = began.elapsed();
        self.kafka.restart()?;
        Ok(Restarted {
            shutdown,
            start: self.kafka.started_in,
        })
    }
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(true)
}

/// The gateway replicas: `idemgate-bench soak-replica --config F`, which is
/// `idemgate run` (the same `Config::load` and `app::run` until SIGTERM).
pub(crate) struct Replicas {
    exe: PathBuf,
    dir: PathBuf,
    configs: Vec<PathBuf>,
    procs: Vec<Option<Logged>>,
    starts: Vec<u32>,
    /// Replicas started with a fault point armed: `watch` leaves their
    /// exit to `await_fault_point`, which expects it.
    armed: Vec<bool>,
    /// Exits the soak did not cause, each with its log tail; each replica
    /// was started again.
    pub unexpected_exits: Vec<String>,
}

impl Replicas {
    pub fn start(exe: &Path, dir: &Path, configs: Vec<String>) -> Result<Replicas> {
        let mut paths = Vec::new();
        for (n, text) in configs.iter().enumerate() {
            let path = dir.join(format!("replica-{n}.toml"));
            std::fs::write(&path, text)?;
            paths.push(path);
        }
        let mut replicas = Replicas {
            exe: exe.to_path_buf(),
            dir: dir.to_path_buf(),
            procs: paths.iter().map(|_| None).collect(),
            starts: vec![0; paths.len()],
            armed: vec![false; paths.len()],
            configs: paths,
            unexpected_exits: Vec::new(),
        };
        for n in 0..replicas.configs.len() {
            replicas.spawn(n);
        }
        Ok(replicas)
    }

    pub fn spawn(&mut self, n: usize) {
        self.spawn_with(n, &[]);
    }

    /// Starts replica `n` with `env` added to its environment (a fault
    /// point's variables: then it is armed until `await_fault_point`).
    pub fn spawn_with(&mut self, n: usize, env: &[(&str, String)]) {
        self.starts[n] += 1;
        self.armed[n] = !env.is_empty();
        let mut command = Command::new(&self.exe);
        command
            .arg("soak-replica")
            .arg("--config")
            .arg(&self.configs[n])
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .envs(env.iter().cloned());
        let log = self.dir.join(format!("replica-{n}.{}.log", self.starts[n]));
        self.procs[n] = Some(Logged::spawn(&format!("replica {n}"), command, &log));
    }

    /// Waits up to `bound` for armed replica `n` to log `reached` and exit
    /// by it, watching the others meanwhile; then starts it again unarmed
    /// (a supervisor's restart). Replica `n` is stopped by SIGTERM if it is
    /// still running at the bound. What happened, for the report.
    pub fn await_fault_point(
        &mut self,
        n: usize,
        reached: &str,
        bound: Duration,
        start: Instant,
    ) -> FaultPoint {
        let began = Instant::now();
        let outcome = loop {
            self.watch(start.elapsed().as_secs_f64());
            let Some(process) = self.procs[n].as_mut() else {
                break FaultPoint::NotRunning;
            };
            // The exit first, then the log: a line written just before the
            // exit is in the file by then.
            let exited = process.exited();
            let fired = process.log_text().contains(reached);
            if let Some(status) = exited {
                let process = self.procs[n].take().expect("checked");
                let after = began.elapsed();
                break if fired {
                    use std::os::unix::process::ExitStatusExt;
                    FaultPoint::Fired {
                        after,
                        killed: status.signal() == Some(9),
                        status: status.to_string(),
                    }
                } else {
                    FaultPoint::ExitedFirst {
                        after,
                        status: status.to_string(),
                        tail: process.tail(8),
                    }
                };
            }
            if began.elapsed() > bound {
                let (_, status) = self.terminate(n, Duration::from_secs(90));
                break FaultPoint::NotReached { fired, status };
            }
            // Polling the armed replica's exit: it dies when its seal
            // reaches the fault point, which the broker's pace decides.
            std::thread::sleep(Duration::from_millis(100));
        };
        self.armed[n] = false;
        self.spawn(n);
        outcome
    }

    /// Partitions the running replicas hold, by their logs: each one's last
    /// assignment, unless a revoke came after it.
    pub fn assigned(&self) -> usize {
        self.procs
            .iter()
            .flatten()
            .map(|process| {
                let text = process.log_text();
                let last = text
                    .lines()
                    .rev()
                    .find(|l| l.contains("poller: assigned") || l.contains("poller: revoked"));
                last.and_then(|l| l.split("assigned partitions=").nth(1))
                    .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
                    .unwrap_or(0)
            })
            .sum()
    }

    /// SIGKILL: nothing flushed, nothing committed. By kill(1), not
    /// `Logged::kill`: a replica that has just exited on its own (after
    /// the last `watch`) is a zombie until reaped here and takes the signal
    /// all the same; its own exit is noted as unexpected.
    pub fn kill(&mut self, n: usize, at: f64) {
        use std::os::unix::process::ExitStatusExt;
        if let Some(mut process) = self.procs[n].take() {
            signal(process.pid(), "KILL");
            let status = process.wait_exit(Duration::from_secs(10));
            if status.signal() != Some(9) {
                self.unexpected_exits.push(format!(
                    "replica {n} exited on its own ({status}) just before its SIGKILL at +{at:.1}s; log {}:\n{}",
                    process.log.display(),
                    process.tail(8)
                ));
            }
        }
    }

    /// SIGTERM and the wait for the exit (the replica finishes its batch,
    /// commits and leaves the group); how long it took and how it ended.
    pub fn terminate(&mut self, n: usize, bound: Duration) -> (Duration, String) {
        let started = Instant::now();
        match self.procs[n].take() {
            Some(mut process) => {
                signal(process.pid(), "TERM");
                let status = process.wait_exit(bound);
                (started.elapsed(), status.to_string())
            }
            None => (Duration::ZERO, "not running".into()),
        }
    }

    /// Starts again every replica that exited on its own, noting each.
    pub fn watch(&mut self, at: f64) {
        for n in 0..self.procs.len() {
            if self.armed[n] {
                continue;
            }
            let exited = match self.procs[n].as_mut() {
                Some(process) => !alive(process),
                None => false,
            };
            if exited {
                let process = self.procs[n].take().expect("checked");
                self.unexpected_exits.push(format!(
                    "replica {n} exited on its own at +{at:.1}s; log {}:\n{}",
                    process.log.display(),
                    process.tail(8)
                ));
                self.spawn(n);
            }
        }
    }

    /// SIGTERM to all, waiting for each.
    pub fn stop_all(&mut self, bound: Duration) -> Vec<String> {
        (0..self.procs.len())
            .map(|n| {
                let (took, status) = self.terminate(n, bound);
                format!("replica {n}: {status} after {:.1}s", took.as_secs_f64())
            })
            .collect()
    }
}

/// How an armed replica's fault point went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum FaultPoint {
    /// It logged the step and exited (`status`; `killed` if by SIGKILL)
    /// `after` its armed start.
    Fired {
        after: Duration,
        killed: bool,
        status: String,
    },
    /// It exited without reaching the step.
    ExitedFirst {
        after: Duration,
        status: String,
        tail: String,
    },
    /// Not gone by it within the bound (`fired`: the step was logged, yet
    /// the process ran on); stopped by SIGTERM (`status`).
    NotReached { fired: bool, status: String },
    /// It was not running when armed.
    NotRunning,
}

/// Whether the process still runs (a zombie has exited).
fn alive(process: &mut Logged) -> bool {
    let pid = process.pid();
    !is_zombie(pid)
}
