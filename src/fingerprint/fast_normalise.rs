//! The `decimal`, `round:N` and `timestamp` normalisers without a heap
//! allocation, for the shapes they meet most: at most 28 significant
//! digits and a scale of at most 28 (always exact in rust_decimal), and
//! RFC 3339 timestamps of the plain `YYYY-MM-DDTHH:MM:SS[.f{1,9}](Z|±HH:MM)`
//! shape. Each appends the canonical JSON of what `normalise::normalise`
//! returns, or returns `None` (appending nothing) and lets it decide,
//! errors included.

/// Most significant digits handled here (rust_decimal's mantissa holds any
/// 28-digit integer).
const MAX_DIGITS: usize = 28;
/// rust_decimal's largest scale.
const MAX_SCALE: i32 = 28;

/// ±digits × 10^exponent; digits without leading or trailing zeros (none
/// at all for zero).
struct Dec {
    negative: bool,
    digits: [u8; MAX_DIGITS],
    len: usize,
    exponent: i32,
}

/// `normalise::parse_text`'s grammar (`-?d+(.d+)?([eE][+-]?d+)?`, leading
/// zeros allowed), restricted to exponents of at most 4 digits and to at
/// most [`MAX_DIGITS`] significant digits.
fn parse(text: &[u8]) -> Option<Dec> {
    let mut dec = Dec {
        negative: false,
        digits: [0; MAX_DIGITS],
        len: 0,
        exponent: 0,
    };
    let mut i = 0;
    if text.first() == Some(&b'-') {
        dec.negative = true;
        i = 1;
    }
    // Zeros after the last non-zero digit, not yet known to be inner.
    let mut zeros = 0usize;
    let mut digit = |dec: &mut Dec, d: u8, fraction: bool| -> Option<()> {
        if fraction {
            dec.exponent -= 1;
        }
        if d == 0 {
            if dec.len > 0 {
                zeros += 1;
            }
            return Some(());
        }
        if dec.len + zeros + 1 > MAX_DIGITS {
            return None;
        }
        dec.len += zeros;
        zeros = 0;
        dec.digits[dec.len] = d;
        dec.len += 1;
        Some(())
    };
    let whole = i;
    while let Some(&b) = text.get(i).filter(|b| b.is_ascii_digit()) {
        digit(&mut dec, b - b'0', false)?;
        i += 1;
    }
    if i == whole {
        return None;
    }
    if text.get(i) == Some(&b'.') {
        i += 1;
        let fraction = i;
        while let Some(&b) = text.get(i).filter(|b| b.is_ascii_digit()) {
            digit(&mut dec, b - b'0', true)?;
            i += 1;
        }
        if i == fraction {
            return None;
        }
    }
    let trailing = zeros;
    if let Some(b'e' | b'E') = text.get(i) {
        i += 1;
        let negative = match text.get(i) {
            Some(b'-') => {
                i += 1;
                true
            }
            Some(b'+') => {
                i += 1;
                false
            }
            _ => false,
        };
        let from = i;
        let mut magnitude = 0i32;
        while let Some(&b) = text.get(i).filter(|b| b.is_ascii_digit()) {
            if i - from == 4 {
                return None;
            }
            magnitude = magnitude * 10 + i32::from(b - b'0');
            i += 1;
        }
        if i == from {
            return None;
        }
        dec.exponent += if negative { -magnitude } else { magnitude };
    }
    if i != text.len() {
        return None;
    }
    if dec.len > 0 {
        dec.exponent += trailing as i32;
    } else {
        dec.negative = false;
        dec.exponent = 0;
    }
    Some(dec)
}

/// Exactly representable (as `parse_decimal` would build it) without the
/// tiny-value truncation of `round:N`.
fn representable(dec: &Dec) -> bool {
    if dec.exponent >= 0 {
        dec.len + dec.exponent as usize <= MAX_DIGITS
    } else {
        -dec.exponent <= MAX_SCALE
    }
}

/// A normalised decimal as rust_decimal prints it, as a JSON string.
fn write(out: &mut Vec<u8>, dec: &Dec) {
    out.push(b'"');
    if dec.len == 0 {
        out.push(b'0');
    } else {
        if dec.negative {
            out.push(b'-');
        }
        let digits = &dec.digits[..dec.len];
        let ascii = |d: &u8| b'0' + d;
        if dec.exponent >= 0 {
            out.extend(digits.iter().map(ascii));
            out.extend(std::iter::repeat_n(b'0', dec.exponent as usize));
        } else {
            let scale = (-dec.exponent) as usize;
            if dec.len > scale {
                let (whole, fraction) = digits.split_at(dec.len - scale);
                out.extend(whole.iter().map(ascii));
                out.push(b'.');
                out.extend(fraction.iter().map(ascii));
            } else {
                out.extend_from_slice(b"0.");
                out.extend(std::iter::repeat_n(b'0', scale - dec.len));
                out.extend(digits.iter().map(ascii));
            }
        }
    }
    out.push(b'"');
}

/// `decimal` on a string's text or a number's serde_json text.
pub(super) fn decimal(out: &mut Vec<u8>, text: &[u8]) -> Option<()> {
    let dec = parse(text)?;
    if !representable(&dec) {
        return None;
    }
    write(out, &dec);
    Some(())
}

