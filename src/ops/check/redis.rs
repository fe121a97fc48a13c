//! The store, as `check` asks it. Connecting is the store's own connect,
//! so what it refuses (a missing or wrong password, an evicting
//! `maxmemory-policy`, RedisBloom asked for and absent) is refused here in
//! the same words; then the figures it does not print: the policy itself,
//! the modules a tiered stream's filter uses, a cluster's state.

use std::time::Duration;

use redis::Value;

use super::Finding;
use crate::config::Config;
use crate::store::redis::{
    config_value, module_names, FilterBackend, RedisOptions, RedisStore, RedisTarget,
};
use crate::store::{Mode, StoreError};

/// The longest the whole connect may take (it has its own shorter
/// timeouts per step; this bounds a cluster's several steps).
const CONNECT_BOUND: Duration = Duration::from_secs(30);

pub(super) async fn probe(config: &Config, options: &RedisOptions) -> Vec<Finding> {
    let target = options.target.to_string();
    let subject = match options.target {
        RedisTarget::Standalone(_) => "store.url",
        RedisTarget::Cluster(_) => "store.nodes",
    };
    let streams = config.streams.iter().map(|s| s.spec.clone()).collect();
    let store =
        match tokio::time::timeout(CONNECT_BOUND, RedisStore::connect(options, streams)).await {
            Err(_) => {
                return vec![Finding::fail(
                    subject,
                    format!("{target}: no answer within {}s", CONNECT_BOUND.as_secs()),
                )]
            }
            Ok(Err(error)) => return vec![Finding::fail(subject, format!("{target}: {error}"))],
            Ok(Ok(store)) => store,
        };
    let mut findings = vec![
        Finding::ok(
            subject,
            format!("{target}: every node answered PING with these credentials"),
        ),
        eviction_policy(&store, options).await,
    ];
    if config.streams.iter().any(|s| s.spec.mode == Mode::Tiered) {
        findings.push(filter(&store, options).await);
    }
    let exact: Vec<&str> = config
        .streams
        .iter()
        .filter(|s| s.spec.mode == Mode::Exact)
        .map(|s| s.spec.name.as_str())
        .collect();
    if !exact.is_empty() {
        findings.push(persistence(&store, &exact).await);
    }
    if matches!(options.target, RedisTarget::Cluster(_)) {
        findings.push(cluster_state(&store).await);
    }
    findings
}

async fn ask(store: &RedisStore, words: &[&str]) -> Result<Vec<Value>, StoreError> {
    let mut cmd = redis::cmd(words[0]);
    for word in &words[1..] {
        cmd.arg(*word);
    }
    store.ask_every_master(&cmd).await
}

/// Connect has refused an evicting policy unless the config allows it;
/// this says what the policy is.
async fn eviction_policy(store: &RedisStore, options: &RedisOptions) -> Finding {
    const SUBJECT: &str = "store maxmemory-policy";
    let answers = match ask(store, &["CONFIG", "GET", "maxmemory-policy"]).await {
        Ok(answers) => answers,
        Err(error) => {
            return Finding::warn(
                SUBJECT,
                format!("the server will not tell ({error}): make sure it never evicts keys, or every eviction shortens a ttl"),
            )
        }
    };
    let mut policies: Vec<String> = answers
        .into_iter()
        .map(|a| config_value(a).unwrap_or_else(|| "unreadable".into()))
        .collect();
    policies.sort();
    policies.dedup();
    let shown = policies.join(", ");
    if policies.iter().all(|p| p == "noeviction") {
        Finding::ok(SUBJECT, shown)
    } else if options.allow_eviction {
        Finding::warn(
            SUBJECT,
            format!("{shown}: can evict claims (accepted: store.allow_eviction = true)"),
        )
    } else {
        Finding::fail(SUBJECT, format!("{shown}: can evict claims"))
    }
}

