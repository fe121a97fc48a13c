//! Figure 1: fingerprints per second per profile.
//!
//! Records are generated up front (varied ids, amounts written as strings
//! and numbers with and without trailing zeros, currencies in either case,
//! time zone offsets, shuffled key order) so the timed loop measures
//! `idemgate::fingerprint::fingerprint` alone, not the generator. The
//! reference implementation (`fingerprint_reference`, which the fast path
//! falls back to and must agree with) is timed in the same passes,
//! alternating with it, so a noisy machine moves both alike; heap
//! allocations per record are counted for both.

use std::collections::HashSet;
use std::hint::black_box;
use std::time::Instant;

use anyhow::{ensure, Context};
use idemgate::fingerprint::{fingerprint, fingerprint_reference, Fingerprint, Invalid};
use idemgate::fingerprint::{Profile, RecordView};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use crate::stats::median;

/// Far above any generated record: the size check never refuses one here.
const MAX_BYTES: usize = 1 << 20;

pub struct Row {
    pub profile: String,
    pub records: usize,
    pub mean_bytes: f64,
    /// Median over the timed passes, so one noisy pass does not move it.
    pub per_second: f64,
    pub ns_per_record: f64,
    /// The same for `fingerprint_reference`, timed in the same passes.
    pub reference_per_second: f64,
    /// Records per second of on-CPU time (median), fast and reference.
    pub cpu_per_second: Option<f64>,
    pub reference_cpu_per_second: Option<f64>,
    /// Heap allocations per record (one untimed pass each).
    pub allocations: f64,
    pub reference_allocations: f64,
}

type Fingerprinter = fn(&Profile, usize, &RecordView<'_>) -> Result<Fingerprint, Invalid>;

/// This thread's time on a CPU (ns, from /proc/thread-self/schedstat): on
/// a shared machine, the time the thread actually ran.
fn thread_cpu_ns() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    stat.split_whitespace().next()?.parse().ok()
}

