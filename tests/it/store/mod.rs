//! The claim-store conformance suite against every backend: memory, Redis
//! with bitmaps, Redis with RedisBloom, a three-master Redis Cluster, Redis
//! over TLS with an ACL user, and PostgreSQL over TLS (exact streams only).

mod conformance;
mod deployments;
mod layouts;
mod marks;
mod permissions;
mod postgres_bytes;
mod postgres_names;
mod postgres_only;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use idemgate::fingerprint::SourceHash;
use idemgate::store::memory::MemoryStore;
use idemgate::store::redis::{
    Auth, FilterBackend, RedisOptions, RedisStore, RedisTarget, Tier1Layout, TlsFiles,
};
use idemgate::store::{ClaimStore, StreamId, StreamSpec};

/// Opens stores that share one state: each `open` is a new connection to
/// the same server and key prefix (the memory store hands out one instance).
#[async_trait]
pub trait Harness: Send + Sync {
    async fn open(&self, streams: Vec<StreamSpec>) -> Arc<dyn ClaimStore>;
    /// Unique per test, so hashes never meet another test's keys.
    fn salt(&self) -> &str;
    /// Called where a test's timestamps have passed a hash's tier-1 TTL.
    /// The memory store ages keys on the caller's clock, so the timestamps
    /// alone expire them; Redis expires keys on its own wall clock, so
    /// there the harness deletes the key.
    async fn tier1_expired(&self, stream: StreamId, hash: &SourceHash);
    /// The store loses everything it held, as a server restarted without
    /// persistence (docs/design.md §8.2): the memory store forgets, Redis
    /// loses every key under the test's prefix, PostgreSQL every row of
    /// the test's schema.
    async fn lose_state(&self);
}

use idemgate_testkit::servers::scan_async;
use idemgate_testkit::{env, unique};

struct Memory {
    salt: String,
    store: Mutex<Option<Arc<MemoryStore>>>,
}

#[async_trait]
impl Harness for Memory {
    async fn open(&self, streams: Vec<StreamSpec>) -> Arc<dyn ClaimStore> {
        let mut store = self.store.lock().unwrap();
        store
            .get_or_insert_with(|| Arc::new(MemoryStore::new(streams)))
            .clone()
    }
    fn salt(&self) -> &str {
        &self.salt
    }
    async fn tier1_expired(&self, _: StreamId, _: &SourceHash) {}
    async fn lose_state(&self) {
        if let Some(store) = self.store.lock().unwrap().as_ref() {
            store.forget();
        }
    }
}

pub struct Redis {
    salt: String,
    pub target: RedisTarget,
    pub backend: FilterBackend,
    pub prefix: String,
    /// The TLS server's ACL user and certificates (backend `tls`).
    pub auth: Auth,
    pub tls: Option<TlsFiles>,
    /// What the stores write tier-1 claims as.
    pub layout: Tier1Layout,
    /// Every stream's `peak_rate` where set: 1/s gives one to ten hashes a
    /// tag, whose claims go native once a script has written them.
    pub peak_rate: Option<u64>,
}

/// The test services' TLS Redis (tls-port, client certificates required):
/// its ACL user `user_var`/`password_var`, the CA and client certificate
/// made at start.
pub fn tls_options(prefix: &str, user_var: &str, password_var: &str) -> RedisOptions {
    let dir = std::path::PathBuf::from(env("IDEMGATE_TEST_REDIS_TLS_DIR"));
    RedisOptions {
        auth: Auth {
            username: Some(env(user_var)),
            password: Some(env(password_var)),
        },
        tls: Some(TlsFiles {
            ca_file: Some(dir.join("ca.pem")),
            cert_file: Some(dir.join("client.pem")),
            key_file: Some(dir.join("client.key")),
        }),
        ..RedisOptions::new(
            RedisTarget::Standalone(env("IDEMGATE_TEST_REDIS_TLS_URL")),
            prefix,
        )
    }
}

impl Redis {
    /// A backend writing tier-1 claims as keys.
    pub fn new(kind: &str, test: &str) -> Redis {
        Redis::with_layout(kind, test, Tier1Layout::Keys)
    }

