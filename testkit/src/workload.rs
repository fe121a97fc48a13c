//! The bank-transaction workload: distinct events, redeliveries of them
//! re-serialized (other key order, whitespace, `"100.5"` for `"100.50"`,
//! `"eur"` for `"EUR"`, the same instant in another offset), reuses of a
//! transaction id with a different payload, and malformed records.
//!
//! What each record must become is not taken from the gateway: every
//! planned record is fingerprinted here with the library's own pure
//! `fingerprint`, and the plan is refused if a redelivery does not hash like
//! its original, so the oracle is the documented canonical form.

use idemgate::fingerprint::{fingerprint, Profile, RecordView};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use time::macros::{format_description, offset};
use time::OffsetDateTime;

/// What a planned input is, and so which decision it must get.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The first copy of an event: the one that must reach the clean topic.
    Original,
    /// A redelivery of the event, spelled differently: a `duplicate`.
    Copy,
    /// The same transaction with another payload (an added memo): a
    /// `conflict`.
    Conflict,
    /// No hash can be computed: `invalid`.
    Malformed,
}

/// One record of the workload.
#[derive(Clone, Debug)]
pub struct Planned {
    /// The `x-test-id` header: maps every output back to this input.
    pub id: String,
    /// The account (copies of an event share it, hence a partition), or a
    /// delivery key of its own (see `Bank::copies_share_key`).
    pub key: Vec<u8>,
    /// `None` is a tombstone.
    pub payload: Option<Vec<u8>>,
    /// Index of the event (for all but malformed records).
    pub event: Option<usize>,
    pub kind: Kind,
    /// The library's verdict: hex source hash, or the invalid reason code.
    pub hash: Result<String, &'static str>,
    /// An explicit partition; by key otherwise.
    pub partition: Option<i32>,
    /// Headers besides `x-test-id` (an idempotency key, say).
    pub headers: Vec<(String, Vec<u8>)>,
}

impl Planned {
    /// A record written by hand (a poison record, a header-keyed job):
    /// `hash` is what the test expects the gateway to find.
    pub fn custom(
        id: impl Into<String>,
        key: &[u8],
        payload: Option<&[u8]>,
        kind: Kind,
        hash: Result<String, &'static str>,
    ) -> Planned {
        Planned {
            id: id.into(),
            key: key.to_vec(),
            payload: payload.map(<[u8]>::to_vec),
            event: None,
            kind,
            hash,
            partition: None,
            headers: Vec::new(),
        }
    }
}

impl Planned {
    /// The same record written with Kafka record timestamp `at` (ms since
    /// the epoch) instead of the producer's clock: carried as the
    /// [`crate::kafka::TIMESTAMP`] header, which the test kit's producer
    /// turns into the timestamp and does not send.
    pub fn stamped(mut self, at: i64) -> Planned {
        self.headers.retain(|(k, _)| k != crate::kafka::TIMESTAMP);
        self.headers
            .push((crate::kafka::TIMESTAMP.into(), at.to_string().into_bytes()));
        self
    }

    /// The record timestamp `stamped` gave it, if any.
    pub fn timestamp(&self) -> Option<i64> {
        self.headers
            .iter()
            .find(|(k, _)| k == crate::kafka::TIMESTAMP)
            .and_then(|(_, v)| std::str::from_utf8(v).ok()?.parse().ok())
    }
}

struct Event {
    account: String,
    txn: String,
    cents: u64,
    posted: i64,
}

/// How a redelivery spells an event.
#[derive(Clone, Copy, Default)]
struct Style {
    order: usize,
    pretty: bool,
    amount: u8,
    lower_currency: bool,
    other_offset: bool,
    memo: bool,
}

const ORDERS: [[usize; 5]; 4] = [
    [0, 1, 2, 3, 4],
    [4, 3, 2, 1, 0],
    [2, 0, 4, 1, 3],
    [1, 4, 0, 3, 2],
];

/// Generates the workload in phases; later phases may redeliver events of
/// earlier ones.
pub struct Bank {
    tag: String,
    rng: StdRng,
    events: Vec<Event>,
    next_id: u64,
    accounts: usize,
    profile: Profile,
    /// Chance that an event gets one redelivery, and a second one.
    pub copy_rate: (f64, f64),
    /// Chance that an event's transaction id is reused with a new payload.
    pub conflict_rate: f64,
    /// Redeliveries keyed by account like their original (so in its
    /// partition, the default), or each by a key of its own (a sender that
    /// keys by delivery attempt), so copies of one event land anywhere.
    pub copies_share_key: bool,
    /// How far behind its original a redelivery may come, in tenths of a
    /// record: 300 (the default) keeps copies within about 30 records, in
    /// the same batch or the next; larger spreads them over the phase.
    pub copy_spread: u64,
}

