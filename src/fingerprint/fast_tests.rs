//! The fast path against the reference: same hash, digest and error for
//! every input, valid or not.

use super::*;
use super::{canonical, fast_normalise, fast_scan, normalise};
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

const LIMIT: usize = 1 << 20;

const HEADERS: &[(&str, Option<&[u8]>)] = &[("x-idempotency-key", Some(b"key-1"))];

fn profiles() -> Vec<Profile> {
    let named = |name| Profile::resolve(name, None, None).unwrap();
    let fields = |list| Profile::resolve("fields", Some(list), None).unwrap();
    vec![
        named("payload"),
        named("payload-raw"),
        named("header"),
        named("bank-txn"),
        named("spatial-job"),
        fields("a.b.c:decimal,a.x:round:2,s:upper,t:lower,o:object,n"),
        fields("amount:decimal,ts:timestamp,box:round:3,n:lower"),
        // Nested paths: always the reference's.
        fields("a:object,a.b.c"),
        fields("a.b.c,a"),
    ]
}

/// Asserts fast == reference for one payload under one profile; `true`
/// when the fast path decided.
fn check(profile: &Profile, payload: &[u8]) -> bool {
    let view = RecordView {
        payload: Some(payload),
        headers: HEADERS,
    };
    let reference = fingerprint_reference(profile, LIMIT, &view);
    let quick = fast::fingerprint(profile, LIMIT, &view);
    if let Some(quick) = &quick {
        assert_eq!(
            quick,
            &reference,
            "profile {profile:?}, payload {:?}",
            String::from_utf8_lossy(payload)
        );
    }
    assert_eq!(fingerprint(profile, LIMIT, &view), reference);
    quick.is_some()
}

const KEYS: &[&str] = &[
    "a", "b", "c", "aa", "ab", "A", "Z", "", "é", "z", "x", "s", "t", "o", "n", "a.b", "😀",
    "\u{7f}", "\u{1}",
];

const NUMBERS: &[&str] = &[
    "0",
    "-0",
    "1",
    "-1",
    "1.0",
    "-1.0",
    "100.50",
    "100.5000",
    "1e2",
    "1E2",
    "1e+2",
    "1e-2",
    "1E-7",
    "-0.0",
    "0.0",
    "-0e0",
    "0e-5",
    "0.1",
    "74.500000",
    "-74.500000",
    "123456789012345678",
    "-123456789012345678",
    "1234567890123456789",
    "-1234567890123456789",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "-9223372036854775809",
    "18446744073709551615",
    "18446744073709551616",
    "-18446744073709551616",
    "123456789012345678901234567890",
    "1.7976931348623157e308",
    "1.8e308",
    "1e309",
    "-1e309",
    "2.2250738585072014e-308",
    "5e-324",
    "1e-400",
    "0.30000000000000004",
    "3.141592653589793238462643383279",
    "1.00000000000000000000000000001",
    "12345678901234567890.123",
    "1e0000000000000000000002",
    "0e999999999999999999",
];

fn pick<'a>(rng: &mut StdRng, from: &[&'a str]) -> &'a str {
    from.choose(rng).copied().unwrap_or_default()
}

fn number(rng: &mut StdRng) -> String {
    match rng.gen_range(0..4) {
        0 => pick(rng, NUMBERS).to_owned(),
        1 => format!("{}", rng.gen::<i64>() >> rng.gen_range(0..63)),
        2 => {
            let digits: String = (0..rng.gen_range(1..25))
                .map(|i| {
                    char::from(
                        b'0' + if i == 0 {
                            rng.gen_range(1..10)
                        } else {
                            rng.gen_range(0..10)
                        },
                    )
                })
                .collect();
            let sign = if rng.gen_bool(0.3) { "-" } else { "" };
            format!("{sign}{digits}")
        }
        _ => {
            let sign = if rng.gen_bool(0.3) { "-" } else { "" };
            let whole = if rng.gen_bool(0.3) {
                "0".to_owned()
            } else {
                rng.gen_range(1..100_000u32).to_string()
            };
            let fraction: String = (0..rng.gen_range(0..12))
                .map(|_| char::from(b'0' + rng.gen_range(0..10)))
                .collect();
            let fraction = if fraction.is_empty() {
                String::new()
            } else {
                format!(".{fraction}")
            };
            let exponent = if rng.gen_bool(0.3) {
                format!(
                    "{}{}{}",
                    ["e", "E"][rng.gen_range(0..2)],
                    ["", "+", "-"][rng.gen_range(0..3)],
                    rng.gen_range(0..40)
                )
            } else {
                String::new()
            };
            format!("{sign}{whole}{fraction}{exponent}")
        }
    }
}