    pub fn with_layout(kind: &str, test: &str, layout: Tier1Layout) -> Redis {
        let (target, backend) = match kind {
            "bitmap" => (
                RedisTarget::Standalone(env("IDEMGATE_TEST_REDIS_URL")),
                FilterBackend::Bitmap,
            ),
            "bloom" => (
                RedisTarget::Standalone(env("IDEMGATE_TEST_REDISBLOOM_URL")),
                FilterBackend::RedisBloom,
            ),
            "cluster" => (
                RedisTarget::Cluster(
                    env("IDEMGATE_TEST_REDIS_CLUSTER")
                        .split(',')
                        .map(str::to_string)
                        .collect(),
                ),
                FilterBackend::Bitmap,
            ),
            "tls" => {
                let salt = unique(test);
                let prefix = format!("{salt}:");
                let options = tls_options(
                    &prefix,
                    "IDEMGATE_TEST_REDIS_TLS_USER",
                    "IDEMGATE_TEST_REDIS_TLS_PASSWORD",
                );
                return Redis {
                    prefix,
                    salt,
                    target: options.target,
                    backend: FilterBackend::Bitmap,
                    auth: options.auth,
                    tls: options.tls,
                    layout,
                    peak_rate: None,
                };
            }
            other => panic!("unknown backend {other}"),
        };
        let salt = unique(test);
        Redis {
            prefix: format!("{salt}:"),
            salt,
            target,
            backend,
            auth: Auth::default(),
            tls: None,
            layout,
            peak_rate: None,
        }
    }

    /// A backend writing tier-1 claims grouped.
    pub fn grouped(kind: &str, test: &str) -> Redis {
        Redis::with_layout(kind, test, Tier1Layout::Grouped)
    }

    /// Born grouped in ten hashes a tag: most claims go native.
    pub fn native(kind: &str, test: &str) -> Redis {
        Redis {
            peak_rate: Some(1),
            ..Redis::grouped(kind, test)
        }
    }
}

#[async_trait]
impl Harness for Redis {
    async fn open(&self, mut streams: Vec<StreamSpec>) -> Arc<dyn ClaimStore> {
        if let Some(rate) = self.peak_rate {
            for spec in &mut streams {
                spec.peak_rate = Some(rate);
            }
        }
        let options = RedisOptions {
            filter_backend: Some(self.backend),
            auth: self.auth.clone(),
            tls: self.tls.clone(),
            tier1_layout: Some(self.layout),
            ..RedisOptions::new(self.target.clone(), self.prefix.clone())
        };
        let store = RedisStore::connect(&options, streams)
            .await
            .unwrap_or_else(|e| panic!("cannot open the {:?} store: {e}", self.target));
        assert_eq!(store.filter_backend(), self.backend);
        Arc::new(store)
    }
    fn salt(&self) -> &str {
        &self.salt
    }
    async fn tier1_expired(&self, stream: StreamId, hash: &SourceHash) {
        let key = tier1_key(&self.prefix, stream, hash);
        // Its field, in whichever of the tag's hashes holds it.
        let key_id = &conformance::streams()[stream.0].key_id;
        let groups = format!("{}{key_id}:g{{{:02x}}}*", self.prefix, hash.0[16] & 0x3f);
        // On a cluster only the slot's owner deletes; the others answer
        // MOVED, which is of no interest here.
        for mut conn in connections(self).await {
            let _: redis::RedisResult<i64> =
                redis::cmd("DEL").arg(&key).query_async(&mut conn).await;
            for group in scan_async(&mut conn, &groups).await.unwrap_or_default() {
                let _: redis::RedisResult<i64> = redis::cmd("HDEL")
                    .arg(&group)
                    .arg(&hash.0[..16])
                    .query_async(&mut conn)
                    .await;
            }
        }
    }
    async fn lose_state(&self) {
        for mut conn in connections(self).await {
            let keys = scan_async(&mut conn, &format!("{}*", self.prefix))
                .await
                .unwrap();
            for key in keys {
                let _: i64 = redis::cmd("DEL")
                    .arg(&key)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
            }
        }
    }
}

/// A tier-1 key as the store names it: `<prefix><key_id>{<tag>}<16 bytes>`.
pub fn tier1_key(prefix: &str, stream: StreamId, hash: &SourceHash) -> Vec<u8> {
    let key_id = &conformance::streams()[stream.0].key_id;
    let mut key = format!("{prefix}{key_id}{{{:02x}}}", hash.0[16] & 0x3f).into_bytes();
    key.extend_from_slice(&hash.0[..16]);
    key
}

/// How long the harness's checks wait for one reply on [`connections`].
const INSPECT_REPLY: Duration = Duration::from_secs(10);

