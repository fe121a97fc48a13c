//! A replica stopped at each step of an exactly-once seal, on Apache Kafka
//! (docs/design.md §7, "Fault points"). The test-only fault point
//! (`IDEMGATE_FAULT_AT`, `IDEMGATE_FAULT_ACTION`, `IDEMGATE_FAULT_SKIP`)
//! stops the first replica's run the sixth time its seal reaches the step
//! with work in hand, half a second into a burst:
//!
//! ```text
//! produce ─► (reports in) ─┬─► tier-2 inserts ─┬─► send_offsets ─┬─► commit ─┬─► … ─┬─► settlements
//!              after-produce     after-inserts      after-offsets   after-commit  before-settlements
//! ```
//!
//! by SIGKILL (nothing runs after it) or SIGTERM (the graceful stop runs
//! from there); one more case freezes it just after a commit, cuts its
//! store link (the packets dropped, the sockets open: the settlements
//! cannot land) and then sends SIGTERM. A replica without the fault point
//! takes over (the restart a supervisor makes, with the same
//! transactional id) and drains the stream.
//!
//! The guarantee each case checks: for a read_committed reader of clean and
//! audit every input has exactly one output and every event is once in
//! clean, nothing lost (`Expect::Filtered`: a tiered stream); the next
//! owner settles every claim the committed transactions cover (below the
//! committed offsets, or in their metadata's delivered ranges above): it
//! has committed past every record the stopped replica read, with no
//! covered claim left unsettled, before tier 1's TTL could have decided
//! them (that TTL is shorter than the test, so waiting it out would hide
//! a stranded claim);
//! no copy is left waiting (the next owner's oldest wait stays short, and
//! at the end no claim is unsettled).

use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use idemgate_testkit::check::{check, Expect};
use idemgate_testkit::kafka::{committed_now, read_inputs_as_delivered, Producer, Reader};
use idemgate_testkit::link::Link;
use idemgate_testkit::process::scrape_metric;
use idemgate_testkit::servers::{free_port, signal, unsettled_holders, Holder};
use idemgate_testkit::{env, kafka_brokers, say, unique, BOUND};

use super::group::{ends, wait_committed};
use super::process::{BurstAndTail, Gate, GateConfig};

const PARTITIONS: i32 = 4;

/// How much longer than tier 1's TTL the paced tail runs (`Fault::tier1_ttl`).
const TAIL_PAST_TTL: Duration = Duration::from_secs(5);

/// The longest a copy may wait on another record's claim at the next
/// owner: a holder in flight there finishes within a few commit
/// intervals; a stranded one would hold its copies until tier 1 forgets it.
const LONGEST_WAIT: f64 = 10.0;

/// How many passes of its step with work the first replica makes before
/// the fault: half a second of 100 ms seals into the (paced) burst, past the first
/// transactions (they hold only `invalid` records' outputs, which need no
/// claim: a fault there would strand nothing).
const SKIP: u32 = 5;

/// How the first replica is stopped at its step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// SIGKILL from the fault point.
    Kill,
    /// SIGTERM from the fault point: the graceful stop.
    Term,
    /// Frozen at the step (SIGSTOP from the fault point), its store link
    /// cut, then SIGTERM: a graceful stop whose settlements cannot land.
    CutThenTerm,
}

