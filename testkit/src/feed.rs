//! The bench's raw topic: a bank connector's feed of 200-byte transaction
//! webhooks, a given fraction of which are redeliveries along a retry
//! ladder.
//!
//! First attempts arrive evenly at a simulated feed rate (events a second).
//! A retried event is sent again at the ladder's first rungs (1 min, 5 min,
//! 30 min, 1.5 h, 3 h 20 min, 6 h, 9 h 20 min after the first attempt): one
//! more attempt with probability 1/2, two with 1/4, and so on. Copies whose
//! rung lies past the last first attempt follow at the end of the topic.
//! The feed rate sets how far apart in the topic an event's copies are: at
//! 1,000 events a second the first rung is 60,000 records later, so a batch
//! never holds two copies of one event; at a few dozen a second (a slow feed
//! caught up as a backlog) most batches do. Retried events are drawn
//! until the copies make up the asked fraction of the records. Two thirds of
//! the copies are byte for byte the first attempt; a third are re-serialized
//! (other key order, `"1234.560"` for `"1234.56"`), which the `bank-txn`
//! profile must still see as the same event. Records go out in arrival
//! order, keyed and partitioned by account, so every copy of an event lands
//! in its partition after the first.
//!
//! Deterministic: a seeded generator, so every run loads the same records.

/// Seconds after the first attempt.
pub const LADDER: [i64; 7] = [60, 300, 1_800, 5_400, 12_000, 21_600, 33_600];
pub const PAYLOAD_BYTES: usize = 200;
const ACCOUNTS: u64 = 50_000;
const CURRENCIES: [&str; 4] = ["EUR", "USD", "GBP", "CHF"];

/// One record of the raw topic, in arrival order.
#[derive(Clone, Copy, Debug)]
pub struct Planned {
    pub event: u32,
    /// 0 for the first attempt.
    pub attempt: u8,
    pub reserialized: bool,
    pub arrival_ms: i64,
}

pub struct Workload {
    pub records: Vec<Planned>,
    pub events: u64,
    pub copies: u64,
    /// Copies per ladder rung.
    pub per_rung: [u64; LADDER.len()],
    start_ms: i64,
    /// Milliseconds between two first attempts, times `events`.
    span_ms: i64,
}

pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// A keyed hash of the event number, so attributes look random but each
/// copy of an event gets the same ones.
fn mix(event: u32, salt: u64) -> u64 {
    let mut rng = Rng::new(u64::from(event).wrapping_mul(0x2545_f491_4f6c_dd1d) ^ salt);
    rng.next_u64()
}

impl Workload {
    /// `records` records of which a fraction `duplicates` are copies,
    /// first attempts arriving at `feed_rate` a second.
    pub fn generate(records: u64, duplicates: f64, feed_rate: f64, end_ms: i64) -> Workload {
        let copies_wanted = ((records as f64) * duplicates.clamp(0.0, 0.9)).round() as u64;
        let events = records - copies_wanted;
        let span_ms = ((events as f64 / feed_rate.max(1e-3)) * 1000.0) as i64;
        let start_ms = end_ms - span_ms - LADDER[LADDER.len() - 1] * 1000;
        let first_ms = |event: u64| start_ms + (event as i64 * span_ms) / events.max(1) as i64;
        let mut rng = Rng::new(0x1de6_a7e5_0bea_c4ed);
        let mut out = Vec::with_capacity(records as usize);
        for event in 0..events {
            out.push(Planned {
                event: event as u32,
                attempt: 0,
                reserialized: false,
                arrival_ms: first_ms(event),
            });
        }
        // Retried events, drawn at random (without repeats: a step walk
        // over a shuffled order) until the copies add up.
        let mut per_rung = [0u64; LADDER.len()];
        let mut copies = 0;
        let stride = pick_stride(events, &mut rng);
        let mut cursor = rng.below(events.max(1));
        let mut drawn = 0;
        while copies < copies_wanted && drawn < events {
            let event = cursor;
            cursor = (cursor + stride) % events;
            drawn += 1;
            let mut attempts = 1;
            while attempts < LADDER.len() && rng.below(2) == 0 {
                attempts += 1;
            }
            for (rung, wait_s) in LADDER.iter().enumerate().take(attempts) {
                if copies == copies_wanted {
                    break;
                }
                out.push(Planned {
                    event: event as u32,
                    attempt: rung as u8 + 1,
                    reserialized: rng.below(3) == 0,
                    arrival_ms: first_ms(event) + wait_s * 1000,
                });
                per_rung[rung] += 1;
                copies += 1;
            }
        }
        out.sort_by_key(|p| (p.arrival_ms, p.event, p.attempt));
        Workload {
            records: out,
            events,
            copies,
            per_rung,
            start_ms,
            span_ms,
        }
    }