/// Text content to be rendered as a JSON string.
fn text(rng: &mut StdRng) -> String {
    const PIECES: &[&str] = &[
        "a", "b", "Z", " ", "/", "\"", "\\", "\n", "\t", "\r", "\u{8}", "\u{c}", "\u{0}", "\u{1f}",
        "\u{7f}", "é", "É", "ß", "😀", "中", "\u{2028}", "ǅ", "Σ", "100.50", "eur", "USD", "-",
    ];
    (0..rng.gen_range(0..8))
        .map(|_| pick(rng, PIECES))
        .collect()
}

/// A JSON string literal for `content`, escapes chosen at random where
/// JSON allows a choice.
fn quote(rng: &mut StdRng, content: &str) -> String {
    let mut out = String::from("\"");
    for ch in content.chars() {
        let free = rng.gen_bool(0.1);
        let short = match ch {
            '"' => Some("\\\""),
            '\\' => Some("\\\\"),
            '\n' => Some("\\n"),
            '\t' => Some("\\t"),
            '\r' => Some("\\r"),
            '\u{8}' => Some("\\b"),
            '\u{c}' => Some("\\f"),
            '/' if free => Some("\\/"),
            _ => None,
        };
        let must = (ch as u32) < 0x20 || ch == '"' || ch == '\\';
        if let (Some(short), false) = (short, rng.gen_bool(0.2)) {
            out.push_str(short);
        } else if must || free {
            let mut units = [0u16; 2];
            for unit in ch.encode_utf16(&mut units) {
                if rng.gen_bool(0.5) {
                    out.push_str(&format!("\\u{unit:04x}"));
                } else {
                    out.push_str(&format!("\\u{unit:04X}"));
                }
            }
        } else {
            out.push(ch);
        }
    }
    out.push('"');
    out
}

fn ws(rng: &mut StdRng) -> &'static str {
    if rng.gen_bool(0.7) {
        ""
    } else {
        pick(rng, &[" ", "\n", "\t", "\r", " \r\n\t ", "  "])
    }
}

fn value(rng: &mut StdRng, depth: u32) -> String {
    let top = if depth >= 4 { 5 } else { 7 };
    match rng.gen_range(0..top) {
        0 => pick(rng, &["null", "true", "false"]).to_owned(),
        1 | 2 => number(rng),
        3 | 4 => {
            let content = text(rng);
            quote(rng, &content)
        }
        5 => {
            let items: Vec<String> = (0..rng.gen_range(0..5))
                .map(|_| format!("{}{}{}", ws(rng), value(rng, depth + 1), ws(rng)))
                .collect();
            format!("[{}]", items.join(","))
        }
        _ => {
            let pairs: Vec<(String, String)> = (0..rng.gen_range(0..6))
                .map(|_| (pick(rng, KEYS).to_owned(), value(rng, depth + 1)))
                .collect();
            object(rng, pairs)
        }
    }
}

/// An object of these pairs, in a random order, sometimes with one key
/// given twice.
fn object(rng: &mut StdRng, mut pairs: Vec<(String, String)>) -> String {
    if !pairs.is_empty() && rng.gen_bool(0.2) {
        let again = pairs[rng.gen_range(0..pairs.len())].0.clone();
        let other = value(rng, 4);
        pairs.push((again, other));
    }
    pairs.shuffle(rng);
    let body: Vec<String> = pairs
        .iter()
        .map(|(k, v)| {
            let key = quote(rng, k);
            format!("{}{key}{}:{}{v}{}", ws(rng), ws(rng), ws(rng), ws(rng))
        })
        .collect();
    format!("{{{}}}", body.join(","))
}

