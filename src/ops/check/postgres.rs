//! The PostgreSQL store, as `check` asks it: the server's version, what a
//! crash keeps, the tables the store needs (missing ones with the SQL an
//! administrator runs), the role's rights on them and how bloated each
//! claims table is.
//! The store's `inspect` asks without creating anything; the verdicts here
//! are pure, each with its test without a server.

use std::time::Duration;

use super::Finding;
use crate::config::Config;
use crate::store::postgres::{
    inspect, redact, Durability, PostgresOptions, ServerFacts, TableFacts,
};

/// The longest the connect and the questions may take.
const CONNECT_BOUND: Duration = Duration::from_secs(30);

pub(super) async fn probe(config: &Config, options: &PostgresOptions) -> Vec<Finding> {
    let streams: Vec<_> = config.streams.iter().map(|s| s.spec.clone()).collect();
    let target = redact(&options.url);
    match tokio::time::timeout(CONNECT_BOUND, inspect(options, &streams)).await {
        Err(_) => vec![Finding::fail(
            "store.url",
            format!("{target}: no answer within {}s", CONNECT_BOUND.as_secs()),
        )],
        Ok(Err(error)) => vec![Finding::fail("store.url", format!("{target}: {error}"))],
        Ok(Ok(facts)) => verdicts(&target, &facts),
    }
}

/// The oldest major version the store is tested on (Debian 12's 15); older
/// ones are a warning, not a refusal: the statements are plain SQL that
/// PostgreSQL has run since 9.5.
const TESTED_MAJOR: i32 = 15;

/// A claims table whose dead rows are at least this share of its rows is
/// called bloated: the janitor's deletes are waiting for a vacuum, and
/// the disk per claim is above `plan`'s figure.
const BLOAT_SHARE: f64 = 0.2;

/// Every finding, in the order `check` prints them.
fn verdicts(target: &str, facts: &ServerFacts) -> Vec<Finding> {
    let subject = "store.url";
    let mut findings = vec![
        version(subject, target, facts),
        durability(&facts.durability),
    ];
    findings.extend(tables(subject, facts));
    findings.extend(rights(subject, facts));
    findings.extend(facts.tables.iter().filter_map(bloat));
    findings
}

fn version(subject: &str, target: &str, facts: &ServerFacts) -> Finding {
    let major = facts.version_num / 10_000;
    if major >= TESTED_MAJOR {
        Finding::ok(
            subject,
            format!(
                "{target}: PostgreSQL {} answered as role {:?}",
                facts.version, facts.role
            ),
        )
    } else {
        Finding::warn(
            subject,
            format!(
                "PostgreSQL {} is older than the {TESTED_MAJOR} idemgate is tested on: the claim protocol's statements run there, but nothing vouches for it",
                facts.version
            ),
        )
    }
}

/// What a crash or a failover costs the claims (docs/operating.md,
/// "Persistence"): with `fsync` or `synchronous_commit` off a server
/// crash can lose rounds the worker was answered, of which the progress
/// marks see what a commit recorded and not the last commit interval
/// (design §8.2); on, it loses none, and what remains is a standby or a
/// backup that lacks the last rounds: seen, and stopped until a rebuild.
fn durability(settings: &Durability) -> Finding {
    const SUBJECT: &str = "store persistence";
    let off = |value: &str| value.trim() == "off";
    if off(&settings.fsync) {
        return Finding::warn(
            SUBJECT,
            "fsync off: a server crash can lose or corrupt claims, those of the last commit \
             interval unseen; set fsync = on"
                .to_string(),
        );
    }
    if off(&settings.synchronous_commit) {
        return Finding::warn(
            SUBJECT,
            "synchronous_commit off: a server crash can lose the last claim rounds the \
             worker was answered, those of the last commit interval unseen, and copies of \
             events decided in them pass as novel; \
             set synchronous_commit = on"
                .to_string(),
        );
    }
    let standbys = if settings.synchronous_standby_names.trim().is_empty() {
        "no synchronous standby: a promoted asynchronous standby or a restored backup \
         lacks the last rounds; the progress marks see it (the streams stop until \
         `idemgate rebuild`) but for the last commit interval"
    } else {
        "a synchronous standby: a promoted one has every round; a restored backup lacks \
         the last ones, seen by the progress marks (the streams stop until `idemgate \
         rebuild`)"
    };
    Finding::ok(
        SUBJECT,
        format!(
            "synchronous_commit {}: a server crash loses no round the worker was answered; {standbys}",
            settings.synchronous_commit.trim()
        ),
    )
}

