//! Figures for the claims idemgate makes about its cost: fingerprints per
//! second, claim-batch throughput per backend (claim, publish, duplicate
//! claim: claim protocol v2, docs/design.md §4), round trips per batch,
//! Redis memory per claimed key, and PostgreSQL bytes per claim over
//! generations (on a PostgreSQL server of the bench's own).
//!
//! `idemgate-bench claims` is the full run (release build; the Redis
//! backends come from `IDEMGATE_TEST_REDIS_URL`, `IDEMGATE_TEST_REDISBLOOM_URL`
//! and `IDEMGATE_TEST_REDIS_CLUSTER`, as for the test suite; a missing one
//! is reported and fails the run). `idemgate-bench claims --smoke` (run by
//! the bench package's test) is the same on tiny sizes, every outcome still
//! checked.

mod fingerprints;
mod footprint;
mod live;
mod pg_generations;
mod report;
mod runs;
mod servers;
mod throughput;

use std::sync::Arc;

use anyhow::{ensure, Context};

use crate::proxy;
use idemgate::store::memory::MemoryStore;
use idemgate::store::redis::{FilterBackend, RedisOptions, RedisStore, RedisTarget};
use idemgate::store::{ClaimStore, StreamId};

use servers::RedisBackend;
use throughput::{Load, BATCH, EXACT, TIERED};

/// How much work each figure does.
struct Sizes {
    fingerprint_records: usize,
    fingerprint_passes: usize,
    /// Timed claim batches per backend and stream.
    batches: Load,
    /// Batches counted through the proxy.
    counted: Load,
    footprint_keys: usize,
    /// Commits timed per count of finished runs (`runs.rs`).
    runs_repeats: usize,
    /// The paced load of the live-claim figure.
    live: live::Pace,
    postgres: pg_generations::Plan,
}

const BENCH: Sizes = Sizes {
    fingerprint_records: 100_000,
    fingerprint_passes: 5,
    batches: Load {
        batches: 100,
        size: BATCH,
    },
    counted: Load {
        batches: 20,
        size: BATCH,
    },
    footprint_keys: 1_000_000,
    runs_repeats: 50,
    // A TTL long beside the one-second grain of a field's expiry and the
    // sweep's tenth of a TTL, as tier-1 TTLs are in production.
    live: live::Pace {
        rate: 5_000,
        ttl: std::time::Duration::from_secs(30),
        ttls: 2,
    },
    // Autovacuum at its defaults visits a table once its dead rows pass a
    // fifth of it; where every claim leaves two (its done flag's old
    // version, its deletion), that is every tenth of a TTL.
    postgres: pg_generations::Plan {
        per_step: 10_000,
        steps_per_ttl: 10,
        generations: 1,
        autovacuum: true,
    },
};

const SMOKE: Sizes = Sizes {
    fingerprint_records: 300,
    fingerprint_passes: 1,
    batches: Load {
        batches: 2,
        size: 100,
    },
    counted: Load {
        batches: 1,
        size: 100,
    },
    footprint_keys: 1_000,
    runs_repeats: 2,
    live: live::Pace {
        rate: 1_000,
        ttl: std::time::Duration::from_secs(1),
        ttls: 2,
    },
    postgres: pg_generations::Plan {
        per_step: 2_000,
        steps_per_ttl: 2,
        generations: 1,
        autovacuum: false,
    },
};

/// Unique per run, so keys never meet another run's (or another
/// session's) and can be removed by prefix afterwards.
fn run_prefix() -> String {
    format!(
        "idemgate-bench-{}-{:x}:",
        std::process::id(),
        throughput::now_ms()
    )
}

