//! The handover run's arithmetic, pure: from the outputs the harness read
//! (which replica wrote each, the input partition its `idemgate-input`
//! header names, when the harness read it), when the group was steady,
//! which partitions the leaving replica was serving, and for each the time
//! from the signal to the first output of another replica on it.

use serde::Serialize;

/// One output as the harness's reader saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Seen {
    /// The replica that wrote it: each writes its own output topics.
    pub replica: usize,
    /// The input partition (`idemgate-input`).
    pub partition: i32,
    /// Unix µs the harness read it.
    pub at_us: i64,
    /// Unix ms its record carries: its input's create time (the producer
    /// stamped it at the send; idemgate keeps an input's time).
    pub produced_ms: Option<i64>,
}

/// How long outputs took from their input's send to the harness's
/// read_committed reader, in a window of the steady stream.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub(crate) struct Visible {
    pub outputs: usize,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
}

/// Pure: the visibility latency of the outputs whose inputs were sent in
/// `[from_ms, to_ms)`, among those read (nearest rank; ms, the resolution
/// of a record's time). By send time, not read time: a backlog sent before
/// the window (during a rebalance) is not in it.
pub(crate) fn visible(seen: &[Seen], from_ms: i64, to_ms: i64) -> Visible {
    let mut ms: Vec<f64> = seen
        .iter()
        .filter_map(|s| {
            let sent = s.produced_ms.filter(|t| (from_ms..to_ms).contains(t))?;
            Some(s.at_us as f64 / 1000.0 - sent as f64)
        })
        .collect();
    ms.sort_by(f64::total_cmp);
    let rank = |q: f64| {
        (!ms.is_empty()).then(|| ms[((q * ms.len() as f64).ceil() as usize).clamp(1, ms.len()) - 1])
    };
    Visible {
        outputs: ms.len(),
        p50_ms: rank(0.50),
        p99_ms: rank(0.99),
    }
}

/// A partition the leaving replica served when it was signalled.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct Moved {
    pub partition: i32,
    /// From the signal to the first output of another replica on it, read
    /// after the signal; `None`: none came within the run.
    pub unserved_ms: Option<f64>,
}

/// Outputs flowed for the whole of `[now - window, now]` (one came before
/// it), every partition had outputs in it, each from one replica alone,
/// and each of `replicas` replicas served one at least: the group settled,
/// every partition flowing.
pub(crate) fn steady(
    seen: &[Seen],
    now_us: i64,
    window_us: i64,
    partitions: i32,
    replicas: usize,
) -> bool {
    if !seen.iter().any(|s| s.at_us <= now_us - window_us) {
        return false;
    }
    let mut owner: Vec<Option<usize>> = vec![None; partitions.max(0) as usize];
    for s in seen.iter().filter(|s| s.at_us > now_us - window_us) {
        let Some(slot) = owner.get_mut(s.partition as usize) else {
            continue;
        };
        match slot {
            None => *slot = Some(s.replica),
            Some(r) if *r != s.replica => return false,
            Some(_) => {}
        }
    }
    owner.iter().all(Option::is_some) && (0..replicas).all(|r| owner.contains(&Some(r)))
}

/// The partitions `leaving` served last before `signal_us` (its outputs
/// the latest read on them), each with its unserved time.
pub(crate) fn moved(seen: &[Seen], leaving: usize, signal_us: i64) -> Vec<Moved> {
    let mut last: std::collections::BTreeMap<i32, Seen> = Default::default();
    for s in seen.iter().filter(|s| s.at_us <= signal_us) {
        let entry = last.entry(s.partition).or_insert(*s);
        if s.at_us >= entry.at_us {
            *entry = *s;
        }
    }
    last.values()
        .filter(|s| s.replica == leaving)
        .map(|s| {
            let first = seen
                .iter()
                .filter(|o| o.partition == s.partition && o.replica != leaving)
                .filter(|o| o.at_us > signal_us)
                .map(|o| o.at_us)
                .min();
            Moved {
                partition: s.partition,
                unserved_ms: first.map(|at| (at - signal_us) as f64 / 1e3),
            }
        })
        .collect()
}

/// Partitions moved, how many of them the new owner served, and the
/// median and the largest unserved time of those (ms).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub(crate) struct Figures {
    pub moved: usize,
    pub served: usize,
    pub median_ms: Option<f64>,
    pub max_ms: Option<f64>,
}

pub(crate) fn figures(moved: &[Moved]) -> Figures {
    let mut times: Vec<f64> = moved.iter().filter_map(|m| m.unserved_ms).collect();
    times.sort_by(f64::total_cmp);
    let n = times.len();
    let median = match n {
        0 => None,
        _ if n % 2 == 1 => Some(times[n / 2]),
        _ => Some((times[n / 2 - 1] + times[n / 2]) / 2.0),
    };
    Figures {
        moved: moved.len(),
        served: n,
        median_ms: median,
        max_ms: times.last().copied(),
    }
}