impl Fault {
    fn action(self) -> &'static str {
        match self {
            Fault::Kill => "kill",
            Fault::Term => "term",
            Fault::CutThenTerm => "stop",
        }
    }

    /// Tier 1 forgets a claim this long after its write, settled or not.
    /// Each case runs longer (the paced tail alone does: `TAIL_PAST_TTL`),
    /// so a claim left unsettled would be decided by its expiry within the
    /// test. The next owner must have settled every covered claim before
    /// then, so the first replica's stop and the next owner's takeover both
    /// fit in it. A kill or a graceful stop ends the first replica about
    /// 5 s in and the next owner has settled by 6 to 12 s (six tests at a
    /// time beside a busy core): 30 s. The cut link's graceful stop retries
    /// its last transaction's tier-2 inserts for the worker's flush
    /// patience (30 s) first: 60 s. At 40 s, a loaded machine left its next
    /// owner under 5 s to join, take the partitions and settle, and the
    /// case failed with nothing wrong but the time.
    fn tier1_ttl(self) -> Duration {
        match self {
            Fault::Kill | Fault::Term => Duration::from_secs(30),
            Fault::CutThenTerm => Duration::from_secs(60),
        }
    }

    /// Whether the stopped replica cannot have settled what it committed
    /// (the case then requires claims stranded under the committed
    /// transactions, or it tests nothing).
    fn strands(self, step: &str) -> bool {
        match self {
            Fault::Kill => matches!(step, "after-commit" | "before-settlements"),
            Fault::Term => false,
            Fault::CutThenTerm => true,
        }
    }
}

