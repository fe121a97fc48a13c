//! The soak on PostgreSQL (`--store postgres`): what its sections of
//! SOAK.md say beyond the Redis run's conditions, the settled-claims check
//! read with SQL, and how its sections join a SOAK.md written by another
//! run.
//!
//! SOAK.md keeps one section per store and guarantee: a `--store postgres`
//! run replaces only its own sections (`## PostgreSQL: <guarantee>`) of an
//! existing SOAK.md, inserted before *What this machine cannot show*, and
//! leaves every other section as it was; a Redis run writes the file anew
//! and carries the PostgreSQL sections over. SOAK.json likewise: a
//! PostgreSQL run's report goes under its key `postgres`, kept by the
//! Redis runs.

use std::path::Path;

use anyhow::{Context, Result};

use super::report::Report;
use super::run::RunResult;
use crate::pg_server::PgServer;
use idemgate::store::postgres::DEFAULT_SCHEMA;

/// The heading of a PostgreSQL run's section.
pub(crate) fn heading(guarantee: &str) -> String {
    format!("## PostgreSQL: {guarantee}")
}

const PREFIX: &str = "## PostgreSQL: ";
const LAST: &str = "## What this machine cannot show";

/// Claims of every claims table in the store's schema that are live (not
/// past their expiry) and not settled: neither flagged done nor below
/// their partition's watermark. The value is the store's 28-byte claim
/// value (`idemgate::store` value layout: topic tag, partition, offset,
/// token, digest; the done flag the high bit of byte 24); watermarks are
/// rows (stream key id, topic tag, partition, below).
pub(crate) fn unsettled_claims(pg: &PgServer) -> Result<Vec<String>> {
    let tables = pg.query(&format!(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname = '{DEFAULT_SCHEMA}' AND c.relkind IN ('r', 'p') \
         AND NOT c.relispartition AND c.relname LIKE 'claims\\_%'"
    ))?;
    let mut unsettled = Vec::new();
    for table in tables.lines().filter(|l| !l.is_empty()) {
        let Some(key_id) = idemgate::store::postgres::claims_key_id(table) else {
            continue;
        };
        let rows = pg.query(&format!(
            "WITH c AS (SELECT \
               (get_byte(value, 0)::bigint << 16) | (get_byte(value, 1) << 8) | get_byte(value, 2) AS topic, \
               (get_byte(value, 3)::bigint << 16) | (get_byte(value, 4) << 8) | get_byte(value, 5) AS part, \
               ('x' || encode(substring(value FROM 7 FOR 6), 'hex'))::bit(48)::bigint AS off, \
               (get_byte(value, 24) & 128) <> 0 AS done \
             FROM \"{DEFAULT_SCHEMA}\".\"{table}\" \
             WHERE expires_at > (extract(epoch FROM clock_timestamp()) * 1000)::bigint) \
             SELECT to_hex(c.topic) || '/' || c.part || '/' || c.off || ' (watermark ' || coalesce(w.below::text, 'none') || ')' \
             FROM c LEFT JOIN \"{DEFAULT_SCHEMA}\".watermarks w \
               ON w.stream = '{key_id}' AND w.topic = c.topic AND w.partition = c.part \
             WHERE NOT c.done AND (w.below IS NULL OR c.off >= w.below) \
             ORDER BY 1"
        ))?;
        unsettled.extend(
            rows.lines()
                .filter(|l| !l.is_empty())
                .map(|l| format!("{table}: {l}")),
        );
    }
    Ok(unsettled)
}