impl Bank {
    /// `tag` keeps transaction ids apart between tests (each test has its
    /// own key prefix anyway); the seed is printed so a failure replays
    /// (`IDEMGATE_TEST_SEED=<seed>` gives it back).
    pub fn new(tag: &str, accounts: usize) -> Bank {
        let seed = std::env::var("IDEMGATE_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(rand::random::<u64>);
        println!("[{tag}] workload seed {seed}");
        Bank {
            tag: tag.to_string(),
            rng: StdRng::seed_from_u64(seed),
            events: Vec::new(),
            next_id: 0,
            accounts,
            profile: Profile::resolve("bank-txn", None, None).expect("bank-txn preset"),
            copy_rate: (0.35, 0.10),
            conflict_rate: 0.0,
            copies_share_key: true,
            copy_spread: 300,
        }
    }

    pub fn events(&self) -> usize {
        self.events.len()
    }

    /// One phase: `new_events` new events with their redeliveries and
    /// conflicts spread after them, `late_copies` redeliveries of events of
    /// earlier phases, and `malformed` invalid records, interleaved.
    pub fn phase(
        &mut self,
        new_events: usize,
        late_copies: usize,
        malformed: usize,
    ) -> Vec<Planned> {
        let earlier = self.events.len();
        let mut slots: Vec<(u64, Planned)> = Vec::new();
        let span = (new_events as u64).max(1) * 10;
        for _ in 0..if earlier > 0 { late_copies } else { 0 } {
            let event = self.rng.gen_range(0..earlier);
            let at = self.rng.gen_range(0..span + 10);
            let record = self.copy(event, false);
            slots.push((at, record));
        }
        for n in 0..new_events {
            let event = self.new_event();
            let at = n as u64 * 10;
            let record = self.record(event, Kind::Original, Style::default());
            slots.push((at, record));
            let (one, two) = self.copy_rate;
            let copies = usize::from(self.rng.gen_bool(one)) + usize::from(self.rng.gen_bool(two));
            for _ in 0..copies {
                let later = at + self.rng.gen_range(1..=self.copy_spread.max(1));
                let record = self.copy(event, false);
                slots.push((later, record));
            }
            if self.rng.gen_bool(self.conflict_rate) {
                let later = at + self.rng.gen_range(1..=self.copy_spread.max(1));
                let record = self.copy(event, true);
                slots.push((later, record));
            }
        }
        for _ in 0..malformed {
            let at = self.rng.gen_range(0..span + 10);
            let record = self.malformed();
            slots.push((at, record));
        }
        // Stable: an original keeps its place before its later copies.
        slots.sort_by_key(|(at, _)| *at);
        slots.into_iter().map(|(_, record)| record).collect()
    }

    fn new_event(&mut self) -> usize {
        let index = self.events.len();
        let account = format!("acct-{:03}", self.rng.gen_range(0..self.accounts));
        self.events.push(Event {
            account,
            txn: format!("{}-txn-{index:06}", self.tag),
            cents: self.rng.gen_range(1..2_000_000),
            // 2024-03-01T00:00:00Z and on, a minute apart.
            posted: 1_709_251_200 + index as i64 * 60 + self.rng.gen_range(0..60),
        });
        index
    }

    /// A redelivery of event `event` (an index below [`Bank::events`]),
    /// spelled as `phase` spells them: a `duplicate` of it.
    pub fn redelivery(&mut self, event: usize) -> Planned {
        self.copy(event, false)
    }

    /// A record no hash can be computed for: `invalid`, finished at once.
    pub fn malformed_record(&mut self) -> Planned {
        self.malformed()
    }

    fn copy(&mut self, event: usize, memo: bool) -> Planned {
        let original = render(&self.events[event], Style::default());
        let mut style = Style {
            order: self.rng.gen_range(0..ORDERS.len()),
            pretty: self.rng.gen_bool(0.5),
            amount: self.rng.gen_range(1..=3),
            lower_currency: self.rng.gen_bool(0.5),
            other_offset: self.rng.gen_bool(0.5),
            memo,
        };
        if render(&self.events[event], style) == original {
            style.pretty = true;
        }
        let kind = if memo { Kind::Conflict } else { Kind::Copy };
        self.record(event, kind, style)
    }

    fn record(&mut self, event: usize, kind: Kind, style: Style) -> Planned {
        let payload = render(&self.events[event], style).into_bytes();
        let key = if kind == Kind::Original || self.copies_share_key {
            self.events[event].account.clone().into_bytes()
        } else {
            format!("delivery-{:08x}", self.rng.gen::<u32>()).into_bytes()
        };
        let planned = self.planned(key, Some(payload), Some(event), kind);
        if kind_has_hash(&planned.kind) {
            let hash = planned.hash.clone().unwrap_or_else(|code| {
                panic!(
                    "workload: {} of event {event} is invalid ({code})",
                    planned.id
                )
            });
            let original = self.planned_hash(&render(&self.events[event], Style::default()));
            assert_eq!(
                Ok(hash),
                original,
                "workload: a redelivery hashes unlike its original; fingerprint bug?\n{}",
                String::from_utf8_lossy(planned.payload.as_deref().unwrap_or_default())
            );
        }
        planned
    }

    fn malformed(&mut self) -> Planned {
        let account = format!("acct-{:03}", self.rng.gen_range(0..self.accounts));
        let payload: Option<&str> = match self.rng.gen_range(0..5) {
            0 => Some("{\"account_id\": \"acct-001\", \"amount\": oops"),
            1 => Some(
                "{\"account_id\":\"acct-001\",\"bank_txn_id\":\"x\",\"currency\":\"EUR\",\"posted_at\":\"2024-03-01T00:00:00Z\"}",
            ),
            2 => Some(
                "{\"account_id\":\"acct-001\",\"bank_txn_id\":\"x\",\"amount\":\"12,50\",\"currency\":\"EUR\",\"posted_at\":\"2024-03-01T00:00:00Z\"}",
            ),
            3 => Some("[1, 2, 3]"),
            _ => None,
        };
        let planned = self.planned(
            account.into_bytes(),
            payload.map(|p| p.as_bytes().to_vec()),
            None,
            Kind::Malformed,
        );
        assert!(
            planned.hash.is_err(),
            "workload: malformed {} has a hash",
            planned.id
        );
        planned
    }

    fn planned(
        &mut self,
        key: Vec<u8>,
        payload: Option<Vec<u8>>,
        event: Option<usize>,
        kind: Kind,
    ) -> Planned {
        self.next_id += 1;
        let view = RecordView {
            key: Some(&key),
            payload: payload.as_deref(),
            headers: &[],
        };
        let hash = fingerprint(&self.profile, 1 << 20, &view)
            .map(|print| print.hash.to_string())
            .map_err(|invalid| invalid.code());
        Planned {
            id: format!("{}-{}", self.tag, self.next_id),
            key,
            payload,
            event,
            kind,
            hash,
            partition: None,
            headers: Vec::new(),
        }
    }

    fn planned_hash(&self, payload: &str) -> Result<String, &'static str> {
        let view = RecordView {
            key: None,
            payload: Some(payload.as_bytes()),
            headers: &[],
        };
        fingerprint(&self.profile, 1 << 20, &view)
            .map(|print| print.hash.to_string())
            .map_err(|invalid| invalid.code())
    }
}