    pub fn account(&self, event: u32) -> u64 {
        mix(event, 1) % ACCOUNTS
    }

    pub fn partition(&self, event: u32, partitions: i32) -> i32 {
        // FNV-1a over the account number: stable, and every copy of an
        // event shares its account, so its partition.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in self.account(event).to_be_bytes() {
            h ^= u64::from(byte);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        (h % partitions.max(1) as u64) as i32
    }

    /// The record's key (the account) and its exactly 200-byte payload.
    pub fn render(&self, planned: &Planned) -> (String, Vec<u8>) {
        let event = planned.event;
        let account = format!("acct-{:06}", self.account(event));
        let txn = format!("txn-{event:010}");
        let cents = mix(event, 2) % 500_000 + 1;
        let amount = format!("{}.{:02}", cents / 100, cents % 100);
        let currency = CURRENCIES[(mix(event, 3) % CURRENCIES.len() as u64) as usize];
        let posted_ms =
            self.start_ms + (i64::from(event) * self.span_ms) / self.events.max(1) as i64 - 2_000;
        let posted = rfc3339(posted_ms);
        // The memo pads the first attempt to exactly PAYLOAD_BYTES; the
        // re-serialized copy drops a space and gains a trailing zero, so
        // it is as long and its memo is the same (the memo is outside the
        // identity but inside the payload digest: a changed memo would be a
        // conflict, not a duplicate).
        let frame = format!(
            r#"{{"account_id":"{account}","bank_txn_id":"{txn}","amount":"{amount}","currency":"{currency}","posted_at":"{posted}","memo": ""}}"#
        );
        let pad = PAYLOAD_BYTES.saturating_sub(frame.len());
        let memo: String = (0..pad)
            .map(|i| (b'a' + ((mix(event, 4) as usize + i * 7) % 26) as u8) as char)
            .collect();
        let payload = if planned.reserialized {
            format!(
                r#"{{"memo":"{memo}","currency":"{currency}","amount":"{amount}0","posted_at":"{posted}","bank_txn_id":"{txn}","account_id":"{account}"}}"#
            )
        } else {
            format!(
                r#"{{"account_id":"{account}","bank_txn_id":"{txn}","amount":"{amount}","currency":"{currency}","posted_at":"{posted}","memo": "{memo}"}}"#
            )
        };
        (account, payload.into_bytes())
    }
}

/// A step coprime with `n`, so `(start + i * step) % n` visits every event
/// once in a scattered order.
fn pick_stride(n: u64, rng: &mut Rng) -> u64 {
    if n <= 1 {
        return 1;
    }
    loop {
        let candidate = n / 2 + rng.below(n / 2).max(1);
        if gcd(candidate, n) == 1 {
            return candidate;
        }
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

fn rfc3339(ms: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(ms.div_euclid(1000))
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use idemgate::fingerprint::{fingerprint, Profile, RecordView};

    #[test]
    fn the_duplicate_fraction_is_what_was_asked_and_copies_follow_their_original() {
        let workload = Workload::generate(20_000, 0.1, 5.0, 1_700_000_000_000);
        assert_eq!(workload.records.len(), 20_000);
        assert_eq!(workload.copies, 2_000);
        assert_eq!(workload.events, 18_000);
        let mut first_seen = std::collections::HashMap::new();
        for (index, record) in workload.records.iter().enumerate() {
            if record.attempt == 0 {
                first_seen.insert(record.event, index);
            } else {
                assert!(first_seen[&record.event] < index);
            }
        }
        assert!(workload.per_rung[0] > workload.per_rung[1]);
    }

    #[test]
    fn every_copy_is_200_bytes_and_hashes_like_its_original() {
        let workload = Workload::generate(5_000, 0.3, 1000.0, 1_700_000_000_000);
        let profile = Profile::resolve("bank-txn", None, None).unwrap();
        let mut prints = std::collections::HashMap::new();
        for record in &workload.records {
            let (_, payload) = workload.render(record);
            assert_eq!(
                payload.len(),
                PAYLOAD_BYTES,
                "{}",
                String::from_utf8_lossy(&payload)
            );
            let view = RecordView {
                key: None,
                payload: Some(&payload),
                headers: &[],
            };
            let print = fingerprint(&profile, 1 << 20, &view).unwrap();
            let first = *prints.entry(record.event).or_insert(print);
            assert_eq!(first, print, "event {}", record.event);
        }
        assert_eq!(prints.len() as u64, workload.events);
    }
}
