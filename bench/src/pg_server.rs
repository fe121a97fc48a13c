//! A PostgreSQL server of the bench's own, for the e2e bench's PostgreSQL
//! runs and the soak's `--store postgres`: a fresh cluster (`initdb`) in a
//! data directory under the run's directory, on a spare loopback port, TCP
//! only (no Unix socket), `trust` authentication for the superuser
//! `idemgate`, who owns the database `idemgate`. Every other setting is
//! PostgreSQL's default (`fsync`, `synchronous_commit`, `shared_buffers`,
//! autovacuum...): [`PgServer::settings`] reads the ones the reports name.
//!
//! PostgreSQL refuses to run as root: when the bench is root, `initdb` and
//! `pg_ctl` run as the `postgres` system user (its uid and gid set on the
//! child), who owns the directory. Started and stopped with `pg_ctl` (`-w`:
//! it returns once the server accepts connections, or has shut down), so
//! the postmaster is not the bench's child: its pid is read from
//! `postmaster.pid`, and dropping the guard stops it (`-m immediate`).
//! Queries go through `psql`, so the bench needs no PostgreSQL client
//! library of its own.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use idemgate_testkit::servers::{free_port, signal};

/// The database and its owner.
pub(crate) const DATABASE: &str = "idemgate";
pub(crate) const USER: &str = "idemgate";

pub(crate) struct PgServer {
    pub port: u16,
    /// `postgres://idemgate@127.0.0.1:<port>/idemgate?sslmode=disable`.
    pub url: String,
    /// `PostgreSQL 15.x (...)`, from `SELECT version()`.
    pub version: String,
    bin: PathBuf,
    root: PathBuf,
    data: PathBuf,
    /// The `postgres` system user's uid and gid, when the bench is root.
    owner: Option<(u32, u32)>,
    /// The directory is a temporary one (see [`PgServer::start`]): removed
    /// with the server.
    temporary: bool,
    running: bool,
    /// Processes stopped by [`PgServer::freeze`], to continue.
    frozen: Vec<u32>,
}

/// The folder of `initdb`, `pg_ctl` and `postgres`: `flag`, else the one
/// `pg_ctl` on PATH is in, else the newest `/usr/lib/postgresql/<v>/bin`.
pub(crate) fn bin_dir(flag: Option<&Path>) -> Result<PathBuf> {
    if let Some(dir) = flag {
        return Ok(dir.to_path_buf());
    }
    if let Some(pg_ctl) = crate::e2e::on_path("pg_ctl") {
        let real = std::fs::canonicalize(&pg_ctl).unwrap_or(pg_ctl);
        if let Some(dir) = real.parent() {
            return Ok(dir.to_path_buf());
        }
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|entries| entries.flatten().map(|e| e.path().join("bin")).collect())
        .unwrap_or_default();
    versions.sort();
    versions
        .pop()
        .filter(|dir| dir.join("pg_ctl").is_file())
        .context("no PostgreSQL server binaries (pg_ctl, initdb): install postgresql, or pass the folder of pg_ctl")
}

/// The uid and gid of the `postgres` system user, from /etc/passwd.
fn postgres_user() -> Result<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd")?;
    passwd
        .lines()
        .find_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            (fields.first() == Some(&"postgres"))
                .then(|| Some((fields.get(2)?.parse().ok()?, fields.get(3)?.parse().ok()?)))
                .flatten()
        })
        .context("the bench runs as root and there is no `postgres` system user to run PostgreSQL as (PostgreSQL refuses root)")
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

