//! The file a config was read from, as a remedy names it: the command an
//! operator is told to run (`idemgate rebuild --config ... --stream bank`)
//! names the file this process read, ready to paste, not a placeholder.

use super::Config;

impl Config {
    /// `--config` and the file `load` read, as `--config` (or
    /// `IDEMGATE_CONFIG`) gave it, quoted for a POSIX shell where it needs
    /// it; `--config <file>` for a config parsed from text.
    pub(crate) fn config_flag(&self) -> String {
        match &self.source {
            Some(path) => format!("--config {}", shell_word(&path.to_string_lossy())),
            None => "--config <file>".to_string(),
        }
    }
}

/// `text` as one POSIX shell word: as it is where every character is
/// plain, else in single quotes (a quote inside written `'\''`).
fn shell_word(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+,:@%=".contains(c));
    if plain {
        text.to_string()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loaded_config_names_its_file_and_a_parsed_one_a_placeholder() {
        let dir = std::env::temp_dir().join(format!("idemgate-source-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let text = "[kafka]\n\"bootstrap.servers\" = \"b:9092\"\n\n[[streams]]\nname = \"bank\"\n\
                    inputs = [\"raw.bank\"]\nclean = \"clean.bank\"\naudit = \"audit.bank\"\n\
                    profile = \"bank-txn\"\nmode = \"exact\"\nttl = { explicit = \"1h\" }\n";
        let plain = dir.join("gate.toml");
        std::fs::write(&plain, text).unwrap();
        let spaced = dir.join("my gate's.toml");
        std::fs::write(&spaced, text).unwrap();
        let flag = |path: &std::path::Path| Config::load(path).map(|c| c.config_flag());
        let (plain_flag, spaced_flag) = (flag(&plain), flag(&spaced));
        let parsed = Config::parse(text).map(|c| c.config_flag());
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(plain_flag.unwrap(), format!("--config {}", plain.display()));
        assert_eq!(
            spaced_flag.unwrap(),
            format!("--config '{}/my gate'\\''s.toml'", dir.display())
        );
        assert_eq!(parsed.unwrap(), "--config <file>");
    }
}