/// What a PostgreSQL run's section says of its conditions, beyond the
/// machine, broker, replicas, oracle and doubles of the file's Conditions.
pub(crate) fn conditions(report: &Report, run: &RunResult) -> Vec<String> {
    let a = &report.args;
    let settings: Vec<String> = run
        .store_settings
        .iter()
        .map(|(k, v)| format!("`{k}` {v}"))
        .collect();
    vec![
        format!(
            "- Generated {} by `idemgate-bench soak --store postgres{}` (`scripts/soak.sh --store postgres` runs it) at commit {}, in {:.1} minutes; seed {}. Every figure below comes from that run; regenerate rather than edit. A `--store postgres` run replaces only its own sections of this file.",
            report.generated_utc,
            if a.short { " --short" } else { "" },
            report.idemgate_commit,
            report.seconds / 60.0,
            report.seed
        ),
        format!(
            "- Store: {}, a cluster of the soak's own per guarantee (`initdb`, as the `postgres` system user when the soak runs as root; its data directory under the run's directory, or a temporary one where the `postgres` user cannot reach that; one loopback port over TCP, `trust` authentication), every setting at its default: {}; data in {}. Both streams on `store.kind = \"postgres\"` with the store's defaults (schema `{DEFAULT_SCHEMA}`, its connection pool and janitor).",
            run.store_version,
            settings.join(", "),
            run.store_data
        ),
        format!(
            "- Telemetry: exact, not tiered (tiered keeps its filter on Redis; the PostgreSQL store keeps exact claims only), `fail_mode = \"open\"`, its TTL {} s as its whole horizon (the Redis run's tier-1 TTL, which the short preset shortens on Redis alone: a horizon must outlast the longest stall of the faults, or a copy decided after its event's claim expired is rightly `novel`). The late re-sends (a twentieth of the stream, written at the end) may outlive it: one decided `novel` found its event's claim expired, which is correct past the horizon, and is counted apart (*late re-sends claimed anew*); its event is then twice in clean (counted: fail-open), and a later copy naming it as the holder is counted with the copies naming a re-claim. Any other copy decided `novel` is a disagreement.",
            a.tier1_ttl
        ),
        format!(
            "- Workload as in Conditions: {} records, {:.0} % bank, {} partitions, {} replicas, batches of {}, a {:.0} s window.",
            a.records, a.bank_share * 100.0, a.partitions, a.replicas, a.batch, a.window
        ),
        format!(
            "- Faults: those of the Redis run, the Redis ones made PostgreSQL ones: a freeze (SIGSTOP of the postmaster, then of each of its children, for {:.0} s and later {:.0} s; then SIGCONT), a restart that keeps the data (`pg_ctl stop -m fast`: sessions ended, a shutdown checkpoint; down {:.0} s; `pg_ctl start` on the same data directory) and the replicas' link to the server cut for {:.0} s (packets dropped, sockets open). A crash (`-m immediate`, recovery from the WAL at start) is not soaked.",
            a.freeze,
            (a.freeze / 3.0).max(3.0),
            a.redis_down,
            a.link_cut
        ),
        "- Settled claims: after the graceful stop, every live row (not past its expiry) of the claims tables must be flagged done or lie below its partition's watermark (the watermarks table), read with SQL.".into(),
    ]
}

/// `(heading, text)` of each `## ` section of a Markdown file, and what
/// comes before the first.
fn sections(md: &str) -> (String, Vec<(String, String)>) {
    let mut head = String::new();
    let mut out: Vec<(String, String)> = Vec::new();
    for line in md.split_inclusive('\n') {
        if line.starts_with("## ") {
            out.push((line.trim_end().to_string(), String::new()));
        }
        match out.last_mut() {
            Some((_, text)) => text.push_str(line),
            None => head.push_str(line),
        }
    }
    (head, out)
}

/// A section's key: its heading without a `: NOT RUN`.
fn key(heading: &str) -> &str {
    heading.trim_end_matches(": NOT RUN")
}

/// `md` with the PostgreSQL sections of `new` in place of its own of the
/// same guarantee, the others inserted before *What this machine cannot
/// show* (or at the end).
pub(crate) fn splice(md: &str, new: &str) -> String {
    let (head, mut kept) = sections(md);
    for (heading, text) in sections(new)
        .1
        .into_iter()
        .filter(|(h, _)| h.starts_with(PREFIX))
    {
        match kept.iter().position(|(h, _)| key(h) == key(&heading)) {
            Some(at) => kept[at] = (heading, text),
            None => {
                let at = kept
                    .iter()
                    .position(|(h, _)| h == LAST)
                    .unwrap_or(kept.len());
                kept.insert(at, (heading, text));
            }
        }
    }
    let mut out = head;
    for (_, text) in kept {
        if !out.is_empty() && !out.ends_with("\n\n") {
            out.push('\n');
        }
        out.push_str(&text);
    }
    out
}