fn timestamp(rng: &mut StdRng) -> String {
    let offset = pick(
        rng,
        &[
            "Z", "z", "+02:00", "-05:00", "+05:30", "+00:00", "+24:00", "",
        ],
    );
    let fraction = match rng.gen_range(0..4) {
        0 => String::new(),
        1 => format!(".{:03}", rng.gen_range(0..1000)),
        2 => format!(".{:09}", rng.gen_range(0..1_000_000_000u32)),
        _ => ".1".to_owned(),
    };
    let sep = if rng.gen_bool(0.9) { "T" } else { "t" };
    format!(
        "{}-{:02}-{:02}{sep}{:02}:{:02}:{:02}{fraction}{offset}",
        rng.gen_range(1990..2030),
        rng.gen_range(1..=12),
        rng.gen_range(1..=31),
        rng.gen_range(0..25),
        rng.gen_range(0..60),
        rng.gen_range(0..61),
    )
}

fn amount(rng: &mut StdRng) -> String {
    let cents: u64 = rng.gen_range(0..10_000_000);
    let plain = format!("{}.{:02}", cents / 100, cents % 100);
    match rng.gen_range(0..7) {
        0 => format!("\"{plain}\""),
        1 => format!("\"{plain}00\""),
        2 => plain,
        3 => format!("{}", cents / 100),
        4 => format!("\"-{plain}\""),
        5 => number(rng),
        _ => {
            let n = number(rng);
            format!("\"{n}\"")
        }
    }
}

/// A bank transaction as testkit's feed and the claims bench write them,
/// with the variations a real feed (and a broken one) has.
fn bank_txn(rng: &mut StdRng) -> String {
    let i: u32 = rng.gen();
    let currency = pick(rng, &["EUR", "eur", "Usd", "gbp", "CHF", "eür", "ß"]);
    let mut pairs = vec![
        (
            "account_id".to_owned(),
            quote(rng, &format!("ACC-{:08}", i % 50_000)),
        ),
        (
            "bank_txn_id".to_owned(),
            quote(rng, &format!("BTX-2024-{i:010}")),
        ),
        ("amount".to_owned(), amount(rng)),
        ("currency".to_owned(), quote(rng, currency)),
        ("posted_at".to_owned(), {
            let at = timestamp(rng);
            quote(rng, &at)
        }),
        ("memo".to_owned(), {
            let memo = text(rng);
            quote(rng, &memo)
        }),
        ("channel".to_owned(), {
            let channel = pick(rng, &["card", "sepa", "swift"]);
            quote(rng, channel)
        }),
    ];
    // Sometimes a field is missing, null or of another type.
    if rng.gen_bool(0.1) {
        let at = rng.gen_range(0..pairs.len());
        match rng.gen_range(0..3) {
            0 => {
                pairs.remove(at);
            }
            1 => pairs[at].1 = "null".to_owned(),
            _ => pairs[at].1 = value(rng, 3),
        }
    }
    object(rng, pairs)
}

