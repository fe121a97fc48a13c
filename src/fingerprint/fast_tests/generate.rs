//! Payload generators for the fast-path tests: JSON as real feeds and
//! broken ones write it (random key order, escapes, whitespace, numbers of
//! every shape), and the damage a byte stream can take.

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

pub(super) const KEYS: &[&str] = &[
    "a", "b", "c", "aa", "ab", "A", "Z", "", "é", "z", "x", "s", "t", "o", "n", "a.b", "😀",
    "\u{7f}", "\u{1}",
];

pub(super) const NUMBERS: &[&str] = &[
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
    // Numbers serde_json reads inexactly (long, or a step off).
    "1.000000000000000001",
    "1.000000000000000002",
    "-18446744073709551617",
    "0.12345649999999999999",
    "40.71277500000000145519152283668518066406",
    "1.23456789012345678901234567890",
    "1234567.89012345678901234567891",
    "1e-30",
    "140130e93",
    "-2.5e-400",
    "1e-99999999999999999999",
    "12.5E-0000000000000000000000000007",
];

pub(super) fn pick<'a>(rng: &mut StdRng, from: &[&'a str]) -> &'a str {
    from.choose(rng).copied().unwrap_or_default()
}

pub(super) fn number(rng: &mut StdRng) -> String {
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
            } else if rng.gen_bool(0.2) {
                // Past what an f64 or a u64 holds.
                let tail: String = (0..rng.gen_range(15..30))
                    .map(|_| char::from(b'0' + rng.gen_range(0..10)))
                    .collect();
                format!("{}{tail}", rng.gen_range(1..10))
            } else {
                rng.gen_range(1..100_000u32).to_string()
            };
            let long = rng.gen_bool(0.25);
            let fraction: String = (0..rng.gen_range(0..if long { 40 } else { 12 }))
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
pub(super) fn text(rng: &mut StdRng) -> String {
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
pub(super) fn quote(rng: &mut StdRng, content: &str) -> String {
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

pub(super) fn ws(rng: &mut StdRng) -> &'static str {
    if rng.gen_bool(0.7) {
        ""
    } else {
        pick(rng, &[" ", "\n", "\t", "\r", " \r\n\t ", "  "])
    }
}

pub(super) fn value(rng: &mut StdRng, depth: u32) -> String {
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
pub(super) fn object(rng: &mut StdRng, mut pairs: Vec<(String, String)>) -> String {
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

pub(super) fn timestamp(rng: &mut StdRng) -> String {
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

pub(super) fn amount(rng: &mut StdRng) -> String {
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
pub(super) fn bank_txn(rng: &mut StdRng) -> String {
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

pub(super) fn spatial_job(rng: &mut StdRng) -> String {
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
pub(super) fn fielded(rng: &mut StdRng) -> String {
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
pub(super) fn mutate(rng: &mut StdRng, text: &mut Vec<u8>) {
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
pub(super) fn payload(seed: u64) -> (Vec<u8>, bool) {
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

/// A decimal-ish text: leading zeros, long digit strings, exponents,
/// and the odd malformed one.
pub(super) fn decimal_text(rng: &mut StdRng) -> String {
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