fn tables(subject: &str, facts: &ServerFacts) -> Option<Finding> {
    let missing: Vec<&str> = facts
        .tables
        .iter()
        .filter(|t| !t.exists)
        .map(|t| t.name.as_str())
        .collect();
    if missing.is_empty() {
        return Some(Finding::ok(
            format!("{subject} tables"),
            format!(
                "schema {:?}: every table is there ({})",
                facts.schema,
                facts
                    .tables
                    .iter()
                    .map(|t| t.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    let listed = missing.join(", ");
    Some(if facts.may_create {
        Finding::warn(
            format!("{subject} tables"),
            format!("missing, created at the first start (the role may create them): {listed}"),
        )
    } else {
        Finding::fail(
            format!("{subject} tables"),
            format!(
                "missing, and role {:?} may not create them: {listed}. An administrator runs:\n{}",
                facts.role, facts.create_sql
            ),
        )
    })
}

fn rights(subject: &str, facts: &ServerFacts) -> Vec<Finding> {
    let lacking: Vec<String> = facts
        .tables
        .iter()
        .filter(|t| t.exists && !t.missing_rights.is_empty())
        .map(|t| format!("{} on {}", t.missing_rights.join(", "), t.name))
        .collect();
    if lacking.is_empty() {
        let present = facts.tables.iter().any(|t| t.exists);
        return if present {
            vec![Finding::ok(
                format!("{subject} rights"),
                format!(
                    "role {:?} may SELECT, INSERT, UPDATE and DELETE on every table",
                    facts.role
                ),
            )]
        } else {
            Vec::new()
        };
    }
    vec![Finding::fail(
        format!("{subject} rights"),
        format!(
            "role {:?} lacks {}: every round would be rejected (GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {} TO {})",
            facts.role,
            lacking.join("; "),
            facts.schema,
            facts.role
        ),
    )]
}

fn bloat(table: &TableFacts) -> Option<Finding> {
    let stream = table.stream.as_deref()?;
    if !table.exists {
        return None;
    }
    let rows = table.live_rows + table.dead_rows;
    let share = if rows > 0 {
        table.dead_rows as f64 / rows as f64
    } else {
        0.0
    };
    let subject = format!("streams.{stream} claims table");
    let sizes = format!(
        "{} live claims, {} dead rows, {} on disk",
        table.live_rows,
        table.dead_rows,
        crate::ops::plan::text::human_bytes(u64::try_from(table.bytes).unwrap_or(0))
    );
    Some(if share >= BLOAT_SHARE {
        Finding::warn(
            subject,
            format!(
                "{sizes}: {:.0} % of its rows are dead (bloated): autovacuum is behind the janitor's deletes; VACUUM {} or tune its autovacuum",
                share * 100.0,
                table.name
            ),
        )
    } else {
        Finding::ok(subject, sizes)
    })
}

#[cfg(test)]
mod tests {
    use super::super::Status;
    use super::*;

    fn table(name: &str, stream: Option<&str>) -> TableFacts {
        TableFacts {
            name: name.into(),
            stream: stream.map(Into::into),
            exists: true,
            missing_rights: Vec::new(),
            live_rows: 1000,
            dead_rows: 10,
            bytes: 137_000,
        }
    }

    fn facts() -> ServerFacts {
        ServerFacts {
            version_num: 150_018,
            version: "15.18".into(),
            role: "idemgate".into(),
            schema: "idemgate".into(),
            may_create: true,
            tables: vec![
                table("idemgate.claims_ba", Some("bank")),
                table("idemgate.watermarks", None),
            ],
            create_sql: "CREATE SCHEMA idemgate;".into(),
            durability: Durability {
                fsync: "on".into(),
                synchronous_commit: "on".into(),
                synchronous_standby_names: String::new(),
            },
        }
    }

    fn statuses(findings: &[Finding]) -> Vec<(String, Status)> {
        findings
            .iter()
            .map(|f| (f.subject.clone(), f.status))
            .collect()
    }

    #[test]
    fn a_ready_server_is_ok_throughout() {
        let findings = verdicts("postgres://db/x", &facts());
        assert!(
            findings.iter().all(|f| f.status == Status::Ok),
            "{findings:#?}"
        );
        assert!(findings[0].detail.contains("15.18"), "{findings:#?}");
        assert!(findings.iter().any(|f| f
            .detail
            .contains("1000 live claims, 10 dead rows, 137.0 kB")));
    }

    #[test]
    fn missing_tables_are_a_warning_when_the_role_may_create_them_and_a_failure_with_the_sql_when_not(
    ) {
        let mut facts = facts();
        facts.tables[0].exists = false;
        let warned = verdicts("postgres://db/x", &facts);
        assert!(statuses(&warned).contains(&("store.url tables".into(), Status::Warn)));
        facts.may_create = false;
        let failed = verdicts("postgres://db/x", &facts);
        let finding = failed
            .iter()
            .find(|f| f.subject == "store.url tables")
            .unwrap();
        assert_eq!(finding.status, Status::Fail);
        assert!(
            finding.detail.contains("CREATE SCHEMA idemgate;"),
            "{finding:?}"
        );
        assert!(finding.detail.contains("idemgate.claims_ba"), "{finding:?}");
    }

    #[test]
    fn a_missing_right_fails_naming_it_and_the_grant() {
        let mut facts = facts();
        facts.tables[1].missing_rights = vec!["DELETE"];
        let findings = verdicts("postgres://db/x", &facts);
        let finding = findings
            .iter()
            .find(|f| f.subject == "store.url rights")
            .unwrap();
        assert_eq!(finding.status, Status::Fail);
        assert!(
            finding.detail.contains("DELETE on idemgate.watermarks"),
            "{finding:?}"
        );
        assert!(finding.detail.contains("GRANT"), "{finding:?}");
    }

    #[test]
    fn a_claims_table_with_a_fifth_of_its_rows_dead_is_bloated() {
        let mut facts = facts();
        facts.tables[0].dead_rows = 250;
        let findings = verdicts("postgres://db/x", &facts);
        let finding = findings
            .iter()
            .find(|f| f.subject == "streams.bank claims table")
            .unwrap();
        assert_eq!(finding.status, Status::Warn);
        assert!(finding.detail.contains("20 %"), "{finding:?}");
        facts.tables[0].dead_rows = 240;
        let findings = verdicts("postgres://db/x", &facts);
        assert!(findings
            .iter()
            .all(|f| f.subject != "streams.bank claims table" || f.status == Status::Ok));
    }

    #[test]
    fn an_older_server_is_a_warning() {
        let mut facts = facts();
        facts.version_num = 120_000;
        facts.version = "12.0".into();
        let findings = verdicts("postgres://db/x", &facts);
        assert_eq!(findings[0].status, Status::Warn);
    }

    #[test]
    fn a_server_that_may_lose_answered_rounds_is_a_warning() {
        let ok = durability(&facts().durability);
        assert_eq!(ok.status, Status::Ok, "{ok:?}");
        assert!(ok.detail.contains("no synchronous standby"), "{ok:?}");
        for (fsync, commit) in [("off", "on"), ("on", "off")] {
            let settings = Durability {
                fsync: fsync.into(),
                synchronous_commit: commit.into(),
                synchronous_standby_names: "standby1".into(),
            };
            let found = durability(&settings);
            assert_eq!(found.status, Status::Warn, "{found:?}");
            assert!(found.detail.contains("unseen"), "{found:?}");
        }
    }
}
