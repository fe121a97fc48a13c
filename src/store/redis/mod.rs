//! The Redis store, standalone or cluster (docs/design.md §4-§6).
//!
//! A round is one pipelined round trip carrying everything, in the order
//! the contract fixes: tier-2 inserts, watermark raises, done flags and
//! releases (compare-and-set scripts), the watermark read (`HGETALL` per
//! stream), then every claim (`SET NX PX GET`) with the tier-2 probes of
//! the tiered streams. One connection executes a pipeline in order, so on
//! standalone Redis that is exactly the contract's order.
//!
//! A cluster splits the trip by slot and sends the parts in parallel, so
//! commands on different slots have no order. Every dependency but one is
//! within one key, hence one slot (a raise and the read of the same
//! watermark hash; a done flag, a release and a claim of the same tier-1
//! key): there the slot's pipeline keeps the order. The exception is tier 2,
//! whose keys live apart: a round with inserts sends them first, alone, so
//! that a raised watermark never covers a hash tier 2 lacks. Steady state
//! is one round trip per round (per node), two on a cluster round with
//! inserts.
//!
//! Rare follow-ups: scripts the server lost (`NOSCRIPT`) are sent again as
//! `EVAL` with the watermark read after them; a full RedisBloom generation's
//! refused items go to its overflow part before the round answers; an
//! overflow part a round left out of its probes (an earlier round found it
//! absent) and that the round finds exists now is probed before the round
//! answers; a record that met its own claim from an earlier owner
//! re-stamps it by compare and set. Nothing is ever taken over and no
//! claim has a lease: claims are settled by the watermarks and done flags
//! alone.

mod claims;
mod conn;
mod dry_round;
mod early;
mod grouped;
mod grouped_script;
mod identity;
mod marks;
mod native;
mod native_trip;
mod reset;
mod restore;
mod round;
mod runs;
mod tier1;
mod tier2;
mod tier2_trips;
mod watermarks;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use redis::Value;
use tracing::warn;

pub(crate) use conn::redact;
use conn::{reply_error, Conn, Keyed};
pub use conn::{Auth, RedisTarget, TlsFiles};
use grouped::StreamLayout;
pub use grouped::Tier1Layout;
use tier1::Scripts;
pub use tier2::FilterBackend;
use tier2::{Clear, Full};

use super::{spec, StoreError, StoreIdentity, StreamSpec};

/// How to reach the store and what to accept of it.
#[derive(Clone, Debug)]
pub struct RedisOptions {
    pub target: RedisTarget,
    /// Prepended to every key: lets several deployments (or tests) share
    /// one server.
    pub key_prefix: String,
    /// `None` picks RedisBloom where every node has it, bitmaps otherwise.
    pub filter_backend: Option<FilterBackend>,
    /// Accept a `maxmemory-policy` that can evict claims. Eviction silently
    /// shortens every TTL, so this is off unless an operator says so.
    pub allow_eviction: bool,
    /// Refuse to start when the server will not tell its
    /// `maxmemory-policy` (managed services refuse `CONFIG`); otherwise
    /// that is a warning.
    pub require_eviction_check: bool,
    /// ACL user and password, where they are not in the URLs.
    pub auth: Auth,
    /// Certificates for `rediss://` URLs, where the system's roots and no
    /// client certificate are not enough.
    pub tls: Option<TlsFiles>,
    /// What new tier-1 claims are written as; `None` follows each
    /// stream's record (a fresh stream: grouped; one from before the
    /// grouped layout: keys). Claims of both layouts are always read.
    pub tier1_layout: Option<Tier1Layout>,
}

impl RedisOptions {
    /// The defaults: auto filter, no eviction, the eviction check a
    /// warning where refused, no extra credentials or certificates.
    pub fn new(target: RedisTarget, key_prefix: impl Into<String>) -> RedisOptions {
        RedisOptions {
            target,
            key_prefix: key_prefix.into(),
            filter_backend: None,
            allow_eviction: false,
            require_eviction_check: false,
            auth: Auth::default(),
            tls: None,
            tier1_layout: None,
        }
    }
}