/// What the server's persistence means for an exact stream's claims, its
/// only memory of what passed (docs/operating.md, "Persistence"): a
/// restart with nothing on disk is a loss idemgate sees (the streams stop
/// until `idemgate rebuild`, docs/design.md §8.2); one that brings back an
/// older state (the last RDB snapshot, an AOF missing its last writes) is
/// seen by the progress marks of every commit since, but not the writes of
/// the last commit interval, which no commit recorded yet.
async fn persistence(store: &RedisStore, exact: &[&str]) -> Finding {
    const SUBJECT: &str = "store persistence";
    let saves = ask(store, &["CONFIG", "GET", "save"]).await;
    let aofs = ask(store, &["CONFIG", "GET", "appendonly"]).await;
    let fsyncs = ask(store, &["CONFIG", "GET", "appendfsync"]).await;
    let (saves, aofs, fsyncs) = match (saves, aofs, fsyncs) {
        (Ok(saves), Ok(aofs), Ok(fsyncs)) => (saves, aofs, fsyncs),
        (Err(error), _, _) | (_, Err(error), _) | (_, _, Err(error)) => {
            return Finding::warn(
                SUBJECT,
                format!(
                    "could not tell whether the server keeps claims on disk ({error}): make sure \
                     it does (RDB snapshots or AOF) for the exact stream(s) {}",
                    exact.join(", ")
                ),
            )
        }
    };
    let nodes: Vec<Persistence> = saves
        .into_iter()
        .zip(aofs)
        .zip(fsyncs)
        .map(|((save, aof), fsync)| Persistence {
            save: config_value(save).unwrap_or_default(),
            appendonly: config_value(aof).unwrap_or_default(),
            appendfsync: config_value(fsync).unwrap_or_default(),
        })
        .collect();
    persistence_finding(&nodes, exact)
}

/// One node's `save`, `appendonly` and `appendfsync` settings.
struct Persistence {
    save: String,
    appendonly: String,
    appendfsync: String,
}

/// A node's persistence, worst first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kept {
    Nothing,
    Snapshots,
    AofNoFsync,
    AofEverySec,
    AofAlways,
}

impl Persistence {
    fn kept(&self) -> Kept {
        if self.appendonly.trim() == "yes" {
            match self.appendfsync.trim() {
                "always" => Kept::AofAlways,
                "no" => Kept::AofNoFsync,
                _ => Kept::AofEverySec,
            }
        } else if !self.save.trim().is_empty() {
            Kept::Snapshots
        } else {
            Kept::Nothing
        }
    }
}

/// The weakest node's persistence, and what a crash then costs.
fn persistence_finding(nodes: &[Persistence], exact: &[&str]) -> Finding {
    const SUBJECT: &str = "store persistence";
    let Some(worst) = nodes.iter().map(Persistence::kept).min() else {
        return Finding::warn(SUBJECT, "no node answered".to_string());
    };
    let count = nodes.iter().filter(|n| n.kept() == worst).count();
    let streams = exact.join(", ");
    let save = nodes
        .iter()
        .find(|n| n.kept() == worst)
        .map_or("", |n| n.save.trim());
    let said = match worst {
        Kept::Nothing => format!(
            "keep nothing on disk (save \"\", appendonly no): a restart loses every claim of the \
             exact stream(s) {streams}; idemgate sees it and they stop until `idemgate rebuild`; \
             enable AOF (appendonly yes, appendfsync always)"
        ),
        Kept::Snapshots => format!(
            "keep RDB snapshots only (save {save}): a crash brings back the last snapshot, \
             without the claims written since; idemgate sees it by the progress marks the \
             commits since recorded, and {streams} stop until `idemgate rebuild`, but a copy \
             of an event decided in the last commit interval can pass once; enable AOF \
             (appendonly yes, appendfsync always)"
        ),
        Kept::AofNoFsync => format!(
            "keep an AOF the OS flushes when it likes (appendfsync no): a crash can lose the \
             last seconds of claims; idemgate sees what a commit recorded ({streams} then stop \
             until `idemgate rebuild`), not the last commit interval, whose copies can pass \
             once; set appendfsync always"
        ),
        Kept::AofEverySec => "appendonly yes, appendfsync everysec: a crash can lose the last \
             second of claims; within the last commit interval unseen (a copy of an event \
             decided in it can pass once); appendfsync always loses none"
            .to_string(),
        Kept::AofAlways => {
            "appendonly yes, appendfsync always: a crash loses no acknowledged claim".to_string()
        }
    };
    if worst >= Kept::AofEverySec {
        return Finding::ok(SUBJECT, said);
    }
    Finding::warn(
        SUBJECT,
        format!("{count} of {} node(s) {said}", nodes.len()),
    )
}

