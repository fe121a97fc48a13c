//! JSON numbers in canonical JSON, from their literal text (docs/design.md
//! §3), never through a binary float alone.
//!
//! A number's canonical form is what it always was, serde_json's text of it
//! (its own digits for an integer within u64/i64, else the shortest text
//! of the `f64` its parser reads: `100.50` is `100.5`, `1e2` is `100.0`),
//! whenever that text has exactly the literal's value. So every hash of an
//! ordinary amount, coordinate or parameter stays as it was.
//!
//! Otherwise that text has lost digits (`1.000000000000000001` reads as
//! `1.0`, `18446744073709551617` as `1.8446744073709552e+19`, `1e-400` as
//! `0.0`) and would give two amounts one hash. Then:
//!
//! - serde_json's float parser (without its `float_roundtrip` feature,
//!   which nothing in this build turns on) can be a step off the nearest
//!   `f64` (`1e-30` reads as `9.999999999999999e-31`). If the nearest
//!   `f64`, parsed by the standard library (correctly rounded), prints as
//!   exactly the literal's value, that text is the form (`1e-30`);
//! - else the number is written exactly, in normalised scientific notation
//!   with a capital `E`: `1.000000000000000001E0`,
//!   `1.8446744073709551617E19`, `1E-400`.
//!
//! serde_json never prints a capital `E`, so an exact form never equals
//! the form of another number, and a form written from a float's text has
//! exactly the literal's value: no two values share a form. And the form
//! of a number written with a point or an exponent depends on its value
//! alone, so every spelling of one value (`1.50`, `15e-1`, or thirty
//! digits written two ways) agrees, and turning `float_roundtrip` on would
//! change no form.
//!
//! Why not serde_json's `arbitrary_precision` feature, which keeps a
//! number's text in `Number`: a Cargo feature is unified over the whole
//! build, so it would change `Number` for every user of serde_json in the
//! binary and in bench and testkit (rdkafka's statistics, tracing's JSON
//! logs, the horizon tool, the demo): each number in a `Value` would
//! become a heap string, `Value` equality would turn textual (`1.0` and
//! `1.00` differ), and numbers inside untagged or flattened serde types
//! would stop deserializing. Its `Number` prints the literal as written
//! (`1E2`), so the canonical form would still need this module. (Were it
//! ever turned on, `json.rs` would read every number as an object, and the
//! fingerprint's tests would fail.) Instead the fast path keeps each
//! number's token (a span of the input, no allocation for an ordinary
//! number), the reference's parse keeps the text (`json.rs`), and both
//! call this module.

use std::borrow::Cow;
use std::io::Write as _;

/// A JSON number literal, read exactly: its sign, its integer and fraction
/// digits, and its written exponent.
struct Literal<'a> {
    negative: bool,
    int: &'a [u8],
    fraction: &'a [u8],
    exponent_negative: bool,
    /// The exponent's digits without leading zeros (empty for zero).
    exponent: &'a [u8],
}

/// Exponents of more digits than this are not read into an `i64`.
const I64_DIGITS: usize = 18;

