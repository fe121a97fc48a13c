//! The fast path's parsed payload: a small tree of nodes that point into
//! the input or into an arena, built by one strict scan and kept in
//! buffers reused from record to record, written out in canonical form.

use serde_json::Number;

use super::fast_scan;
use super::json::{Json, Num, Object};

/// Deeper nesting goes to the reference (serde_json's own limit is 128).
const MAX_DEPTH: u32 = 100;

/// A byte range in the input (`arena == false`) or in the arena.
#[derive(Clone, Copy, Debug)]
pub(super) struct Span {
    pub(super) start: u32,
    pub(super) end: u32,
    pub(super) arena: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
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
pub(super) struct Node {
    pub(super) kind: Kind,
    pub(super) text: Span,
    pub(super) token: Span,
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

/// What [`Tree::write`] changes in the canonical form: the entries whose
/// value is a `skip` node are left out of their object (ignored fields),
/// and a field's node is written as its normalised value, a range of
/// `replaced`.
#[derive(Clone, Copy, Default)]
pub(super) struct Edits<'a> {
    /// Per listed field: its node and its normalised value's range.
    pub(super) fields: &'a [(u32, u32, u32)],
    pub(super) replaced: &'a [u8],
    /// Object entry values to leave out.
    pub(super) skip: &'a [u32],
}

/// The parsed payload: nodes referencing the input and the arena.
pub(super) struct Tree {
    nodes: Vec<Node>,
    items: Vec<u32>,
    entries: Vec<Entry>,
    arena: Vec<u8>,
    item_stack: Vec<u32>,
    entry_stack: Vec<Entry>,
    /// An object gave a key twice: the reference decides such a record
    /// (`duplicate-key` where the key is on the identity's path), so the
    /// parse gives up, costing nothing to records without one.
    duplicate: bool,
}

impl Tree {
    pub(super) const fn new() -> Tree {
        Tree {
            nodes: Vec::new(),
            items: Vec::new(),
            entries: Vec::new(),
            arena: Vec::new(),
            item_stack: Vec::new(),
            entry_stack: Vec::new(),
            duplicate: false,
        }
    }

    /// Empties the tree for the next record, keeping its buffers.
    #[inline]
    pub(super) fn clear(&mut self) {
        self.nodes.clear();
        self.items.clear();
        self.entries.clear();
        self.arena.clear();
        self.item_stack.clear();
        self.entry_stack.clear();
        self.duplicate = false;
    }

    /// Whether any buffer has grown past `limit` bytes.
    #[inline]
    pub(super) fn grown_past(&self, limit: usize) -> bool {
        self.arena.capacity() > limit
            || self.nodes.capacity() * std::mem::size_of::<Node>() > limit
            || self.entries.capacity() * std::mem::size_of::<Entry>() > limit
            || self.entry_stack.capacity() * std::mem::size_of::<Entry>() > limit
            || self.items.capacity() * 4 > limit
            || self.item_stack.capacity() * 4 > limit
    }

    /// Parses a whole payload into the (cleared) tree: its root node, or
    /// `None` at the first doubt.
    #[inline]
    pub(super) fn parse(&mut self, input: &[u8]) -> Option<u32> {
        let mut parser = Parser {
            input,
            pos: 0,
            tree: self,
        };
        let root = parser.value(0)?;
        parser.skip_ws();
        (parser.pos == input.len() && !self.duplicate).then_some(root)
    }

    #[inline]
    pub(super) fn node(&self, node: u32) -> Node {
        self.nodes[node as usize]
    }

    /// The item nodes of an array node.
    #[inline]
    pub(super) fn items(&self, array: Node) -> &[u32] {
        &self.items[array.text.start as usize..array.text.end as usize]
    }
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

