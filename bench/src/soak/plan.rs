//! The soak's mixed workload and its oracle: a bank stream (the test kit's
//! `Bank`: redeliveries re-serialized, conflicts, malformed records) and a
//! telemetry stream (the test kit's `Telemetry`: re-sends soon after, and
//! late ones only the filter still knows), generated chunk by chunk so a
//! million records never sit in memory as `Planned` at once.
//!
//! Every record is renamed `b<n>` or `t<n>` (its `x-test-id`), and what the
//! oracle needs of it is kept in a compact [`Expected`]: which event it is
//! a copy of, what kind of copy, the library's hash of it, and a digest of
//! its key and payload (an output must carry them unchanged).

use std::hash::{Hash, Hasher};

use idemgate_testkit::telemetry::Telemetry;
use idemgate_testkit::workload::{Bank, Kind, Planned};

/// The two streams, as indexes into the soak's per-stream tables.
pub(crate) const BANK: usize = 0;
pub(crate) const TELEMETRY: usize = 1;
pub(crate) const STREAMS: [&str; 2] = ["bank", "telemetry"];

/// What one input record must become.
#[derive(Clone, Debug)]
pub(crate) struct Expected {
    pub kind: Kind,
    /// The event it is a copy of (none for a malformed record).
    pub event: Option<u32>,
    /// The library's source hash (raw bytes), or the invalid reason code.
    pub hash: Result<[u8; 32], &'static str>,
    /// Digest of the key and payload, to check outputs keep them.
    pub digest: u64,
    /// One of the late telemetry re-sends, written at the end.
    pub late: bool,
}

/// Digest of a record's key and payload.
pub(crate) fn digest(key: Option<&[u8]>, payload: Option<&[u8]>) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut hasher);
    payload.hash(&mut hasher);
    hasher.finish()
}

/// How the soak's records are made.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub(crate) struct Shape {
    /// Records in all, both streams.
    pub records: u64,
    /// The bank stream's share of them.
    pub bank_share: f64,
    /// Records per chunk the producer writes at a time.
    pub chunk: usize,
    /// Vehicles of the telemetry stream.
    pub vehicles: usize,
    /// Accounts of the bank stream.
    pub accounts: usize,
}

/// Generates the workload one chunk at a time, recording the oracle.
pub(crate) struct Plan {
    shape: Shape,
    bank: Bank,
    telemetry: Telemetry,
    /// By stream: every input so far, indexed by the number in its id.
    pub expected: [Vec<Expected>; 2],
    /// Late telemetry re-sends still to write (held for the last chunks,
    /// once tier 1 has forgotten their originals).
    late_left: usize,
}

impl Plan {
    pub fn new(tag: &str, shape: Shape, seed: u64) -> Plan {
        std::env::set_var("IDEMGATE_TEST_SEED", seed.to_string());
        let mut bank = Bank::new(&format!("{tag}-bank"), shape.accounts);
        bank.conflict_rate = 0.02;
        let telemetry = Telemetry::with_seed(&format!("{tag}-tel"), shape.vehicles, seed ^ 0x5eed);
        let telemetry_records = (shape.records as f64 * (1.0 - shape.bank_share)) as usize;
        Plan {
            shape,
            bank,
            telemetry,
            expected: [Vec::new(), Vec::new()],
            // A twentieth of the telemetry records come back late.
            late_left: telemetry_records / 20,
        }
    }

    pub fn produced(&self) -> u64 {
        (self.expected[BANK].len() + self.expected[TELEMETRY].len()) as u64
    }

    fn wanted(&self, stream: usize) -> u64 {
        let share = match stream {
            BANK => self.shape.bank_share,
            _ => 1.0 - self.shape.bank_share,
        };
        (self.shape.records as f64 * share).round() as u64
    }

    /// Whether only the late re-sends are left to write.
    pub fn only_late_left(&self) -> bool {
        self.expected[BANK].len() as u64 >= self.wanted(BANK)
            && self.expected[TELEMETRY].len() as u64 + self.late_left as u64
                >= self.wanted(TELEMETRY)
    }

    pub fn done(&self) -> bool {
        (0..2).all(|s| self.expected[s].len() as u64 >= self.wanted(s))
    }

    /// The next chunk of each stream (either may be empty), renamed and
    /// recorded; `late` asks for the late telemetry re-sends now.
    pub fn next_chunk(&mut self, late: bool) -> [Vec<Planned>; 2] {
        let chunk = self.shape.chunk.max(100);
        let bank_left = self
            .wanted(BANK)
            .saturating_sub(self.expected[BANK].len() as u64);
        let bank = if bank_left == 0 {
            Vec::new()
        } else {
            // A phase of n new events is about 1.47 n records (copies at
            // 0.35 and 0.10, conflicts at 0.02) plus malformed ones.
            let share = (chunk as f64 * self.shape.bank_share) as u64;
            let n = (share.min(bank_left) as f64 / 1.5).ceil() as usize;
            let late = n / 20;
            let mut records = self.bank.phase(n.max(1), late, n / 100);
            records.truncate(bank_left as usize);
            records
        };
        let tel_left = self
            .wanted(TELEMETRY)
            .saturating_sub(self.expected[TELEMETRY].len() as u64) as usize;
        let regular = tel_left.saturating_sub(self.late_left);
        let mut late_resends = false;
        let telemetry = if regular > 0 {
            let share = ((chunk as f64 * (1.0 - self.shape.bank_share)) as usize).min(regular);
            // A round is a minute of every vehicle, a tenth re-sent soon.
            let minutes = (share as f64 / (self.shape.vehicles as f64 * 1.1)).ceil() as usize;
            let mut records = self.telemetry.round(minutes.max(1), 0.1);
            records.truncate(regular);
            records
        } else if late && tel_left > 0 {
            let count = tel_left.min(chunk);
            self.late_left = tel_left - count;
            late_resends = true;
            self.telemetry.resend_earlier(count)
        } else {
            Vec::new()
        };
        [
            self.record(BANK, bank, false),
            self.record(TELEMETRY, telemetry, late_resends),
        ]
    }

    fn record(&mut self, stream: usize, records: Vec<Planned>, late: bool) -> Vec<Planned> {
        let prefix = if stream == BANK { 'b' } else { 't' };
        records
            .into_iter()
            .map(|mut p| {
                let n = self.expected[stream].len();
                p.id = format!("{prefix}{n}");
                let hash = p.hash.clone().map(|h| {
                    let mut raw = [0u8; 32];
                    hex::decode_to_slice(&h, &mut raw).expect("the library's hex hash");
                    raw
                });
                self.expected[stream].push(Expected {
                    kind: p.kind.clone(),
                    event: p.event.map(|e| e as u32),
                    hash,
                    digest: digest(Some(&p.key), p.payload.as_deref()),
                    late,
                });
                p
            })
            .collect()
    }
}

/// A test id back to (stream, index).
pub(crate) fn parse_id(id: &str) -> Option<(usize, usize)> {
    let stream = match id.as_bytes().first()? {
        b'b' => BANK,
        b't' => TELEMETRY,
        _ => return None,
    };
    Some((stream, id[1..].parse().ok()?))
}
