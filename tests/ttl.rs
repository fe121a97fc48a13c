//! TTLs from evidence (docs/design.md §9), through the public API only.

use std::time::Duration;

use idemgate::ttl::{
    format_duration, measure_horizon, parse_duration, Delivery, DurationError, TtlError, TtlPolicy,
};
use proptest::prelude::*;

const MINUTE: u64 = 60;
const HOUR: u64 = 3_600;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn policy(toml_text: &str) -> TtlPolicy {
    #[derive(serde::Deserialize)]
    struct Stream {
        ttl: TtlPolicy,
    }
    toml::from_str::<Stream>(toml_text).unwrap().ttl
}

/// Every attempt of one deliberately failed delivery, in seconds after the
/// first: five documented attempts within 90 minutes, then three more.
const LADDER_SECS: [i64; 8] = [0, 60, 300, 1_800, 5_400, 12_000, 21_600, 33_600];

fn attempts(sender: &'static str, id: &'static str, at_secs: &[i64]) -> Vec<Delivery<'static>> {
    at_secs
        .iter()
        .map(|&s| Delivery {
            delivery_id: id,
            sender,
            received_at_ms: s * 1_000,
        })
        .collect()
}

// ---- policies ----

#[test]
fn seven_years_of_retention_is_220_903_200_seconds() {
    // 7 x 365.25 days = 2,556.75 days; x 86,400 s = 220,903,200 s.
    let ttl = policy("ttl = { retention_years = 7 }").ttl().unwrap();
    assert_eq!(ttl, secs(220_903_200));
    assert_eq!(ttl, secs(7 * 36_525 * 86_400 / 100));
}

#[test]
fn job_ttl_covers_p99_every_retry_the_fallback_and_the_margin() {
    // p99 40m = 2,400 s; ladder 1m + 5m + 30m + 2h = 60 + 300 + 1,800 + 7,200
    // = 9,360 s; fallback 1h = 3,600 s. Total 2,400 + 9,360 + 3,600 =
    // 15,360 s; x 1.25 = 19,200 s = 5h20m.
    let job = policy(
        r#"ttl = { p99 = "40m", retry_ladder = ["1m", "5m", "30m", "2h"], fallback = "1h", margin = 0.25 }"#,
    );
    assert_eq!(
        job,
        TtlPolicy::Job {
            p99: secs(40 * MINUTE),
            retry_ladder: vec![
                secs(MINUTE),
                secs(5 * MINUTE),
                secs(30 * MINUTE),
                secs(2 * HOUR)
            ],
            fallback: secs(HOUR),
            margin: 0.25,
        }
    );
    assert_eq!(job.ttl().unwrap(), secs(19_200));
    assert_eq!(format_duration(job.ttl().unwrap()), "5h20m");
}