/// Runs every figure (`bench`: full sizes; otherwise the smoke sizes), or
/// only the section `only` names; `Ok(false)` when something went
/// unmeasured.
pub async fn run(bench: bool, only: Option<&str>) -> anyhow::Result<bool> {
    let sizes = if bench { &BENCH } else { &SMOKE };
    if only == Some("postgres") {
        eprintln!("[claims] postgres: bytes per claim over generations");
        pg_generations::print(&pg_generations::run(sizes.postgres).await?);
        return Ok(true);
    }
    let mut complete = true;
    let mut report = report::Report::new(bench);
    if only == Some("live") {
        report.live = live::run(sizes.live).await?;
        report.print_live();
        return Ok(true);
    }
    if only == Some("runs") {
        // The memory store and every Redis backend of the test services.
        let memory = MemoryStore::new(throughput::streams());
        report
            .runs
            .extend(runs::measure("memory", &memory, EXACT, sizes.runs_repeats).await?);
        let (backends, missing) = servers::from_env();
        ensure!(missing.is_empty(), "backends missing: {missing:?}");
        for backend in &backends {
            let prefix = run_prefix();
            let options = RedisOptions {
                filter_backend: Some(backend.filter),
                ..RedisOptions::new(backend.target.clone(), &prefix)
            };
            let store = RedisStore::connect(&options, throughput::streams()).await?;
            let rows = runs::measure(backend.label, &store, EXACT, sizes.runs_repeats).await;
            servers::delete_prefix(&backend.target, &prefix).await?;
            report.runs.extend(rows?);
        }
        report.print_runs();
        return Ok(true);
    }

    eprintln!(
        "[claims] fingerprints: {} records per profile",
        sizes.fingerprint_records
    );
    report.fingerprints = fingerprints::run(sizes.fingerprint_records, sizes.fingerprint_passes)?;
    fingerprints::print_comparison(&report.fingerprints);
    match only {
        Some("fingerprints") => return Ok(true),

        Some(other) => anyhow::bail!("no claims section `{other}`"),
        None => {}
    }

    eprintln!("[claims] memory backend");
    let memory: Arc<dyn ClaimStore> = Arc::new(MemoryStore::new(throughput::streams()));
    for stream in [EXACT, TIERED] {
        report
            .claims
            .push(timed("memory", memory.as_ref(), stream, sizes.batches, None).await?);
    }
    report
        .runs
        .extend(runs::measure("memory", memory.as_ref(), EXACT, sizes.runs_repeats).await?);

    let (backends, missing) = servers::from_env();
    for (label, why) in &missing {
        eprintln!("\n!!! NOT MEASURED: backend {label}: {why}\n");
        complete = false;
        report
            .unmeasured
            .push(format!("{label}: not measured ({why})"));
    }
    for backend in &backends {
        eprintln!("[claims] {}", backend.label);
        let prefix = run_prefix();
        let measured = redis_backend(backend, &prefix, sizes, &mut report).await;
        // Whatever happened, the keys go: the shared servers are not ours.
        let removed = servers::delete_prefix(&backend.target, &prefix).await;
        match removed {
            Ok(n) => eprintln!(
                "[claims] {}: removed {n} keys under {prefix}",
                backend.label
            ),
            Err(e) => {
                eprintln!(
                    "\n!!! {}: could not remove keys under {prefix}: {e:#}\n",
                    backend.label
                );
                report
                    .unmeasured
                    .push(format!("{}: keys left under {prefix}", backend.label));
                complete = false;
            }
        }
        if let Err(error) = measured {
            eprintln!("\n!!! NOT MEASURED: backend {}: {error:#}\n", backend.label);
            report
                .unmeasured
                .push(format!("{}: failed ({error:#})", backend.label));
            complete = false;
        }
    }

    match live::run(sizes.live).await {
        Ok(rows) => report.live = rows,
        Err(error) => {
            eprintln!("\n!!! NOT MEASURED: bytes per live claim: {error:#}\n");
            report
                .unmeasured
                .push(format!("bytes per live claim: failed ({error:#})"));
            complete = false;
        }
    }
    match footprint_figure(sizes).await {
        Ok(figure) => report.tier1 = Some(figure),
        Err(error) => {
            eprintln!("\n!!! NOT MEASURED: tier-1 memory per key: {error:#}\n");
            report
                .unmeasured
                .push(format!("tier-1 memory per key: failed ({error:#})"));
            complete = false;
        }
    }

    report
        .versions
        .push(("redis-server --version".into(), servers::server_version()));
    if let Some(bloom) = backends
        .iter()
        .find(|b| b.filter == FilterBackend::RedisBloom)
    {
        if let RedisTarget::Standalone(url) = &bloom.target {
            let version = servers::bloom_version(url)
                .await
                .unwrap_or_else(|e| format!("{e:#}"));
            report.versions.push((
                format!("RedisBloom (MODULE LIST on {url})"),
                report::bloom_semver(&version),
            ));
        }
    }
    report.print();

    eprintln!("[claims] postgres: bytes per claim over generations");
    match pg_generations::run(sizes.postgres).await {
        Ok(figure) => pg_generations::print(&figure),
        Err(error) => {
            eprintln!("\n!!! NOT MEASURED: PostgreSQL bytes per claim: {error:#}\n");
            complete = false;
        }
    }
    Ok(complete)
}

