//! Reading a replica's own /metrics: the product's Prometheus recorder,
//! as an operator's scraper reads it. The clean runs take their decision
//! latency (the worker's `idemgate_decision_latency_seconds` histogram)
//! and their decision counts from here, so nothing of the bench sits in
//! the worker's path.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use idemgate::metrics::{BATCH_SIZE, DECISION_LATENCY, RECORDS, TXN_STEP, TXN_STEPS};

/// One sample of the exposition: name, labels, value.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl Sample {
    fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// The address a replica's /metrics listener bound, from its log line
/// (`serving /metrics, ... address=127.0.0.1:port`); waits up to `within`.
pub(crate) async fn metrics_address(log: &Path, within: Duration) -> Result<String> {
    let until = Instant::now() + within;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let found = text
            .lines()
            .filter(|l| l.contains("serving /metrics"))
            .find_map(|l| l.split("address=").nth(1))
            .and_then(|rest| rest.split_whitespace().next());
        if let Some(address) = found {
            return Ok(address.trim_matches('"').to_string());
        }
        if Instant::now() > until {
            bail!("{} never said where it serves /metrics", log.display());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `GET /metrics` from `address`, parsed.
pub(crate) async fn scrape(address: &str) -> Result<Vec<Sample>> {
    let mut socket = TcpStream::connect(address)
        .await
        .with_context(|| format!("connecting to /metrics on {address}"))?;
    socket
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
        .await?;
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), socket.read_to_end(&mut response))
        .await
        .context("/metrics did not answer within 10 s")??;
    let text = String::from_utf8_lossy(&response);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, body)| body)
        .context("/metrics answered without a body")?;
    Ok(parse(body))
}

/// The Prometheus text format, as far as the bench needs it (no escapes
/// in label values, no timestamps).
pub(crate) fn parse(text: &str) -> Vec<Sample> {
    let mut samples = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (series, value) = match line.rsplit_once(' ') {
            Some(pair) => pair,
            None => continue,
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => (name, rest.trim_end_matches('}')),
            None => (series, ""),
        };
        let labels = labels
            .split(',')
            .filter_map(|pair| {
                let (k, v) = pair.split_once('=')?;
                Some((k.trim().to_string(), v.trim().trim_matches('"').to_string()))
            })
            .collect();
        samples.push(Sample {
            name: name.to_string(),
            labels,
            value,
        });
    }
    samples
}

/// Cumulative bucket counts of a histogram, summed over every series
/// (stream) and every scrape given (replica): `(le, count)` by rising
/// `le`, `+Inf` last.
pub(crate) fn buckets<'a>(
    scrapes: impl IntoIterator<Item = &'a [Sample]>,
    name: &str,
) -> Vec<(f64, f64)> {
    let bucket = format!("{name}_bucket");
    let mut sums: Vec<(f64, f64)> = Vec::new();
    for samples in scrapes {
        for s in samples.iter().filter(|s| s.name == bucket) {
            let Some(le) = s.label("le").and_then(|le| match le {
                "+Inf" => Some(f64::INFINITY),
                other => other.parse().ok(),
            }) else {
                continue;
            };
            match sums.iter_mut().find(|(b, _)| *b == le) {
                Some((_, count)) => *count += s.value,
                None => sums.push((le, s.value)),
            }
        }
    }
    sums.sort_by(|a, b| a.0.total_cmp(&b.0));
    sums
}

/// The `q` quantile of cumulative buckets, interpolated linearly within
/// its bucket (as PromQL's `histogram_quantile`): the lower bound of the
/// first bucket is 0, and a rank in `+Inf` gives the highest finite bound.
pub(crate) fn quantile(buckets: &[(f64, f64)], q: f64) -> Option<f64> {
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let (mut lower, mut below) = (0.0, 0.0);
    for &(le, count) in buckets {
        if count >= rank {
            if le.is_infinite() {
                return Some(lower);
            }
            let within = count - below;
            let fraction = if within > 0.0 {
                (rank - below) / within
            } else {
                1.0
            };
            return Some(lower + (le - lower) * fraction);
        }
        lower = le;
        below = count;
    }
    Some(lower)
}

/// The sum of a counter (or gauge) over every scrape, of the series whose
/// labels include `labels`.
pub(crate) fn total<'a>(
    scrapes: impl IntoIterator<Item = &'a [Sample]>,
    name: &str,
    labels: &[(&str, &str)],
) -> f64 {
    scrapes
        .into_iter()
        .flat_map(|samples| samples.iter())
        .filter(|s| s.name == name && labels.iter().all(|(k, v)| s.label(k) == Some(*v)))
        .map(|s| s.value)
        .sum()
}

/// What the clean runs read of their replicas' /metrics at the end.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct Scraped {
    /// `idemgate_decision_latency_seconds`, summed over the replicas,
    /// quantiles in ms.
    pub latency_p50_ms: Option<f64>,
    pub latency_p99_ms: Option<f64>,
    pub latency_count: u64,
    /// Its buckets as scraped, summed: (`le`, cumulative count).
    pub latency_buckets: Vec<(String, u64)>,
    /// `idemgate_records_total` by decision, summed over the replicas.
    pub novel: u64,
    pub duplicate: u64,
    pub conflict: u64,
    pub invalid: u64,
    pub unverified: u64,
    /// `idemgate_tier_hits_total` by tier.
    pub duplicate_exact: u64,
    pub duplicate_filter: u64,
    pub store_errors: u64,
    /// `idemgate_batch_records` count: store rounds the replicas started.
    pub store_rounds: u64,
    /// Exactly once: `idemgate_transaction_step_seconds` per step, summed
    /// over the replicas: (step, transactions, mean ms, p99 ms).
    pub txn_steps: Vec<TxnStep>,
}