macro_rules! cases {
    ($($(#[$doc:meta])* $name:ident: $step:literal, $fault:expr;)*) => {$(
        $(#[$doc])*
        #[test]
        fn $name() {
            stopped_at(stringify!($name), $step, $fault);
        }
    )*};
}

cases! {
    /// SIGKILL once the transaction's outputs are produced and their
    /// reports in: the transaction is aborted, its records replayed once;
    /// nothing doubled or lost, every claim settled, no copy waiting.
    seal_killed_after_the_produce_doubles_loses_and_strands_nothing: "after-produce", Fault::Kill;
    /// SIGTERM there: the graceful stop commits it; nothing doubled or
    /// lost, every claim settled, no copy waiting.
    seal_terminated_after_the_produce_doubles_loses_and_strands_nothing: "after-produce", Fault::Term;
    /// SIGKILL after the tier-2 inserts: the aborted records' hashes are in
    /// the filter, their own tier-1 claims override it on the replay;
    /// nothing doubled or lost, every claim settled, no copy waiting.
    seal_killed_after_the_inserts_doubles_loses_and_strands_nothing: "after-inserts", Fault::Kill;
    /// SIGTERM after the tier-2 inserts; nothing doubled or lost, every
    /// claim settled, no copy waiting.
    seal_terminated_after_the_inserts_doubles_loses_and_strands_nothing: "after-inserts", Fault::Term;
    /// SIGKILL between `send_offsets_to_transaction` and the commit: the
    /// offsets are aborted with the outputs; nothing doubled or lost,
    /// every claim settled, no copy waiting.
    seal_killed_after_the_offsets_doubles_loses_and_strands_nothing: "after-offsets", Fault::Kill;
    /// SIGTERM there; nothing doubled or lost, every claim settled, no
    /// copy waiting.
    seal_terminated_after_the_offsets_doubles_loses_and_strands_nothing: "after-offsets", Fault::Term;
    /// SIGKILL right after the commit: its claims are unsettled below the
    /// committed offsets; the next owner settles them at assignment from
    /// the commit's metadata and sends nothing again; nothing doubled or
    /// lost, no copy waiting.
    seal_killed_after_the_commit_doubles_loses_and_strands_nothing: "after-commit", Fault::Kill;
    /// SIGTERM right after the commit; nothing doubled or lost, every claim
    /// settled, no copy waiting.
    seal_terminated_after_the_commit_doubles_loses_and_strands_nothing: "after-commit", Fault::Term;
    /// SIGKILL before the settlement round that follows a commit: as after
    /// the commit, the next owner settles the claims below the committed
    /// offsets at assignment; nothing doubled or lost, no copy waiting.
    seal_killed_before_the_settlements_doubles_loses_and_strands_nothing: "before-settlements", Fault::Kill;
    /// SIGTERM before the settlement round; nothing doubled or lost, every
    /// claim settled, no copy waiting.
    seal_terminated_before_the_settlements_doubles_loses_and_strands_nothing: "before-settlements", Fault::Term;
    /// The store link cut (packets dropped) just after a commit, then
    /// SIGTERM: the graceful stop cannot settle what it committed; the next
    /// owner settles every claim below the committed offsets at assignment;
    /// nothing doubled or lost, no copy waiting.
    seal_with_its_store_link_cut_after_the_commit_then_terminated_strands_nothing: "after-commit", Fault::CutThenTerm;
}

/// One case: the first replica stopped by `fault` at `step`, the next
/// owner draining; the guarantee of the module's doc.
fn stopped_at(test: &'static str, step: &'static str, fault: Fault) {
    let case = format!("[{step}, {fault:?}]");
    let tier1_ttl = fault.tier1_ttl();
    let workload = BurstAndTail::new(test, PARTITIONS, false, 400);
    let (topics, plan) = (&workload.topics, workload.plan());
    let redis_url = env("IDEMGATE_TEST_REDISBLOOM_URL");
    let mut config = GateConfig::new(test, topics, redis_url.clone());
    config.max_records = 500;
    config.stream = Some(format!(
        "profile = \"bank-txn\"\nmode = \"tiered\"\nttl = {{ explicit = \"1h\" }}\ntier1_ttl = \"{}s\"\npeak_rate = 1000\nfp_rate = 0.000001\nfail_mode = \"closed\"",
        tier1_ttl.as_secs()
    ));
    let config = config.exactly_once(&unique(&format!("{test}-txn")));
    let (link, through_link) = Link::for_url(&redis_url);
    let mut doomed_config = config.clone();
    doomed_config.env = vec![
        ("IDEMGATE_FAULT_AT", step.to_string()),
        ("IDEMGATE_FAULT_ACTION", fault.action().to_string()),
        ("IDEMGATE_FAULT_SKIP", SKIP.to_string()),
    ];
    doomed_config.redis_url = through_link;

    let began = Instant::now();
    let mut doomed = Gate::start(&format!("{test}-doomed"), &doomed_config);
    doomed.wait_assigned(Duration::from_secs(30));
    let producer = Producer::new(&kafka_brokers());
    // Paced, so that the fault lands while the burst is being worked on.
    let mut landed = producer.send(
        &topics.input,
        &workload.burst,
        100,
        Duration::from_millis(100),
    );
    let burst_ends = ends(&landed, PARTITIONS);
    let tail = {
        let (topic, tail) = (topics.input.clone(), workload.tail.clone());
        // Records a second, so that the tail takes `TAIL_PAST_TTL` longer
        // than tier 1's TTL.
        let pace = tail
            .len()
            .div_ceil((tier1_ttl + TAIL_PAST_TTL).as_secs() as usize);
        std::thread::spawn(move || {
            Producer::new(&kafka_brokers()).send(&topic, &tail, pace, Duration::from_secs(1))
        })
    };
    let mut reader = Reader::new(&kafka_brokers(), &topics.outputs());

    // The fault point stops it: wait for that, and for the exit.
    let reached = format!("fault point {step} reached");
    doomed.wait_line(
        &reached,
        Instant::now() + BOUND,
        &format!("{case} the fault point was not reached within {BOUND:?}"),
        || reader.read_for(Duration::from_millis(50)),
    );
    let status = match fault {
        Fault::Kill => doomed.wait_exit(Duration::from_secs(20)),
        Fault::Term => doomed.wait_exit(Duration::from_secs(60)),
        Fault::CutThenTerm => {
            wait_frozen(&doomed, &case);
            link.cut();
            // Delivered when it runs again: the stop starts at the step.
            signal(doomed.pid(), "TERM");
            doomed.resume();
            doomed.wait_exit(Duration::from_secs(60))
        }
    };
    let stopped = began.elapsed();
    let fired = doomed.log_text();
    let fired = fired.lines().find(|l| l.contains(&reached)).unwrap_or("");
    say(
        test,
        format!("{case} the first replica stopped at {stopped:?}: {status}; {fired}"),
    );
    match fault {
        Fault::Kill => assert_eq!(
            status.signal(),
            Some(9),
            "{case} the fault point did not SIGKILL the replica: {status}"
        ),
        Fault::Term => assert!(
            status.success(),
            "{case} the graceful stop from the fault point exited with {status}:\n{}",
            doomed.tail(40)
        ),
        // Its store is out of reach: an error exit is its due.
        Fault::CutThenTerm => assert!(status.signal().is_none(), "{case} {status}"),
    }

    let committed = committed_now_of(&config);
    let left = unsettled_holders(&redis_url, &config.key_prefix);
    let stranded = covered(&left, &committed);
    say(
        test,
        format!(
            "{case} left by the first replica: {} unsettled claims, {} of them covered by the committed transactions {committed:?}",
            left.len(),
            stranded.len()
        ),
    );
    if fault.strands(step) {
        assert!(
            !stranded.is_empty(),
            "{case} no claim stranded under the committed transactions {committed:?}: the case tests nothing"
        );
    }

    // The supervisor's restart: same transactional id (it aborts the dead
    // incarnation's open transaction), no fault point, the store direct.
    let mut next_config = config.clone();
    let metrics = format!("127.0.0.1:{}", free_port());
    next_config.metrics_listen = metrics.clone();
    let mut next = Gate::start(&format!("{test}-next"), &next_config);
    let mut longest_wait = 0.0_f64;
    let mut scraped = Instant::now();
    let mut watch = |next: &mut Gate| {
        next.assert_alive();
        if scraped.elapsed() >= Duration::from_millis(500) && next.assigned().is_some() {
            scraped = Instant::now();
            longest_wait =
                longest_wait.max(scrape_metric(&metrics, "idemgate_oldest_wait_seconds"));
        }
    };

    // Every claim the committed transactions cover settled, and their offsets
    // past every record the first replica read, while its first claims
    // are still in tier 1: no TTL decided them.
    let expiry = began + tier1_ttl;
    loop {
        watch(&mut next);
        let committed = committed_now_of(&config);
        let past = burst_ends.iter().all(|&(p, end)| {
            committed[p as usize]
                .as_ref()
                .is_some_and(|c| c.offset >= end)
        });
        let stranded = covered(
            &unsettled_holders(&redis_url, &config.key_prefix),
            &committed,
        );
        if past && stranded.is_empty() {
            say(
                test,
                format!(
                    "{case} the next owner committed past the burst with every covered claim settled at {:?}",
                    began.elapsed()
                ),
            );
            break;
        }
        assert!(
            Instant::now() < expiry,
            "{case} {tier1_ttl:?} after the first claims (tier 1 forgets them now), the next owner has committed {committed:?} of the burst's {burst_ends:?} and leaves {} claims it covers unsettled: {stranded:?}",
            stranded.len()
        );
        reader.read_for(Duration::from_millis(200));
    }

    let mut alive = || watch(&mut next);
    reader.read_every_input(plan.len(), BOUND, "after the restart", &mut alive);
    landed.extend(tail.join().expect("producer thread"));
    let landed = read_inputs_as_delivered(&kafka_brokers(), topics, &landed);
    let summary = check(&plan, &landed, topics, &reader.records, Expect::Filtered);
    say(test, format!("{case} {summary}"));
    wait_committed(
        &config,
        topics,
        &ends(&landed, PARTITIONS),
        &mut [&mut next],
    );
    let unsettled = settled_within(&redis_url, &config.key_prefix, Duration::from_secs(10));
    assert!(
        unsettled.is_empty(),
        "{case} claims left unsettled at the end: {unsettled:?}"
    );
    say(
        test,
        format!("{case} the next owner's longest wait: {longest_wait} s"),
    );
    assert!(
        longest_wait < LONGEST_WAIT,
        "{case} a copy waited {longest_wait} s at the next owner: a claim was left for tier 1's TTL"
    );
    assert!(
        began.elapsed() > tier1_ttl,
        "the test ran {:?}, not longer than tier 1's TTL",
        began.elapsed()
    );
    let status = next.terminate(Duration::from_secs(30));
    assert!(
        status.success(),
        "{case} idemgate exited with {status} on SIGTERM"
    );
}

/// What the group's last committed transaction covers, per partition:
/// its offset, and the delivered ranges above it its metadata lists
/// (`d=<from>.<length>,<gap>.<length>...` in base 36, docs/design.md §7).
#[derive(Debug)]
struct Covered {
    offset: i64,
    done: Vec<(i64, i64)>,
}

/// The group's commits of the input, per partition, now (not waiting for
/// the killed replica's open transaction to be aborted).
fn committed_now_of(config: &GateConfig) -> Vec<Option<Covered>> {
    let partitions: Vec<i32> = (0..PARTITIONS).collect();
    committed_now(&kafka_brokers(), &config.group, &config.input, &partitions)
        .into_iter()
        .map(|c| {
            c.map(|(offset, metadata)| Covered {
                offset,
                done: done_ranges(&metadata),
            })
        })
        .collect()
}

fn done_ranges(metadata: &str) -> Vec<(i64, i64)> {
    let Some(list) = metadata
        .split_whitespace()
        .find_map(|w| w.strip_prefix("d="))
    else {
        return Vec::new();
    };
    let mut ranges = Vec::new();
    let mut end: Option<i64> = None;
    for range in list.split(',') {
        let number = |text: &str| {
            i64::from_str_radix(text, 36)
                .unwrap_or_else(|e| panic!("metadata {metadata:?}: {text:?}: {e}"))
        };
        let (start, length) = range
            .split_once('.')
            .unwrap_or_else(|| panic!("metadata {metadata:?}: range {range:?}"));
        let from = end.unwrap_or(0) + number(start);
        ranges.push((from, from + number(length)));
        end = Some(from + number(length));
    }
    ranges
}

/// The holders a committed transaction covers (below its offset, or in
/// its delivered ranges above): their outputs are committed, so only a
/// settlement is due, and a claim of theirs left unsettled is stranded.
fn covered(holders: &[Holder], committed: &[Option<Covered>]) -> Vec<Holder> {
    holders
        .iter()
        .filter(|h| {
            committed
                .get(h.partition as usize)
                .and_then(Option::as_ref)
                .is_some_and(|c| {
                    h.offset < c.offset
                        || c.done
                            .iter()
                            .any(|&(from, to)| (from..to).contains(&h.offset))
                })
        })
        .cloned()
        .collect()
}

/// Waits up to `bound` for no claim to be unsettled (the last commit's
/// settlement round follows it); what is still unsettled then.
fn settled_within(url: &str, prefix: &str, bound: Duration) -> Vec<Holder> {
    let until = Instant::now() + bound;
    loop {
        let unsettled = unsettled_holders(url, prefix);
        if unsettled.is_empty() || Instant::now() >= until {
            return unsettled;
        }
        // Waits on the replica's settlement round.
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits (bounded) until the process is stopped (`T` in /proc): the fault
/// point froze it.
pub(super) fn wait_frozen(gate: &Gate, case: &str) {
    let path = format!("/proc/{}/stat", gate.pid());
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let stat = std::fs::read_to_string(&path).unwrap_or_default();
        // The state follows the command name's closing parenthesis.
        let state = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.chars().next());
        if state == Some('T') {
            return;
        }
        assert!(
            Instant::now() < until,
            "{case} the replica did not freeze at its fault point: state {state:?}"
        );
        // Polling the kernel's process state: the SIGSTOP the replica
        // sends itself lands when the kernel delivers it.
        std::thread::sleep(Duration::from_millis(10));
    }
}