impl<'a> Literal<'a> {
    /// JSON number grammar: `-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?`.
    fn parse(text: &'a [u8]) -> Option<Literal<'a>> {
        let digits = |from: usize| {
            let len = text.get(from..).map_or(0, |rest| {
                rest.iter().take_while(|b| b.is_ascii_digit()).count()
            });
            (from, from + len)
        };
        let negative = text.first() == Some(&b'-');
        let (start, end) = digits(usize::from(negative));
        let int = text.get(start..end)?;
        if int.is_empty() || (int.len() > 1 && int[0] == b'0') {
            return None;
        }
        let mut at = end;
        let mut fraction: &[u8] = &[];
        if text.get(at) == Some(&b'.') {
            let (start, end) = digits(at + 1);
            fraction = text.get(start..end)?;
            if fraction.is_empty() {
                return None;
            }
            at = end;
        }
        let mut exponent_negative = false;
        let mut exponent: &[u8] = &[];
        if let Some(b'e' | b'E') = text.get(at) {
            at += 1;
            if let Some(sign @ (b'+' | b'-')) = text.get(at) {
                exponent_negative = *sign == b'-';
                at += 1;
            }
            let (start, end) = digits(at);
            let written = text.get(start..end)?;
            if written.is_empty() {
                return None;
            }
            let zeros = written.iter().take_while(|&&b| b == b'0').count();
            exponent = written.get(zeros..)?;
            at = end;
        }
        (at == text.len()).then_some(Literal {
            negative,
            int,
            fraction,
            exponent_negative,
            exponent,
        })
    }

    /// The `i`th digit of the integer and fraction digits run together.
    fn digit(&self, i: usize) -> u8 {
        match self.int.get(i) {
            Some(&d) => d,
            None => self
                .fraction
                .get(i - self.int.len())
                .copied()
                .unwrap_or(b'0'),
        }
    }

    /// The range of significant digits (first to last non-zero) in the
    /// digits run together; `None` for zero.
    fn significant(&self) -> Option<(usize, usize)> {
        let len = self.int.len() + self.fraction.len();
        let first = (0..len).find(|&i| self.digit(i) != b'0')?;
        let last = (first..len).rev().find(|&i| self.digit(i) != b'0')?;
        Some((first, last + 1))
    }

    /// The written exponent, when it has at most [`I64_DIGITS`] digits.
    fn written_exponent(&self) -> Option<i64> {
        if self.exponent.len() > I64_DIGITS {
            return None;
        }
        let magnitude = self
            .exponent
            .iter()
            .fold(0i64, |n, &d| n * 10 + i64::from(d - b'0'));
        Some(if self.exponent_negative {
            -magnitude
        } else {
            magnitude
        })
    }

    /// What the first significant digit at `first` adds to the written
    /// exponent to give the scientific one (`12.5` is `1.25E1`).
    fn shift(&self, first: usize) -> i64 {
        // Both below the payload size limit, far below i64's range.
        self.int.len() as i64 - 1 - first as i64
    }
}

/// Significant digits a [`Short`] holds: more than serde_json ever prints
/// (20 for a u64, 17 for an f64).
const SHORT_DIGITS: usize = 24;

/// A number's value with few significant digits, on the stack:
/// ±d1.d2…dn × 10^exponent, zero as itself (no digits, no sign).
#[derive(PartialEq, Eq)]
struct Short {
    negative: bool,
    len: usize,
    digits: [u8; SHORT_DIGITS],
    /// The scientific exponent (`12.5` is `1.25E1`: 1).
    exponent: i64,
}

impl Literal<'_> {
    /// The value, if it has at most [`SHORT_DIGITS`] significant digits
    /// and an exponent an `i64` holds.
    fn short(&self) -> Option<Short> {
        let mut short = Short {
            negative: self.negative,
            len: 0,
            digits: [0; SHORT_DIGITS],
            exponent: 0,
        };
        let mut first = None;
        // Zeros after the last non-zero digit, not yet known to be inner.
        let mut zeros = 0;
        for (i, &d) in self.int.iter().chain(self.fraction).enumerate() {
            if d == b'0' {
                zeros += usize::from(first.is_some());
                continue;
            }
            first.get_or_insert(i);
            if short.len + zeros + 1 > SHORT_DIGITS {
                return None;
            }
            short.len += zeros;
            zeros = 0;
            short.digits[short.len] = d;
            short.len += 1;
        }
        match first {
            None => {
                short.negative = false;
                Some(short)
            }
            Some(first) => {
                short.exponent = self.written_exponent()? + self.shift(first);
                Some(short)
            }
        }
    }
}

/// Whether serde_json's text of a number (`shown`) has exactly the value of
/// its literal, so that it stays the canonical form. Both are read on the
/// stack: this runs for every number that is not a plain integer.
#[inline]
pub(crate) fn shown_exactly(literal: &[u8], shown: &[u8]) -> bool {
    // Most senders print the shortest text of their f64, which is
    // serde_json's too, or that text with trailing zeros (`100.50`).
    if let Some(rest) = literal.strip_prefix(shown) {
        let decimal = shown.contains(&b'.') && !shown.contains(&b'e');
        if rest.is_empty() || (decimal && rest.iter().all(|&b| b == b'0')) {
            return true;
        }
    }
    let short = |text| Literal::parse(text).and_then(|literal| literal.short());
    match (short(literal), short(shown)) {
        // A literal of more significant digits than serde_json prints has
        // none (`None`), and differs.
        (Some(literal), Some(shown)) => literal == shown,
        _ => false,
    }
}

