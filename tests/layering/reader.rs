//! Reading `src/` for `tests/layering.rs`: each file's module, and every
//! module or item of the crate that it names, by a `use` or by a path in
//! the code; comments and string literals are not read.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A module path from the crate root (`["worker", "flight"]`).
pub(crate) type ModPath = Vec<String>;

/// One module or item named by a file.
#[derive(Clone, Debug)]
pub(crate) struct Reference {
    pub(crate) line: usize,
    /// The path as written.
    pub(crate) written: String,
    /// The path from the crate root.
    pub(crate) target: ModPath,
}

pub(crate) fn src() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a directory of src/") {
        let path = entry.expect("an entry of src/").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module a file is by its place: `src/worker/flight/mod.rs` is
/// `worker::flight`, `src/worker/poller.rs` is `worker::poller`.
fn module_by_place(relative: &Path) -> ModPath {
    let mut parts: ModPath = relative
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().expect("a file name");
    let stem = last.trim_end_matches(".rs");
    if !matches!(stem, "mod" | "lib" | "main") {
        parts.push(stem.to_string());
    }
    parts
}

/// The module of every file of `src/` (but `main.rs`, a crate of its own),
/// `#[path = "x_tests.rs"] mod tests;` followed.
fn modules(files: &[PathBuf]) -> BTreeMap<PathBuf, ModPath> {
    let mut modules: BTreeMap<PathBuf, ModPath> = files
        .iter()
        .filter(|f| {
            f.strip_prefix(src())
                .is_ok_and(|r| r != Path::new("main.rs"))
        })
        .map(|f| (f.clone(), module_by_place(f.strip_prefix(src()).unwrap())))
        .collect();
    let declared = |text: &str| -> Vec<(String, String)> {
        let mut found = Vec::new();
        let mut rest = text;
        while let Some(at) = rest.find("#[path = \"") {
            rest = &rest[at + 10..];
            let Some(end) = rest.find('"') else { break };
            let file = rest[..end].to_string();
            let after = rest[end..].split("mod ").nth(1).unwrap_or("");
            let name: String = after
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            found.push((file, name));
        }
        found
    };
    for file in files {
        let Some(owner) = modules.get(file).cloned() else {
            continue;
        };
        let text = std::fs::read_to_string(file).expect("a source file");
        for (target, name) in declared(&text) {
            let path = file.parent().expect("a directory").join(target);
            if let Some(module) = modules.get_mut(&path) {
                *module = owner.iter().cloned().chain([name]).collect();
            }
        }
    }
    modules
}

/// The text with comments, string and character literals blanked out
/// (newlines kept, for line numbers).
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && !ident_before(&chars, i) {
            // A raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            let close: String = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            let body: String = chars[j + 1..].iter().collect();
            let end = body.find(&close).map_or(chars.len(), |e| {
                j + 1 + body[..e].chars().count() + close.chars().count()
            });
            for &k in &chars[i..end] {
                out.push(blank(k));
            }
            i = end;
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                let skip = if chars[i] == '\\' { 2 } else { 1 };
                for &k in &chars[i..(i + skip).min(chars.len())] {
                    out.push(blank(k));
                }
                i += skip;
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' && is_char_literal(&chars, i) {
            let end = (i + 1..chars.len())
                .find(|&k| chars[k] == '\'' && (chars[k - 1] != '\\' || chars[k - 2] == '\\'))
                .map_or(chars.len(), |k| k + 1);
            for &k in &chars[i..end] {
                out.push(blank(k));
            }
            i = end;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn ident_before(chars: &[char], i: usize) -> bool {
    i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_')
}

/// `'x'`, `'\n'`, `'\''`, `'\u{1F600}'` rather than a lifetime (`'a`).
fn is_char_literal(chars: &[char], i: usize) -> bool {
    match chars.get(i + 1) {
        Some('\\') => true,
        Some(_) => chars.get(i + 2) == Some(&'\''),
        None => false,
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Ident(String),
    Path,
    Open,
    Close,
    Comma,
    Semi,
    Star,
    Other,
}

fn tokens(code: &str) -> Vec<(usize, Token)> {
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            out.push((
                line,
                Token::Ident(word.trim_start_matches("r#").to_string()),
            ));
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            out.push((line, Token::Path));
            i += 2;
        } else {
            out.push((
                line,
                match c {
                    '{' => Token::Open,
                    '}' => Token::Close,
                    ',' => Token::Comma,
                    ';' => Token::Semi,
                    '*' => Token::Star,
                    _ => Token::Other,
                },
            ));
            i += 1;
        }
    }
    out
}

/// The paths a use tree starting at `tokens[*at]` names, each whole.
fn use_tree(
    tokens: &[(usize, Token)],
    at: &mut usize,
    prefix: &[String],
    out: &mut Vec<Vec<String>>,
) {
    let mut path = prefix.to_vec();
    loop {
        match tokens.get(*at).map(|t| &t.1) {
            Some(Token::Ident(word)) if word == "as" => {
                *at += 2;
                break;
            }
            Some(Token::Ident(word)) => {
                path.push(word.clone());
                *at += 1;
            }
            Some(Token::Path) => *at += 1,
            Some(Token::Star) => {
                *at += 1;
                break;
            }
            Some(Token::Open) => {
                *at += 1;
                loop {
                    match tokens.get(*at).map(|t| &t.1) {
                        Some(Token::Close) => {
                            *at += 1;
                            return;
                        }
                        Some(Token::Comma) => *at += 1,
                        None => return,
                        _ => use_tree(tokens, at, &path, out),
                    }
                }
            }
            _ => break,
        }
    }
    out.push(path);
}

