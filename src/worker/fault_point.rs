//! Fault points: a test-only hook that stops this process at a named step
//! of an exactly-once seal (docs/design.md §7, "Fault points"), so the
//! fault tests (`tests/it/e2e/seal_faults.rs`) can aim a SIGKILL or a
//! SIGTERM between two of its writes instead of hoping a timed signal
//! lands there.
//!
//! Inert unless the process environment names a step:
//!
//! - `IDEMGATE_FAULT_AT=<step>`: one of `after-produce`, `after-inserts`,
//!   `after-offsets`, `after-commit`, `before-settlements`;
//! - `IDEMGATE_FAULT_ACTION=kill` (the default): SIGKILL of this process,
//!   from itself: no destructor, flush or handover runs, as a crash;
//! - `IDEMGATE_FAULT_ACTION=term`: SIGTERM to itself, once: the ordinary
//!   graceful stop runs from there, as when an orchestrator stops it;
//! - `IDEMGATE_FAULT_ACTION=stop`: SIGSTOP to itself: the process freezes
//!   at the step, and the test does what it must there (cuts the store's
//!   link) before it sends SIGCONT, or SIGTERM and SIGCONT;
//! - `IDEMGATE_FAULT_SKIP=<n>` (default 0): the step fires the (n+1)th
//!   time it is reached with work, not the first: the first transactions
//!   of a stream hold only what needs no claim (`invalid` records are
//!   decided before any store round answers).
//!
//! The environment is read once. Only a step reached with `work` (a seal
//! holding outputs of claimed records, a round setting done flags) counts,
//! so the fault
//! lands where there is something to lose, not in the empty seals before
//! the first assignment. Reaching it logs
//! `fault point <step> reached` at WARN before the signal. Nothing in
//! production sets these variables; an operator who did would be told by
//! that line.

use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use tracing::warn;

/// The steps of a seal a fault can be aimed at, in their order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Every output of the transaction produced (their reports may still
    /// be coming: the commit waits for them).
    AfterProduce,
    /// The transaction's tier-2 inserts acknowledged.
    AfterInserts,
    /// `send_offsets_to_transaction` returned, the commit not sent.
    AfterOffsets,
    /// `commit_transaction` returned Ok, nothing settled yet.
    AfterCommit,
    /// A round that sets done flags (claims of a committed transaction's
    /// records; a raise alone may cover only claims flagged before) is
    /// about to be sent.
    BeforeSettlements,
}

impl Step {
    const ALL: [Step; 5] = [
        Step::AfterProduce,
        Step::AfterInserts,
        Step::AfterOffsets,
        Step::AfterCommit,
        Step::BeforeSettlements,
    ];

    /// Its name in `IDEMGATE_FAULT_AT`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Step::AfterProduce => "after-produce",
            Step::AfterInserts => "after-inserts",
            Step::AfterOffsets => "after-offsets",
            Step::AfterCommit => "after-commit",
            Step::BeforeSettlements => "before-settlements",
        }
    }
}

/// What a seal holds at a step past its offsets: the claims its commit
/// leaves to settle, and the offsets it sent.
pub(crate) fn holding(claims: usize, offsets: &rdkafka::TopicPartitionList) -> String {
    let listed: Vec<String> = offsets
        .elements()
        .iter()
        .map(|e| format!("{}/{}@{:?}", e.topic(), e.partition(), e.offset()))
        .collect();
    format!("{claims} claims to settle, offsets {listed:?}")
}

/// What happens at the armed step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    Kill,
    Term,
    Stop,
}

/// The armed step, its action and how many of its passes go by first,
/// from the environment, once.
/// Whether any fault point is armed: what a step's `work` costs to tell
/// is spent only then.
pub(crate) fn any_armed() -> bool {
    armed().is_some()
}

fn armed() -> Option<(Step, Action, u64)> {
    static ARMED: OnceLock<Option<(Step, Action, u64)>> = OnceLock::new();
    *ARMED.get_or_init(|| {
        let at = std::env::var("IDEMGATE_FAULT_AT").ok()?;
        let Some(step) = Step::ALL.into_iter().find(|s| s.name() == at) else {
            warn!(at = %at, "IDEMGATE_FAULT_AT names no step of a seal: no fault point armed");
            return None;
        };
        let action = match std::env::var("IDEMGATE_FAULT_ACTION").as_deref() {
            Ok("term") => Action::Term,
            Ok("stop") => Action::Stop,
            _ => Action::Kill,
        };
        let skip = std::env::var("IDEMGATE_FAULT_SKIP")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        Some((step, action, skip))
    })
}

/// The seal reached `step`; `work` says whether it holds anything (only
/// then does an armed step fire), `what` says what it holds, in the line
/// that tells the fault fired. Does nothing unless `step` is armed.
pub(crate) fn reached(step: Step, work: bool, what: impl FnOnce() -> String) {
    static PASSES: AtomicU64 = AtomicU64::new(0);
    let Some((at, action, skip)) = armed() else {
        return;
    };
    if at != step || !work || PASSES.fetch_add(1, Ordering::SeqCst) != skip {
        return;
    }
    warn!(?action, holding = %what(), "fault point {} reached", step.name());
    let signal = match action {
        Action::Kill => "-KILL",
        Action::Term => "-TERM",
        Action::Stop => "-STOP",
    };
    // A kill takes every thread before `kill` exits, and a term lets this
    // one go on. A stop is aimed at this thread: the kernel makes the
    // thread a signal is sent to stop first, and the others after it; sent
    // to the process, the stop could go to a thread that is not running
    // (a busy machine), while this one, woken by `kill`'s exit, went on
    // into the commit (seen: the frozen transaction committed 4 ms after
    // this line).
    let target = match action {
        Action::Stop => this_thread(),
        Action::Kill | Action::Term => std::process::id().to_string(),
    };
    if let Err(error) = Command::new("kill").args([signal, &target]).status() {
        warn!(%error, "fault point {}: the signal could not be sent", step.name());
    }
}

/// This thread's id (`/proc/thread-self` names `<pid>/task/<tid>`), or the
/// process's where it cannot be read.
fn this_thread() -> String {
    std::fs::read_link("/proc/thread-self")
        .ok()
        .and_then(|link| Some(link.file_name()?.to_str()?.to_string()))
        .unwrap_or_else(|| std::process::id().to_string())
}