fn spatial_job(rng: &mut StdRng) -> String {
    let x: f64 = rng.gen_range(-180.0..179.0);
    let y: f64 = rng.gen_range(-85.0..84.0);
    let bbox = match rng.gen_range(0..5) {
        0 => format!("[{x},{y},{},{}]", x + 0.5, y + 0.25),
        1 => format!("[{x:.9}, {y:.9}, {:.3}, {}]", x + 0.1, number(rng)),
        2 => number(rng),
        3 => value(rng, 2),
        _ => format!("[{x:.12},{y:.1}]"),
    };
    let params = match rng.gen_range(0..3) {
        0 => format!(
            "{{\"resolution\":{},\"bands\":[\"B04\",\"B08\"],\"index\":\"ndvi\",\"run\":{}}}",
            number(rng),
            rng.gen::<u32>()
        ),
        1 => value(rng, 1),
        _ => {
            let pairs = (0..rng.gen_range(0..5))
                .map(|_| (pick(rng, KEYS).to_owned(), value(rng, 2)))
                .collect();
            object(rng, pairs)
        }
    };
    let pairs = vec![
        ("job_id".to_owned(), {
            let id = format!("job-{:09}", rng.gen::<u32>());
            quote(rng, &id)
        }),
        ("bbox".to_owned(), bbox),
        ("crs".to_owned(), {
            let crs = pick(rng, &["epsg:4326", "EPSG:3857", "épsg:1"]);
            quote(rng, crs)
        }),
        ("params".to_owned(), params),
    ];
    object(rng, pairs)
}

/// An object carrying the `fields` profiles' paths (a.b.c, a.x, s, t, o,
/// n, amount, ts, box, a.b) with fitting values, mostly.
fn fielded(rng: &mut StdRng) -> String {
    let scalar_or_any = |rng: &mut StdRng, good: String| {
        if rng.gen_bool(0.9) {
            good
        } else {
            value(rng, 3)
        }
    };
    let c = amount(rng);
    let c = scalar_or_any(rng, c);
    let inner_b = if rng.gen_bool(0.9) {
        object(rng, vec![("c".to_owned(), c)])
    } else {
        let t = text(rng);
        quote(rng, &t)
    };
    let x = if rng.gen_bool(0.5) {
        number(rng)
    } else {
        let items: Vec<String> = (0..rng.gen_range(0..4)).map(|_| number(rng)).collect();
        format!("[{}]", items.join(","))
    };
    let x = scalar_or_any(rng, x);
    let mut a_pairs = vec![("b".to_owned(), inner_b), ("x".to_owned(), x)];
    if rng.gen_bool(0.3) {
        a_pairs.push(("y".to_owned(), value(rng, 2)));
    }
    let a = object(rng, a_pairs);
    let mut pairs = vec![("a".to_owned(), a)];
    for key in ["s", "t", "n"] {
        let t = text(rng);
        let t = quote(rng, &t);
        pairs.push((key.to_owned(), scalar_or_any(rng, t)));
    }
    pairs.push(("o".to_owned(), value(rng, 1)));
    pairs.push(("amount".to_owned(), amount(rng)));
    let ts = timestamp(rng);
    let ts = quote(rng, &ts);
    pairs.push(("ts".to_owned(), scalar_or_any(rng, ts)));
    let items: Vec<String> = (0..rng.gen_range(0..5)).map(|_| number(rng)).collect();
    pairs.push(("box".to_owned(), format!("[{}]", items.join(","))));
    for _ in 0..rng.gen_range(0..3) {
        pairs.push((pick(rng, KEYS).to_owned(), value(rng, 2)));
    }
    if rng.gen_bool(0.1) {
        pairs.remove(rng.gen_range(0..pairs.len()));
    }
    object(rng, pairs)
}

/// Random damage: bytes inserted, replaced or removed, from a set that
/// hits the grammar's edges.
fn mutate(rng: &mut StdRng, text: &mut Vec<u8>) {
    const BYTES: &[u8] = &[
        0x00, 0x01, 0x0c, 0x1f, b' ', b'"', b'\\', b'/', b'{', b'}', b'[', b']', b',', b':', b'.',
        b'-', b'+', b'e', b'E', b'0', b'1', b'9', b'u', b'n', b'x', 0x7f, 0x80, 0xbf, 0xc3, 0xa9,
        0xed, 0xa0, 0xf0, 0x9f, 0xff, 0xfe,
    ];
    for _ in 0..rng.gen_range(1..4) {
        let at = rng.gen_range(0..=text.len());
        let byte = BYTES[rng.gen_range(0..BYTES.len())];
        match rng.gen_range(0..4) {
            0 => text.insert(at, byte),
            1 if at < text.len() => text[at] = byte,
            2 if at < text.len() => {
                text.remove(at);
            }
            _ => {
                let snippet = pick(
                    rng,
                    &[
                        "\\u", "\\ud83d", "\\ude00", "\\u00", "\\", "\"", "1e", "-", "{}", "[",
                        "\u{a0}",
                    ],
                );
                let at = at.min(text.len());
                text.splice(at..at, snippet.bytes());
            }
        }
    }
}

