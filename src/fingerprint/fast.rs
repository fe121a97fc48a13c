//! The fast path of [`super::fingerprint`]: the same hash and digest as the
//! reference (`fingerprint_reference`: serde_json's parse into `json::Json`,
//! then `canonical`), without a heap allocation per record in steady state.
//!
//! The payload is scanned once into a small tree kept in thread-local
//! buffers that are reused from record to record: nodes point into the
//! input (a string without a backslash is its own canonical form, since
//! serde_json refuses raw control characters in strings and escapes
//! nothing else) or into an arena (strings with escapes, decoded; numbers
//! that are not plain integers, in their canonical form from `number.rs`;
//! a number's token, as written, stays in the input for the normalisers).
//! Each object's entries are sorted by key bytes once, the last of equal
//! keys kept, and the canonical form is written straight into a reused
//! buffer.
//!
//! The scanner accepts a strict subset of what serde_json accepts. Whenever
//! it has any doubt (a syntax error, invalid UTF-8, a lone surrogate,
//! nesting deeper than `fast_tree::MAX_DEPTH`, a number serde_json refuses,
//! a field that is missing or of the wrong type, a normaliser error, field
//! paths that nest in one another), it returns `None` and the caller runs
//! the reference, which then decides (including every error and its text).

use std::cell::RefCell;

use super::fast_tree::{escape_byte, write_escaped, Edits, Kind, Tree};
use super::ignore::nests;
use super::{
    canonical, fast_normalise, hash, header_value, normalise, payload_digest, record_key,
    FieldSpec, Fingerprint, Identity, Invalid, Normaliser, Profile, RecordView, TAG_FIELDS,
    TAG_HEADER, TAG_PAYLOAD, TAG_PAYLOAD_RAW, TAG_RECORD_KEY,
};

/// Buffers grown past this are dropped after the record, so one huge
/// payload does not pin its memory in every worker thread for good.
const KEEP_BYTES: usize = 1 << 20;

/// Everything reused from record to record.
struct Scratch {
    tree: Tree,
    /// Canonical payload (the digest's input, and the hash's for `payload`).
    out: Vec<u8>,
    /// The `fields` hash form.
    form: Vec<u8>,
    /// Canonical normalised field values.
    normalised: Vec<u8>,
    /// Per spec: the field's node and its normalised value in `normalised`.
    fields: Vec<(u32, u32, u32)>,
    /// Spec indices sorted by name.
    order: Vec<u32>,
    /// The nodes of the ignored fields present in the payload.
    skip: Vec<u32>,
    /// For `canonical::write_value` of a normalised value.
    text: String,
}

impl Scratch {
    const fn new() -> Scratch {
        Scratch {
            tree: Tree::new(),
            out: Vec::new(),
            form: Vec::new(),
            normalised: Vec::new(),
            fields: Vec::new(),
            order: Vec::new(),
            skip: Vec::new(),
            text: String::new(),
        }
    }

    fn clear(&mut self) {
        self.tree.clear();
        self.out.clear();
        self.form.clear();
        self.normalised.clear();
        self.fields.clear();
        self.order.clear();
        self.skip.clear();
        self.text.clear();
    }

    /// Drops buffers a huge record grew, keeping the usual sizes.
    fn trim(&mut self) {
        let big = self.out.capacity() > KEEP_BYTES
            || self.tree.grown_past(KEEP_BYTES)
            || self.normalised.capacity() > KEEP_BYTES
            || self.text.capacity() > KEEP_BYTES
            || self.form.capacity() > KEEP_BYTES;
        if big {
            *self = Scratch::new();
        }
    }
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = const { RefCell::new(Scratch::new()) };
}

/// The fingerprint, or `None` when the reference must decide.
pub(super) fn fingerprint(
    profile: &Profile,
    max_bytes: usize,
    record: &RecordView<'_>,
) -> Option<Result<Fingerprint, Invalid>> {
    let payload = record.payload.unwrap_or_default();
    // Oversized (refused before parsing), empty or beyond u32 offsets: the
    // reference decides.
    if payload.len() > max_bytes || payload.is_empty() || payload.len() >= u32::MAX as usize / 2 {
        return None;
    }
    SCRATCH
        .try_with(|cell| {
            let mut scratch = cell.try_borrow_mut().ok()?;
            scratch.clear();
            let result = run(&mut scratch, profile, payload, record);
            scratch.trim();
            result
        })
        .ok()
        .flatten()
}

fn run(
    s: &mut Scratch,
    profile: &Profile,
    payload: &[u8],
    record: &RecordView<'_>,
) -> Option<Result<Fingerprint, Invalid>> {
    let root = s.tree.parse(payload)?;
    // What `ignore::remove` would remove: found once, left out of every
    // object `write` meets them in.
    for path in &profile.ignore {
        if let Some(node) = s.tree.find(payload, root, path) {
            s.skip.push(node);
        }
    }
    let edits = Edits {
        skip: &s.skip,
        ..Edits::default()
    };
    match &profile.identity {
        Identity::Header { name } => {
            s.tree.write(payload, root, &mut s.out, &edits);
            let digest = payload_digest(&s.out);
            Some(header_value(record, name).map(|text| Fingerprint {
                hash: hash(TAG_HEADER, text.as_bytes()),
                digest,
            }))
        }
        Identity::RecordKey => {
            s.tree.write(payload, root, &mut s.out, &edits);
            let digest = payload_digest(&s.out);
            Some(record_key(record).map(|key| Fingerprint {
                hash: hash(TAG_RECORD_KEY, key),
                digest,
            }))
        }
        Identity::Payload { raw } => {
            s.tree.write(payload, root, &mut s.out, &edits);
            let digest = payload_digest(&s.out);
            let hash = if *raw {
                hash(TAG_PAYLOAD_RAW, payload)
            } else {
                hash(TAG_PAYLOAD, &s.out)
            };
            Some(Ok(Fingerprint { hash, digest }))
        }
        Identity::Fields(specs) => fields(s, specs, payload, root).map(Ok),
    }
}

