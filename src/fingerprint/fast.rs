//! The fast path of [`super::fingerprint`]: the same hash and digest as the
//! reference (`fingerprint_reference`, serde_json `Value` plus
//! `canonical`), without a heap allocation per record in steady state.
//!
//! The payload is scanned once into a small tree kept in thread-local
//! buffers that are reused from record to record: nodes point into the
//! input (a string without a backslash is its own canonical form, since
//! serde_json refuses raw control characters in strings and escapes
//! nothing else) or into an arena (strings with escapes, decoded; numbers
//! that are not plain integers, parsed by serde_json itself and printed as
//! `Number` prints). Each object's entries are sorted by key bytes once,
//! the last of equal keys kept, and the canonical form is written straight
//! into a reused buffer.
//!
//! The scanner accepts a strict subset of what serde_json accepts. Whenever
//! it has any doubt (a syntax error, invalid UTF-8, a lone surrogate,
//! nesting deeper than [`MAX_DEPTH`], a number serde_json refuses, a field
//! that is missing or of the wrong type, a normaliser error, field paths
//! that nest in one another), it returns `None` and the caller runs the
//! reference, which then decides (including every error and its text).

use std::cell::RefCell;
use std::io::Write as _;

use serde_json::{Map, Number, Value};

use super::{
    canonical, fast_normalise, hash, header_value, normalise, payload_digest, FieldSpec,
    Fingerprint, Invalid, Normaliser, Profile, RecordView, TAG_FIELDS, TAG_HEADER, TAG_PAYLOAD,
    TAG_PAYLOAD_RAW,
};

/// Deeper nesting goes to the reference (serde_json's own limit is 128).
const MAX_DEPTH: u32 = 100;

/// Buffers grown past this are dropped after the record, so one huge
/// payload does not pin its memory in every worker thread for good.
const KEEP_BYTES: usize = 1 << 20;

/// A byte range in the input (`arena == false`) or in the arena.
#[derive(Clone, Copy, Debug)]
struct Span {
    start: u32,
    end: u32,
    arena: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Null,
    True,
    False,
    /// `text`: canonical form; `token`: the number as written.
    Number,
    /// `text`: the decoded string (in the input when it had no escape).
    String,
    /// `text.start..text.end`: range in `items`.
    Array,
    /// `text.start..text.end`: range in `entries` (sorted, deduplicated).
    Object,
}

#[derive(Clone, Copy, Debug)]
struct Node {
    kind: Kind,
    text: Span,
    token: Span,
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    /// Decoded key.
    key: Span,
    value: u32,
    /// Position in the object as written, for a stable sort.
    seq: u32,
    /// The key's first 8 bytes, big-endian, zero-padded: orders as the
    /// bytes do, ties settled on the whole key.
    prefix: u64,
}

fn prefix(key: &[u8]) -> u64 {
    let mut bytes = [0u8; 8];
    let n = key.len().min(8);
    bytes[..n].copy_from_slice(&key[..n]);
    u64::from_be_bytes(bytes)
}

const NO_SPAN: Span = Span {
    start: 0,
    end: 0,
    arena: false,
};

/// The parsed payload: nodes referencing the input and the arena.
struct Tree {
    nodes: Vec<Node>,
    items: Vec<u32>,
    entries: Vec<Entry>,
    arena: Vec<u8>,
    item_stack: Vec<u32>,
    entry_stack: Vec<Entry>,
}

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
    /// For `canonical::write_value` of a normalised value.
    text: String,
}

impl Scratch {
    const fn new() -> Scratch {
        Scratch {
            tree: Tree {
                nodes: Vec::new(),
                items: Vec::new(),
                entries: Vec::new(),
                arena: Vec::new(),
                item_stack: Vec::new(),
                entry_stack: Vec::new(),
            },
            out: Vec::new(),
            form: Vec::new(),
            normalised: Vec::new(),
            fields: Vec::new(),
            order: Vec::new(),
            text: String::new(),
        }
    }