/// `round:places` on a number's serde_json text: half away from zero,
/// trailing zeros stripped.
pub(super) fn round(out: &mut Vec<u8>, text: &[u8], places: u32) -> Option<()> {
    let mut dec = parse(text)?;
    if !representable(&dec) || places > MAX_SCALE as u32 {
        return None;
    }
    let places = places as i32;
    if dec.exponent < -places {
        let cut = (-places - dec.exponent) as usize;
        if cut > dec.len {
            dec.len = 0;
        } else {
            let keep = dec.len - cut;
            let up = dec.digits[keep] >= 5;
            dec.len = keep;
            dec.exponent = -places;
            if up {
                // Add one at the last kept digit, carrying.
                let mut at = keep;
                loop {
                    if at == 0 {
                        // All nines (or nothing kept): 10^(keep).
                        dec.digits[0] = 1;
                        for d in &mut dec.digits[1..=keep] {
                            *d = 0;
                        }
                        dec.len = keep + 1;
                        break;
                    }
                    at -= 1;
                    if dec.digits[at] == 9 {
                        dec.digits[at] = 0;
                    } else {
                        dec.digits[at] += 1;
                        break;
                    }
                }
            }
            while dec.len > 0 && dec.digits[dec.len - 1] == 0 {
                dec.len -= 1;
                dec.exponent += 1;
            }
        }
        if dec.len == 0 {
            dec.negative = false;
            dec.exponent = 0;
        }
    }
    write(out, &dec);
    Some(())
}

fn number(text: &[u8], from: usize, len: usize) -> Option<u32> {
    let mut value = 0u32;
    for &b in text.get(from..from + len)? {
        if !b.is_ascii_digit() {
            return None;
        }
        value = value * 10 + u32::from(b - b'0');
    }
    Some(value)
}

fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        4 | 6 | 9 | 11 => 30,
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// `timestamp` on `YYYY-MM-DDTHH:MM:SS[.f{1,9}](Z|±HH:MM)`, valid fields
/// only (no leap second, no `-00:00`), years 1 to 9999 before and after
/// the move to UTC.
pub(super) fn timestamp(out: &mut Vec<u8>, text: &[u8]) -> Option<()> {
    let at = |i: usize| text.get(i).copied();
    if at(4)? != b'-' || at(7)? != b'-' || at(10)? != b'T' || at(13)? != b':' || at(16)? != b':' {
        return None;
    }
    let year = i64::from(number(text, 0, 4)?);
    let month = number(text, 5, 2)?;
    let day = number(text, 8, 2)?;
    let hour = number(text, 11, 2)?;
    let minute = number(text, 14, 2)?;
    let second = number(text, 17, 2)?;
    if year < 1
        || !(1..=12).contains(&month)
        || day < 1
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return None;
    }
    let mut i = 19;
    let mut nanos = 0u32;
    if at(i) == Some(b'.') {
        i += 1;
        let from = i;
        while at(i).is_some_and(|b| b.is_ascii_digit()) {
            if i - from == 9 {
                return None;
            }
            nanos = nanos * 10 + u32::from(at(i)? - b'0');
            i += 1;
        }
        if i == from {
            return None;
        }
        for _ in (i - from)..9 {
            nanos *= 10;
        }
    }
    let offset = match at(i)? {
        b'Z' => {
            i += 1;
            0
        }
        sign @ (b'+' | b'-') => {
            let hours = number(text, i + 1, 2)?;
            let minutes = number(text, i + 4, 2)?;
            if at(i + 3)? != b':' || hours > 23 || minutes > 59 {
                return None;
            }
            if sign == b'-' && hours == 0 && minutes == 0 {
                return None;
            }
            i += 6;
            let seconds = i64::from(hours * 3600 + minutes * 60);
            if sign == b'-' {
                -seconds
            } else {
                seconds
            }
        }
        _ => return None,
    };
    if i != text.len() {
        return None;
    }
    let local =
        days_from_civil(year, month, day) * 86_400 + i64::from(hour * 3600 + minute * 60 + second);
    let utc = local - offset;
    let (year, month, day) = civil_from_days(utc.div_euclid(86_400));
    if !(1..=9999).contains(&year) {
        return None;
    }
    let seconds = utc.rem_euclid(86_400) as u32;
    let two = |out: &mut Vec<u8>, n: u32| {
        out.extend_from_slice(&[b'0' + (n / 10) as u8, b'0' + (n % 10) as u8])
    };
    out.push(b'"');
    let year = year as u32;
    two(out, year / 100);
    two(out, year % 100);
    out.push(b'-');
    two(out, month);
    out.push(b'-');
    two(out, day);
    out.push(b'T');
    two(out, seconds / 3600);
    out.push(b':');
    two(out, seconds / 60 % 60);
    out.push(b':');
    two(out, seconds % 60);
    out.push(b'.');
    let mut digits = [0u8; 9];
    let mut n = nanos;
    for d in digits.iter_mut().rev() {
        *d = b'0' + (n % 10) as u8;
        n /= 10;
    }
    out.extend_from_slice(&digits);
    out.extend_from_slice(b"Z\"");
    Some(())
}
