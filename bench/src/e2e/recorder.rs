//! The metrics recorder of a counting replica (never a clean one): the same
//! Prometheus recorder `idemgate run` installs, with the product's buckets,
//! wrapped so that three of the worker's metrics also feed the timeline
//! (`timeline.rs`): the batch size (a store round starts), the records
//! counter (outputs were acknowledged) and the offset commits. Every call
//! still reaches the Prometheus recorder.

use std::sync::Arc;

use metrics::{
    Counter, CounterFn, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle, PrometheusRecorder};

use super::timeline::{self, Event};
use idemgate::metrics::{BATCH_SIZE, COMMITS, RECORDS};

struct Tapped {
    inner: PrometheusRecorder,
}

struct TapCounter {
    inner: Counter,
    event: Event,
}

impl CounterFn for TapCounter {
    fn increment(&self, value: u64) {
        self.inner.increment(value);
        for _ in 0..value {
            timeline::global().event(self.event);
        }
    }

    fn absolute(&self, value: u64) {
        self.inner.absolute(value);
    }
}

struct TapHistogram {
    inner: Histogram,
}

impl HistogramFn for TapHistogram {
    fn record(&self, value: f64) {
        self.inner.record(value);
        timeline::global().event(Event::BatchStart(value as u64));
    }
}

impl Recorder for Tapped {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_counter(key, unit, description);
    }

    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_gauge(key, unit, description);
    }

    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_histogram(key, unit, description);
    }

    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        let inner = self.inner.register_counter(key, metadata);
        let event = match key.name() {
            name if name == RECORDS.name => Event::Decided,
            name if name == COMMITS.name => Event::Commit,
            _ => return inner,
        };
        Counter::from_arc(Arc::new(TapCounter { inner, event }))
    }

    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        self.inner.register_gauge(key, metadata)
    }

    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        let inner = self.inner.register_histogram(key, metadata);
        if key.name() == BATCH_SIZE.name {
            return Histogram::from_arc(Arc::new(TapHistogram { inner }));
        }
        inner
    }
}

/// Installs the tapped recorder as the process's recorder and returns its
/// handle (to render what it holds at the end). Must run before anything
/// records a metric (and before the product's /metrics listener, which then
/// finds a recorder installed and serves an empty /metrics: a counting
/// replica reports its exposition itself).
pub(crate) fn install() -> anyhow::Result<PrometheusHandle> {
    let inner = idemgate::metrics::with_buckets(PrometheusBuilder::new())?.build_recorder();
    let handle = inner.handle();
    metrics::set_global_recorder(Tapped { inner })
        .map_err(|_| anyhow::anyhow!("a metrics recorder was installed already"))?;
    idemgate::metrics::describe();
    Ok(handle)
}