/// Which structure a tiered stream's filter lives in, and whether the
/// module it needs is there.
async fn filter(store: &RedisStore, options: &RedisOptions) -> Finding {
    const SUBJECT: &str = "store.filter";
    let modules = ask(store, &["MODULE", "LIST"]).await;
    let bloom_everywhere = modules.as_ref().ok().map(|answers| {
        answers
            .iter()
            .all(|a| module_names(a).iter().any(|n| n == "bf"))
    });
    let chosen = store.filter_backend();
    match (options.filter_backend, chosen, bloom_everywhere) {
        (_, FilterBackend::RedisBloom, Some(true)) => {
            Finding::ok(SUBJECT, "tier 2 on RedisBloom: module bf on every node")
        }
        (_, FilterBackend::RedisBloom, _) => Finding::warn(
            SUBJECT,
            "tier 2 on RedisBloom as configured, but the server will not list its modules: it is trusted to have bf",
        ),
        (Some(FilterBackend::Bitmap), _, _) => {
            Finding::ok(SUBJECT, "tier 2 on bitmaps (store.filter = \"bitmap\")")
        }
        (None, FilterBackend::Bitmap, Some(false)) => Finding::ok(
            SUBJECT,
            "tier 2 on bitmaps: RedisBloom (bf) is not on every node",
        ),
        (None, FilterBackend::Bitmap, _) => Finding::warn(
            SUBJECT,
            "tier 2 on bitmaps: the server will not list its modules",
        ),
        (Some(FilterBackend::RedisBloom), FilterBackend::Bitmap, _) => {
            Finding::fail(SUBJECT, "RedisBloom asked for, bitmaps chosen")
        }
    }
}

/// `CLUSTER INFO` on every master must say `cluster_state:ok`.
async fn cluster_state(store: &RedisStore) -> Finding {
    const SUBJECT: &str = "store cluster_state";
    let answers = match ask(store, &["CLUSTER", "INFO"]).await {
        Ok(answers) => answers,
        Err(error) => return Finding::fail(SUBJECT, format!("CLUSTER INFO: {error}")),
    };
    let states: Vec<String> = answers
        .into_iter()
        .map(|answer| {
            redis::from_redis_value::<String>(answer)
                .ok()
                .and_then(|info| state_of(&info))
                .unwrap_or_else(|| "unreadable".into())
        })
        .collect();
    let bad = states.iter().filter(|s| *s != "ok").count();
    if bad == 0 && !states.is_empty() {
        Finding::ok(SUBJECT, format!("ok on {} masters", states.len()))
    } else {
        Finding::fail(
            SUBJECT,
            format!(
                "not ok on {bad} of {} masters: {}",
                states.len(),
                states.join(", ")
            ),
        )
    }
}

/// `cluster_state:<state>` from `CLUSTER INFO`.
fn state_of(info: &str) -> Option<String> {
    info.lines()
        .find_map(|line| line.trim().strip_prefix("cluster_state:"))
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::super::Status;
    use super::{persistence_finding, state_of, Persistence};

    fn node(save: &str, appendonly: &str) -> Persistence {
        Persistence {
            save: save.into(),
            appendonly: appendonly.into(),
            appendfsync: "everysec".into(),
        }
    }

    #[test]
    fn a_server_that_keeps_nothing_on_disk_is_a_warning_for_exact_streams() {
        let bank = ["bank"];
        let volatile = persistence_finding(&[node("", "no")], &bank);
        assert_eq!(volatile.status, Status::Warn, "{volatile:?}");
        assert!(volatile.detail.contains("bank"), "{volatile:?}");
        let rdb = persistence_finding(&[node("3600 1 300 100", "no")], &bank);
        assert_eq!(rdb.status, Status::Warn, "{rdb:?}");
        assert!(
            rdb.detail.contains("progress marks") && rdb.detail.contains("idemgate rebuild"),
            "{rdb:?}"
        );
        let aof = persistence_finding(&[node("", "yes")], &bank);
        assert_eq!(aof.status, Status::Ok, "{aof:?}");
        assert!(aof.detail.contains("last second"), "{aof:?}");
        let always = Persistence {
            appendfsync: "always".into(),
            ..node("", "yes")
        };
        let always = persistence_finding(&[always], &bank);
        assert_eq!(always.status, Status::Ok, "{always:?}");
        assert!(
            always.detail.contains("no acknowledged claim"),
            "{always:?}"
        );
        let no_fsync = Persistence {
            appendfsync: "no".into(),
            ..node("", "yes")
        };
        assert_eq!(persistence_finding(&[no_fsync], &bank).status, Status::Warn);
        let one_of_three = persistence_finding(
            &[node("", "yes"), node("", "no"), node("60 1", "no")],
            &bank,
        );
        assert_eq!(one_of_three.status, Status::Warn);
        assert!(
            one_of_three.detail.starts_with("1 of 3"),
            "{one_of_three:?}"
        );
    }

    #[test]
    fn the_cluster_state_is_read_from_cluster_info() {
        let info = "cluster_enabled:1\r\ncluster_state:fail\r\ncluster_slots_assigned:16384\r\n";
        assert_eq!(state_of(info).as_deref(), Some("fail"));
        assert_eq!(state_of("cluster_enabled:1\r\n"), None);
    }
}
