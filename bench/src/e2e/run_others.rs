//! The runs that are not the worker: the passthrough (the ceiling of any
//! Kafka-to-Kafka worker here, `passthrough.rs`) and the per-record baseline
//! (`baseline.rs`), each one child process on the exact run's topic.

use std::time::Duration;

use anyhow::{bail, Result};

use super::baseline::BaselineSpec;
use super::children::ChildProcess;
use super::kafka::{create_topics, delete_topics, watch, CommitWatch, Progress};
use super::memory;
use super::passthrough::PassthroughSpec;
use super::replica::{Report, Role, CONNECTED, GO, STOP};
use super::runs::{
    config, cpu_now, Dataset, Endpoints, Kind, Mode, RunResult, Setup, LINGER_MS, PREFIX,
};

/// The passthrough over the whole dataset, one process, with the exact
/// run's config (its own group, `passthrough` and `suffix`): first poll to
/// the last commit the harness sees, as the worker's runs.
pub(crate) async fn passthrough(
    setup: &Setup,
    dataset: &Dataset,
    suffix: &str,
) -> Result<RunResult> {
    let name = format!("passthrough{suffix}");
    let group = format!("{}.{name}", setup.run_id);
    let out = group.clone();
    let clean = format!("{out}.clean");
    create_topics(&setup.broker.brokers, &[&clean], setup.partitions).await?;
    let endpoints = Endpoints {
        brokers: &setup.broker.brokers,
        store_url: &setup.redis.url,
        batch: setup.batch,
    };
    let spec = PassthroughSpec {
        config: config(&endpoints, dataset, Mode::Exact, &group, &out),
        topic: dataset.topic.clone(),
        clean,
        max_records: setup.batch,
        linger_ms: LINGER_MS,
    };
    let mut children = vec![ChildProcess::spawn(
        &setup.exe,
        &setup.dir,
        &name,
        &Role::Passthrough(spec),
    )?];
    children[0]
        .expect(CONNECTED, Duration::from_secs(60))
        .await?;
    let cpu_before = cpu_now(setup, &children);
    children[0].send(GO).await?;
    let end_us = watch(
        &setup.broker.brokers,
        &group,
        &dataset.loaded,
        "passthrough",
        &mut children,
    )
    .await?;
    let cpu_after = cpu_now(setup, &children);
    children[0].send(STOP).await?;
    let Report::Passthrough(report) = children[0].report(Duration::from_secs(60)).await? else {
        bail!("the passthrough sent another report");
    };
    let seconds = report
        .first_poll_us
        .map_or(0.0, |f| (end_us - f) as f64 / 1e6);
    let mut r = cpu_after.result(
        &cpu_before,
        setup,
        (name, Kind::Passthrough),
        (dataset.records, seconds),
    );
    r.dataset = dataset.topic.clone();
    r.worker_peak_rss_mb = report.peak_rss_bytes as f64 / 1048576.0;
    r.latency_p50_ms = report.latency.quantile(0.5).map(|us| us / 1000.0);
    r.latency_p99_ms = report.latency.quantile(0.99).map(|us| us / 1000.0);
    r.latency_source = "the passthrough's own: poll to delivery report, per record".into();
    r.check = if report.failed == 0 && report.delivered >= dataset.records {
        "ok".into()
    } else {
        format!(
            "CHECK: delivered {} of {} records, {} deliveries failed",
            report.delivered, dataset.records, report.failed
        )
    };
    r.passthrough = Some(*report);
    delete_topics(&setup.broker.brokers, &[format!("{out}.clean")]).await?;
    Ok(r)
}

/// The per-record baseline over the first `records` records of the dataset.
pub(crate) async fn baseline(setup: &Setup, dataset: &Dataset, records: u64) -> Result<RunResult> {
    let name = "baseline".to_string();
    let group = format!("{}.{name}", setup.run_id);
    let out = format!("{}.{name}", setup.run_id);
    let spec = BaselineSpec {
        brokers: setup.broker.brokers.clone(),
        group: group.clone(),
        topic: dataset.topic.clone(),
        clean: format!("{out}.clean"),
        audit: format!("{out}.audit"),
        redis_url: setup.redis.url.clone(),
        key_prefix: format!("{PREFIX}baseline:c:"),
        ttl_ms: 11 * 3_600_000 + 20 * 60_000,
        records,
    };
    create_topics(
        &setup.broker.brokers,
        &[&spec.clean, &spec.audit],
        setup.partitions,
    )
    .await?;
    let mut conn = super::services::connect(&setup.redis.url).await?;
    memory::reset(&mut conn).await?;
    let mut child = ChildProcess::spawn(&setup.exe, &setup.dir, &name, &Role::Baseline(spec))?;
    child.expect(CONNECTED, Duration::from_secs(60)).await?;
    let cpu_before = cpu_now(setup, std::slice::from_ref(&child));
    child.send(GO).await?;
    let watcher = CommitWatch::new(&setup.broker.brokers, &group, &dataset.loaded)?;
    let mut progress = Progress::new("per-record baseline", records);
    let report = loop {
        let read = child.expect(super::replica::REPORT, Duration::from_millis(250));
        if let Ok(text) = read.await {
            break serde_json::from_str::<Report>(&text)?;
        }
        if child.exited() {
            bail!("the baseline exited without a report\n{}", child.tail());
        }
        if let Ok((done, _)) = tokio::task::block_in_place(|| watcher.committed()) {
            progress.update(done.min(records));
        }
    };
    let cpu_after = cpu_now(setup, std::slice::from_ref(&child));
    let Report::Baseline(report) = report else {
        bail!("the baseline sent another report");
    };
    progress.finish(report.processed);
    let seconds = match (report.first_consumed_us, report.last_committed_us) {
        (Some(a), Some(b)) => (b - a) as f64 / 1e6,
        _ => 0.0,
    };
    let mut r = cpu_after.result(
        &cpu_before,
        setup,
        (name, Kind::Baseline),
        (report.processed, seconds),
    );
    r.dataset = dataset.topic.clone();
    r.worker_peak_rss_mb = report.peak_rss_bytes as f64 / 1048576.0;
    r.latency_p50_ms = report.latency.quantile(0.5).map(|us| us / 1000.0);
    r.latency_p99_ms = report.latency.quantile(0.99).map(|us| us / 1000.0);
    r.latency_source =
        "the baseline's own: consumer hand-over to acknowledgement, per record".into();
    r.check = if report.processed == records {
        "ok".to_string()
    } else {
        format!("CHECK: processed {} of {records}", report.processed)
    };
    r.baseline = Some(report);
    delete_topics(
        &setup.broker.brokers,
        &[format!("{out}.clean"), format!("{out}.audit")],
    )
    .await?;
    Ok(r)
}