/// Writes SOAK.md and SOAK.json for `report`: a Redis run writes them anew,
/// keeping the PostgreSQL sections and key of the files it replaces; a
/// PostgreSQL run puts its own into them.
pub(crate) fn write(report: &Report, out_dir: &Path) -> Result<()> {
    let md_path = out_dir.join("SOAK.md");
    let json_path = out_dir.join("SOAK.json");
    let old_md = std::fs::read_to_string(&md_path).ok();
    let old_json: Option<serde_json::Value> = std::fs::read_to_string(&json_path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    let ours = serde_json::to_value(report)?;
    let (md, json) = match report.store {
        super::store::StoreKind::Redis => {
            let md = match &old_md {
                Some(old) => splice(&report.markdown(), old),
                None => report.markdown(),
            };
            let mut json = ours;
            if let Some(pg) = old_json.as_ref().and_then(|o| o.get("postgres")) {
                json["postgres"] = pg.clone();
            }
            (md, json)
        }
        super::store::StoreKind::Postgres => {
            let md = match &old_md {
                Some(old) => splice(old, &report.markdown()),
                None => report.markdown(),
            };
            let mut json = old_json
                .filter(|o| o.is_object())
                .unwrap_or_else(|| serde_json::json!({}));
            json["postgres"] = ours;
            (md, json)
        }
    };
    std::fs::write(&md_path, md).with_context(|| md_path.display().to_string())?;
    std::fs::write(&json_path, serde_json::to_string_pretty(&json)?)?;
    eprintln!("soak: wrote {}", md_path.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Needs PostgreSQL's server binaries. Claims written as the store
    /// writes them: one flagged done, one below its partition's watermark,
    /// one above it, one on a partition without a watermark, one unsettled
    /// but expired; the two live unsettled ones are found.
    #[test]
    fn unsettled_claims_are_live_not_done_and_at_or_above_the_watermark() {
        let bin = crate::pg_server::bin_dir(None).expect("PostgreSQL's binaries");
        let dir = std::env::temp_dir().join(format!("idemgate-pgsettled-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pg = PgServer::start(&bin, &dir).expect("a server");
        // Holder: topic tag 0x0a0b0c, partition, offset (48 bits); then
        // token, digest; byte 24's high bit the done flag.
        let value = |partition: u32, offset: u64, done: bool| {
            let mut v = vec![0x0a, 0x0b, 0x0c];
            v.extend_from_slice(&partition.to_be_bytes()[1..]);
            v.extend_from_slice(&offset.to_be_bytes()[2..]);
            v.extend_from_slice(&[7; 12]);
            v.extend_from_slice(&[if done { 0x80 } else { 0 }, 0, 0, 1]);
            assert_eq!(v.len(), 28);
            format!("'\\x{}'::bytea", hex::encode(v))
        };
        let live = "(extract(epoch FROM now()) * 1000)::bigint + 600000";
        pg.query(&format!(
            "CREATE SCHEMA {DEFAULT_SCHEMA}; \
             CREATE TABLE {DEFAULT_SCHEMA}.{k1} (expires_at bigint NOT NULL, hash bytea PRIMARY KEY, value bytea NOT NULL); \
             CREATE TABLE {DEFAULT_SCHEMA}.watermarks (stream text, topic integer, partition integer, below bigint); \
             INSERT INTO {DEFAULT_SCHEMA}.watermarks VALUES ('k1', {tag}, 1, 500), ('other', {tag}, 2, 900); \
             INSERT INTO {DEFAULT_SCHEMA}.{k1} VALUES \
               ({live}, '\\x01', {done}), ({live}, '\\x02', {below}), ({live}, '\\x03', {above}), \
               ({live}, '\\x04', {elsewhere}), (1000, '\\x05', {expired})",
            tag = 0x0a0b0c,
            k1 = idemgate::store::postgres::claims_name("k1"),
            done = value(1, 700, true),
            below = value(1, 499, false),
            above = value(1, 500, false),
            elsewhere = value(2, 3, false),
            expired = value(1, 800, false),
        ))
        .unwrap();
        let found = unsettled_claims(&pg).unwrap();
        assert_eq!(
            found,
            vec![
                "claims_00006b31: a0b0c/1/500 (watermark 500)".to_string(),
                "claims_00006b31: a0b0c/2/3 (watermark none)".to_string(),
            ]
        );
        drop(pg);
        let _ = std::fs::remove_dir_all(&dir);
    }

    const REDIS: &str = "# idemgate: fault soak\n\nGenerated ...\n\n## Conditions\n\n- a\n\n## at-least-once\n\nfigures\n\n## This file's run\n\nnote\n\n## What this machine cannot show\n\n- b\n";

    #[test]
    fn a_postgres_run_replaces_only_its_own_sections() {
        let first = splice(
            REDIS,
            "# x\n\n## Conditions\n\nother\n\n## PostgreSQL: at-least-once\n\none\n\n## What this machine cannot show\n\n- c\n",
        );
        assert_eq!(
            first,
            REDIS.replace(
                "## What this machine",
                "## PostgreSQL: at-least-once\n\none\n\n## What this machine"
            )
        );
        let second = splice(
            &first,
            "## PostgreSQL: at-least-once\n\ntwo\n\n## PostgreSQL: exactly-once: NOT RUN\n\nrefused\n",
        );
        assert!(second.contains("## at-least-once\n\nfigures\n\n## This file's run\n\nnote\n"));
        assert!(second.contains("## PostgreSQL: at-least-once\n\ntwo\n\n## PostgreSQL: exactly-once: NOT RUN\n\nrefused\n\n## What this machine"));
        assert!(!second.contains("one"));
        let third = splice(&second, "## PostgreSQL: exactly-once\n\nran\n");
        assert!(
            third.contains("## PostgreSQL: exactly-once\n\nran\n") && !third.contains("NOT RUN")
        );
    }

    #[test]
    fn a_redis_run_carries_the_postgres_sections_over() {
        let old = REDIS.replace(
            "## What this machine",
            "## PostgreSQL: at-least-once\n\nkept\n\n## What this machine",
        );
        let fresh = "# idemgate: fault soak\n\n## Conditions\n\n- new\n\n## exactly-once\n\nnew figures\n\n## What this machine cannot show\n\n- b\n";
        let out = splice(fresh, &old);
        assert!(out.contains("- new\n\n## exactly-once\n\nnew figures\n\n## PostgreSQL: at-least-once\n\nkept\n\n## What this machine cannot show"));
        assert!(!out.contains("This file's run"));
    }
}