/// One step of the transactions' commits, over a run.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct TxnStep {
    pub step: String,
    pub count: u64,
    pub mean_ms: f64,
    pub p99_ms: Option<f64>,
}

/// Every step of `idemgate_transaction_step_seconds` that counted one.
fn txn_steps(scrapes: &[Vec<Sample>]) -> Vec<TxnStep> {
    let all = || scrapes.iter().map(|s| s.as_slice());
    TXN_STEPS
        .iter()
        .filter_map(|&step| {
            let of = [("step", step)];
            let count = total(all(), &format!("{}_count", TXN_STEP.name), &of);
            let sum = total(all(), &format!("{}_sum", TXN_STEP.name), &of);
            let of_step: Vec<Vec<Sample>> = scrapes
                .iter()
                .map(|s| {
                    s.iter()
                        .filter(|x| x.label("step") == Some(step))
                        .cloned()
                        .collect()
                })
                .collect();
            let buckets = buckets(of_step.iter().map(Vec::as_slice), TXN_STEP.name);
            (count > 0.0).then(|| TxnStep {
                step: step.to_string(),
                count: count as u64,
                mean_ms: sum / count * 1000.0,
                p99_ms: quantile(&buckets, 0.99).map(|s| s * 1000.0),
            })
        })
        .collect()
}

impl Scraped {
    pub fn of(scrapes: &[Vec<Sample>]) -> Scraped {
        let all = || scrapes.iter().map(|s| s.as_slice());
        let buckets = buckets(all(), DECISION_LATENCY.name);
        let decided = |d: &str| total(all(), RECORDS.name, &[("decision", d)]) as u64;
        let tier = |t: &str| total(all(), "idemgate_tier_hits_total", &[("tier", t)]) as u64;
        Scraped {
            latency_p50_ms: quantile(&buckets, 0.5).map(|s| s * 1000.0),
            latency_p99_ms: quantile(&buckets, 0.99).map(|s| s * 1000.0),
            latency_count: buckets.last().map_or(0, |b| b.1 as u64),
            latency_buckets: buckets
                .iter()
                .map(|(le, count)| (le.to_string(), *count as u64))
                .collect(),
            novel: decided("novel"),
            duplicate: decided("duplicate"),
            conflict: decided("conflict"),
            invalid: decided("invalid"),
            unverified: decided("unverified"),
            duplicate_exact: tier("exact"),
            duplicate_filter: tier("filter"),
            store_errors: total(all(), "idemgate_store_errors_total", &[]) as u64,
            store_rounds: total(all(), &format!("{}_count", BATCH_SIZE.name), &[]) as u64,
            txn_steps: txn_steps(scrapes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# TYPE idemgate_decision_latency_seconds histogram\n\
idemgate_decision_latency_seconds_bucket{stream=\"bank\",le=\"0.001\"} 0\n\
idemgate_decision_latency_seconds_bucket{stream=\"bank\",le=\"0.002\"} 50\n\
idemgate_decision_latency_seconds_bucket{stream=\"bank\",le=\"0.003\"} 100\n\
idemgate_decision_latency_seconds_bucket{stream=\"bank\",le=\"+Inf\"} 100\n\
idemgate_decision_latency_seconds_sum{stream=\"bank\"} 0.2\n\
idemgate_decision_latency_seconds_count{stream=\"bank\"} 100\n\
idemgate_records_total{stream=\"bank\",decision=\"novel\"} 90\n\
idemgate_records_total{stream=\"bank\",decision=\"duplicate\"} 10\n\
idemgate_offset_commits_total 7\n";

    #[test]
    fn quantiles_interpolate_within_the_bucket_and_sum_over_replicas() {
        let one = parse(TEXT);
        let buckets = buckets([one.as_slice(), one.as_slice()], DECISION_LATENCY.name);
        assert_eq!(buckets.len(), 4);
        assert_eq!(buckets[3], (f64::INFINITY, 200.0));
        // Rank 100 of 200: the end of the 1-2 ms bucket.
        assert!((quantile(&buckets, 0.5).unwrap() - 0.002).abs() < 1e-12);
        // Rank 150: half way through 2-3 ms.
        assert!((quantile(&buckets, 0.75).unwrap() - 0.0025).abs() < 1e-12);
        let scraped = Scraped::of(&[one.clone(), one]);
        assert_eq!((scraped.novel, scraped.duplicate), (180, 20));
        assert_eq!(scraped.latency_count, 200);
        assert_eq!(
            total(
                [parse(TEXT).as_slice()],
                "idemgate_offset_commits_total",
                &[]
            ),
            7.0
        );
    }

    #[test]
    fn a_rank_past_the_last_bound_gives_the_last_bound() {
        let buckets = vec![(0.001, 1.0), (0.002, 1.0), (f64::INFINITY, 10.0)];
        assert_eq!(quantile(&buckets, 0.99), Some(0.002));
        assert_eq!(quantile(&[(f64::INFINITY, 0.0)], 0.5), None);
    }
}
