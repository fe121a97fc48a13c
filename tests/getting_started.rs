//! docs/getting-started.md, run as a reader runs it: docs that are
//! tested. Every ```` ```sh ```` block of the page is a command a reader
//! types. The first is the one command (`scripts/try-kafka.sh`); the rest
//! are the same steps by hand, run here in order in one bash, as one
//! terminal runs them. Both run against the test services (`up` reuses
//! them), each with a `TRY` of its own, so its topics, group and keys are
//! new; then the clean and audit topics must hold what the page says: the
//! sample feed's five transactions in clean, its three retries, its edit
//! and its malformed record in audit.
//!
//! The idemgate the page runs is the one this test run built: `cargo
//! build --locked` is a stand-in here that builds nothing (cargo holds its
//! build lock while tests run), and the `target/debug` the page puts on
//! `PATH` must hold this build's binary.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use idemgate::decision::{DECISION, REASON};
use idemgate_testkit::kafka::Reader;
use idemgate_testkit::process::Logged;
use idemgate_testkit::{env, unique};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const PAGE: &str = "docs/getting-started.md";

/// The most the walk-through may take (it takes about half a minute).
const BOUND: Duration = Duration::from_secs(150);

/// The page's ```` ```sh ```` blocks, in order. Every other fenced block
/// must be ```` ```text ```` (what a command printed), so that no command
/// escapes this test under another fence.
fn sh_blocks(page: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    // Inside a fence: `Some(true)` in an sh block, `Some(false)` in text.
    let mut inside: Option<bool> = None;
    for line in page.lines() {
        let line = line.trim_end();
        match (inside, line.strip_prefix("```")) {
            (None, Some("sh")) => {
                blocks.push(String::new());
                inside = Some(true);
            }
            (None, Some("text")) => inside = Some(false),
            (None, Some(other)) => panic!("{PAGE}: a ```{other} block: use sh or text"),
            (Some(_), Some("")) => inside = None,
            (Some(true), _) => {
                let block = blocks.last_mut().expect("an open block");
                block.push_str(line);
                block.push('\n');
            }
            (Some(false), _) | (None, None) => {}
        }
    }
    assert!(inside.is_none(), "{PAGE}: a block is not closed");
    blocks
}

#[test]
fn the_sh_blocks_are_read_in_order_and_text_blocks_left_out() {
    let page = "intro\n```sh\na\nb\n```\n```text\nout\n```\n```sh\nc\n```\n";
    assert_eq!(sh_blocks(page), ["a\nb\n", "c\n"]);
}

#[test]
#[should_panic(expected = "a ```bash block")]
fn a_command_under_another_fence_is_refused() {
    sh_blocks("```bash\necho hi\n```\n");
}

fn page_blocks() -> Vec<String> {
    let page = std::fs::read_to_string(Path::new(ROOT).join(PAGE)).expect("reading the page");
    let blocks = sh_blocks(&page);
    assert!(
        blocks.len() > 5,
        "{PAGE} has only {} sh blocks",
        blocks.len()
    );
    assert_eq!(
        blocks[0].trim(),
        "scripts/try-kafka.sh",
        "{PAGE}'s first sh block is the one command"
    );
    blocks
}

/// A folder with the stand-ins the page's commands find first on `PATH`:
/// `cargo` (the build is done) and `idemgate` (this build's, for a target
/// folder other than `target/`).
fn stand_ins(name: &str) -> PathBuf {
    let built = PathBuf::from(env!("CARGO_BIN_EXE_idemgate"));
    let page_bin = Path::new(ROOT).join("target/debug/idemgate");
    if page_bin.exists() {
        assert!(
            same_file(&page_bin, &built),
            "{} is not the idemgate this test run built ({}): the page would run another",
            page_bin.display(),
            built.display()
        );
    }
    // Where the page writes the replicas' logs, whichever folder cargo
    // built in.
    std::fs::create_dir_all(Path::new(ROOT).join("target")).unwrap();
    let dir = std::env::temp_dir().join(unique(name));
    std::fs::create_dir_all(&dir).unwrap();
    let cargo = dir.join("cargo");
    std::fs::write(
        &cargo,
        "#!/usr/bin/env bash\n\
         # The test run built idemgate already.\n\
         [[ \"$*\" == 'build --locked' ]] || { echo \"stand-in cargo: not for: $*\" >&2; exit 1; }\n",
    )
    .unwrap();
    make_executable(&cargo);
    std::os::unix::fs::symlink(&built, dir.join("idemgate")).unwrap();
    dir
}

fn same_file(a: &Path, b: &Path) -> bool {
    a.canonicalize().ok() == b.canonicalize().ok()
}

fn make_executable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Kills a process group when dropped: the bash, the replicas it started
/// in the background and Kafka's tools, should the test fail half-way.
struct Group(u32);

impl Drop for Group {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0)])
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// The replicas' logs of one walk-through (where the page writes them):
/// removed when the test passes, their tails shown when it fails.
struct ReplicaLogs(Vec<PathBuf>);

impl ReplicaLogs {
    fn of(try_name: &str) -> ReplicaLogs {
        ReplicaLogs(
            (1..=2)
                .map(|n| Path::new(ROOT).join(format!("target/{try_name}-{n}.log")))
                .collect(),
        )
    }
}

impl Drop for ReplicaLogs {
    fn drop(&mut self) {
        for log in &self.0 {
            if std::thread::panicking() {
                let text = std::fs::read_to_string(log).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                let tail = lines[lines.len().saturating_sub(40)..].join("\n");
                eprintln!("[{}] tail:\n{tail}", log.display());
            } else {
                let _ = std::fs::remove_file(log);
            }
        }
    }
}