    fn clear(&mut self) {
        let t = &mut self.tree;
        t.nodes.clear();
        t.items.clear();
        t.entries.clear();
        t.arena.clear();
        t.item_stack.clear();
        t.entry_stack.clear();
        self.out.clear();
        self.form.clear();
        self.normalised.clear();
        self.fields.clear();
        self.order.clear();
        self.text.clear();
    }

    /// Drops buffers a huge record grew, keeping the usual sizes.
    fn trim(&mut self) {
        let big = self.out.capacity() > KEEP_BYTES
            || self.tree.arena.capacity() > KEEP_BYTES
            || self.tree.nodes.capacity() * std::mem::size_of::<Node>() > KEEP_BYTES
            || self.tree.entries.capacity() * std::mem::size_of::<Entry>() > KEEP_BYTES
            || self.tree.entry_stack.capacity() * std::mem::size_of::<Entry>() > KEEP_BYTES
            || self.tree.items.capacity() * 4 > KEEP_BYTES
            || self.tree.item_stack.capacity() * 4 > KEEP_BYTES
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
    let root = parse(&mut s.tree, payload)?;
    match profile {
        Profile::Header { name } => {
            s.tree.write(payload, root, &mut s.out, &[], &[]);
            let digest = payload_digest(&s.out);
            Some(header_value(record, name).map(|text| Fingerprint {
                hash: hash(TAG_HEADER, text.as_bytes()),
                digest,
            }))
        }
        Profile::Payload { raw } => {
            s.tree.write(payload, root, &mut s.out, &[], &[]);
            let digest = payload_digest(&s.out);
            let hash = if *raw {
                hash(TAG_PAYLOAD_RAW, payload)
            } else {
                hash(TAG_PAYLOAD, &s.out)
            };
            Some(Ok(Fingerprint { hash, digest }))
        }
        Profile::Fields(specs) => fields(s, specs, payload, root).map(Ok),
    }
}

/// The `fields` profile on a parsed payload; `None` for any error (the
/// reference names it) or a case the fast path does not take.
fn fields(s: &mut Scratch, specs: &[FieldSpec], input: &[u8], root: u32) -> Option<Fingerprint> {
    if specs.is_empty() || s.tree.nodes[root as usize].kind != Kind::Object {
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

    s.tree
        .write(input, root, &mut s.out, &s.fields, &s.normalised);
    Some(Fingerprint {
        hash: hash(TAG_FIELDS, &s.form),
        digest: payload_digest(&s.out),
    })
}

/// `inner` is a dotted path strictly below `outer` (or the same path).
fn nests(outer: &str, inner: &str) -> bool {
    match inner.strip_prefix(outer) {
        Some("") => true,
        Some(rest) => rest.starts_with('.'),
        None => false,
    }
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
    // Through serde_json `Value` and `normalise` itself, as the reference.
    let value = s.tree.to_value(input, node)?;
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
    let n = tree.nodes[node as usize];
    match (normaliser, n.kind) {
        // Both keep the value as it is: its canonical form.
        (Normaliser::String, Kind::String) | (Normaliser::Object, _) => {
            tree.write(input, node, out, &[], &[]);
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
        // A number's text is its canonical form, `Number`'s Display, which
        // is what `normalise` reads.
        (Normaliser::Decimal, Kind::String | Kind::Number) => {
            fast_normalise::decimal(out, tree.bytes(input, n.text))
        }
        (Normaliser::Timestamp, Kind::String) => {
            fast_normalise::timestamp(out, tree.bytes(input, n.text))
        }
        (Normaliser::Round(places), Kind::Number) => {
            fast_normalise::round(out, tree.bytes(input, n.text), *places)
        }
        (Normaliser::Round(places), Kind::Array) => {
            out.push(b'[');
            let items = &tree.items[n.text.start as usize..n.text.end as usize];
            for (index, &item) in items.iter().enumerate() {
                let item = tree.nodes[item as usize];
                if item.kind != Kind::Number {
                    return None;
                }
                if index > 0 {
                    out.push(b',');
                }
                fast_normalise::round(out, tree.bytes(input, item.text), *places)?;
            }
            out.push(b']');
            Some(())
        }
        _ => None,
    }
}

fn parse(tree: &mut Tree, input: &[u8]) -> Option<u32> {
    let mut parser = Parser {
        input,
        pos: 0,
        tree,
    };
    let root = parser.value(0)?;
    parser.skip_ws();
    (parser.pos == input.len()).then_some(root)
}

struct Parser<'a, 't> {
    input: &'a [u8],
    pos: usize,
    tree: &'t mut Tree,
}

impl Parser<'_, '_> {
    fn peek(&self) -> Option<u8> {
        self.input.get(self.pos).copied()
    }

    /// The whitespace serde_json skips.
    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.pos + word.len();
        (self.input.get(self.pos..end)? == word).then(|| self.pos = end)
    }

    fn push(&mut self, kind: Kind, text: Span, token: Span) -> u32 {
        self.tree.nodes.push(Node { kind, text, token });
        (self.tree.nodes.len() - 1) as u32
    }

    fn value(&mut self, depth: u32) -> Option<u32> {
        self.skip_ws();
        match self.peek()? {
            b'n' => {
                self.literal(b"null")?;
                Some(self.push(Kind::Null, NO_SPAN, NO_SPAN))
            }
            b't' => {
                self.literal(b"true")?;
                Some(self.push(Kind::True, NO_SPAN, NO_SPAN))
            }
            b'f' => {
                self.literal(b"false")?;
                Some(self.push(Kind::False, NO_SPAN, NO_SPAN))
            }
            b'"' => {
                let text = self.string()?;
                Some(self.push(Kind::String, text, NO_SPAN))
            }
            b'-' | b'0'..=b'9' => self.number(),
            b'[' => {
                if depth >= MAX_DEPTH {
                    return None;
                }
                self.pos += 1;
                let base = self.tree.item_stack.len();
                self.skip_ws();
                if self.peek()? == b']' {
                    self.pos += 1;
                } else {
                    loop {
                        let item = self.value(depth + 1)?;
                        self.tree.item_stack.push(item);
                        self.skip_ws();
                        match self.peek()? {
                            b',' => self.pos += 1,
                            b']' => {
                                self.pos += 1;
                                break;
                            }
                            _ => return None,
                        }
                    }
                }
                let tree = &mut *self.tree;
                let start = tree.items.len() as u32;
                tree.items.extend_from_slice(&tree.item_stack[base..]);
                tree.item_stack.truncate(base);
                let span = Span {
                    start,
                    end: tree.items.len() as u32,
                    arena: false,
                };
                Some(self.push(Kind::Array, span, NO_SPAN))
            }
            b'{' => {
                if depth >= MAX_DEPTH {
                    return None;
                }
                self.pos += 1;
                let base = self.tree.entry_stack.len();
                self.skip_ws();
                if self.peek()? == b'}' {
                    self.pos += 1;
                } else {
                    let mut seq = 0u32;
                    loop {
                        self.skip_ws();
                        if self.peek()? != b'"' {
                            return None;
                        }
                        let key = self.string()?;
                        let prefix = prefix(self.tree.bytes(self.input, key));
                        self.skip_ws();
                        if self.peek()? != b':' {
                            return None;
                        }
                        self.pos += 1;
                        let value = self.value(depth + 1)?;
                        self.tree.entry_stack.push(Entry {
                            key,
                            value,
                            seq,
                            prefix,
                        });
                        seq += 1;
                        self.skip_ws();
                        match self.peek()? {
                            b',' => self.pos += 1,
                            b'}' => {
                                self.pos += 1;
                                break;
                            }
                            _ => return None,
                        }
                    }
                }
                let span = self.tree.close_object(self.input, base);
                Some(self.push(Kind::Object, span, NO_SPAN))
            }
            _ => None,
        }
    }

    /// JSON number grammar, strictly; plain integers are their own
    /// canonical form, anything else is parsed and printed by serde_json.
    fn number(&mut self) -> Option<u32> {
        let input = self.input;
        let start = self.pos;
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
        self.pos = pos;
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
            let arena = &mut self.tree.arena;
            let from = arena.len() as u32;
            write!(arena, "{number}").ok()?;
            Span {
                start: from,
                end: arena.len() as u32,
                arena: true,
            }
        };
        Some(self.push(Kind::Number, text, token))
    }

    /// A string at the opening quote: its decoded text.
    fn string(&mut self) -> Option<Span> {
        let input = self.input;
        let start = self.pos + 1;
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
        self.pos = end + 1;
        let raw = &input[start..end];
        // Escapes are ASCII, so the whole text is valid UTF-8 exactly when
        // each run between escapes is (what serde_json checks).
        if !ascii && std::str::from_utf8(raw).is_err() {
            return None;
        }
        if !escaped {
            return Some(Span {
                start: start as u32,
                end: end as u32,
                arena: false,
            });
        }
        let arena = &mut self.tree.arena;
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
        Some(Span {
            start: from as u32,
            end: arena.len() as u32,
            arena: true,
        })
    }
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

impl Tree {
    fn bytes<'x>(&'x self, input: &'x [u8], span: Span) -> &'x [u8] {
        let from = if span.arena { &self.arena } else { input };
        &from[span.start as usize..span.end as usize]
    }

    /// Sorts the object's entries (from `base` on the entry stack) by key
    /// bytes, keeps the last of equal keys, and stores them.
    fn close_object(&mut self, input: &[u8], base: usize) -> Span {
        let Tree {
            entries,
            arena,
            entry_stack,
            ..
        } = self;
        let key = |span: Span| -> &[u8] {
            let from: &[u8] = if span.arena { arena } else { input };
            &from[span.start as usize..span.end as usize]
        };
        let pending = &mut entry_stack[base..];
        pending.sort_unstable_by(|a, b| {
            a.prefix
                .cmp(&b.prefix)
                .then_with(|| key(a.key).cmp(key(b.key)))
                .then(a.seq.cmp(&b.seq))
        });
        let start = entries.len() as u32;
        for (index, entry) in pending.iter().enumerate() {
            let superseded = pending
                .get(index + 1)
                .is_some_and(|next| next.prefix == entry.prefix && key(next.key) == key(entry.key));
            if !superseded {
                entries.push(*entry);
            }
        }
        entry_stack.truncate(base);
        Span {
            start,
            end: entries.len() as u32,
            arena: false,
        }
    }

    /// The node at a dotted path, as `normalise::lookup` finds it; `None`
    /// for every error case (absent, null, a non-object on the way).
    fn lookup(&self, input: &[u8], root: u32, path: &str) -> Option<u32> {
        let mut node = root;
        for segment in path.split('.') {
            let n = self.nodes[node as usize];
            if n.kind != Kind::Object {
                return None;
            }
            let entries = &self.entries[n.text.start as usize..n.text.end as usize];
            let at = entries
                .binary_search_by(|e| self.bytes(input, e.key).cmp(segment.as_bytes()))
                .ok()?;
            node = entries[at].value;
            if self.nodes[node as usize].kind == Kind::Null {
                return None;
            }
        }
        Some(node)
    }

    /// Appends the canonical form of `node` to `out`, writing the
    /// normalised value (a range of `replaced`) in place of a field's node.
    fn write(
        &self,
        input: &[u8],
        node: u32,
        out: &mut Vec<u8>,
        fields: &[(u32, u32, u32)],
        replaced: &[u8],
    ) {
        if let Some(&(_, start, end)) = fields.iter().find(|(at, _, _)| *at == node) {
            out.extend_from_slice(&replaced[start as usize..end as usize]);
            return;
        }
        let n = self.nodes[node as usize];
        match n.kind {
            Kind::Null => out.extend_from_slice(b"null"),
            Kind::True => out.extend_from_slice(b"true"),
            Kind::False => out.extend_from_slice(b"false"),
            Kind::Number => out.extend_from_slice(self.bytes(input, n.text)),
            Kind::String => self.write_string(input, n.text, out),
            Kind::Array => {
                out.push(b'[');
                let items = &self.items[n.text.start as usize..n.text.end as usize];
                for (index, &item) in items.iter().enumerate() {
                    if index > 0 {
                        out.push(b',');
                    }
                    self.write(input, item, out, fields, replaced);
                }
                out.push(b']');
            }
            Kind::Object => {
                out.push(b'{');
                let entries = &self.entries[n.text.start as usize..n.text.end as usize];
                for (index, entry) in entries.iter().enumerate() {
                    if index > 0 {
                        out.push(b',');
                    }
                    self.write_string(input, entry.key, out);
                    out.push(b':');
                    self.write(input, entry.value, out, fields, replaced);
                }
                out.push(b'}');
            }
        }
    }

    fn write_string(&self, input: &[u8], text: Span, out: &mut Vec<u8>) {
        let bytes = self.bytes(input, text);
        if text.arena {
            write_escaped(out, bytes);
        } else {
            // Straight from the input: no quote, backslash or control
            // character inside, so nothing to escape.
            out.push(b'"');
            out.extend_from_slice(bytes);
            out.push(b'"');
        }
    }

    /// The node as serde_json would have parsed it.
    fn to_value(&self, input: &[u8], node: u32) -> Option<Value> {
        let n = self.nodes[node as usize];
        Some(match n.kind {
            Kind::Null => Value::Null,
            Kind::True => Value::Bool(true),
            Kind::False => Value::Bool(false),
            Kind::Number => {
                Value::Number(serde_json::from_slice::<Number>(self.bytes(input, n.token)).ok()?)
            }
            Kind::String => Value::String(
                std::str::from_utf8(self.bytes(input, n.text))
                    .ok()?
                    .to_owned(),
            ),
            Kind::Array => Value::Array(
                self.items[n.text.start as usize..n.text.end as usize]
                    .iter()
                    .map(|&item| self.to_value(input, item))
                    .collect::<Option<_>>()?,
            ),
            Kind::Object => {
                let mut map = Map::new();
                for entry in &self.entries[n.text.start as usize..n.text.end as usize] {
                    let key = std::str::from_utf8(self.bytes(input, entry.key)).ok()?;
                    map.insert(key.to_owned(), self.to_value(input, entry.value)?);
                }
                Value::Object(map)
            }
        })
    }
}

/// A string's canonical form, escaped as `canonical::write_string` (and
/// serde_json) escape: `"`, `\` and control characters only.
fn write_escaped(out: &mut Vec<u8>, bytes: &[u8]) {
    out.push(b'"');
    let mut run = 0;
    for (index, &b) in bytes.iter().enumerate() {
        if b == b'"' || b == b'\\' || b < 0x20 {
            out.extend_from_slice(&bytes[run..index]);
            escape_byte(out, b);
            run = index + 1;
        }
    }
    out.extend_from_slice(&bytes[run..]);
    out.push(b'"');
}

fn escape_byte(out: &mut Vec<u8>, b: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    match b {
        b'"' => out.extend_from_slice(b"\\\""),
        b'\\' => out.extend_from_slice(b"\\\\"),
        0x08 => out.extend_from_slice(b"\\b"),
        b'\t' => out.extend_from_slice(b"\\t"),
        b'\n' => out.extend_from_slice(b"\\n"),
        0x0c => out.extend_from_slice(b"\\f"),
        b'\r' => out.extend_from_slice(b"\\r"),
        0..=0x1f => out.extend_from_slice(&[
            b'\\',
            b'u',
            b'0',
            b'0',
            HEX[usize::from(b >> 4)],
            HEX[usize::from(b & 0xf)],
        ]),
        _ => out.push(b),
    }
}
