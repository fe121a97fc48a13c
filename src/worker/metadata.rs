//! What idemgate writes into a commit's metadata, and reads back at
//! assignment (docs/design.md §7):
//!
//! ```text
//! idemgate/2 <key id> gap-free|gaps [done=<from>-<to>,<from>-<to>...]
//! ```
//!
//! `gap-free`: every record below the committed offset was decided and
//! delivered, with an unbroken watermark chain, so the next owner may raise
//! the partition's watermark to it. `done`: ranges `[from, to)` above the
//! committed offset whose records are finished (delivered, their claims
//! settled): the next owner skips them instead of deciding them again, so
//! a rebalance repeats no output, audit included.

/// Kafka's default `offset.metadata.max.bytes` is 4096; ranges past this
/// many bytes are left out (those records are decided again, a duplicate
/// audit output at worst).
const MAX_LEN: usize = 1024;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Metadata {
    pub(crate) gap_free: bool,
    /// Finished ranges `[from, to)` above the committed offset.
    pub(crate) done: Vec<(i64, i64)>,
}

pub(crate) fn write(key_id: &str, metadata: &Metadata) -> String {
    let chain = if metadata.gap_free {
        "gap-free"
    } else {
        "gaps"
    };
    let mut out = format!("idemgate/2 {key_id} {chain}");
    let mut first = true;
    for (from, to) in &metadata.done {
        let range = format!("{}{from}-{to}", if first { " done=" } else { "," });
        if out.len() + range.len() > MAX_LEN {
            break;
        }
        out.push_str(&range);
        first = false;
    }
    out
}

/// `None` for metadata idemgate did not write for this stream.
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
    if let Some(list) = words.next().and_then(|w| w.strip_prefix("done=")) {
        for range in list.split(',') {
            let (from, to) = range.split_once('-')?;
            let (from, to) = (from.parse().ok()?, to.parse().ok()?);
            if from < to {
                done.push((from, to));
            }
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
        let text = write("Ab", &metadata);
        assert_eq!(text, "idemgate/2 Ab gap-free done=10-12,15-16");
        assert_eq!(read("Ab", &text), Some(metadata));
        assert_eq!(read("Ab", "idemgate/2 Ab gaps"), Some(Metadata::default()));
        assert_eq!(read("Cd", &text), None, "another stream's");
        assert_eq!(read("Ab", ""), None);
        assert_eq!(read("Ab", "some other tool"), None);
    }

    #[test]
    fn ranges_past_the_size_limit_are_left_out() {
        let metadata = Metadata {
            gap_free: false,
            done: (0..1000).map(|i| (i * 10, i * 10 + 1)).collect(),
        };
        let text = write("Ab", &metadata);
        assert!(text.len() <= MAX_LEN);
        let back = read("Ab", &text).unwrap();
        assert!(!back.done.is_empty() && back.done.len() < 1000);
        assert_eq!(back.done[..], metadata.done[..back.done.len()]);
    }
}
