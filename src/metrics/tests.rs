//! `/metrics` against the catalog: what a recorder renders after
//! `describe`, `register` and one call of every recording function is
//! exactly [`CATALOG`], type, help, labels and buckets.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;

use super::*;
use crate::store::FilterFill;

const STREAMS: [&str; 2] = ["bank", "telemetry"];
const TIERED: [&str; 1] = ["telemetry"];
const LAG_TOPIC: &str = "metrics-catalog-test-topic";

/// What a fresh recorder renders: after `register` alone, or after every
/// recording function has run once too.
fn render(record: bool) -> String {
    let recorder = with_buckets(PrometheusBuilder::new())
        .expect("buckets")
        .build_recorder();
    let handle = recorder.handle();
    metrics::with_local_recorder(&recorder, || {
        describe();
        register(&STREAMS, &TIERED);
        process();
        if record {
            record_everything();
        }
    });
    let mut text = handle.render();
    if record {
        lag(LAG_TOPIC, 0, 7);
    }
    render_lags(&mut text);
    if record {
        lag_gone([(LAG_TOPIC, 0)]);
    }
    text
}

/// Every recording function the worker calls, once.
fn record_everything() {
    let streams: Vec<StreamMetrics> = STREAMS.iter().map(|s| StreamMetrics::new(s)).collect();
    streams[0].latency(Duration::from_millis(3));
    let mut tally = Tally::default();
    tally.decided(0, &Decision::Novel);
    tally.released(0);
    tally.replayed(0);
    tally.taken_over(1);
    tally.produce_failed(1);
    tally.flush(&streams);
    waited(2);
    let error = StoreError::Unavailable("test".into());
    store_call("round", Duration::from_millis(1), Some(&error));
    store_failed("round", &error);
    batch(10);
    breaker(true);
    waiting("bank", 1, Duration::from_secs(2));
    identity_lost("bank");
    not_ready(&[("bank", vec![crate::readiness::Cause::StoreIdentityLost])]);
    partitions_assigned("bank", 3);
    input_partitions("bank", 3);
    in_flight(2);
    committed();
    store_stats(&StoreStats {
        evicted_keys: 0,
        tier1_hash_fields: vec![("bank".into(), 40)],
        filters: vec![FilterFill {
            stream: "telemetry".into(),
            inserts: 5,
            capacity: 100,
        }],
    });
}

/// One sample line: the series name and its labels.
fn sample(line: &str) -> (String, BTreeMap<String, String>) {
    let (series, _value) = line.rsplit_once(' ').expect("a value");
    let Some((name, labels)) = series.split_once('{') else {
        return (series.to_string(), BTreeMap::new());
    };
    let labels = labels
        .strip_suffix('}')
        .expect("closing brace")
        .split("\",")
        .map(|pair| {
            let (key, value) = pair.split_once("=\"").expect("key=\"value\"");
            (key.to_string(), value.trim_end_matches('"').to_string())
        })
        .collect();
    (name.to_string(), labels)
}

fn catalog_types() -> BTreeMap<&'static str, &'static str> {
    CATALOG.iter().map(|m| (m.name, m.kind.as_str())).collect()
}

fn served_types(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| {
            let (name, kind) = rest.split_once(' ')?;
            Some((name.to_string(), kind.to_string()))
        })
        .collect()
}

#[test]
fn the_catalog_names_each_metric_once() {
    let names: BTreeSet<&str> = CATALOG.iter().map(|m| m.name).collect();
    assert_eq!(names.len(), CATALOG.len(), "a name declared twice");
    for metric in CATALOG {
        assert!(
            metric.name.starts_with("idemgate_") || metric.source == Source::Process,
            "{}: idemgate's own metrics start with idemgate_",
            metric.name
        );
        assert!(!metric.help.is_empty(), "{}: no help", metric.name);
        assert_eq!(
            metric.kind == Kind::Histogram,
            !metric.buckets.is_empty(),
            "{}: buckets go with histograms, and only with them",
            metric.name
        );
        assert!(
            metric.buckets.windows(2).all(|w| w[0] < w[1]),
            "{}: buckets must rise",
            metric.name
        );
    }
}

