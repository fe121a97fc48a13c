//! What idemgate writes into a commit's metadata, and reads back at
//! assignment (docs/design.md §7):
//!
//! ```text
//! idemgate/2 <key id> gap-free|gaps [d=<from>.<length>,<gap>.<length>...]
//! ```
//!
//! `gap-free`: every record below the committed offset was decided and
//! delivered, with an unbroken watermark chain, so the next owner may raise
//! the partition's watermark to it. `done`: ranges `[from, to)` above the
//! committed offset whose records are finished (delivered, their claims
//! settled; under exactly once, delivered in a committed transaction): the
//! next owner skips them instead of deciding them again, so a rebalance
//! repeats no output, audit included. Ranges that do not fit are the one
//! way a committed output is decided again: counted and logged where the
//! worker writes them.

/// The longest metadata written: Kafka's default `offset.metadata.max.bytes`
/// is 4096 bytes a partition. `idemgate check`'s probe transaction writes
/// metadata this long, so brokers configured lower are found before a
/// replica runs.
pub(crate) const MAX_LEN: usize = 4000;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Metadata {
    pub(crate) gap_free: bool,
    /// Finished ranges `[from, to)` above the committed offset.
    pub(crate) done: Vec<(i64, i64)>,
}

/// A commit's metadata as written, and how many of its finished ranges
/// did not fit in [`MAX_LEN`] (their records are decided again by the
/// next owner: under exactly once a second output for each, so the worker
/// says so loudly).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Written {
    pub(crate) text: String,
    pub(crate) dropped: usize,
}

/// `idemgate/2 <key id> gap-free|gaps [d=<ranges>]`: the ranges compact,
/// in base 36, the first `<from>.<length>`, each next `<gap>.<length>`
/// after the one before (a few bytes a range: about 800 of them fit).
pub(crate) fn write(key_id: &str, metadata: &Metadata) -> Written {
    let chain = if metadata.gap_free {
        "gap-free"
    } else {
        "gaps"
    };
    let mut text = format!("idemgate/2 {key_id} {chain}");
    let mut last_end = None;
    let mut written = 0;
    for &(from, to) in &metadata.done {
        let start = match last_end {
            None => from,
            Some(end) => from - end,
        };
        let range = format!(
            "{}{}.{}",
            if last_end.is_none() { " d=" } else { "," },
            base36(start),
            base36(to - from)
        );
        if text.len() + range.len() > MAX_LEN {
            break;
        }
        text.push_str(&range);
        last_end = Some(to);
        written += 1;
    }
    Written {
        text,
        dropped: metadata.done.len() - written,
    }
}

fn base36(mut n: i64) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    if n <= 0 {
        return "0".into();
    }
    let mut out = Vec::new();
    while n > 0 {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
    }
    out.reverse();
    String::from_utf8(out).unwrap_or_default()
}

/// `None` for metadata idemgate did not write for this stream. Reads the
/// compact ranges (`d=`) and the decimal ones (`done=<from>-<to>,...`)
/// that replicas before them wrote.
pub(crate) fn read(key_id: &str, text: &str) -> Option<Metadata> {
    let mut words = text.split(' ');
    if words.next()? != "idemgate/2" || words.next()? != key_id {
        return None;
    }
    let gap_free = match words.next()? {
        "gap-free" => true,
        "gaps" => false,
        _ => return None,
    };
    let mut done = Vec::new();
    let word = words.next();
    if let Some(list) = word.and_then(|w| w.strip_prefix("done=")) {
        for range in list.split(',') {
            let (from, to) = range.split_once('-')?;
            let (from, to) = (from.parse().ok()?, to.parse().ok()?);
            if from < to {
                done.push((from, to));
            }
        }
    } else if let Some(list) = word.and_then(|w| w.strip_prefix("d=")) {
        let mut last_end: Option<i64> = None;
        for range in list.split(',') {
            let (start, length) = range.split_once('.')?;
            let start = i64::from_str_radix(start, 36).ok()?;
            let length = i64::from_str_radix(length, 36).ok()?;
            let from = last_end.map_or(Some(start), |end| end.checked_add(start))?;
            let to = from.checked_add(length)?;
            if from < to {
                done.push((from, to));
            }
            last_end = Some(to);
        }
    }
    Some(Metadata { gap_free, done })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_round_trips_and_other_writers_are_ignored() {
        let metadata = Metadata {
            gap_free: true,
            done: vec![(10, 12), (15, 16)],
        };
        let written = write("Ab", &metadata);
        assert_eq!(written.text, "idemgate/2 Ab gap-free d=a.2,3.1");
        assert_eq!(written.dropped, 0);
        assert_eq!(read("Ab", &written.text), Some(metadata.clone()));
        // What replicas before the compact ranges wrote reads the same.
        assert_eq!(
            read("Ab", "idemgate/2 Ab gap-free done=10-12,15-16"),
            Some(metadata)
        );
        assert_eq!(read("Ab", "idemgate/2 Ab gaps"), Some(Metadata::default()));
        assert_eq!(read("Cd", &written.text), None, "another stream's");
        assert_eq!(read("Ab", ""), None);
        assert_eq!(read("Ab", "some other tool"), None);
    }

    #[test]
    fn seven_hundred_holes_at_offsets_in_the_billions_fit() {
        // A partition at offset 4 billion with 700 waiting copies between
        // finished runs: every run fits in the limit.
        let base = 4_000_000_000_i64;
        let metadata = Metadata {
            gap_free: false,
            done: (0..700).map(|i| (base + i * 7, base + i * 7 + 5)).collect(),
        };
        let written = write("Ab", &metadata);
        assert!(written.text.len() <= MAX_LEN, "{}", written.text.len());
        assert_eq!(written.dropped, 0);
        assert_eq!(read("Ab", &written.text), Some(metadata));
    }

    #[test]
    fn ranges_past_the_size_limit_are_left_out_and_counted() {
        let metadata = Metadata {
            gap_free: false,
            done: (0..5000).map(|i| (i * 1000, i * 1000 + 1)).collect(),
        };
        let written = write("Ab", &metadata);
        assert!(written.text.len() <= MAX_LEN);
        let back = read("Ab", &written.text).unwrap();
        assert!(!back.done.is_empty() && back.done.len() < 5000);
        assert_eq!(back.done[..], metadata.done[..back.done.len()]);
        assert_eq!(written.dropped, 5000 - back.done.len());
    }
}
