//! Figure 1: fingerprints per second per profile.
//!
//! Records are generated up front (varied ids, amounts written as strings
//! and numbers with and without trailing zeros, currencies in either case,
//! time zone offsets, shuffled key order) so the timed loop measures
//! `idemgate::fingerprint::fingerprint` alone, not the generator.

use std::collections::HashSet;
use std::hint::black_box;
use std::time::Instant;

use anyhow::{ensure, Context};
use idemgate::fingerprint::{fingerprint, Profile, RecordView};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

/// Far above any generated record: the size check never refuses one here.
const MAX_BYTES: usize = 1 << 20;

pub struct Row {
    pub profile: String,
    pub records: usize,
    pub mean_bytes: f64,
    /// Median over the timed passes, so one noisy pass does not move it.
    pub per_second: f64,
    pub ns_per_record: f64,
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
                payload: Some(&o.payload),
                headers: h,
            })
            .collect();

        // Untimed pass: checks the outcomes and warms the caches.
        let mut seen = HashSet::with_capacity(count);
        for view in &views {
            let print = fingerprint(&profile, MAX_BYTES, view)
                .map_err(|e| anyhow::anyhow!("{name}: generated record refused: {e}"))?;
            seen.insert(print.hash);
        }
        ensure!(
            seen.len() == count,
            "{name}: {} distinct hashes for {count} distinct records",
            seen.len()
        );

        let mut rates = Vec::with_capacity(passes);
        for _ in 0..passes {
            let started = Instant::now();
            for view in &views {
                // The error case cannot occur (checked above); keeping the
                // result alive is what matters to the optimiser.
                let _ = black_box(fingerprint(&profile, MAX_BYTES, black_box(view)));
            }
            rates.push(count as f64 / started.elapsed().as_secs_f64());
        }
        rates.sort_by(f64::total_cmp);
        let per_second = rates[rates.len() / 2];
        rows.push(Row {
            profile: match fields {
                Some(list) => format!("fields ({list})"),
                None => name.to_string(),
            },
            records: count,
            mean_bytes: owned.iter().map(|o| o.payload.len()).sum::<usize>() as f64 / count as f64,
            per_second,
            ns_per_record: 1e9 / per_second,
        });
    }
    Ok(rows)
}