/// A tier-1 claim's two places (docs/design.md §4.1): its key, and its
/// field in a grouped hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tier1Place {
    pub key: Vec<u8>,
    pub group: Vec<u8>,
    pub field: Vec<u8>,
}

pub struct RedisStore {
    conn: Conn,
    streams: Vec<StreamSpec>,
    prefix: String,
    filter_backend: FilterBackend,
    scripts: Scripts,
    /// RedisBloom generations this replica saw refuse an item: their
    /// inserts go straight to the overflow part (docs/design.md §5).
    full: Mutex<Full>,
    /// RedisBloom generations whose overflow part the last round that asked
    /// found absent: probed without it (docs/design.md §5).
    clear: Mutex<Clear>,
    /// Whether rounds ask which overflow parts exist (`EXISTS`): not where
    /// the store user may not, and then every part is probed.
    ask_overflow: bool,
    /// The stream identities adopted at start, by stream index: every
    /// round reads them beside its claims (docs/design.md §8.2).
    adopted: Mutex<HashMap<usize, StoreIdentity>>,
    /// Each stream's tier-1 layout, by stream index, settled at start.
    layouts: Vec<StreamLayout>,
    /// By stream index, the most live claims a claim script found in a
    /// hash it swept since the store's figures were last read: how near
    /// the listpack limit.
    most_fields: Vec<AtomicU64>,
    /// The server's time and the hashes' next sweeps, as the claim scripts
    /// answered them: which claims may go native (`native.rs`).
    sweeps: Mutex<native::Sweeps>,
    /// Claims sent as a native command since start (`native_claims`).
    native_sent: AtomicU64,
    /// This replica's floors of the streams' progress marks (`marks.rs`).
    floors: crate::store::marks::Floors,
}

const NOSCRIPT: &str = "NOSCRIPT";

/// Whether the store user may run `EXISTS`, which lets tiered rounds on
/// RedisBloom probe only the overflow parts that exist. Without it (an ACL
/// documented before) every part is probed in every round, as before,
/// and a warning says what to grant.
async fn may_ask_overflow(conn: &Conn, prefix: &str, backend: FilterBackend) -> bool {
    if backend != FilterBackend::RedisBloom {
        return false;
    }
    let asked = tier2::exists_cmd(format!("{prefix}dryrun-exists"));
    let error = match conn.run(vec![asked]).await {
        Ok(answers) => match answers.into_iter().next() {
            Some(Ok(_)) => return true,
            Some(Err(error)) => error.to_string(),
            None => "no answer".to_string(),
        },
        Err(error) => error.to_string(),
    };
    warn!(
        %error,
        "EXISTS failed at start: every round probes every overflow part of tier 2; where the store user may not run it, grant it (ACL SETUSER <user> +exists) to probe only those that exist"
    );
    false
}

impl RedisStore {
    /// Connects and checks the server before any claim is made: refuses an
    /// evicting `maxmemory-policy`, a requested RedisBloom that is absent,
    /// and a server that refuses any command of the dry round (a user the
    /// ACL limits, a full server, a read-only replica), naming it.
    pub async fn connect(
        options: &RedisOptions,
        streams: Vec<StreamSpec>,
    ) -> Result<RedisStore, StoreError> {
        let conn = Conn::connect(options).await?;
        check_eviction_policy(&conn, options).await?;
        let has_bloom = every_node_has_bloom(&conn).await?;
        let filter_backend = match (options.filter_backend, has_bloom) {
            // A service that will not list its modules: the operator's word
            // for RedisBloom, bitmaps (which work everywhere) for auto.
            (Some(backend), None) => backend,
            (None, None) => FilterBackend::Bitmap,
            (Some(FilterBackend::RedisBloom), Some(false)) => {
                return Err(StoreError::Refused(
                    "store.filter = \"redisbloom\" but the server has no RedisBloom module (bf)"
                        .into(),
                ));
            }
            (Some(backend), Some(_)) => backend,
            (None, Some(true)) => FilterBackend::RedisBloom,
            (None, Some(false)) => FilterBackend::Bitmap,
        };
        let scripts = Scripts::new();
        dry_round::run(
            &conn,
            &scripts,
            &options.key_prefix,
            &streams,
            filter_backend,
        )
        .await?;
        let ask_overflow = may_ask_overflow(&conn, &options.key_prefix, filter_backend).await;
        let layouts =
            grouped::settle(&conn, &options.key_prefix, &streams, options.tier1_layout).await?;
        let most_fields = streams.iter().map(|_| AtomicU64::new(0)).collect();
        let floors = marks::floors(streams.len());
        Ok(RedisStore {
            conn,
            streams,
            prefix: options.key_prefix.clone(),
            filter_backend,
            scripts,
            full: Mutex::new(Full::new()),
            clear: Mutex::new(Clear::new()),
            ask_overflow,
            adopted: Mutex::new(HashMap::new()),
            layouts,
            most_fields,
            sweeps: Mutex::new(native::Sweeps::default()),
            native_sent: AtomicU64::new(0),
            floors,
        })
    }