/// The `fields` profile on a parsed payload; `None` for any error (the
/// reference names it) or a case the fast path does not take.
fn fields(s: &mut Scratch, specs: &[FieldSpec], input: &[u8], root: u32) -> Option<Fingerprint> {
    if specs.is_empty() || s.tree.node(root).kind != Kind::Object {
        return None;
    }
    // Replacing `a` and then `a.b` (or the reverse) in the digest's copy
    // depends on the order: left to the reference, as are equal names.
    for (i, a) in specs.iter().enumerate() {
        for b in specs.iter().skip(i + 1) {
            if nests(&a.name, &b.name) || nests(&b.name, &a.name) {
                return None;
            }
        }
    }
    for spec in specs {
        let node = s.tree.lookup(input, root, &spec.name)?;
        let start = s.normalised.len() as u32;
        normalised(s, input, node, spec)?;
        s.fields.push((node, start, s.normalised.len() as u32));
    }

    s.order.extend(0..specs.len() as u32);
    s.order
        .sort_unstable_by(|&a, &b| specs[a as usize].name.cmp(&specs[b as usize].name));
    s.form.push(b'{');
    for (index, &spec) in s.order.iter().enumerate() {
        if index > 0 {
            s.form.push(b',');
        }
        write_escaped(&mut s.form, specs[spec as usize].name.as_bytes());
        s.form.push(b':');
        let (_, start, end) = s.fields[spec as usize];
        s.form
            .extend_from_slice(&s.normalised[start as usize..end as usize]);
    }
    s.form.push(b'}');

    let edits = Edits {
        fields: &s.fields,
        replaced: &s.normalised,
        skip: &s.skip,
    };
    s.tree.write(input, root, &mut s.out, &edits);
    Some(Fingerprint {
        hash: hash(TAG_FIELDS, &s.form),
        digest: payload_digest(&s.out),
    })
}

/// Appends the canonical form of the field's normalised value to
/// `s.normalised`; `None` when the normaliser refuses the value (the
/// reference then names the error).
fn normalised(s: &mut Scratch, input: &[u8], node: u32, spec: &FieldSpec) -> Option<()> {
    let start = s.normalised.len();
    if quick(&s.tree, input, node, &spec.normaliser, &mut s.normalised).is_some() {
        return Some(());
    }
    s.normalised.truncate(start);
    // Through the reference's tree and `normalise` itself.
    let value = s.tree.to_json(input, node)?;
    let normal = normalise::normalise(&spec.name, &spec.normaliser, &value).ok()?;
    s.text.clear();
    canonical::write_value(&mut s.text, &normal);
    s.normalised.extend_from_slice(s.text.as_bytes());
    Some(())
}

/// The normalisers' common cases without an allocation; `None` (possibly
/// with a partial value written) leaves the case to `normalise`.
fn quick(
    tree: &Tree,
    input: &[u8],
    node: u32,
    normaliser: &Normaliser,
    out: &mut Vec<u8>,
) -> Option<()> {
    let n = tree.node(node);
    match (normaliser, n.kind) {
        // Both keep the value as it is: its canonical form.
        (Normaliser::String, Kind::String) | (Normaliser::Object, _) => {
            tree.write(input, node, out, &Edits::default());
            Some(())
        }
        (Normaliser::Upper | Normaliser::Lower, Kind::String) => {
            let bytes = tree.bytes(input, n.text);
            // On ASCII text, Unicode case mapping is ASCII case mapping.
            if !bytes.is_ascii() {
                return None;
            }
            let upper = *normaliser == Normaliser::Upper;
            out.push(b'"');
            for &b in bytes {
                let b = if upper {
                    b.to_ascii_uppercase()
                } else {
                    b.to_ascii_lowercase()
                };
                escape_byte(out, b);
            }
            out.push(b'"');
            Some(())
        }
        // A number is read from its literal text (`token`), as `normalise`
        // reads it, never from its canonical form.
        (Normaliser::Decimal, Kind::String) => {
            fast_normalise::decimal(out, tree.bytes(input, n.text))
        }
        (Normaliser::Decimal, Kind::Number) => {
            fast_normalise::decimal(out, tree.bytes(input, n.token))
        }
        (Normaliser::Timestamp, Kind::String) => {
            fast_normalise::timestamp(out, tree.bytes(input, n.text))
        }
        (Normaliser::Round(places), Kind::Number) => {
            fast_normalise::round(out, tree.bytes(input, n.token), *places)
        }
        (Normaliser::Round(places), Kind::Array) => {
            out.push(b'[');
            for (index, &item) in tree.items(n).iter().enumerate() {
                let item = tree.node(item);
                if item.kind != Kind::Number {
                    return None;
                }
                if index > 0 {
                    out.push(b',');
                }
                fast_normalise::round(out, tree.bytes(input, item.token), *places)?;
            }
            out.push(b']');
            Some(())
        }
        _ => None,
    }
}