#[test]
fn job_ttl_rounds_a_fractional_result_down_to_whole_seconds() {
    // (60 + 1 + 0) s x 1.25 = 76.25 s -> 76 s.
    let job =
        policy(r#"ttl = { p99 = "1m", retry_ladder = ["1s"], fallback = "0s", margin = 0.25 }"#);
    assert_eq!(job.ttl().unwrap(), secs(76));
    // 1.5 s x 1.5 = 2.25 s -> 2 s: sub-second inputs round only at the end.
    let job =
        policy(r#"ttl = { p99 = "1500ms", retry_ladder = [], fallback = "0s", margin = 0.5 }"#);
    assert_eq!(job.ttl().unwrap(), secs(2));
}

#[test]
fn job_margin_must_be_finite_and_not_negative() {
    let job = policy(r#"ttl = { p99 = "1m", retry_ladder = [], fallback = "1m", margin = -0.1 }"#);
    assert_eq!(job.ttl(), Err(TtlError::InvalidMargin { margin: -0.1 }));
    let job = policy(r#"ttl = { p99 = "1m", retry_ladder = [], fallback = "1m", margin = nan }"#);
    assert!(matches!(job.ttl(), Err(TtlError::InvalidMargin { .. })));
}

#[test]
fn horizon_ttl_is_the_measured_horizon_plus_outage_tolerance() {
    // 9h20m + 2h = 11h20m = 40,800 s.
    let horizon = policy(r#"ttl = { horizon = "9h20m", outage = "2h" }"#);
    assert_eq!(horizon.ttl().unwrap(), secs(11 * HOUR + 20 * MINUTE));
    assert_eq!(horizon.ttl().unwrap(), secs(40_800));
}

#[test]
fn explicit_ttl_reads_a_duration_or_integer_seconds() {
    assert_eq!(
        policy(r#"ttl = { explicit = "12h" }"#).ttl().unwrap(),
        secs(12 * HOUR)
    );
    assert_eq!(policy("ttl = { explicit = 900 }").ttl().unwrap(), secs(900));
}

#[test]
fn a_zero_ttl_is_refused() {
    for text in [
        r#"ttl = { explicit = "0s" }"#,
        "ttl = { retention_years = 0 }",
        r#"ttl = { p99 = "0s", retry_ladder = [], fallback = "0s", margin = 0.25 }"#,
        r#"ttl = { horizon = "0s", outage = "0s" }"#,
    ] {
        let err = policy(text).ttl().unwrap_err();
        assert!(matches!(err, TtlError::Zero { .. }), "{text}");
        assert!(err.to_string().contains("ttl is zero"), "{err}");
    }
}

#[test]
fn unknown_or_mixed_policy_keys_are_refused_when_read() {
    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Stream {
        ttl: TtlPolicy,
    }
    let err = |text: &str| toml::from_str::<Stream>(text).unwrap_err().to_string();
    assert!(err(r#"ttl = { explicit = "1h", jitter = "5m" }"#).contains("unknown field `jitter`"));
    assert!(err(r#"ttl = { explicit = "1h", retention_years = 7 }"#).contains("mixes"));
    assert!(err(r#"ttl = { horizon = "9h20m" }"#).contains("missing `outage`"));
    assert!(err(r#"ttl = { explicit = "5x" }"#).contains("unknown unit `x` in duration `5x`"));
}

// ---- measured horizon ----

#[test]
fn one_senders_undocumented_retries_stretch_its_horizon_to_nine_hours_twenty() {
    let horizon = measure_horizon(attempts("acme", "d1", &LADDER_SECS));
    assert_eq!(horizon.max, secs(33_600));
    assert_eq!(horizon.max, parse_duration("9h20m").unwrap());
    assert!(
        horizon.max > secs(90 * MINUTE),
        "documented schedule: 90 minutes"
    );
    assert_eq!(horizon.longest_sender.as_deref(), Some("acme"));
}

#[test]
fn a_ttl_from_the_documented_schedule_misses_the_last_three_attempts() {
    // 90 minutes documented + a comfortable-looking 30 minutes = 2h; the
    // attempts at 12,000, 21,600 and 33,600 s would each win a new claim.
    let documented = secs(2 * HOUR);
    let late = LADDER_SECS
        .iter()
        .filter(|&&at| secs(at as u64) > documented)
        .count();
    assert_eq!(late, 3);
    let measured = measure_horizon(attempts("acme", "d1", &LADDER_SECS)).max;
    let ttl = TtlPolicy::Horizon {
        horizon: measured,
        outage: secs(2 * HOUR),
    }
    .ttl()
    .unwrap();
    assert!(LADDER_SECS.iter().all(|&at| secs(at as u64) < ttl));
}

#[test]
fn four_senders_give_four_horizons_and_the_max_is_the_longest() {
    let mut log = attempts("acme", "a1", &[0, 30, 90, 270]);
    log.extend(attempts("bolt", "b1", &[0, 3_600, 7_200]));
    log.extend(attempts("carrier", "c1", &LADDER_SECS));
    log.extend(attempts("dunmore", "d1", &[0, 600]));
    let horizon = measure_horizon(log);
    let per_sender: Vec<(&str, Duration)> = horizon
        .per_sender
        .iter()
        .map(|(s, d)| (s.as_str(), *d))
        .collect();
    assert_eq!(
        per_sender,
        [
            ("acme", secs(270)),
            ("bolt", secs(7_200)),
            ("carrier", secs(33_600)),
            ("dunmore", secs(600)),
        ]
    );
    assert_eq!(horizon.max, secs(33_600));
    assert_eq!(horizon.longest_sender.as_deref(), Some("carrier"));
}

#[test]
fn shuffled_input_gives_the_same_horizon() {
    let mut log = attempts("carrier", "c1", &LADDER_SECS);
    log.extend(attempts("bolt", "b1", &[0, 3_600, 7_200]));
    let in_order = measure_horizon(log.clone());
    log.reverse();
    log.swap(1, 7);
    assert_eq!(measure_horizon(log), in_order);
}

#[test]
fn two_delivery_ids_of_one_sender_take_the_longer_span() {
    let mut log = attempts("acme", "short", &[1_000, 1_060]);
    log.extend(attempts("acme", "long", &[5_000, 5_000 + 4 * HOUR as i64]));
    let horizon = measure_horizon(log);
    assert_eq!(horizon.per_sender.len(), 1);
    assert_eq!(horizon.per_sender["acme"], secs(4 * HOUR));
    assert_eq!(horizon.max, secs(4 * HOUR));
}

#[test]
fn an_empty_recording_measures_nothing() {
    let horizon = measure_horizon(Vec::<Delivery>::new());
    assert_eq!(horizon.max, Duration::ZERO);
    assert!(horizon.per_sender.is_empty());
    assert_eq!(horizon.longest_sender, None);
}

// ---- durations ----

#[test]
fn parse_duration_refuses_empty_negative_unknown_and_unitless_text() {
    assert!(matches!(
        parse_duration(""),
        Err(DurationError::Empty { .. })
    ));
    assert!(matches!(
        parse_duration("-5s"),
        Err(DurationError::Negative { .. })
    ));
    assert!(matches!(
        parse_duration("5x"),
        Err(DurationError::UnknownUnit { .. })
    ));
    assert!(matches!(
        parse_duration("h"),
        Err(DurationError::MissingNumber { .. })
    ));
    let message = parse_duration("5x").unwrap_err().to_string();
    assert!(message.contains("`5x`"), "{message}");
}

#[test]
fn parse_duration_reads_the_documented_examples() {
    for (text, expected) in [
        ("900s", secs(900)),
        ("9h20m", secs(33_600)),
        ("1h", secs(HOUR)),
        ("30m", secs(30 * MINUTE)),
        ("1500ms", Duration::from_millis(1_500)),
        ("2d", secs(48 * HOUR)),
        ("1h30m15s", secs(HOUR + 30 * MINUTE + 15)),
        ("42", secs(42)),
    ] {
        assert_eq!(parse_duration(text), Ok(expected), "{text}");
    }
}

fn arrivals() -> impl Strategy<Value = Vec<Delivery<'static>>> {
    let senders = prop::sample::select(vec!["acme", "bolt", "carrier", "dunmore"]);
    let ids = prop::sample::select(vec!["d1", "d2", "d3"]);
    prop::collection::vec((senders, ids, -1_000_000_000i64..1_000_000_000), 0..40).prop_map(|v| {
        v.into_iter()
            .map(|(sender, delivery_id, received_at_ms)| Delivery {
                delivery_id,
                sender,
                received_at_ms,
            })
            .collect()
    })
}

proptest! {
    #[test]
    fn format_then_parse_gives_back_any_duration(secs in any::<u64>(), nanos in 0u32..1_000_000_000) {
        let d = Duration::new(secs, nanos);
        prop_assert_eq!(parse_duration(&format_duration(d)), Ok(d));
    }

    #[test]
    fn format_then_parse_gives_back_whole_seconds(secs in 0u64..10 * 365 * 86_400) {
        let d = Duration::from_secs(secs);
        let text = format_duration(d);
        prop_assert!(text.ends_with(['d', 'h', 'm', 's']));
        prop_assert_eq!(parse_duration(&text), Ok(d));
    }

    #[test]
    fn parse_then_format_is_stable(h in 0u64..48, m in 0u64..60, s in 0u64..60) {
        let text = format!("{h}h{m}m{s}s");
        let d = parse_duration(&text).unwrap();
        prop_assert_eq!(d, Duration::from_secs(h * 3_600 + m * 60 + s));
        prop_assert_eq!(parse_duration(&format_duration(d)), Ok(d));
    }

    #[test]
    fn log_order_never_changes_the_horizon(
        (log, shuffled) in arrivals().prop_flat_map(|log| (Just(log.clone()), Just(log).prop_shuffle()))
    ) {
        prop_assert_eq!(measure_horizon(log), measure_horizon(shuffled));
    }
}
