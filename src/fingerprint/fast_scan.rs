//! The fast path's tokens: a JSON number or string at a position of the
//! input, checked as strictly as serde_json checks it (or refused, leaving
//! the record to the reference), with its canonical text: a span of the
//! input when it needs no change, else appended to the arena.

use std::io::Write as _;

use serde_json::Number;

use super::fast_tree::Span;
use super::number;

/// The number token at `start`, JSON number grammar strictly: its
/// canonical text, the token as written, and where it ends. Plain integers
/// of up to 18 digits are their own canonical form (no allocation, no
/// copy); any other number is parsed and printed by serde_json into the
/// arena, and that text is kept if it has exactly the token's value, else
/// corrected (`number.rs`).
#[inline]
pub(super) fn number(
    input: &[u8],
    start: usize,
    arena: &mut Vec<u8>,
) -> Option<(Span, Span, usize)> {
    let digits = |pos: &mut usize| {
        let from = *pos;
        while input.get(*pos).is_some_and(u8::is_ascii_digit) {
            *pos += 1;
        }
        *pos - from
    };
    let mut pos = start;
    let negative = input.get(pos) == Some(&b'-');
    if negative {
        pos += 1;
    }
    let int_digits = match input.get(pos)? {
        b'0' => {
            pos += 1;
            1
        }
        b'1'..=b'9' => digits(&mut pos),
        _ => return None,
    };
    let mut plain = true;
    if input.get(pos) == Some(&b'.') {
        pos += 1;
        if digits(&mut pos) == 0 {
            return None;
        }
        plain = false;
    }
    if let Some(b'e' | b'E') = input.get(pos) {
        pos += 1;
        if let Some(b'+' | b'-') = input.get(pos) {
            pos += 1;
        }
        if digits(&mut pos) == 0 {
            return None;
        }
        plain = false;
    }
    let token = Span {
        start: start as u32,
        end: pos as u32,
        arena: false,
    };
    let token_bytes = &input[start..pos];
    // Up to 18 digits fits u64 and i64 alike: serde_json prints the
    // digits back as written (no leading zeros by the grammar). `-0`
    // is a float to serde_json ("-0.0").
    let text = if plain && int_digits <= 18 && token_bytes != b"-0" {
        token
    } else {
        let number = serde_json::from_slice::<Number>(token_bytes).ok()?;
        let from = arena.len();
        write!(arena, "{number}").ok()?;
        // serde_json's text stays the canonical form when it is exactly the
        // literal's value; else `number.rs` corrects it.
        if !number::shown_exactly(token_bytes, &arena[from..]) {
            arena.truncate(from);
            number::write_corrected(arena, token_bytes)?;
        }
        Span {
            start: from as u32,
            end: arena.len() as u32,
            arena: true,
        }
    };
    Some((text, token, pos))
}

/// The string whose opening quote is at `quote`: its decoded text (in the
/// input when it has no escape, else appended to the arena) and where it
/// ends, past the closing quote.
#[inline]
pub(super) fn string(input: &[u8], quote: usize, arena: &mut Vec<u8>) -> Option<(Span, usize)> {
    let start = quote + 1;
    let mut pos = start;
    let mut ascii = true;
    let mut escaped = false;
    loop {
        // Eight bytes at a time past plain ASCII (no quote, backslash,
        // control character or byte >= 0x80).
        while let Some(chunk) = input.get(pos..pos + 8) {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            if special(u64::from_le_bytes(word)) {
                break;
            }
            pos += 8;
        }
        let b = *input.get(pos)?;
        if b == b'"' {
            break;
        }
        if b == b'\\' {
            escaped = true;
            // Skip the escaped byte so `\"` does not end the scan; the
            // escape itself is checked when decoding.
            pos += 2;
            continue;
        }
        if b < 0x20 {
            return None;
        }
        if b >= 0x80 {
            ascii = false;
        }
        pos += 1;
    }
    let end = pos;
    let raw = &input[start..end];
    // Escapes are ASCII, so the whole text is valid UTF-8 exactly when
    // each run between escapes is (what serde_json checks).
    if !ascii && std::str::from_utf8(raw).is_err() {
        return None;
    }
    if !escaped {
        let text = Span {
            start: start as u32,
            end: end as u32,
            arena: false,
        };
        return Some((text, end + 1));
    }
    let from = arena.len();
    let mut i = 0;
    while i < raw.len() {
        let b = raw[i];
        if b != b'\\' {
            arena.push(b);
            i += 1;
            continue;
        }
        let code = *raw.get(i + 1)?;
        i += 2;
        let byte = match code {
            b'"' => b'"',
            b'\\' => b'\\',
            b'/' => b'/',
            b'b' => 0x08,
            b'f' => 0x0c,
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'u' => {
                let first = hex4(raw.get(i..i + 4)?)?;
                i += 4;
                let scalar = match first {
                    0xD800..=0xDBFF => {
                        if raw.get(i..i + 2)? != b"\\u" {
                            return None;
                        }
                        let second = hex4(raw.get(i + 2..i + 6)?)?;
                        if !(0xDC00..=0xDFFF).contains(&second) {
                            return None;
                        }
                        i += 6;
                        0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00)
                    }
                    0xDC00..=0xDFFF => return None,
                    other => other,
                };
                let ch = char::from_u32(scalar)?;
                let mut buf = [0u8; 4];
                arena.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                continue;
            }
            _ => return None,
        };
        arena.push(byte);
    }
    let text = Span {
        start: from as u32,
        end: arena.len() as u32,
        arena: true,
    };
    Some((text, end + 1))
}

/// Whether a word holds a quote, a backslash, a control character or a
/// byte >= 0x80 (exact as a yes or no).
pub(super) fn special(word: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
    let control = word.wrapping_sub(ONES * 0x20) & !word & HIGH;
    (zero(word ^ (ONES * u64::from(b'"')))
        | zero(word ^ (ONES * u64::from(b'\\')))
        | control
        | (word & HIGH))
        != 0
}

fn hex4(digits: &[u8]) -> Option<u32> {
    let mut value = 0u32;
    for &d in digits {
        let nibble = match d {
            b'0'..=b'9' => d - b'0',
            b'a'..=b'f' => d - b'a' + 10,
            b'A'..=b'F' => d - b'A' + 10,
            _ => return None,
        };
        value = value << 4 | u32::from(nibble);
    }
    Some(value)
}