impl PgServer {
    /// `initdb` in `<dir>/postgres-<port>/data`, a start, and the database.
    /// As root, where the `postgres` user cannot reach `dir` (a folder on
    /// its way is closed to others, as `/root` is), the cluster goes to a
    /// temporary directory instead, removed with the server.
    pub fn start(bin: &Path, dir: &Path) -> Result<PgServer> {
        let port = free_port();
        let owner = match is_root() {
            true => Some(postgres_user()?),
            false => None,
        };
        let dir = std::path::absolute(dir)?;
        let temporary = owner.is_some() && !open_to_others(&dir);
        let root = match temporary {
            true => std::env::temp_dir().join(format!("idemgate-postgres-{port}")),
            false => dir.join(format!("postgres-{port}")),
        };
        std::fs::create_dir_all(&root)?;
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(&root, Some(uid), Some(gid))?;
        }
        let mut server = PgServer {
            port,
            url: format!("postgres://{USER}@127.0.0.1:{port}/{DATABASE}?sslmode=disable"),
            version: String::new(),
            bin: bin.to_path_buf(),
            data: root.join("data"),
            root,
            owner,
            temporary,
            running: false,
            frozen: Vec::new(),
        };
        let data = server.data.display().to_string();
        server.tool(
            "initdb",
            &[
                "-D",
                &data,
                "-U",
                USER,
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-locale",
            ],
        )?;
        server.start_again()?;
        server.psql_on(
            "postgres",
            &format!("CREATE DATABASE {DATABASE} OWNER {USER}"),
        )?;
        server.version = server.query("SELECT version()")?;
        Ok(server)
    }

    /// Runs `initdb` or `pg_ctl` as the data directory's owner; its output
    /// goes to `<root>/<name>.log`.
    fn tool(&self, name: &str, args: &[&str]) -> Result<()> {
        let log = self.root.join(format!("{name}.log"));
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)?;
        let mut command = Command::new(self.bin.join(name));
        command
            .args(args)
            .current_dir(&self.root)
            .stdout(out.try_clone()?)
            .stderr(out);
        if let Some((uid, gid)) = self.owner {
            use std::os::unix::process::CommandExt;
            command.uid(uid).gid(gid);
        }
        let status = command
            .status()
            .with_context(|| format!("running {}", self.bin.join(name).display()))?;
        if !status.success() {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(12).collect();
            bail!(
                "{name} {} failed ({status}); {}:\n{}",
                args.join(" "),
                log.display(),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        Ok(())
    }

    /// `pg_ctl start -w` on the data directory (kept across restarts): how
    /// long until it accepted connections.
    pub fn start_again(&mut self) -> Result<Duration> {
        anyhow::ensure!(!self.running, "start of a running PostgreSQL server");
        let began = Instant::now();
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -c unix_socket_directories=''",
            self.port
        );
        let data = self.data.display().to_string();
        let log = self.root.join("postgres.log").display().to_string();
        self.tool(
            "pg_ctl",
            &[
                "start", "-w", "-t", "120", "-D", &data, "-l", &log, "-o", &options,
            ],
        )?;
        self.running = true;
        Ok(began.elapsed())
    }

    /// `pg_ctl stop -m fast -w`: sessions ended, a shutdown checkpoint, the
    /// data kept. How long the shutdown took.
    pub fn stop_fast(&mut self) -> Result<Duration> {
        self.thaw();
        let began = Instant::now();
        let data = self.data.display().to_string();
        self.tool(
            "pg_ctl",
            &["stop", "-m", "fast", "-w", "-t", "120", "-D", &data],
        )?;
        self.running = false;
        Ok(began.elapsed())
    }

    /// The postmaster's pid, from the first line of `postmaster.pid`.
    pub fn postmaster(&self) -> Option<u32> {
        std::fs::read_to_string(self.data.join("postmaster.pid"))
            .ok()?
            .lines()
            .next()?
            .trim()
            .parse()
            .ok()
    }

    /// The postmaster's children now (backends, checkpointer, walwriter,
    /// autovacuum...).
    pub fn children(&self) -> Vec<u32> {
        let Some(parent) = self.postmaster() else {
            return Vec::new();
        };
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| stat_fields(*pid).and_then(|f| f.get(1)?.parse().ok()) == Some(parent))
            .collect()
    }

    /// CPU seconds (user + system) of the server: the postmaster's own, its
    /// children's that it has reaped (a backend that exited: `cutime` and
    /// `cstime`), and every live child's.
    pub fn cpu_seconds(&self) -> f64 {
        let Some(postmaster) = self.postmaster() else {
            return 0.0;
        };
        let ticks = |pid: u32, fields: &[usize]| -> f64 {
            stat_fields(pid).map_or(0.0, |f| {
                fields
                    .iter()
                    .filter_map(|i| f.get(*i)?.parse::<f64>().ok())
                    .sum()
            })
        };
        // After the command name: utime 11, stime 12, cutime 13, cstime 14.
        let own = ticks(postmaster, &[11, 12, 13, 14]);
        let children: f64 = self
            .children()
            .into_iter()
            .map(|pid| ticks(pid, &[11, 12]))
            .sum();
        (own + children) / 100.0
    }

    /// SIGSTOP to the postmaster (so it starts no new process), then to
    /// each of its children.
    pub fn freeze(&mut self) {
        let Some(postmaster) = self.postmaster() else {
            return;
        };
        signal(postmaster, "STOP");
        self.frozen = vec![postmaster];
        for child in self.children() {
            signal(child, "STOP");
            self.frozen.push(child);
        }
    }

    /// SIGCONT to every process [`PgServer::freeze`] stopped.
    pub fn thaw(&mut self) {
        for pid in std::mem::take(&mut self.frozen).into_iter().rev() {
            signal(pid, "CONT");
        }
    }

    /// One statement on the `idemgate` database: its rows, `|`-separated.
    pub fn query(&self, sql: &str) -> Result<String> {
        self.psql_on(DATABASE, sql)
    }

    fn psql_on(&self, database: &str, sql: &str) -> Result<String> {
        let url = format!(
            "postgres://{USER}@127.0.0.1:{}/{database}?sslmode=disable",
            self.port
        );
        let psql = ["psql"]
            .iter()
            .map(|name| self.bin.join(name))
            .find(|p| p.is_file())
            .or_else(|| crate::e2e::on_path("psql"))
            .context("no psql (PostgreSQL's client): install postgresql-client")?;
        let out = Command::new(psql)
            .args([
                "-X",
                "-q",
                "-A",
                "-t",
                "-v",
                "ON_ERROR_STOP=1",
                "-d",
                &url,
                "-c",
                sql,
            ])
            .output()
            .context("running psql")?;
        if !out.status.success() {
            bail!(
                "psql on {url}: {sql}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// Where the cluster's data is, and the file system holding it (from
    /// /proc/mounts: the mount point that is the longest prefix of it).
    pub fn data_dir(&self) -> String {
        let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
        let fs = mounts
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                Some((*f.get(1)?, *f.first()?, *f.get(2)?))
            })
            .filter(|(at, _, _)| self.data.starts_with(at))
            .max_by_key(|(at, _, _)| at.len())
            .map_or("file system unknown".to_string(), |(at, dev, kind)| {
                format!("{kind} on {dev}, mounted at {at}")
            });
        format!("{} ({fs})", self.data.display())
    }

    /// The settings that decide what a commit costs and what the disk
    /// holds, as the server reports them.
    pub fn settings(&self) -> Result<Vec<(String, String)>> {
        let names = [
            "fsync",
            "synchronous_commit",
            "wal_sync_method",
            "full_page_writes",
            "wal_level",
            "shared_buffers",
            "checkpoint_timeout",
            "max_wal_size",
            "autovacuum",
        ];
        let list = names
            .iter()
            .map(|n| format!("'{n}'"))
            .collect::<Vec<_>>()
            .join(",");
        let rows = self.query(&format!(
            "SELECT name, current_setting(name) FROM pg_settings WHERE name IN ({list}) ORDER BY name"
        ))?;
        Ok(rows
            .lines()
            .filter_map(|l| l.split_once('|'))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect())
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        self.thaw();
        if self.running {
            let data = self.data.display().to_string();
            if self
                .tool("pg_ctl", &["stop", "-m", "immediate", "-w", "-D", &data])
                .is_err()
            {
                if let Some(pid) = self.postmaster() {
                    signal(pid, "KILL");
                }
            }
        }
        if self.temporary {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}

/// Whether every folder from `/` to `dir` lets others through (`o+x`).
fn open_to_others(dir: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    dir.ancestors()
        .filter(|p| p.exists())
        .all(|p| std::fs::metadata(p).is_ok_and(|m| m.permissions().mode() & 0o001 != 0))
}

/// The fields of `/proc/<pid>/stat` after the command name (state first).
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_string).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Needs PostgreSQL's server binaries: a start, a query, the CPU of
    /// the server's processes, a freeze that stops answering and a thaw
    /// that answers again, a fast stop and a start that keep the data.
    #[test]
    fn a_server_of_its_own_restarts_with_its_data_and_freezes() {
        let bin = bin_dir(None).expect("PostgreSQL's binaries");
        let dir = std::env::temp_dir().join(format!("idemgate-pg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut server = PgServer::start(&bin, &dir).expect("a server");
        assert!(
            server.version.starts_with("PostgreSQL"),
            "{}",
            server.version
        );
        server
            .query("CREATE TABLE t (n bigint primary key); INSERT INTO t SELECT generate_series(1, 50000)")
            .unwrap();
        assert!(server.cpu_seconds() > 0.0);
        assert!(!server.children().is_empty());
        let settings = server.settings().unwrap();
        assert!(
            settings.contains(&("fsync".into(), "on".into())),
            "{settings:?}"
        );

        server.freeze();
        let url = server.url.clone();
        let blocked = std::thread::spawn(move || {
            let began = Instant::now();
            let out = Command::new("psql")
                .args(["-X", "-At", "-d", &url, "-c", "SELECT 1"])
                .output()
                .unwrap();
            (began.elapsed(), out.status.success())
        });
        std::thread::sleep(Duration::from_secs(2));
        server.thaw();
        let (waited, ok) = blocked.join().unwrap();
        assert!(ok && waited >= Duration::from_millis(1500), "{waited:?}");

        assert!(server.data_dir().contains(" on "), "{}", server.data_dir());
        server.stop_fast().unwrap();
        assert!(server.query("SELECT 1").is_err());
        server.start_again().unwrap();
        assert_eq!(server.query("SELECT count(*) FROM t").unwrap(), "50000");
        drop(server);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// As root, a run directory the `postgres` user cannot reach (a folder
    /// closed to others on its way) puts the cluster in a temporary
    /// directory, removed with the server; as another user the cluster is
    /// that user's and stays where asked.
    #[test]
    fn a_folder_closed_to_others_still_gets_a_cluster() {
        use std::os::unix::fs::PermissionsExt;
        let bin = bin_dir(None).expect("PostgreSQL's binaries");
        let closed =
            std::env::temp_dir().join(format!("idemgate-pg-closed-{}", std::process::id()));
        std::fs::create_dir_all(closed.join("run")).unwrap();
        std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o700)).unwrap();
        let server = PgServer::start(&bin, &closed.join("run")).expect("a server");
        assert_eq!(server.query("SELECT 1").unwrap(), "1");
        let root = server.root.clone();
        assert_eq!(root.starts_with(&closed), !is_root(), "{}", root.display());
        drop(server);
        assert_eq!(root.exists(), !is_root(), "{}", root.display());
        let _ = std::fs::remove_dir_all(&closed);
    }
}