/// A connection to every node (standalone: the server), as the harness's
/// checks reach them, with the TLS user and certificates where set.
pub async fn connections(redis: &Redis) -> Vec<redis::aio::MultiplexedConnection> {
    let nodes = match &redis.target {
        RedisTarget::Standalone(url) => vec![url.clone()],
        RedisTarget::Cluster(nodes) => nodes.clone(),
    };
    let mut out = Vec::new();
    for url in nodes {
        let mut info = redis::IntoConnectionInfo::into_connection_info(url.as_str()).unwrap();
        let mut settings = info.redis_settings().clone();
        if let (Some(user), Some(password)) = (&redis.auth.username, &redis.auth.password) {
            settings = settings.set_username(user).set_password(password);
        }
        info = info.set_redis_settings(settings);
        let client = match &redis.tls {
            Some(files) => {
                let read =
                    |p: &Option<std::path::PathBuf>| std::fs::read(p.as_ref().unwrap()).unwrap();
                let certs = redis::TlsCertificates {
                    client_tls: Some(redis::ClientTlsConfig {
                        client_cert: read(&files.cert_file),
                        client_key: read(&files.key_file),
                    }),
                    root_cert: Some(read(&files.ca_file)),
                };
                redis::Client::build_with_tls(info, certs).unwrap()
            }
            None => redis::Client::open(info).unwrap(),
        };
        // Not redis-rs's default 500 ms per reply: a SCAN of the shared
        // Redis, which holds the keys of every test running beside this
        // one, outlived it once beside a busy core ("timed out").
        let config = redis::AsyncConnectionConfig::new().set_response_timeout(Some(INSPECT_REPLY));
        out.push(
            client
                .get_multiplexed_async_connection_with_config(&config)
                .await
                .unwrap(),
        );
    }
    out
}

/// Every key under the prefix, on every node, with its TTL in ms.
pub async fn ttls(redis: &Redis) -> Vec<(Vec<u8>, i64)> {
    let mut out = Vec::new();
    for mut conn in connections(redis).await {
        let keys = scan_async(&mut conn, &format!("{}*", redis.prefix))
            .await
            .unwrap();
        for key in keys {
            let ttl: i64 = redis::cmd("PTTL")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .unwrap();
            out.push((key, ttl));
        }
    }
    out
}

/// Runs every test of `exact` on every backend; those of `tiered` (which
/// need tier 2, the filter) on every backend that has one, so not on
/// PostgreSQL, which keeps exact claims only: no such test is generated
/// for it, rather than skipped at run time. Those of `redis` (which look at
/// the server itself) run on every Redis backend.
macro_rules! conformance {
    (
        exact: [$($test:ident),* $(,)?],
        tiered: [$($tiered:ident),* $(,)?],
        redis: [$($only:ident),* $(,)?] $(,)?
    ) => {
        mod memory {
            $(
                #[tokio::test]
                async fn $test() {
                    let harness = super::Memory {
                        salt: super::unique(stringify!($test)),
                        store: Default::default(),
                    };
                    super::conformance::$test(&harness).await;
                }
            )*
            $(
                #[tokio::test]
                async fn $tiered() {
                    let harness = super::Memory {
                        salt: super::unique(stringify!($tiered)),
                        store: Default::default(),
                    };
                    super::conformance::$tiered(&harness).await;
                }
            )*
        }
        conformance!(@redis redis_bitmap, "bitmap", new, [$($test,)* $($tiered),*], [$($only),*]);
        conformance!(@redis redis_bloom, "bloom", new, [$($test,)* $($tiered),*], [$($only),*]);
        conformance!(@redis redis_cluster, "cluster", new, [$($test,)* $($tiered),*], [$($only),*]);
        conformance!(@redis redis_tls, "tls", new, [$($test,)* $($tiered),*], [$($only),*]);
        conformance!(@redis redis_grouped, "bitmap", grouped, [$($test,)* $($tiered),*], [$($only),*]);
        conformance!(@redis redis_cluster_grouped, "cluster", grouped, [$($test,)* $($tiered),*], [$($only),*]);
        conformance!(@redis redis_native, "bitmap", native, [$($test,)* $($tiered),*], [$($only),*]);
        conformance!(@redis redis_cluster_native, "cluster", native, [$($test,)* $($tiered),*], [$($only),*]);
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    let harness = super::postgres_only::Postgres::new(stringify!($test)).await;
                    super::conformance::$test(&harness).await;
                    harness.no_expired_row_outlives_a_sweep().await;
                }
            )*
        }
    };
    (@redis $module:ident, $kind:literal, $make:ident, [$($test:ident),*], [$($only:ident),*]) => {
        mod $module {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    let harness = super::Redis::$make($kind, stringify!($test));
                    super::conformance::$test(&harness).await;
                    super::every_key_carries_an_expiry(&harness).await;
                }
            )*
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $only() {
                    let harness = super::Redis::$make($kind, stringify!($only));
                    super::conformance::$only(&harness).await;
                    super::every_key_carries_an_expiry(&harness).await;
                }
            )*
        }
    };
}