    fn string(&mut self) -> Option<Span> {
        let (text, end) = fast_scan::string(self.input, self.pos, &mut self.tree.arena)?;
        self.pos = end;
        Some(text)
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
            b'-' | b'0'..=b'9' => {
                let (text, token, end) =
                    fast_scan::number(self.input, self.pos, &mut self.tree.arena)?;
                self.pos = end;
                Some(self.push(Kind::Number, text, token))
            }
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
}

impl Tree {
    #[inline]
    pub(super) fn bytes<'x>(&'x self, input: &'x [u8], span: Span) -> &'x [u8] {
        let from = if span.arena { &self.arena } else { input };
        &from[span.start as usize..span.end as usize]
    }

    /// Sorts the object's entries (from `base` on the entry stack) by key
    /// bytes, keeps the last of equal keys (noting that there were some),
    /// and stores them.
    fn close_object(&mut self, input: &[u8], base: usize) -> Span {
        let Tree {
            entries,
            arena,
            entry_stack,
            duplicate,
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
            if superseded {
                *duplicate = true;
            } else {
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
    #[inline]
    pub(super) fn lookup(&self, input: &[u8], root: u32, path: &str) -> Option<u32> {
        self.find(input, root, path)
            .filter(|&node| self.nodes[node as usize].kind != Kind::Null)
    }

    /// The node at a dotted path, `null` included, as `ignore::remove`
    /// finds what it removes; `None` when a step is absent or not an
    /// object.
    #[inline]
    pub(super) fn find(&self, input: &[u8], root: u32, path: &str) -> Option<u32> {
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
        }
        Some(node)
    }

    /// Appends the canonical form of `node` to `out` with `edits` applied.
    pub(super) fn write(&self, input: &[u8], node: u32, out: &mut Vec<u8>, edits: &Edits<'_>) {
        if let Some(&(_, start, end)) = edits.fields.iter().find(|(at, _, _)| *at == node) {
            out.extend_from_slice(&edits.replaced[start as usize..end as usize]);
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
                    self.write(input, item, out, edits);
                }
                out.push(b']');
            }
            Kind::Object => {
                out.push(b'{');
                let entries = &self.entries[n.text.start as usize..n.text.end as usize];
                let mut first = true;
                for entry in entries {
                    if edits.skip.contains(&entry.value) {
                        continue;
                    }
                    if !first {
                        out.push(b',');
                    }
                    first = false;
                    self.write_string(input, entry.key, out);
                    out.push(b':');
                    self.write(input, entry.value, out, edits);
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

    /// The node as the reference parses it (`json::parse`).
    pub(super) fn to_json(&self, input: &[u8], node: u32) -> Option<Json> {
        let n = self.nodes[node as usize];
        Some(match n.kind {
            Kind::Null => Json::Null,
            Kind::True => Json::Bool(true),
            Kind::False => Json::Bool(false),
            Kind::Number => {
                let token = self.bytes(input, n.token);
                Json::Number(Num {
                    literal: std::str::from_utf8(token).ok()?.to_owned(),
                    parsed: serde_json::from_slice::<Number>(token).ok()?,
                })
            }
            Kind::String => Json::String(
                std::str::from_utf8(self.bytes(input, n.text))
                    .ok()?
                    .to_owned(),
            ),
            Kind::Array => Json::Array(
                self.items[n.text.start as usize..n.text.end as usize]
                    .iter()
                    .map(|&item| self.to_json(input, item))
                    .collect::<Option<_>>()?,
            ),
            Kind::Object => {
                let mut map = Object::new();
                for entry in &self.entries[n.text.start as usize..n.text.end as usize] {
                    let key = std::str::from_utf8(self.bytes(input, entry.key)).ok()?;
                    map.insert(key.to_owned(), self.to_json(input, entry.value)?);
                }
                Json::Object(map)
            }
        })
    }
}

/// A string's canonical form, escaped as `canonical::write_string` (and
/// serde_json) escape: `"`, `\` and control characters only.
#[inline]
pub(super) fn write_escaped(out: &mut Vec<u8>, bytes: &[u8]) {
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

#[inline]
pub(super) fn escape_byte(out: &mut Vec<u8>, b: u8) {
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
