//! What idemgate writes into a commit's metadata, and reads back at
//! assignment (docs/design.md §7): one format, written here and nowhere
//! else.
//!
//! ```text
//! idemgate/3 <key id> gap-free|gaps [d=<from>.<length>,<gap>.<length>...]
//! idemgate/3 <key id> gap-free|gaps r=<writer>.<sequence>.<digest>
//! ```
//!
//! `gap-free`: every record below the committed offset was decided and
//! delivered, with an unbroken watermark chain, so the next owner may raise
//! the partition's watermark to it. The runs: ranges `[from, to)` above
//! the committed offset whose records are finished (delivered, their
//! claims settled; under exactly once, delivered in a committed
//! transaction): the next owner skips them instead of deciding them again,
//! so a rebalance repeats no output, audit included. They go inline
//! (`d=`) where they fit in [`MAX_LEN`]; where they do not, the metadata
//! names a record of them kept in the store (`r=`): its writer's owner
//! token (hex), the writer's sequence number of it (base 36) and the
//! SHA-256 of its content (hex), so no finished run is ever dropped. The
//! record's content is the `d=` list without its `d=`.
//!
//! `m=<mark>,<mark>...` after the runs: the progress marks the commit's
//! pre-commit store step answered (docs/design.md §8.2), one per place of
//! the stream in place order (64 on Redis), base 36; none where the store
//! keeps none. The step runs after the runs are chosen, so the committers
//! append it ([`marks_word`]) and inline runs leave room for it
//! ([`MARKS_ROOM`]). The build before this one accepts and ignores the
//! word, so replicas that write it roll out beside it. Any other word is
//! malformed. Readers accept `idemgate/2` (the same words, inline runs
//! only, and the decimal `done=<from>-<to>,...` of before) during a
//! rolling upgrade.

use sha2::{Digest, Sha256};

/// The longest metadata written: Kafka's default `offset.metadata.max.bytes`
/// is 4096 bytes a partition. `idemgate check`'s probe transaction writes
/// metadata this long, so brokers configured lower are found before a
/// replica runs.
pub(crate) const MAX_LEN: usize = 4000;

/// The most a `m=` word takes: 64 marks of up to 13 base-36 digits (a u64),
/// with their commas and the leading space.
pub(crate) const MARKS_ROOM: usize = 4 + 64 * 14;

const VERSION: &str = "idemgate/3";
const VERSION_2: &str = "idemgate/2";

/// One commit's metadata, as written and as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Metadata {
    pub(crate) gap_free: bool,
    pub(crate) runs: Runs,
    /// The progress marks the commit relied on; empty where none.
    pub(crate) marks: Vec<u64>,
}

/// The finished runs above the committed offset: listed, or kept in the
/// store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Runs {
    /// Ranges `[from, to)`, ascending.
    Inline(Vec<(i64, i64)>),
    Stored(RunsRef),
}

/// The name and digest of a record of runs in the store: with the stream,
/// input topic and partition of the commit that carries it, the record's
/// unique name (docs/design.md §7).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct RunsRef {
    /// The owner token of the replica that wrote it.
    pub(crate) writer: u32,
    /// That writer's sequence number of it: two records of one writer
    /// never share a name, whatever their content.
    pub(crate) sequence: u64,
    /// SHA-256 of the content.
    pub(crate) digest: [u8; 32],
}

/// Metadata idemgate wrote for the stream that cannot be read: a reader
/// that guessed would decide finished records again.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("malformed commit metadata ({why}): {text:?}")]
pub(crate) struct Malformed {
    why: &'static str,
    text: String,
}

impl Metadata {
    /// No runs above the committed offset.
    #[cfg(test)]
    pub(crate) fn bare(gap_free: bool) -> Metadata {
        Metadata {
            gap_free,
            runs: Runs::Inline(Vec::new()),
            marks: Vec::new(),
        }
    }
}

/// The metadata's text. Inline runs may exceed [`MAX_LEN`]: the writer
/// asks [`inline`] first.
pub(crate) fn encode(key_id: &str, metadata: &Metadata) -> String {
    let chain = if metadata.gap_free {
        "gap-free"
    } else {
        "gaps"
    };
    let mut text = format!("{VERSION} {key_id} {chain}");
    match &metadata.runs {
        Runs::Inline(runs) if runs.is_empty() => {}
        Runs::Inline(runs) => {
            text.push_str(" d=");
            text.push_str(&runs_text(runs));
        }
        Runs::Stored(r) => {
            text.push_str(&format!(
                " r={:x}.{}.{}",
                r.writer,
                base36(i64::try_from(r.sequence).unwrap_or(i64::MAX)),
                hex::encode(r.digest)
            ));
        }
    }
    text.push_str(&marks_word(&metadata.marks));
    text
}

/// ` m=<marks>`, or nothing for no marks: what the committers append once
/// the pre-commit store step answered.
pub(crate) fn marks_word(marks: &[u64]) -> String {
    if marks.is_empty() {
        return String::new();
    }
    let mut word = String::with_capacity(4 + marks.len() * 5);
    word.push_str(" m=");
    for (i, &mark) in marks.iter().enumerate() {
        if i > 0 {
            word.push(',');
        }
        word.push_str(&base36(i64::try_from(mark).unwrap_or(i64::MAX)));
    }
    word
}

/// The metadata with its runs inline, where it fits in [`MAX_LEN`] with
/// room for the marks appended after it.
pub(crate) fn inline(key_id: &str, gap_free: bool, runs: &[(i64, i64)]) -> Option<String> {
    let text = encode(
        key_id,
        &Metadata {
            gap_free,
            runs: Runs::Inline(runs.to_vec()),
            marks: Vec::new(),
        },
    );
    (text.len() + MARKS_ROOM <= MAX_LEN).then_some(text)
}