    pub fn filter_backend(&self) -> FilterBackend {
        self.filter_backend
    }

    /// Runs one command on every master (standalone: the server) and
    /// returns each answer: what `idemgate check` reports beside the checks
    /// `connect` made (the eviction policy, modules, the cluster state).
    pub(crate) async fn ask_every_master(
        &self,
        cmd: &redis::Cmd,
    ) -> Result<Vec<Value>, StoreError> {
        self.conn.on_every_node(cmd).await
    }

    /// The tier-1 key of a hash, for tests that inspect TTLs.
    pub fn tier1_key(
        &self,
        stream: super::StreamId,
        hash: &crate::fingerprint::SourceHash,
    ) -> Result<Vec<u8>, StoreError> {
        Ok(tier1::key(
            &self.prefix,
            &spec(&self.streams, stream)?.key_id,
            hash,
        ))
    }

    /// How many claims went as a native command since start (docs/design.md
    /// §4.1), for tests that check they do.
    pub fn native_claims(&self) -> u64 {
        self.native_sent.load(Ordering::Relaxed)
    }

    /// Where a hash's tier-1 claim lives, for tests that inspect the
    /// server.
    pub fn tier1_place(
        &self,
        stream: super::StreamId,
        hash: &crate::fingerprint::SourceHash,
    ) -> Result<Tier1Place, StoreError> {
        let place = round::place(&self.prefix, &self.streams, &self.layouts, stream, hash)?;
        Ok(Tier1Place {
            key: place.key,
            group: place.group,
            field: place.field,
        })
    }

    /// What a stream writes its tier-1 claims as.
    pub fn tier1_layout(&self, stream: super::StreamId) -> Result<Tier1Layout, StoreError> {
        Ok(round::layout(&self.layouts, stream)?.write)
    }

    fn saw_fields(&self, stream: usize, fields: u64) {
        if let Some(most) = self.most_fields.get(stream) {
            most.fetch_max(fields, Ordering::Relaxed);
        }
    }

    /// Per stream, the most live claims one of its tier-1 hashes held at a
    /// sweep since the last call, and starts over.
    fn take_most_fields(&self) -> Vec<(String, u64)> {
        self.streams
            .iter()
            .zip(&self.most_fields)
            .map(|(spec, most)| (spec.name.clone(), most.swap(0, Ordering::Relaxed)))
            .collect()
    }

    /// Runs script invocations; any that met `NOSCRIPT` are sent again as
    /// `EVAL`, which also caches the script on that node.
    async fn run_scripts<F>(&self, count: usize, build: F) -> Result<Vec<Value>, StoreError>
    where
        F: Fn(usize, bool) -> Keyed,
    {
        let answers = self
            .conn
            .run((0..count).map(|i| build(i, true)).collect())
            .await?;
        let mut values: Vec<Option<Value>> = Vec::with_capacity(count);
        let mut retry = Vec::new();
        for (i, answer) in answers.into_iter().enumerate() {
            match answer {
                Ok(value) => values.push(Some(value)),
                Err(error) if error.code() == Some(NOSCRIPT) => {
                    retry.push(i);
                    values.push(None);
                }
                Err(error) => return Err(reply_error("script", error)),
            }
        }
        if !retry.is_empty() {
            let again = self
                .conn
                .run(retry.iter().map(|&i| build(i, false)).collect())
                .await?;
            for (&i, answer) in retry.iter().zip(again) {
                values[i] = Some(answer.map_err(|e| reply_error("script", e))?);
            }
        }
        values
            .into_iter()
            .map(|v| v.ok_or_else(|| StoreError::Protocol("script without an answer".into())))
            .collect()
    }
}

