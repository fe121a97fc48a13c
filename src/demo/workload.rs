//! The demo's workload: what at-least-once delivery really sends.
//!
//! - A bank feed (exact mode, `bank-txn`): every transaction once; a quarter
//!   of them retried along an eight-attempt ladder out to 9 h 20 min;
//!   overlapping polls that re-send re-serialized copies; a batch file
//!   reprocessed three hours later with amounts written to four places; keys
//!   reused with an edited memo (conflicts); malformed records.
//! - Vehicle telemetry (tiered mode, `payload`): a reading a minute per
//!   vehicle; overlapping polls re-send some within seconds (tier 1) and some
//!   20 to 50 minutes later, after tier 1 has let go (the filter).
//!
//! Deterministic: a seeded generator, so every run tells the same story.

use serde_json::json;

/// One raw record to produce.
pub(crate) struct Raw {
    pub(crate) topic: &'static str,
    pub(crate) key: String,
    pub(crate) payload: Vec<u8>,
    pub(crate) timestamp_ms: i64,
    /// The distinct event this record carries; `None` for malformed ones.
    pub(crate) event: Option<String>,
    pub(crate) kind: Kind,
}

/// What the generator meant each record to be, to check the outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    First,
    Redelivery,
    Conflict,
    Malformed,
}

pub(crate) const BANK: &str = "raw.bank";
pub(crate) const TELEMETRY: &str = "raw.telemetry";

/// The retry ladder: seconds after the first attempt.
pub(crate) const LADDER: [i64; 7] = [60, 300, 1800, 5400, 12000, 21600, 33600];

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

fn rfc3339(ms: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default()
}

/// Bank transactions and telemetry readings starting at `start_ms`, sorted
/// by timestamp.
pub(crate) fn generate(start_ms: i64, transactions: u64, vehicles: u64, minutes: u64) -> Vec<Raw> {
    let mut rng = Rng(0x1de6_a7e5);
    let mut out = Vec::new();
    bank(&mut rng, start_ms, transactions, &mut out);
    telemetry(&mut rng, start_ms, vehicles, minutes, &mut out);
    out.sort_by_key(|r| r.timestamp_ms);
    out
}

fn bank(rng: &mut Rng, start_ms: i64, transactions: u64, out: &mut Vec<Raw>) {
    let senders = ["acme-bank", "northwind", "globex", "initech"];
    let mut reprocessed = 0;
    for n in 0..transactions {
        let sender = senders[(n % 4) as usize];
        let account = format!("ACC-{sender}-{}", rng.below(40));
        let txn = format!("TXN-{n:06}");
        let cents = 100 + rng.below(500_000);
        let amount = format!("{}.{:02}", cents / 100, cents % 100);
        let at = start_ms + (n as i64) * 5_000 + rng.below(4_000) as i64;
        let posted_at = rfc3339(at - 60_000);
        let event = format!("{account}/{txn}");
        let payload = json!({
            "account_id": account, "bank_txn_id": txn, "amount": amount,
            "currency": "USD", "posted_at": posted_at, "memo": format!("payment {n}"),
            "sender": sender,
        });
        let first = serde_json::to_vec(&payload).unwrap_or_default();
        let record = |payload: Vec<u8>, ts: i64, kind: Kind| Raw {
            topic: BANK,
            key: account.clone(),
            payload,
            timestamp_ms: ts,
            event: Some(event.clone()),
            kind,
        };
        out.push(record(first.clone(), at, Kind::First));
        // Webhook retries after timed-out acknowledgements, along the ladder.
        if rng.chance(25) {
            let attempts = 1 + rng.below(LADDER.len() as u64) as usize;
            for delay in &LADDER[..attempts] {
                out.push(record(first.clone(), at + delay * 1000, Kind::Redelivery));
            }
        }
        // An overlapping poll: the same transaction, re-serialized.
        if rng.chance(10) {
            let pretty = serde_json::to_vec_pretty(&payload).unwrap_or_default();
            out.push(record(
                pretty,
                at + 30_000 + rng.below(90_000) as i64,
                Kind::Redelivery,
            ));
        }
        // A batch file reprocessed after a crashed worker, three hours on,
        // amounts written to four places and the currency in lower case.
        if n % 5 == 0 && reprocessed < transactions / 5 {
            reprocessed += 1;
            let mut again = payload.clone();
            again["amount"] = json!(format!("{amount}00"));
            again["currency"] = json!("usd");
            let bytes = serde_json::to_vec(&again).unwrap_or_default();
            out.push(record(bytes, at + 3 * 3_600_000, Kind::Redelivery));
        }
        // The same key reused for an edited record: a conflict to review.
        if n % 97 == 13 {
            let mut edited = payload.clone();
            edited["memo"] = json!(format!("payment {n} (corrected)"));
            let bytes = serde_json::to_vec(&edited).unwrap_or_default();
            out.push(record(bytes, at + 600_000, Kind::Conflict));
        }
        // Malformed deliveries from a misbehaving connector.
        if n % 61 == 7 {
            let broken: Vec<u8> = match n % 4 {
                0 => b"{\"account_id\": \"ACC-1\", \"amount\": ".to_vec(),
                1 => serde_json::to_vec(&json!({"account_id": account, "bank_txn_id": txn, "currency": "USD", "posted_at": posted_at})).unwrap_or_default(),
                2 => serde_json::to_vec(&json!({"account_id": account, "bank_txn_id": txn, "amount": "12,50", "currency": "USD", "posted_at": posted_at})).unwrap_or_default(),
                _ => serde_json::to_vec(&json!({"account_id": account, "bank_txn_id": txn, "amount": amount, "currency": "USD", "posted_at": "yesterday"})).unwrap_or_default(),
            };
            out.push(Raw {
                topic: BANK,
                key: account.clone(),
                payload: broken,
                timestamp_ms: at + 1_000,
                event: None,
                kind: Kind::Malformed,
            });
        }
    }
}

fn telemetry(rng: &mut Rng, start_ms: i64, vehicles: u64, minutes: u64, out: &mut Vec<Raw>) {
    for vehicle in 0..vehicles {
        let id = format!("VIN-{vehicle:04}");
        for minute in 0..minutes {
            let at = start_ms + (minute as i64) * 60_000 + (vehicle as i64) * 97;
            let reading = json!({
                "vehicle_id": id, "seq": minute,
                "lat": 40.0 + (rng.below(10_000) as f64) / 1e5,
                "lon": -74.0 + (rng.below(10_000) as f64) / 1e5,
                "speed_kmh": rng.below(130), "recorded_at": rfc3339(at),
            });
            let bytes = serde_json::to_vec(&reading).unwrap_or_default();
            let event = format!("{id}/{minute}");
            let record = |ts: i64, kind: Kind| Raw {
                topic: TELEMETRY,
                key: id.clone(),
                payload: bytes.clone(),
                timestamp_ms: ts,
                event: Some(event.clone()),
                kind,
            };
            out.push(record(at, Kind::First));
            if rng.chance(15) {
                out.push(record(
                    at + 5_000 + rng.below(50_000) as i64,
                    Kind::Redelivery,
                ));
            }
            if rng.chance(5) {
                let late = 20 * 60_000 + rng.below(30 * 60_000) as i64;
                out.push(record(at + late, Kind::Redelivery));
            }
        }
    }
}