/// The input partition an `idemgate-input` value (`topic/partition/offset`,
/// the topic possibly holding `/`) names.
pub(crate) fn input_partition(header: &[u8]) -> Option<i32> {
    let text = std::str::from_utf8(header).ok()?;
    let mut parts = text.rsplitn(3, '/');
    let _offset: i64 = parts.next()?.parse().ok()?;
    let partition = parts.next()?.parse().ok()?;
    parts.next().filter(|topic| !topic.is_empty())?;
    Some(partition)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(replica: usize, partition: i32, ms: i64) -> Seen {
        Seen {
            replica,
            partition,
            at_us: ms * 1000,
            produced_ms: Some(ms - 5),
        }
    }

    #[test]
    fn visibility_is_taken_in_its_window_by_nearest_rank() {
        // 100 outputs sent at 1000..1100 ms, read 1..=100 ms later; a
        // backlog sent before the window, read in it; outputs without a time.
        let seen: Vec<Seen> = (0..100)
            .map(|i| Seen {
                replica: 0,
                partition: 0,
                at_us: (1000 + i + (i + 1)) * 1000,
                produced_ms: Some(1000 + i),
            })
            .chain([at(0, 0, 5000), at(1, 0, 10)])
            .chain((0..50).map(|i| Seen {
                replica: 1,
                partition: 1,
                at_us: (1000 + i) * 1000,
                produced_ms: Some(500),
            }))
            .collect();
        let v = visible(&seen, 1000, 1100);
        assert_eq!(v.outputs, 100);
        assert_eq!(v.p50_ms, Some(50.0));
        assert_eq!(v.p99_ms, Some(99.0));
        assert_eq!(visible(&seen, 0, 1).p99_ms, None);
    }

    #[test]
    fn each_moved_partition_is_unserved_from_the_signal_to_the_new_owners_first_output() {
        let seen = [
            at(0, 0, 900),
            at(1, 1, 950),
            at(0, 2, 990),
            // The leaving replica's drain: still its outputs, after the signal.
            at(0, 0, 1_100),
            at(0, 2, 1_200),
            at(1, 1, 1_300),
            at(1, 2, 1_450),
            at(1, 0, 1_700),
            at(1, 0, 1_800),
        ];
        let moved = moved(&seen, 0, 1_000_000);
        assert_eq!(
            moved,
            vec![
                Moved {
                    partition: 0,
                    unserved_ms: Some(700.0)
                },
                Moved {
                    partition: 2,
                    unserved_ms: Some(450.0)
                },
            ]
        );
        let f = figures(&moved);
        assert_eq!((f.moved, f.served), (2, 2));
        assert_eq!(f.median_ms, Some(575.0));
        assert_eq!(f.max_ms, Some(700.0));
    }

    #[test]
    fn a_partition_the_survivor_served_last_did_not_move_and_one_never_served_again_counts_unserved(
    ) {
        // Partition 1 was the leaving replica's once, the survivor's last.
        let seen = [at(0, 1, 100), at(1, 1, 500), at(0, 3, 900), at(1, 1, 1_200)];
        let moved = moved(&seen, 0, 1_000_000);
        assert_eq!(
            moved,
            vec![Moved {
                partition: 3,
                unserved_ms: None
            }]
        );
        assert_eq!(
            figures(&moved),
            Figures {
                moved: 1,
                served: 0,
                median_ms: None,
                max_ms: None
            }
        );
    }

    #[test]
    fn the_median_of_an_odd_count_is_the_middle_one() {
        let moved: Vec<Moved> = [30.0, 10.0, 20.0]
            .into_iter()
            .enumerate()
            .map(|(p, ms)| Moved {
                partition: p as i32,
                unserved_ms: Some(ms),
            })
            .collect();
        let f = figures(&moved);
        assert_eq!((f.median_ms, f.max_ms), (Some(20.0), Some(30.0)));
    }

    #[test]
    fn steady_needs_every_partition_flowing_from_one_replica_and_both_replicas_serving() {
        let split = [
            at(0, 0, 400),
            at(0, 0, 1_000),
            at(0, 1, 1_100),
            at(1, 2, 1_200),
            at(1, 3, 1_300),
        ];
        assert!(steady(&split, 1_500_000, 1_000_000, 4, 2));
        // Outputs began inside the window: not settled for the whole of it.
        assert!(!steady(&split[1..], 1_500_000, 1_000_000, 4, 2));
        // Partition 3 silent in the window.
        assert!(!steady(&split[..4], 1_500_000, 1_000_000, 4, 2));
        // Partition 1 from both replicas within the window: still moving.
        let moving = [&split[..], &[at(1, 1, 1_400)]].concat();
        assert!(!steady(&moving, 1_500_000, 1_000_000, 4, 2));
        // One replica serving everything.
        let one = [at(0, 0, 400), at(0, 0, 1_000), at(0, 1, 1_100)];
        assert!(!steady(&one, 1_500_000, 1_000_000, 2, 2));
        // Outputs older than the window do not count.
        assert!(!steady(&split, 2_250_000, 1_000_000, 4, 2));
    }

    #[test]
    fn the_input_partition_is_read_from_the_header() {
        assert_eq!(input_partition(b"bench.raw/3/1234"), Some(3));
        assert_eq!(input_partition(b"a/b/7/0"), Some(7));
        assert_eq!(input_partition(b"3/1234"), None);
        assert_eq!(input_partition(b"t/x/1"), None);
    }
}