/// One generated payload: which generator, and whether it is damaged.
fn payload(seed: u64) -> (Vec<u8>, bool) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut text = match rng.gen_range(0..5) {
        0 => value(&mut rng, 0),
        1 => bank_txn(&mut rng),
        2 => spatial_job(&mut rng),
        _ => fielded(&mut rng),
    }
    .into_bytes();
    let damaged = rng.gen_bool(0.3);
    if damaged {
        mutate(&mut rng, &mut text);
    }
    let mut framed = ws(&mut rng).as_bytes().to_vec();
    framed.extend_from_slice(&text);
    framed.extend_from_slice(ws(&mut rng).as_bytes());
    (framed, damaged)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn fast_path_matches_the_reference(seed in any::<u64>()) {
        let (payload, damaged) = payload(seed);
        let profiles = profiles();
        let decided = check(&profiles[0], &payload);
        // JSON the generator meant to be valid (some numbers are out of
        // range) is taken by the fast path, under `payload` at least.
        if !damaged && serde_json::from_slice::<Value>(&payload).is_ok() {
            prop_assert!(decided, "{}", String::from_utf8_lossy(&payload));
        }
        for profile in &profiles[1..] {
            check(profile, &payload);
        }
    }

    #[test]
    fn fast_path_matches_the_reference_on_arbitrary_bytes(
        payload in proptest::collection::vec(any::<u8>(), 0..64)
    ) {
        for profile in &profiles() {
            check(profile, &payload);
        }
    }
}

/// How often each profile's generated, undamaged records take the fast
/// path: the generators must exercise it, not just the fallback.
#[test]
fn generated_records_mostly_take_the_fast_path() {
    let profiles = profiles();
    let mut rng = StdRng::seed_from_u64(7);
    let cases: [(usize, fn(&mut StdRng) -> String); 4] =
        [(3, bank_txn), (4, spatial_job), (5, fielded), (6, fielded)];
    for (profile, make) in cases {
        let decided = (0..500)
            .filter(|_| check(&profiles[profile], make(&mut rng).as_bytes()))
            .count();
        eprintln!("{profile}: {decided} of 500 on the fast path");
        assert!(
            decided > 100,
            "{:?}: only {decided} of 500 on the fast path",
            profiles[profile]
        );
    }
}

#[test]
fn feed_records_take_the_fast_path() {
    let profile = Profile::resolve("bank-txn", None, None).unwrap();
    let workload = idemgate_testkit::feed::Workload::generate(300, 0.3, 1000.0, 1_700_000_000_000);
    let mut count = 0;
    for planned in workload.records.iter() {
        let (_, payload) = workload.render(planned);
        assert!(
            check(&profile, &payload),
            "{}",
            String::from_utf8_lossy(&payload)
        );
        assert!(check(&Profile::Payload { raw: false }, &payload));
        count += 1;
    }
    assert!(count > 0);
}

#[test]
fn nesting_around_the_depth_limits_matches() {
    for depth in [1, 99, 100, 101, 126, 127, 128, 129, 200] {
        for (open, close) in [("[", "]"), ("{\"a\":", "}")] {
            let text = format!("{}1{}", open.repeat(depth), close.repeat(depth));
            for profile in &profiles() {
                check(profile, text.as_bytes());
            }
        }
    }
}

