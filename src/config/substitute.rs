//! `${VAR}` and `${VAR:-default}` anywhere in the config file, so secrets
//! (`sasl.password`, a Redis password) and per-environment addresses live in
//! the environment, not in the file.
//!
//! The value is put into the text as it is, before TOML parsing: inside a
//! quoted string it becomes part of the string, outside one it must itself
//! be TOML (`max_records = ${BATCH:-1000}`). `$${` writes a literal `${`.
//! Comment lines (first non-blank character `#`) are left alone, so an
//! example in a comment needs no variable set. A variable that is unset,
//! and has no default, is an error naming it and its line: a silently empty
//! password is worse than a refusal.
//!
//! Why this is not `shellexpand` (3.1, checked against the tests below):
//! it reads `${VAR}` and `${VAR:-default}` the same way, but it also
//! expands `$VAR` without braces and turns every `$$` into `$`, so a
//! literal `$` that configs may already hold changes meaning: `pa$word`
//! becomes a lookup of `word`, and `pa$HOME` silently becomes `pa/root`, a
//! wrong secret with no error. It leaves an unclosed `${OPEN` in the text
//! (refused here), and a default hides a malformed name (`${bad name:-x}`
//! gives `x`; refused here). Keeping this grammar on top of it would take
//! a pre-pass that finds each reference, splits its default and checks its
//! name: what `expand_line` does now, lookup included.

/// Why a file could not be expanded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubstituteError {
    #[error("line {line}: ${{{name}}} is not set and has no default (write ${{{name}:-default}})")]
    Unset { line: usize, name: String },
    #[error("line {line}: `${{` without a closing `}}`")]
    Unclosed { line: usize },
    #[error("line {line}: `${{{text}}}` is not a variable name (letters, digits, `_`)")]
    BadName { line: usize, text: String },
}

/// Expands every reference in `text`, reading variables through `var`.
pub(crate) fn substitute(
    text: &str,
    var: impl Fn(&str) -> Option<String>,
) -> Result<String, SubstituteError> {
    let mut out = String::with_capacity(text.len());
    for (index, line) in text.split_inclusive('\n').enumerate() {
        if line.trim_start().starts_with('#') {
            out.push_str(line);
            continue;
        }
        expand_line(line, index + 1, &var, &mut out)?;
    }
    Ok(out)
}

fn expand_line(
    line: &str,
    number: usize,
    var: &impl Fn(&str) -> Option<String>,
    out: &mut String,
) -> Result<(), SubstituteError> {
    let mut rest = line;
    while let Some(at) = rest.find("${") {
        // `$${` is an escaped `${`.
        if rest[..at].ends_with('$') {
            out.push_str(&rest[..at - 1]);
            out.push_str("${");
            rest = &rest[at + 2..];
            continue;
        }
        out.push_str(&rest[..at]);
        let body = &rest[at + 2..];
        let end = body
            .find('}')
            .ok_or(SubstituteError::Unclosed { line: number })?;
        let reference = &body[..end];
        let (name, default) = match reference.split_once(":-") {
            Some((name, default)) => (name, Some(default)),
            None => (reference, None),
        };
        let valid = !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !name.starts_with(|c: char| c.is_ascii_digit());
        if !valid {
            return Err(SubstituteError::BadName {
                line: number,
                text: reference.to_string(),
            });
        }
        match (var(name), default) {
            (Some(value), _) => out.push_str(&value),
            (None, Some(default)) => out.push_str(default),
            (None, None) => {
                return Err(SubstituteError::Unset {
                    line: number,
                    name: name.to_string(),
                })
            }
        }
        rest = &body[end + 1..];
    }
    out.push_str(rest);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "SASL_PASSWORD" => Some("s3cr3t".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn a_set_variable_is_put_in_place() {
        let text = "\"sasl.password\" = \"${SASL_PASSWORD}\"\n";
        assert_eq!(
            substitute(text, env).unwrap(),
            "\"sasl.password\" = \"s3cr3t\"\n"
        );
    }

    #[test]
    fn an_unset_variable_takes_its_default_and_a_set_one_ignores_it() {
        let text = "max_records = ${BATCH:-1000}\nurl = \"${SASL_PASSWORD:-x}\"";
        assert_eq!(
            substitute(text, env).unwrap(),
            "max_records = 1000\nurl = \"s3cr3t\""
        );
    }

    #[test]
    fn a_variable_set_to_empty_is_empty_not_its_default() {
        assert_eq!(substitute("a = \"${EMPTY:-d}\"", env).unwrap(), "a = \"\"");
    }

    #[test]
    fn an_unset_variable_without_default_is_refused_with_its_name_and_line() {
        let error = substitute("[kafka]\n\"sasl.password\" = \"${NOPE}\"\n", env).unwrap_err();
        assert_eq!(
            error,
            SubstituteError::Unset {
                line: 2,
                name: "NOPE".into()
            }
        );
        assert!(error.to_string().contains("${NOPE}"), "{error}");
    }

    #[test]
    fn escaped_references_and_comments_are_left_alone() {
        let text = "# set ${UNSET} in the environment\na = \"$${literal}\"\n";
        assert_eq!(
            substitute(text, env).unwrap(),
            "# set ${UNSET} in the environment\na = \"${literal}\"\n"
        );
    }

    #[test]
    fn a_dollar_without_a_brace_is_literal_even_before_a_set_name() {
        let env = |name: &str| (name == "HOME").then(|| "/root".to_string());
        let text = "password = \"pa$HOME$$x$1\"\n";
        assert_eq!(substitute(text, env).unwrap(), text);
    }

    #[test]
    fn a_malformed_reference_is_refused() {
        assert_eq!(
            substitute("a = \"${OPEN\"", env),
            Err(SubstituteError::Unclosed { line: 1 })
        );
        assert!(matches!(
            substitute("a = \"${not a name}\"", env),
            Err(SubstituteError::BadName { line: 1, .. })
        ));
        // A default does not hide a malformed name.
        assert!(matches!(
            substitute("a = \"${not a name:-x}\"", env),
            Err(SubstituteError::BadName { line: 1, .. })
        ));
    }
}