/// Warm-up, then the timed batches, with the CPU both sides used read
/// around them.
async fn timed(
    backend: &str,
    store: &dyn ClaimStore,
    stream: StreamId,
    load: Load,
    server: Option<&RedisTarget>,
) -> anyhow::Result<throughput::Row> {
    throughput::warm_up(store, stream, "timed", load.size).await?;
    let server_cpu = || async {
        match server {
            Some(target) => servers::cpu_seconds(target).await.map(Some),
            None => Ok(None),
        }
    };
    let (client0, server0) = (servers::own_cpu_seconds(), server_cpu().await?);
    let mut row = throughput::measure(backend, store, stream, "timed", load).await?;
    let (client1, server1) = (servers::own_cpu_seconds(), server_cpu().await?);
    let records = row.records as f64;
    if let (Some(c0), Some(c1)) = (client0, client1) {
        row.cpu = Some(throughput::Cpu {
            wall_us: 1e6 / row.claim_publish_new + 1e6 / row.claim_duplicate,
            client_us: (c1 - c0) * 1e6 / records,
            server_us: server0
                .zip(server1)
                .map(|(s0, s1)| (s1 - s0) * 1e6 / records),
        });
    }
    Ok(row)
}

/// The tier-1 figure starts a scratch `redis-server` of its own.
async fn footprint_figure(sizes: &Sizes) -> anyhow::Result<footprint::Tier1> {
    eprintln!(
        "[claims] tier-1 memory: {} keys on a scratch redis-server",
        sizes.footprint_keys
    );
    footprint::tier1(sizes.footprint_keys).await
}

/// Throughput on both streams, the tier-2 footprint and (standalone only)
/// the round trips counted through the proxy.
async fn redis_backend(
    backend: &RedisBackend,
    prefix: &str,
    sizes: &Sizes,
    report: &mut report::Report,
) -> anyhow::Result<()> {
    let options = RedisOptions {
        filter_backend: Some(backend.filter),
        ..RedisOptions::new(backend.target.clone(), prefix)
    };
    let store = RedisStore::connect(&options, throughput::streams())
        .await
        .with_context(|| format!("connecting to {:?}", backend.target))?;
    ensure!(store.filter_backend() == backend.filter, "filter backend");
    let mut rows = Vec::new();
    for stream in [EXACT, TIERED] {
        let server = Some(&backend.target);
        rows.push(timed(backend.label, &store, stream, sizes.batches, server).await?);
    }
    report
        .runs
        .extend(runs::measure(backend.label, &store, EXACT, sizes.runs_repeats).await?);

    if let RedisTarget::Standalone(url) = &backend.target {
        let (kind, what) = match backend.filter {
            FilterBackend::RedisBloom => ("f", "RedisBloom filter"),
            FilterBackend::Bitmap => ("b", "bitmap shards"),
        };
        let tiered = &throughput::streams()[TIERED.0];
        let (bytes, keys) = footprint::tier2_bytes(url, prefix, tiered, kind).await?;
        report.tier2.push(report::Tier2 {
            backend: backend.label.to_string(),
            what: format!("{what} ({keys} key{})", if keys == 1 { "" } else { "s" }),
            bytes,
        });

        // Counted on a second connection through the proxy, after the
        // timed run, so the proxy's own cost never enters the rates. The
        // scripts are already cached on the server by then.
        let (address, counts) = proxy::start(servers::socket_of(url)?).await?;
        let counted = RedisStore::connect(
            &RedisOptions {
                target: RedisTarget::Standalone(format!("redis://{address}")),
                ..options.clone()
            },
            throughput::streams(),
        )
        .await?;
        for (row, stream) in rows.iter_mut().zip([EXACT, TIERED]) {
            let trips =
                throughput::count(&counted, &counts, stream, "counted", sizes.counted).await?;
            row.trips = Some(trips);
        }
    }
    report.claims.extend(rows);
    Ok(())
}