#[test]
fn edge_cases_match() {
    let cases: &[&[u8]] = &[
        b"",
        b" ",
        b"{}",
        b"[]",
        b"null",
        b"-0",
        b"-",
        b"01",
        b"1.",
        b".5",
        b"1e",
        b"+1",
        b"\"\\ud83d\\ude00\"",
        b"\"\\ud83d\"",
        b"\"\\ude00\"",
        b"\"\\ud83d\\u0041\"",
        b"\"\\u00e9\\/\\n\"",
        b"\"\xc3\xa9\"",
        b"\"\xc3\"",
        b"\"\xed\xa0\x80\"",
        b"\"a\x01\"",
        b"\"a\x7f\"",
        b"{\"a\":1,\"a\":2}",
        b"{\"a\":1,\"\\u0061\":2}",
        b"{\"b\":1,\"a\":{\"y\":1,\"x\":[1,2,{\"k\":\"v\"}]}}",
        b"{\"a\":1,}",
        b"[1,]",
        b"{\"a\" 1}",
        b"[1 2]",
        b"\xef\xbb\xbf{}",
        b"{}x",
        b"{} ",
        b"\x0c{}",
        b"{\"s\":\"x\",\"t\":\"Y\",\"n\":\"z\",\"o\":{},\"a\":{\"b\":{\"c\":\"1.50\"},\"x\":1.005}}",
        b"{\"s\":\"\xc3\x9f\",\"t\":\"\xce\xa3A\",\"n\":\"z\",\"o\":[],\"a\":{\"b\":{\"c\":1e2},\"x\":[1.005,2]}}",
        b"{\"account_id\":\"A\",\"bank_txn_id\":\"B\",\"amount\":\"100.50\",\"currency\":\"eur\",\"posted_at\":\"2024-01-01T00:00:00+02:00\"}",
        b"{\"account_id\":\"A\",\"bank_txn_id\":\"B\",\"amount\":100.50,\"currency\":\"eur\",\"posted_at\":\"2024-01-01T00:00:00Z\",\"amount\":\"7\"}",
        b"{\"account_id\":\"A\",\"bank_txn_id\":\"B\",\"amount\":1e40,\"currency\":\"eur\",\"posted_at\":\"2024-01-01T00:00:00Z\"}",
    ];
    for payload in cases {
        for profile in &profiles() {
            check(profile, payload);
        }
    }
    // Tombstones and the size limit.
    for profile in &profiles() {
        let view = RecordView {
            payload: None,
            headers: HEADERS,
        };
        assert_eq!(
            fingerprint(profile, LIMIT, &view),
            fingerprint_reference(profile, LIMIT, &view)
        );
        let view = RecordView {
            payload: Some(b"{\"a\":1}"),
            headers: HEADERS,
        };
        assert_eq!(
            fingerprint(profile, 3, &view),
            fingerprint_reference(profile, 3, &view)
        );
    }
}

/// A decimal-ish text: leading zeros, long digit strings, exponents,
/// and the odd malformed one.
fn decimal_text(rng: &mut StdRng) -> String {
    let digits = |rng: &mut StdRng, n: usize| -> String {
        (0..n)
            .map(|_| {
                char::from(
                    b'0' + if rng.gen_bool(0.3) {
                        0
                    } else {
                        rng.gen_range(0..10)
                    },
                )
            })
            .collect()
    };
    match rng.gen_range(0..6) {
        0 => number(rng),
        1 => {
            // serde_json's own text of a number, as `round` and `decimal`
            // read it.
            let parsed: Option<serde_json::Number> = serde_json::from_str(&number(rng)).ok();
            parsed.map_or_else(|| "1".to_owned(), |n| n.to_string())
        }
        2 => serde_json::Number::from_f64(rng.gen::<f64>() * 10f64.powi(rng.gen_range(-12..12)))
            .map_or_else(|| "0".to_owned(), |n| n.to_string()),
        _ => {
            let sign = pick(rng, &["", "", "-", "+", "--"]);
            let whole_len = rng.gen_range(0..32);
            let whole = digits(rng, whole_len);
            let fraction = if rng.gen_bool(0.6) {
                let n = rng.gen_range(0..32);
                format!(".{}", digits(rng, n))
            } else {
                String::new()
            };
            let exponent = if rng.gen_bool(0.3) {
                format!(
                    "{}{}{}",
                    pick(rng, &["e", "E"]),
                    pick(rng, &["", "+", "-"]),
                    rng.gen_range(0..60)
                )
            } else {
                String::new()
            };
            format!("{sign}{whole}{fraction}{exponent}")
        }
    }
}