/// Runs `script` in bash from the repository's root, as a reader's
/// terminal with the test services' addresses and a `TRY` of its own;
/// returns what it printed.
fn run_as_reader(name: &str, try_name: &str, script: &str) -> String {
    use std::os::unix::process::CommandExt;
    let stand_ins = stand_ins(name);
    let path = format!(
        "{}:{}",
        stand_ins.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut bash = Command::new("bash");
    bash.arg("-c")
        .arg(format!(
            "set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n{script}"
        ))
        .current_dir(ROOT)
        .env("PATH", path)
        .env("TRY", try_name)
        .process_group(0);
    let log = std::env::temp_dir().join(format!("{try_name}.log"));
    let mut reader = Logged::spawn(name, bash, &log);
    let _group = Group(reader.pid());
    let status = reader.wait_exit(BOUND);
    let printed = reader.log_text();
    let _ = std::fs::remove_dir_all(stand_ins);
    assert!(
        status.success(),
        "[{name}] exited with {status}; it printed:\n{printed}"
    );
    let _ = std::fs::remove_file(&log);
    printed
}

/// What clean and audit hold after the sample feed: each of its five
/// transactions once in clean; in audit the three retries, the edit and
/// the malformed record, each with its decision.
fn assert_the_feed_was_decided(try_name: &str, printed: &str) {
    let brokers = env("IDEMGATE_TEST_KAFKA_BROKERS");
    let clean = format!("{try_name}-clean");
    let audit = format!("{try_name}-audit");
    let mut reader = Reader::new(&brokers, &[(&clean, 2), (&audit, 2)]);
    let all = reader.read_until(Duration::from_secs(30), |r| r.records.len() >= 10, || {});
    reader.read_for(Duration::from_secs(1));
    assert!(all, "only {} outputs", reader.records.len());

    let mut transactions: Vec<String> = Vec::new();
    let mut audited: BTreeMap<String, usize> = BTreeMap::new();
    for out in &reader.records {
        if out.topic == clean {
            assert_eq!(out.decision(), "novel", "{out:?}");
            let payload: serde_json::Value =
                serde_json::from_slice(out.payload.as_deref().unwrap_or_default())
                    .expect("a clean payload is JSON");
            transactions.push(payload["bank_txn_id"].as_str().unwrap_or("?").to_string());
        } else {
            assert!(out.header(REASON).is_some(), "no reason on {out:?}");
            *audited.entry(out.decision().to_string()).or_default() += 1;
        }
    }
    transactions.sort();
    assert_eq!(
        transactions,
        ["TXN-0001", "TXN-0002", "TXN-0003", "TXN-0004", "TXN-0005"],
        "clean"
    );
    let expected: BTreeMap<String, usize> = [("conflict", 1), ("duplicate", 3), ("invalid", 1)]
        .into_iter()
        .map(|(d, n)| (d.to_string(), n))
        .collect();
    assert_eq!(audited, expected, "audit");

    // Kafka's console consumer showed both topics, headers first.
    let shown = |decision: &str| {
        let header = format!("{DECISION}:{decision}");
        printed.lines().filter(|l| l.contains(&header)).count()
    };
    assert_eq!(
        [
            shown("novel"),
            shown("duplicate"),
            shown("conflict"),
            shown("invalid")
        ],
        [5, 3, 1, 1],
        "the console consumer's lines:\n{printed}"
    );
}

#[test]
fn the_steps_by_hand_decide_the_sample_feed() {
    let blocks = page_blocks();
    let try_name = unique("gs-hand");
    let _logs = ReplicaLogs::of(&try_name);
    let printed = run_as_reader("by hand", &try_name, &blocks[1..].join("\n"));
    assert_the_feed_was_decided(&try_name, &printed);
}

#[test]
fn the_one_command_decides_the_sample_feed() {
    let blocks = page_blocks();
    let try_name = unique("gs-one");
    let _logs = ReplicaLogs::of(&try_name);
    let printed = run_as_reader("one command", &try_name, &blocks[0]);
    assert_the_feed_was_decided(&try_name, &printed);
}

/// `scripts/kafka.sh list`: each tool's class is in Kafka's own jars (a
/// jar's directory names its entries in plain text).
#[test]
fn every_tool_the_kafka_wrapper_names_is_in_the_jars() {
    let listed = Command::new(Path::new(ROOT).join("scripts/kafka.sh"))
        .arg("list")
        .output()
        .expect("scripts/kafka.sh list");
    assert!(listed.status.success(), "{listed:?}");
    let listed = String::from_utf8(listed.stdout).unwrap();
    let jars: Vec<String> = std::fs::read_dir(env("IDEMGATE_TEST_KAFKA_LIBS"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap_or_default().to_string_lossy();
            name.starts_with("kafka") && name.ends_with(".jar")
        })
        .map(|p| String::from_utf8_lossy(&std::fs::read(p).unwrap()).into_owned())
        .collect();
    let mut tools = 0;
    for line in listed.lines() {
        let [tool, class] = line.split_whitespace().collect::<Vec<_>>()[..] else {
            panic!("not `tool class`: {line}");
        };
        let entry = format!("{}.class", class.replace('.', "/"));
        assert!(
            jars.iter().any(|jar| jar.contains(&entry)),
            "{tool}: no {entry} in Kafka's jars"
        );
        tools += 1;
    }
    assert!(tools >= 10, "only {tools} tools listed");
}
