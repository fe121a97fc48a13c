//! The claim-store conformance suite against every backend: memory, Redis
//! with bitmaps, Redis with RedisBloom, and a three-master Redis Cluster.

mod conformance;
mod deployments;

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use idemgate::store::memory::MemoryStore;
use idemgate::store::redis::{
    Auth, FilterBackend, RedisOptions, RedisStore, RedisTarget, TlsFiles,
};
use idemgate::store::{ClaimStore, StreamSpec};

/// Opens stores that share one state: each `open` is a new connection to
/// the same server and key prefix (the memory store hands out one instance).
#[async_trait]
pub trait Harness: Send + Sync {
    async fn open(&self, streams: Vec<StreamSpec>) -> Arc<dyn ClaimStore>;
    /// Unique per test, so hashes never meet another test's keys.
    fn salt(&self) -> &str;
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
}

pub struct Redis {
    salt: String,
    pub target: RedisTarget,
    pub backend: FilterBackend,
    pub prefix: String,
    /// The TLS server's ACL user and certificates (backend `tls`).
    pub auth: Auth,
    pub tls: Option<TlsFiles>,
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
    pub fn new(kind: &str, test: &str) -> Redis {
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
        }
    }
}

#[async_trait]
impl Harness for Redis {
    async fn open(&self, streams: Vec<StreamSpec>) -> Arc<dyn ClaimStore> {
        let options = RedisOptions {
            filter_backend: Some(self.backend),
            auth: self.auth.clone(),
            tls: self.tls.clone(),
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
}

/// Every key under the prefix, on every node, with its TTL in ms.
pub async fn ttls(redis: &Redis) -> Vec<(Vec<u8>, i64)> {
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
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
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

macro_rules! conformance {
    ($($test:ident),* $(,)?) => {
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
        }
        conformance!(@redis redis_bitmap, "bitmap", $($test),*);
        conformance!(@redis redis_bloom, "bloom", $($test),*);
        conformance!(@redis redis_cluster, "cluster", $($test),*);
        conformance!(@redis redis_tls, "tls", $($test),*);
    };
    (@redis $module:ident, $kind:literal, $($test:ident),*) => {
        mod $module {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    let harness = super::Redis::new($kind, stringify!($test));
                    super::conformance::$test(&harness).await;
                    super::every_key_carries_an_expiry(&harness).await;
                }
            )*
        }
    };
}

/// Checked after every Redis test: a key without an expiry is a bug.
async fn every_key_carries_an_expiry(redis: &Redis) {
    let keys = ttls(redis).await;
    assert!(
        !keys.is_empty(),
        "the test left no keys under {}",
        redis.prefix
    );
    for (key, ttl) in keys {
        assert!(
            ttl > 0,
            "key {} has pttl {ttl}",
            String::from_utf8_lossy(&key)
        );
    }
}

conformance!(
    redelivery_nine_hours_after_the_first_is_suppressed,
    a_key_written_a_minute_before_a_rotation_is_found_a_minute_after,
    a_repeat_three_horizons_later_is_admitted,
    a_retry_ladder_out_to_nine_hours_is_suppressed_and_measured,
    a_record_meeting_its_own_claim_is_not_its_own_duplicate,
    a_released_claim_is_won_by_the_next_record,
    another_records_pending_claim_is_held_not_duplicate,
    a_reused_key_with_another_payload_is_a_conflict,
    a_lapsed_lease_passes_the_claim_on_and_the_old_holder_cannot_finalize,
    streams_are_separate_namespaces,
    two_connections_claiming_one_hash_at_once_give_exactly_one_winner,
    filter_inserts_are_counted_against_capacity,
);