/// A metric added to the catalog is on `/metrics` from the start, at zero,
/// with its type and help; nothing is served that the catalog lacks.
#[test]
fn after_register_every_catalog_metric_is_served_with_its_type_and_help() {
    let text = render(false);
    let served = served_types(&text);
    let expected: BTreeMap<String, String> = catalog_types()
        .into_iter()
        .map(|(name, kind)| (name.to_string(), kind.to_string()))
        .collect();
    assert_eq!(served, expected, "/metrics against the catalog:\n{text}");
    for metric in CATALOG {
        let help = format!("# HELP {} {}", metric.name, metric.help);
        assert!(
            text.lines().any(|line| line == help),
            "no `{help}` in:\n{text}"
        );
    }
    // Series at start: every combination of the labels' known values.
    let mut count: BTreeMap<&str, usize> = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (name, _) = sample(line);
        let metric = of_series(&name).unwrap_or_else(|| panic!("unknown series {line}"));
        if metric.kind != Kind::Histogram || name.ends_with("_count") {
            *count.entry(metric.name).or_default() += 1;
        }
    }
    for metric in CATALOG.iter().filter(|m| m.source == Source::Recorder) {
        let expected: usize = metric
            .labels
            .iter()
            .map(|label| match label.values {
                Values::Streams => STREAMS.len(),
                Values::TieredStreams => TIERED.len(),
                Values::Fixed(values) => values.len(),
                Values::Open => 0,
            })
            .product();
        assert_eq!(
            count.get(metric.name).copied().unwrap_or(0),
            expected,
            "{}: series at start",
            metric.name
        );
    }
    assert_eq!(count[RECORDS.name], 10, "2 streams by 5 decisions");
    assert_eq!(count[FILTER_INSERTS.name], 1, "the tiered stream only");
    assert!(
        text.contains(&format!(
            "{}{{version=\"{}\"}} 1",
            BUILD_INFO.name,
            env!("CARGO_PKG_VERSION")
        )),
        "{text}"
    );
}

/// The recording functions name their labels by hand: every series they
/// make carries exactly its metric's declared labels, with a declared value
/// where the values are fixed, and a histogram has its declared buckets.
#[test]
fn every_recorded_series_carries_its_declared_labels_and_buckets() {
    let text = render(true);
    assert_eq!(
        served_types(&text),
        catalog_types()
            .into_iter()
            .map(|(n, k)| (n.to_string(), k.to_string()))
            .collect::<BTreeMap<_, _>>(),
        "recording made a metric the catalog lacks:\n{text}"
    );
    let mut bounds: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    let mut labelled: BTreeSet<&str> = BTreeSet::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (name, mut labels) = sample(line);
        let metric = of_series(&name).unwrap_or_else(|| panic!("unknown series {line}"));
        if name.ends_with("_bucket") {
            let le = labels.remove("le").expect("a bucket's le");
            bounds.entry(metric.name).or_default().insert(le);
        }
        let names: BTreeSet<&str> = labels.keys().map(String::as_str).collect();
        let declared: BTreeSet<&str> = metric.label_names().collect();
        assert_eq!(names, declared, "{line}: labels against the catalog");
        for label in metric.labels {
            if let Values::Fixed(values) = label.values {
                assert!(
                    values.contains(&labels[label.name].as_str()),
                    "{line}: {} is none of {values:?}",
                    label.name
                );
            }
        }
        labelled.insert(metric.name);
    }
    for metric in CATALOG {
        assert!(
            labelled.contains(metric.name),
            "no series of {}",
            metric.name
        );
    }
    for metric in CATALOG.iter().filter(|m| m.kind == Kind::Histogram) {
        let mut expected: BTreeSet<String> = metric.buckets.iter().map(|b| b.to_string()).collect();
        expected.insert("+Inf".into());
        assert_eq!(bounds[metric.name], expected, "{} buckets", metric.name);
    }
    // What was recorded moved the series `register` made.
    let records = format!("{}{{stream=\"bank\",decision=\"novel\"}} 1", RECORDS.name);
    assert!(
        text.lines().any(|l| l == records),
        "no `{records}`:\n{text}"
    );
}
