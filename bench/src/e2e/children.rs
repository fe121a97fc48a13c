//! Starting and talking to the bench's child processes (see `replica.rs`
//! for their side of the line protocol).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{ChildStdin, ChildStdout, Command};

use super::replica::{Report, Role, REPORT};

pub(crate) struct ChildProcess {
    process: tokio::process::Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    pub pid: u32,
    pub log: PathBuf,
}

impl ChildProcess {
    /// Starts `exe replica <spec>` with the role written to the
    /// spec file; its log (stderr) goes to `<dir>/<name>.log`.
    pub fn spawn(exe: &Path, dir: &Path, name: &str, role: &Role) -> Result<ChildProcess> {
        let spec = dir.join(format!("{name}.json"));
        std::fs::write(&spec, serde_json::to_vec(role)?)?;
        let log = dir.join(format!("{name}.log"));
        let mut process = Command::new(exe)
            .arg("replica")
            .arg(&spec)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(File::create(&log)?)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {} replica", exe.display()))?;
        let pid = process.id().context("child without a pid")?;
        let stdin = process.stdin.take().context("child stdin")?;
        let stdout = process.stdout.take().context("child stdout")?;
        Ok(ChildProcess {
            process,
            stdin,
            lines: BufReader::new(stdout).lines(),
            pid,
            log,
        })
    }

    /// Reads stdout until a line starting with `prefix`; returns the rest.
    pub async fn expect(&mut self, prefix: &str, within: Duration) -> Result<String> {
        let read = async {
            while let Some(line) = self.lines.next_line().await? {
                if let Some(rest) = line.strip_prefix(prefix) {
                    return Ok(rest.to_string());
                }
            }
            bail!("exited before saying {prefix:?}")
        };
        match tokio::time::timeout(within, read).await {
            Ok(Ok(rest)) => Ok(rest),
            Ok(Err(error)) => Err(error).with_context(|| self.tail()),
            Err(_) => bail!(
                "did not say {prefix:?} within {}s\n{}",
                within.as_secs(),
                self.tail()
            ),
        }
    }

    pub async fn send(&mut self, word: &str) -> Result<()> {
        self.stdin.write_all(format!("{word}\n").as_bytes()).await?;
        self.stdin.flush().await?;
        Ok(())
    }

    pub fn exited(&mut self) -> bool {
        matches!(self.process.try_wait(), Ok(Some(_)))
    }

    /// Reads the final report and waits for the process to end.
    pub async fn report(&mut self, within: Duration) -> Result<Report> {
        let text = self.expect(REPORT, within).await?;
        let report = serde_json::from_str(&text).context("parsing a replica report")?;
        let _ = tokio::time::timeout(Duration::from_secs(30), self.process.wait()).await;
        Ok(report)
    }

    /// Waits for the process to end, up to `within`; whether it did.
    pub async fn wait_exit(&mut self, within: Duration) -> bool {
        tokio::time::timeout(within, self.process.wait())
            .await
            .is_ok()
    }

    /// The last lines of the child's log, for an error message.
    pub fn tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let from = lines.len().saturating_sub(15);
        format!(
            "last lines of {}:\n{}",
            self.log.display(),
            lines[from..].join("\n")
        )
    }
}