/// `path`, written in `module`, from the crate root; `None` for a path that
/// starts elsewhere (another crate, a local name).
fn resolve(module: &[String], path: &[String]) -> Option<ModPath> {
    let first = path.first()?;
    let mut here: ModPath = match first.as_str() {
        "crate" => Vec::new(),
        "super" | "self" => module.to_vec(),
        _ => return None,
    };
    let mut rest = if first == "crate" { &path[1..] } else { path };
    while let Some(step) = rest.first() {
        match step.as_str() {
            "super" => {
                here.pop();
            }
            "self" => {}
            _ => break,
        }
        rest = &rest[1..];
    }
    here.extend(rest.iter().cloned());
    Some(here)
}

/// Every module or item of the crate that `text`, the source of `module`,
/// names.
pub(crate) fn references(module: &[String], text: &str) -> Vec<Reference> {
    let tokens = tokens(&code_only(text));
    let mut out = Vec::new();
    // Inline modules around the current token: name, and the brace depth
    // inside them.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let mut i = 0;
    while i < tokens.len() {
        let here: ModPath = module
            .iter()
            .cloned()
            .chain(inline.iter().map(|(name, _)| name.clone()))
            .collect();
        let after_path = i > 0 && tokens[i - 1].1 == Token::Path;
        match &tokens[i].1 {
            Token::Open => {
                depth += 1;
                i += 1;
            }
            Token::Close => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth -= 1;
                i += 1;
            }
            Token::Ident(word) if word == "mod" => {
                if let (Some((_, Token::Ident(name))), Some((_, Token::Open))) =
                    (tokens.get(i + 1), tokens.get(i + 2))
                {
                    inline.push((name.clone(), depth + 1));
                    depth += 1;
                    i += 3;
                } else {
                    i += 1;
                }
            }
            Token::Ident(word) if word == "use" && !after_path => {
                let line = tokens[i].0;
                i += 1;
                let mut paths = Vec::new();
                use_tree(&tokens, &mut i, &[], &mut paths);
                for path in paths {
                    if let Some(target) = resolve(&here, &path) {
                        out.push(Reference {
                            line,
                            written: format!("use {}", path.join("::")),
                            target,
                        });
                    }
                }
            }
            Token::Ident(word)
                if !after_path && matches!(word.as_str(), "crate" | "super" | "self") =>
            {
                let line = tokens[i].0;
                let mut path = vec![word.clone()];
                i += 1;
                while let (Some((_, Token::Path)), Some((_, Token::Ident(next)))) =
                    (tokens.get(i), tokens.get(i + 1))
                {
                    path.push(next.clone());
                    i += 2;
                }
                if path.len() > 1 {
                    if let Some(target) = resolve(&here, &path) {
                        out.push(Reference {
                            line,
                            written: path.join("::"),
                            target,
                        });
                    }
                }
            }
            _ => i += 1,
        }
    }
    out
}

/// Every file of `src/` with its module and what it names.
pub(crate) fn crate_references() -> Vec<(PathBuf, ModPath, Vec<Reference>)> {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    files.sort();
    let modules = modules(&files);
    assert!(modules.len() > 50, "src/ read: {} files", modules.len());
    modules
        .into_iter()
        .map(|(file, module)| {
            let text = std::fs::read_to_string(&file).expect("a source file");
            let refs = references(&module, &text);
            (file, module, refs)
        })
        .collect()
}

// The reader itself, on sources written to trip it.

pub(crate) fn module(path: &str) -> ModPath {
    path.split("::").map(String::from).collect()
}

fn targets(module_path: &str, text: &str) -> Vec<String> {
    references(&module(module_path), text)
        .into_iter()
        .map(|r| r.target.join("::"))
        .collect()
}

#[test]
fn grouped_nested_and_aliased_imports_are_each_named() {
    let named = targets(
        "worker::resolve",
        "use crate::{config::Config, ops::{check_txn::read_back, kafka as k}, store};\n",
    );
    assert_eq!(
        named,
        [
            "config::Config",
            "ops::check_txn::read_back",
            "ops::kafka",
            "store"
        ]
    );
}

#[test]
fn relative_paths_resolve_from_the_file_and_its_inline_modules() {
    assert_eq!(
        targets("worker::flight::state", "use super::super::ops::kafka;"),
        ["worker::ops::kafka"],
        "super of worker::flight::state is worker::flight, its super is worker"
    );
    assert_eq!(
        targets("worker::flight", "use super::super::ops::kafka;"),
        ["ops::kafka"]
    );
    assert_eq!(
        targets(
            "decision",
            "mod tests {\n    use super::super::store::TopicTag;\n}\n"
        ),
        ["store::TopicTag"]
    );
    assert_eq!(
        targets("decision", "mod tests {}\nfn f() { self::g() }\n"),
        ["decision::g"],
        "a closed inline module no longer counts"
    );
}

#[test]
fn paths_in_code_count_and_comments_and_strings_do_not() {
    let text = r##"
        // use crate::ops::kafka;
        /* crate::ops::check_txn::verdict( /* nested */ ) */
        const WHY: &str = "see crate::ops::kafka";
        const RAW: &str = r#"crate::ops::group"#;
        const QUOTE: char = '"';
        fn members<'a>(x: &'a str) -> usize {
            crate::ops::kafka::group_members(x)
        }
    "##;
    let refs = references(&module("worker::watch"), text);
    let named: Vec<(usize, String)> = refs.iter().map(|r| (r.line, r.target.join("::"))).collect();
    assert_eq!(named, [(8, "ops::kafka::group_members".to_string())]);
}