/// The runs compact, in base 36: the first `<from>.<length>`, each next
/// `<gap>.<length>` after the one before (a few bytes a run: about 800 fit
/// inline). Also a stored record's content.
pub(crate) fn runs_text(runs: &[(i64, i64)]) -> String {
    let mut text = String::with_capacity(runs.len() * 6);
    let mut last_end = None;
    for &(from, to) in runs {
        if last_end.is_some() {
            text.push(',');
        }
        text.push_str(&base36(last_end.map_or(from, |end| from - end)));
        text.push('.');
        text.push_str(&base36(to - from));
        last_end = Some(to);
    }
    text
}

/// A stored record's content read back; refuses anything [`runs_text`]
/// does not write.
pub(crate) fn parse_runs(text: &str) -> Result<Vec<(i64, i64)>, Malformed> {
    compact_runs(text).ok_or_else(|| malformed("runs", text))
}

/// The SHA-256 of a record's content, as its reference carries it.
pub(crate) fn digest(content: &[u8]) -> [u8; 32] {
    Sha256::digest(content).into()
}

/// `Ok(None)` for metadata idemgate did not write for this stream (another
/// stream's, another tool's, none); an error for `idemgate/3` metadata of
/// this stream that does not read. `idemgate/2` reads as it always did
/// (leniently: its writers are gone once the upgrade is done).
pub(crate) fn parse(key_id: &str, text: &str) -> Result<Option<Metadata>, Malformed> {
    let mut words = text.split(' ');
    let version = words.next().unwrap_or_default();
    if words.next() != Some(key_id) {
        return Ok(None);
    }
    match version {
        VERSION_2 => Ok(parse_2(words)),
        VERSION => parse_3(text, words).map(Some),
        _ => Ok(None),
    }
}

/// Whether the text is idemgate's for the stream, readable or not.
pub(crate) fn is_ours(key_id: &str, text: &str) -> bool {
    !matches!(parse(key_id, text), Ok(None))
}

fn parse_3<'a>(
    text: &str,
    mut words: impl Iterator<Item = &'a str>,
) -> Result<Metadata, Malformed> {
    let gap_free = match words.next() {
        Some("gap-free") => true,
        Some("gaps") => false,
        _ => return Err(malformed("chain", text)),
    };
    let mut runs = None;
    let mut marks = None;
    for word in words {
        if let Some(list) = word
            .strip_prefix("d=")
            .filter(|_| runs.is_none() && marks.is_none())
        {
            let list = compact_runs(list).filter(|l| !l.is_empty());
            runs = Some(Runs::Inline(list.ok_or_else(|| malformed("d=", text))?));
        } else if let Some(r) = word
            .strip_prefix("r=")
            .filter(|_| runs.is_none() && marks.is_none())
        {
            runs = Some(Runs::Stored(
                reference(r).ok_or_else(|| malformed("r=", text))?,
            ));
        } else if let Some(list) = word.strip_prefix("m=").filter(|_| marks.is_none()) {
            marks = Some(marks_list(list).ok_or_else(|| malformed("m=", text))?);
        } else {
            return Err(malformed("unknown word", text));
        }
    }
    Ok(Metadata {
        gap_free,
        runs: runs.unwrap_or(Runs::Inline(Vec::new())),
        marks: marks.unwrap_or_default(),
    })
}

/// The marks of a `m=` word: 1 to 256 base-36 numbers.
fn marks_list(list: &str) -> Option<Vec<u64>> {
    let marks = list
        .split(',')
        .map(|m| u64::from_str_radix(m, 36).ok())
        .collect::<Option<Vec<u64>>>()?;
    (1..=256).contains(&marks.len()).then_some(marks)
}

fn reference(text: &str) -> Option<RunsRef> {
    let mut parts = text.split('.');
    let writer = u32::from_str_radix(parts.next()?, 16).ok()?;
    let sequence = u64::from_str_radix(parts.next()?, 36).ok()?;
    let digest = hex::decode(parts.next()?).ok()?.try_into().ok()?;
    parts.next().is_none().then_some(RunsRef {
        writer,
        sequence,
        digest,
    })
}

/// The base-36 chain; `None` where any part does not read, a run is empty
/// or runs overlap.
fn compact_runs(list: &str) -> Option<Vec<(i64, i64)>> {
    let mut runs = Vec::new();
    if list.is_empty() {
        return Some(runs);
    }
    let mut last_end: Option<i64> = None;
    for range in list.split(',') {
        let (start, length) = range.split_once('.')?;
        let start = i64::from_str_radix(start, 36).ok()?;
        let length = i64::from_str_radix(length, 36).ok()?;
        let from = last_end.map_or(Some(start), |end| end.checked_add(start))?;
        let to = from.checked_add(length)?;
        if length <= 0 || start < 0 || from < 0 {
            return None;
        }
        runs.push((from, to));
        last_end = Some(to);
    }
    Some(runs)
}

/// `idemgate/2 <key id> gap-free|gaps [d=<runs>|done=<from>-<to>,...]`,
/// as replicas before this one read it.
fn parse_2<'a>(mut words: impl Iterator<Item = &'a str>) -> Option<Metadata> {
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
        done = compact_runs(list)?;
    }
    Some(Metadata {
        gap_free,
        runs: Runs::Inline(done),
        marks: Vec::new(),
    })
}

fn malformed(why: &'static str, text: &str) -> Malformed {
    Malformed {
        why,
        text: text.chars().take(200).collect(),
    }
}

fn base36(n: i64) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut n = u64::try_from(n).unwrap_or(0);
    if n == 0 {
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
