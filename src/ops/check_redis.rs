//! The store, as `check` asks it. Connecting is the store's own connect,
//! so what it refuses (a missing or wrong password, an evicting
//! `maxmemory-policy`, RedisBloom asked for and absent) is refused here in
//! the same words; then the figures it does not print: the policy itself,
//! the modules a tiered stream's filter uses, a cluster's state.

use std::time::Duration;

use redis::Value;

use super::check::Finding;
use crate::config::{Config, StoreConfig};
use crate::store::redis::{
    config_value, module_names, FilterBackend, RedisOptions, RedisStore, RedisTarget,
};
use crate::store::{Mode, StoreError};

/// The longest the whole connect may take (it has its own shorter
/// timeouts per step; this bounds a cluster's several steps).
const CONNECT_BOUND: Duration = Duration::from_secs(30);

pub(super) async fn probe(config: &Config) -> Vec<Finding> {
    match &config.store {
        StoreConfig::Memory { .. } => vec![Finding::warn(
            "store",
            "memory: claims live in this one process and die with it (one replica only); nothing to reach",
        )],
        StoreConfig::Redis(options) => redis(config, options).await,
        StoreConfig::Postgres(_) => vec![Finding::warn(
            "store",
            "postgres: `check` does not probe a postgres store yet; `run` checks its tables at start",
        )],
    }
}

async fn redis(config: &Config, options: &RedisOptions) -> Vec<Finding> {
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

/// Whether the server keeps its data on disk: an exact stream's claims
/// are its only memory of what passed, and a restart without persistence
/// loses them (the streams then refuse to start, or stop deciding, until
/// `idemgate rebuild`: docs/design.md §8.2).
async fn persistence(store: &RedisStore, exact: &[&str]) -> Finding {
    const SUBJECT: &str = "store persistence";
    let saves = ask(store, &["CONFIG", "GET", "save"]).await;
    let aofs = ask(store, &["CONFIG", "GET", "appendonly"]).await;
    let (saves, aofs) = match (saves, aofs) {
        (Ok(saves), Ok(aofs)) => (saves, aofs),
        (Err(error), _) | (_, Err(error)) => {
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
        .map(|(save, aof)| Persistence {
            save: config_value(save).unwrap_or_default(),
            appendonly: config_value(aof).unwrap_or_default(),
        })
        .collect();
    persistence_finding(&nodes, exact)
}

/// One node's `save` and `appendonly` settings.
struct Persistence {
    save: String,
    appendonly: String,
}

impl Persistence {
    fn on_disk(&self) -> bool {
        !self.save.trim().is_empty() || self.appendonly.trim() == "yes"
    }
}

fn persistence_finding(nodes: &[Persistence], exact: &[&str]) -> Finding {
    const SUBJECT: &str = "store persistence";
    let volatile = nodes.iter().filter(|n| !n.on_disk()).count();
    if volatile == 0 {
        let aof = nodes.iter().all(|n| n.appendonly.trim() == "yes");
        return Finding::ok(
            SUBJECT,
            if aof {
                "appendonly yes".to_string()
            } else {
                format!(
                    "RDB snapshots (save {})",
                    nodes.first().map_or("", |n| n.save.trim())
                )
            },
        );
    }
    Finding::warn(
        SUBJECT,
        format!(
            "{volatile} of {} node(s) keep nothing on disk (save \"\", appendonly no): a restart \
             loses every claim of the exact stream(s) {}, which then stop until `idemgate \
             rebuild`; enable AOF (appendonly yes) or RDB snapshots",
            nodes.len(),
            exact.join(", ")
        ),
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
    use super::{persistence_finding, state_of, Persistence};
    use crate::ops::check::Status;

    fn node(save: &str, appendonly: &str) -> Persistence {
        Persistence {
            save: save.into(),
            appendonly: appendonly.into(),
        }
    }

    #[test]
    fn a_server_that_keeps_nothing_on_disk_is_a_warning_for_exact_streams() {
        let bank = ["bank"];
        let volatile = persistence_finding(&[node("", "no")], &bank);
        assert_eq!(volatile.status, Status::Warn, "{volatile:?}");
        assert!(volatile.detail.contains("bank"), "{volatile:?}");
        let rdb = persistence_finding(&[node("3600 1 300 100", "no")], &bank);
        assert_eq!(rdb.status, Status::Ok, "{rdb:?}");
        let aof = persistence_finding(&[node("", "yes")], &bank);
        assert_eq!(aof.status, Status::Ok, "{aof:?}");
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