/// Only `noeviction` keeps claims for their TTL. A server that will not say
/// (managed services refuse `CONFIG`) is a warning, or a refusal where the
/// config requires the check.
async fn check_eviction_policy(conn: &Conn, options: &RedisOptions) -> Result<(), StoreError> {
    let allow = options.allow_eviction;
    let mut cmd = redis::cmd("CONFIG");
    cmd.arg("GET").arg("maxmemory-policy");
    let answers = match conn.on_every_node(&cmd).await {
        Ok(answers) => answers,
        Err(StoreError::Refused(why)) if !options.require_eviction_check => {
            warn!(reason = %why, "cannot read redis maxmemory-policy (CONFIG refused): make sure the service never evicts keys, or every eviction shortens a ttl");
            return Ok(());
        }
        Err(StoreError::Refused(why)) => {
            return Err(StoreError::Refused(format!(
                "cannot read redis maxmemory-policy ({why}) and store.require_eviction_check = true"
            )))
        }
        Err(other) => return Err(other),
    };
    for answer in answers {
        let policy = config_value(answer)
            .ok_or_else(|| StoreError::Protocol("CONFIG GET maxmemory-policy".into()))?;
        // Every claim carries a TTL, so volatile-* policies evict claims as
        // surely as allkeys-* ones: only noeviction keeps them.
        if policy != "noeviction" {
            if allow {
                warn!(policy = %policy, "redis may evict claims: every eviction shortens a ttl");
            } else {
                return Err(StoreError::Refused(format!(
                    "redis maxmemory-policy is {policy}, which can evict claims; set it to \
                     noeviction or set store.allow_eviction = true"
                )));
            }
        }
    }
    Ok(())
}

/// `CONFIG GET` answers a flat array (RESP2) or a map (RESP3).
pub(crate) fn config_value(answer: Value) -> Option<String> {
    let second = match answer {
        Value::Array(mut items) if items.len() >= 2 => items.swap_remove(1),
        Value::Map(mut pairs) if !pairs.is_empty() => pairs.swap_remove(0).1,
        _ => return None,
    };
    redis::from_redis_value::<String>(second).ok()
}

/// Whether every node has RedisBloom; `None` where `MODULE LIST` is
/// refused (a managed service).
async fn every_node_has_bloom(conn: &Conn) -> Result<Option<bool>, StoreError> {
    let mut cmd = redis::cmd("MODULE");
    cmd.arg("LIST");
    let answers = match conn.on_every_node(&cmd).await {
        Ok(answers) => answers,
        Err(StoreError::Refused(why)) => {
            warn!(reason = %why, "cannot list redis modules: tier 2 on bitmaps unless store.filter says otherwise");
            return Ok(None);
        }
        Err(other) => return Err(other),
    };
    Ok(Some(answers.iter().all(|answer| {
        module_names(answer).iter().any(|name| name == "bf")
    })))
}

pub(crate) fn module_names(answer: &Value) -> Vec<String> {
    let mut names = Vec::new();
    if let Value::Array(modules) = answer {
        for module in modules {
            let fields: Vec<(Value, Value)> = match module {
                Value::Array(flat) => flat
                    .chunks(2)
                    .filter_map(|c| Some((c.first()?.clone(), c.get(1)?.clone())))
                    .collect(),
                Value::Map(pairs) => pairs.clone(),
                _ => continue,
            };
            for (field, value) in fields {
                let field: Option<String> = redis::from_redis_value(field).ok();
                if field.as_deref() == Some("name") {
                    if let Ok(name) = redis::from_redis_value::<String>(value) {
                        names.push(name);
                    }
                }
            }
        }
    }
    names
}

fn protocol(error: redis::RedisError) -> StoreError {
    reply_error("reply", error)
}

fn unparsable(error: impl std::fmt::Display) -> StoreError {
    StoreError::Protocol(error.to_string())
}