/// Records per second of one pass: wall clock, and on-CPU time if known.
fn pass(f: Fingerprinter, profile: &Profile, views: &[RecordView<'_>]) -> (f64, Option<f64>) {
    let cpu = thread_cpu_ns();
    let started = Instant::now();
    for view in views {
        // The error case cannot occur (checked before); keeping the result
        // alive is what matters to the optimiser.
        let _ = black_box(f(profile, MAX_BYTES, black_box(view)));
    }
    let wall = views.len() as f64 / started.elapsed().as_secs_f64();
    let cpu = cpu
        .zip(thread_cpu_ns())
        .map(|(from, to)| views.len() as f64 * 1e9 / (to.saturating_sub(from).max(1)) as f64);
    (wall, cpu)
}

/// Heap allocations per record over one pass.
fn allocations(f: Fingerprinter, profile: &Profile, views: &[RecordView<'_>]) -> f64 {
    use std::sync::atomic::Ordering;
    crate::alloc::ALLOCATIONS.store(0, Ordering::SeqCst);
    crate::alloc::COUNTING.store(true, Ordering::SeqCst);
    for view in views {
        let _ = black_box(f(profile, MAX_BYTES, black_box(view)));
    }
    crate::alloc::COUNTING.store(false, Ordering::SeqCst);
    crate::alloc::ALLOCATIONS.load(Ordering::SeqCst) as f64 / views.len() as f64
}

/// Fast path beside the reference, from the same passes.
pub fn print_comparison(rows: &[Row]) {
    println!();
    println!("1b. fingerprint (fast path) vs fingerprint_reference, same passes, median");
    println!("    (wall: records per second of elapsed time; cpu: per second the thread ran)");
    println!(
        "{:<44} {:>11} {:>11} {:>11} {:>11} {:>8} {:>7} {:>7}",
        "profile", "fast wall", "ref wall", "fast cpu", "ref cpu", "speedup", "f alloc", "r alloc"
    );
    let cpu = |rate: Option<f64>| rate.map_or("-".to_string(), |r| format!("{r:.0}"));
    for row in rows {
        println!(
            "{:<44} {:>11.0} {:>11.0} {:>11} {:>11} {:>7.1}x {:>7.2} {:>7.2}",
            row.profile,
            row.per_second,
            row.reference_per_second,
            cpu(row.cpu_per_second),
            cpu(row.reference_cpu_per_second),
            row.per_second / row.reference_per_second,
            row.allocations,
            row.reference_allocations
        );
    }
}

/// One header as `RecordView` borrows it.
type Header<'a> = (&'a str, Option<&'a [u8]>);

/// A record as the consumer loop would see it, owned so it can be
/// generated once and viewed many times.
struct Owned {
    payload: Vec<u8>,
    headers: Vec<(&'static str, Option<Vec<u8>>)>,
}

/// One JSON object written with its keys in a random order: the canonical
/// form must not care, and a real sender does not promise an order.
fn object(rng: &mut StdRng, mut pairs: Vec<(&str, String)>) -> Vec<u8> {
    pairs.shuffle(rng);
    let body: Vec<String> = pairs.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
    format!("{{{}}}", body.join(",")).into_bytes()
}

fn quoted(text: impl std::fmt::Display) -> String {
    format!("\"{text}\"")
}

/// About 200 bytes: a bank transaction with the `bank-txn` fields and the
/// descriptive fields a real feed carries beside them.
fn bank_txn(rng: &mut StdRng, i: usize) -> Vec<u8> {
    let cents: u64 = rng.gen_range(1..10_000_000);
    let amount = match i % 4 {
        0 => quoted(format!("{}.{:02}", cents / 100, cents % 100)),
        1 => quoted(format!("{}.{:02}00", cents / 100, cents % 100)),
        2 => format!("{}.{:02}", cents / 100, cents % 100),
        _ => format!("{}", cents / 100),
    };
    let currency = ["EUR", "eur", "USD", "gbp", "CHF"][i % 5];
    let offset = ["Z", "+02:00", "-05:00", "+05:30"][i % 4];
    let posted_at = format!(
        "2024-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}{offset}",
        rng.gen_range(1..=12),
        rng.gen_range(1..=28),
        rng.gen_range(0..24),
        rng.gen_range(0..60),
        rng.gen_range(0..60),
        rng.gen_range(0..1000),
    );
    let pairs = vec![
        ("account_id", quoted(format!("ACC-{:08}", i % 50_000))),
        ("bank_txn_id", quoted(format!("BTX-2024-{i:010}"))),
        ("amount", amount),
        ("currency", quoted(currency)),
        ("posted_at", quoted(posted_at)),
        (
            "description",
            quoted(format!(
                "CARD PAYMENT MERCHANT {:05}",
                rng.gen_range(0..99_999)
            )),
        ),
        ("channel", quoted(["card", "sepa", "swift"][i % 3])),
    ];
    object(rng, pairs)
}

/// About 200 bytes: a spatial job (bbox, crs, params object).
fn spatial_job(rng: &mut StdRng, i: usize) -> Vec<u8> {
    let x: f64 = rng.gen_range(-180.0..179.0);
    let y: f64 = rng.gen_range(-85.0..84.0);
    let bbox = format!(
        "[{x:.9},{y:.9},{:.9},{:.9}]",
        x + rng.gen_range(0.001..0.5),
        y + rng.gen_range(0.001..0.5)
    );
    let crs = ["epsg:4326", "EPSG:3857", "epsg:32633"][i % 3];
    let params = format!(
        "{{\"resolution\":{},\"bands\":[\"B04\",\"B08\"],\"index\":\"{}\",\"run\":{i}}}",
        [10, 20, 60][i % 3],
        ["ndvi", "ndwi", "evi"][i % 3]
    );
    let pairs = vec![
        ("job_id", quoted(format!("job-{i:09}"))),
        ("bbox", bbox),
        ("crs", quoted(crs)),
        ("params", params),
        ("requested_by", quoted(format!("user-{}", i % 977))),
    ];
    object(rng, pairs)
}

/// About 200 bytes: an order, hashed on a 3-field list with a dotted path.
fn order(rng: &mut StdRng, i: usize) -> Vec<u8> {
    let cents: u64 = rng.gen_range(100..1_000_000);
    let customer = format!(
        "{{\"id\":\"C-{:07}\",\"tier\":\"{}\"}}",
        rng.gen_range(0..1_000_000),
        ["gold", "silver", "basic"][i % 3]
    );
    let shipping = format!(
        "{{\"country\":\"{}\",\"method\":\"{}\"}}",
        ["DE", "FR", "NL", "PL"][i % 4],
        ["express", "standard"][i % 2]
    );
    let pairs = vec![
        ("order_id", quoted(format!("ORD-{i:010}"))),
        ("customer", customer),
        (
            "total",
            quoted(format!("{}.{:02}", cents / 100, cents % 100)),
        ),
        ("items", format!("{}", rng.gen_range(1..20))),
        ("created_at", quoted("2024-05-01T12:34:56Z")),
        ("shipping", shipping),
    ];
    object(rng, pairs)
}

/// The bank records again, with an idempotency key and the headers a
/// producer typically adds.
fn with_headers(rng: &mut StdRng, i: usize) -> Owned {
    let key = format!("{:016x}-{i:08}", rng.gen::<u64>());
    let trace = format!("00-{:032x}-{:016x}-01", rng.gen::<u128>(), rng.gen::<u64>());
    Owned {
        payload: bank_txn(rng, i),
        headers: vec![
            ("content-type", Some(b"application/json".to_vec())),
            ("traceparent", Some(trace.into_bytes())),
            ("x-idempotency-key", Some(key.into_bytes())),
        ],
    }
}

/// Which generator feeds a profile.
#[derive(Clone, Copy)]
enum Kind {
    Bank,
    Spatial,
    Order,
    BankWithHeaders,
}

fn make(kind: Kind, rng: &mut StdRng, i: usize) -> Owned {
    let plain = |payload| Owned {
        payload,
        headers: Vec::new(),
    };
    match kind {
        Kind::Bank => plain(bank_txn(rng, i)),
        Kind::Spatial => plain(spatial_job(rng, i)),
        Kind::Order => plain(order(rng, i)),
        Kind::BankWithHeaders => with_headers(rng, i),
    }
}

/// The profiles measured, each with the records it reads.
const CASES: [(&str, Option<&str>, Kind); 6] = [
    ("bank-txn", None, Kind::Bank),
    ("spatial-job", None, Kind::Spatial),
    ("payload", None, Kind::Bank),
    ("payload-raw", None, Kind::Bank),
    ("header", None, Kind::BankWithHeaders),
    (
        "fields",
        Some("order_id,customer.id,total:decimal"),
        Kind::Order,
    ),
];

/// Fingerprints `count` records per profile, `passes` times each, and
/// checks every record hashed and every hash is distinct (the generator
/// gives each record its own id).
pub fn run(count: usize, passes: usize) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    for (name, fields, kind) in CASES {
        let profile = Profile::resolve(name, fields, None).with_context(|| name.to_string())?;
        let mut rng = StdRng::seed_from_u64(0x01de_6a7e);
        let owned: Vec<Owned> = (0..count).map(|i| make(kind, &mut rng, i)).collect();
        let headers: Vec<Vec<Header<'_>>> = owned
            .iter()
            .map(|o| o.headers.iter().map(|(k, v)| (*k, v.as_deref())).collect())
            .collect();
        let views: Vec<RecordView<'_>> = owned
            .iter()
            .zip(&headers)
            .map(|(o, h)| RecordView {
                key: None,
                payload: Some(&o.payload),
                headers: h,
            })
            .collect();

        // Untimed pass: checks the outcomes (the fast path agreeing with
        // the reference) and warms the caches.
        let mut seen = HashSet::with_capacity(count);
        for view in &views {
            let print = fingerprint(&profile, MAX_BYTES, view)
                .map_err(|e| anyhow::anyhow!("{name}: generated record refused: {e}"))?;
            ensure!(
                fingerprint_reference(&profile, MAX_BYTES, view) == Ok(print),
                "{name}: fast path and reference disagree on {:?}",
                String::from_utf8_lossy(view.payload.unwrap_or_default())
            );
            seen.insert(print.hash);
        }
        ensure!(
            seen.len() == count,
            "{name}: {} distinct hashes for {count} distinct records",
            seen.len()
        );

        let allocs = allocations(fingerprint, &profile, &views);
        let reference_allocs = allocations(fingerprint_reference, &profile, &views);
        let (mut rates, mut reference_rates) = (Vec::new(), Vec::new());
        let (mut cpu_rates, mut reference_cpu_rates) = (Vec::new(), Vec::new());
        for _ in 0..passes {
            let (wall, cpu) = pass(fingerprint, &profile, &views);
            rates.push(wall);
            cpu_rates.extend(cpu);
            let (wall, cpu) = pass(fingerprint_reference, &profile, &views);
            reference_rates.push(wall);
            reference_cpu_rates.extend(cpu);
        }
        let per_second = median(rates);
        let cpu_median = |rates: Vec<f64>| (!rates.is_empty()).then(|| median(rates));
        rows.push(Row {
            profile: match fields {
                Some(list) => format!("fields ({list})"),
                None => name.to_string(),
            },
            records: count,
            mean_bytes: owned.iter().map(|o| o.payload.len()).sum::<usize>() as f64 / count as f64,
            per_second,
            ns_per_record: 1e9 / per_second,
            reference_per_second: median(reference_rates),
            cpu_per_second: cpu_median(cpu_rates),
            reference_cpu_per_second: cpu_median(reference_cpu_rates),
            allocations: allocs,
            reference_allocations: reference_allocs,
        });
    }
    Ok(rows)
}