/// Checked after every Redis test: a key without an expiry is a bug, but
/// for the store identities and tier-1 layout records, which must outlive
/// every claim (docs/design.md §8.2) and never expire.
async fn every_key_carries_an_expiry(redis: &Redis) {
    let keys = ttls(redis).await;
    assert!(
        !keys.is_empty(),
        "the test left no keys under {}",
        redis.prefix
    );
    for (key, ttl) in keys {
        let identity = idemgate_testkit::servers::is_persistent_key(&key[redis.prefix.len()..]);
        assert!(
            if identity { ttl == -1 } else { ttl > 0 },
            "key {} has pttl {ttl}",
            String::from_utf8_lossy(&key)
        );
    }
}

conformance!(
    exact: [
        a_record_below_its_watermark_is_replayed_even_after_its_key_expired,
        a_watermark_is_raised_only_from_a_prefix_at_or_below_it,
        a_watermark_never_goes_down,
        another_records_claim_is_settled_by_its_partitions_watermark,
        a_done_flag_settles_a_record_above_the_watermark,
        a_done_flag_or_release_with_another_token_is_refused,
        a_record_meeting_its_own_unsettled_claim_restamps_it,
        a_retried_round_meets_its_own_claim_as_fresh,
        a_released_claim_is_won_by_the_next_record,
        a_done_claim_is_never_released,
        no_claim_is_taken_over_however_long_it_waits,
        a_copy_takes_over_an_unsettled_claim_whose_holder_was_abandoned,
        no_claim_is_taken_over_outside_an_abandoned_range,
        a_skip_counted_delivered_settles_its_holders,
        a_replay_re_emits_inside_its_range_only_what_held_its_own_claim,
        another_records_pending_claim_is_held_not_duplicate,
        a_reused_key_with_another_payload_is_a_conflict,
        streams_are_separate_namespaces,
        two_connections_claiming_one_hash_at_once_give_exactly_one_winner,
        a_streams_identity_is_written_once_and_found_everywhere,
        a_record_of_runs_reads_back_whole_under_its_name_until_its_writer_deletes_it,
        a_record_of_runs_expires_a_watermark_ttl_after_the_last_commit_naming_it,
        a_round_on_a_store_that_lost_its_state_judges_none_of_the_streams_claims,
        a_round_on_a_store_rebuilt_under_the_replica_answers_changed,
        the_timed_check_sees_a_lost_store_without_a_round,
        a_restored_claim_is_settled_and_its_copies_are_duplicates,
        a_late_copy_after_its_claim_expired_is_novel,
    ],
    tiered: [
        a_filter_hit_keeps_its_tier1_claim_and_its_copies_wait_on_it,
        its_own_claim_overrides_a_filter_hit,
        at_least_once_its_own_claim_re_stamped_keeps_a_filter_hit,
        exactly_once_a_late_copy_whose_filter_duplicate_aborted_stays_one,
        a_round_applies_inserts_and_raises_before_it_reads_and_claims,
        a_full_filter_generation_never_drops_an_insert,
        a_generation_another_replica_filled_is_probed_in_full,
        a_publish_sent_twice_is_harmless,
        redelivery_nine_hours_after_the_first_is_suppressed,
        a_key_written_a_minute_before_a_rotation_is_found_a_minute_after,
        a_repeat_three_horizons_later_is_admitted,
        a_retry_ladder_out_to_nine_hours_is_suppressed_and_measured,
        filter_inserts_are_counted_against_capacity,
    ],
    redis: [
        a_tag_that_lost_its_identity_is_seen_by_the_claims_in_it,
        tier1_keys_and_values_are_compact,
        a_server_that_lost_its_scripts_still_settles_and_reads_after_the_raises,
        a_watermark_hash_keeps_its_ttl_refreshed_at_every_raise,
    ],
);