/// Appends the canonical form of a number whose serde_json text is not
/// exactly its value (`shown_exactly` said no): the text of the nearest
/// `f64` if that is exact, else the exact form. `None` if `literal` is not
/// a JSON number.
pub(crate) fn write_corrected(out: &mut Vec<u8>, literal: &[u8]) -> Option<()> {
    let from = out.len();
    let nearest = std::str::from_utf8(literal)
        .ok()
        .and_then(|text| text.parse::<f64>().ok())
        .and_then(serde_json::Number::from_f64);
    if let Some(nearest) = nearest {
        write!(out, "{nearest}").ok()?;
        if shown_exactly(literal, &out[from..]) {
            return Some(());
        }
        out.truncate(from);
    }
    write_exact(out, literal)
}

/// Appends the exact form of a number literal: `-?d(.d+)?E-?d+`, the
/// digits significant ones only; `None` if `literal` is not a JSON number.
fn write_exact(out: &mut Vec<u8>, literal: &[u8]) -> Option<()> {
    let literal = Literal::parse(literal)?;
    let Some((first, end)) = literal.significant() else {
        // Zero is never inexact (serde_json reads it as zero); written
        // with an `E` all the same, so the forms stay apart.
        out.extend_from_slice(b"0E0");
        return Some(());
    };
    if literal.negative {
        out.push(b'-');
    }
    out.push(literal.digit(first));
    if end - first > 1 {
        out.push(b'.');
        out.extend((first + 1..end).map(|i| literal.digit(i)));
    }
    out.push(b'E');
    let shift = literal.shift(first);
    match literal.written_exponent() {
        Some(written) => {
            // Both far inside i64: no overflow, and no allocation.
            write!(out, "{}", written + shift).ok()?;
        }
        None => {
            // |written| >= 10^18 > |shift|: the sign is the written one.
            if literal.exponent_negative {
                out.push(b'-');
            }
            let delta = if literal.exponent_negative {
                -shift
            } else {
                shift
            };
            add_small(out, literal.exponent, delta)?;
        }
    }
    Some(())
}

/// The canonical form of a number whose literal is `literal` and whose
/// serde_json text is `shown`.
pub(crate) fn canonical<'a>(literal: &str, shown: &'a str) -> Cow<'a, str> {
    if shown_exactly(literal.as_bytes(), shown.as_bytes()) {
        return Cow::Borrowed(shown);
    }
    let mut corrected = Vec::new();
    match write_corrected(&mut corrected, literal.as_bytes()) {
        Some(()) => Cow::Owned(String::from_utf8_lossy(&corrected).into_owned()),
        // Not reached: serde_json has read the literal as a number.
        None => Cow::Borrowed(shown),
    }
}

/// Appends `magnitude + delta` in decimal, for a `magnitude` of more than
/// [`I64_DIGITS`] digits (no leading zero) and `|delta| < 10^18`.
fn add_small(out: &mut Vec<u8>, magnitude: &[u8], delta: i64) -> Option<()> {
    const LOW: usize = I64_DIGITS;
    const BASE: i64 = 1_000_000_000_000_000_000;
    let (high, low) = magnitude.split_at(magnitude.len() - LOW);
    let low = low.iter().fold(0i64, |n, &d| n * 10 + i64::from(d - b'0'));
    let mut sum = low + delta;
    let carry = if sum >= BASE {
        sum -= BASE;
        1
    } else if sum < 0 {
        sum += BASE;
        -1
    } else {
        0
    };
    let start = out.len();
    out.extend_from_slice(high);
    // Carry or borrow through the high digits (never past the first: the
    // magnitude is at least 10^18, more than |delta|).
    let mut at = out.len();
    match carry {
        1 => loop {
            if at == start {
                out.insert(start, b'1');
                break;
            }
            at -= 1;
            if out[at] == b'9' {
                out[at] = b'0';
            } else {
                out[at] += 1;
                break;
            }
        },
        -1 => {
            while at > start {
                at -= 1;
                if out[at] == b'0' {
                    out[at] = b'9';
                } else {
                    out[at] -= 1;
                    break;
                }
            }
            let zeros = out[start..].iter().take_while(|&&b| b == b'0').count();
            out.drain(start..start + zeros);
        }
        _ => {}
    }
    let high_digits = out.len() - start;
    write!(out, "{sum:018}").ok()?;
    if high_digits == 0 {
        // No high digits left: the low ones lose their leading zeros.
        let zeros = out[start..].iter().take_while(|&&b| b == b'0').count();
        out.drain(start..start + zeros);
    }
    Some(())
}

#[cfg(test)]
#[path = "number_tests.rs"]
mod tests;