fn reference_normalised(normaliser: &Normaliser, value: &Value) -> Option<String> {
    normalise::normalise("f", normaliser, value)
        .ok()
        .map(|v| canonical::to_canonical(&v))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20000))]

    #[test]
    fn quick_normalisers_match_normalise(seed in any::<u64>()) {
        let mut rng = StdRng::seed_from_u64(seed);
        let text = decimal_text(&mut rng);
        let mut out = Vec::new();
        if fast_normalise::decimal(&mut out, text.as_bytes()).is_some() {
            let expected = reference_normalised(&Normaliser::Decimal, &Value::String(text.clone()));
            prop_assert_eq!(Some(String::from_utf8(out.clone()).unwrap()), expected, "decimal {}", text);
        }
        if let Ok(number) = serde_json::from_str::<serde_json::Number>(&text) {
            let places = if rng.gen_bool(0.2) { 28 } else { rng.gen_range(0..12) };
            let shown = number.to_string();
            out.clear();
            if fast_normalise::round(&mut out, shown.as_bytes(), places).is_some() {
                let expected =
                    reference_normalised(&Normaliser::Round(places), &Value::Number(number));
                prop_assert_eq!(Some(String::from_utf8(out.clone()).unwrap()), expected, "round:{} {}", places, shown);
            }
        }
        let at = timestamp(&mut rng);
        out.clear();
        if fast_normalise::timestamp(&mut out, at.as_bytes()).is_some() {
            let expected = reference_normalised(&Normaliser::Timestamp, &Value::String(at.clone()));
            prop_assert_eq!(Some(String::from_utf8(out).unwrap()), expected, "timestamp {}", at);
        }
    }
}

#[test]
fn quick_normalisers_take_the_common_shapes() {
    let mut out = Vec::new();
    for (text, places, want) in [
        ("100.50", 2, "\"100.5\""),
        ("-74.5000005", 6, "\"-74.500001\""),
        ("0.0000004", 6, "\"0\""),
        ("-0.0000005", 6, "\"-0.000001\""),
        ("9.9999995", 6, "\"10\""),
        ("1.8446744073709552e19", 3, "\"18446744073709552000\""),
    ] {
        out.clear();
        fast_normalise::round(&mut out, text.as_bytes(), places).unwrap();
        assert_eq!(String::from_utf8(out.clone()).unwrap(), want, "{text}");
    }
    for at in [
        "2024-02-29T23:30:00.5-01:00",
        "1999-12-31T23:59:59Z",
        "2000-01-01T00:10:00+05:30",
    ] {
        out.clear();
        fast_normalise::timestamp(&mut out, at.as_bytes()).unwrap();
        assert_eq!(
            Some(String::from_utf8(out.clone()).unwrap()),
            reference_normalised(&Normaliser::Timestamp, &Value::String(at.into()))
        );
    }
}

proptest! {
    #[test]
    fn word_scan_flags_exactly_the_special_bytes(
        mut bytes in proptest::array::uniform8(any::<u8>()),
        plain in proptest::array::uniform8(0x20u8..0x80),
        mask in any::<u8>(),
    ) {
        // Mostly plain ASCII, some bytes from anywhere.
        for (i, b) in bytes.iter_mut().enumerate() {
            if mask & (1 << i) == 0 {
                *b = plain[i];
            }
        }
        let expected = bytes
            .iter()
            .any(|&b| b == b'"' || b == b'\\' || b < 0x20 || b >= 0x80);
        prop_assert_eq!(fast_scan::special(u64::from_le_bytes(bytes)), expected);
    }
}