fn kind_has_hash(kind: &Kind) -> bool {
    matches!(kind, Kind::Original | Kind::Copy | Kind::Conflict)
}

/// The event as JSON, spelled by `style`; the default style is the
/// original's.
fn render(event: &Event, style: Style) -> String {
    let (whole, cents) = (event.cents / 100, event.cents % 100);
    let amount = match style.amount {
        // "100.50"
        0 => format!("\"{whole}.{cents:02}\""),
        // "100.5": trailing zeros dropped
        1 => format!("\"{}\"", trimmed(whole, cents)),
        // "100.5000"
        2 => format!("\"{whole}.{cents:02}00\""),
        // 100.5: a JSON number
        _ => trimmed(whole, cents),
    };
    let currency = if style.lower_currency { "eur" } else { "EUR" };
    let at = OffsetDateTime::from_unix_timestamp(event.posted).expect("timestamp");
    let posted = if style.other_offset {
        at.to_offset(offset!(+1))
            .format(format_description!(
                "[year]-[month]-[day]T[hour]:[minute]:[second]+[offset_hour]:[offset_minute]"
            ))
            .expect("format")
    } else {
        at.format(format_description!(
            "[year]-[month]-[day]T[hour]:[minute]:[second]Z"
        ))
        .expect("format")
    };
    let fields = [
        format!("\"account_id\":\"{}\"", event.account),
        format!("\"bank_txn_id\":\"{}\"", event.txn),
        format!("\"amount\":{amount}"),
        format!("\"currency\":\"{currency}\""),
        format!("\"posted_at\":\"{posted}\""),
    ];
    let mut ordered: Vec<String> = ORDERS[style.order]
        .iter()
        .map(|&i| fields[i].clone())
        .collect();
    if style.memo {
        ordered.push("\"memo\":\"resubmitted with another note\"".into());
    }
    if style.pretty {
        let body = ordered
            .iter()
            .map(|f| format!("  {}", f.replacen("\":", "\": ", 1)))
            .collect::<Vec<_>>()
            .join(",\n");
        format!("{{\n{body}\n}}")
    } else {
        format!("{{{}}}", ordered.join(","))
    }
}

fn trimmed(whole: u64, cents: u64) -> String {
    match cents {
        0 => whole.to_string(),
        c if c % 10 == 0 => format!("{whole}.{}", c / 10),
        c => format!("{whole}.{c:02}"),
    }
}
