//! One way to send a batch of commands to standalone Redis or to a Redis
//! Cluster in a single round trip.
//!
//! Standalone: one pipeline. Cluster: a pipeline may only touch one slot,
//! so commands are grouped by the slot of their key and the groups go out
//! at once, each over the multiplexed connection of the node that owns it;
//! the batch still waits for one round trip, not one per command.

use std::collections::HashMap;
use std::time::Duration;

use futures::future::join_all;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::Slot;
use redis::{
    Client, ClientTlsConfig, Cmd, ConnectionInfo, IntoConnectionInfo, RedisError, RedisResult,
    TlsCertificates, Value,
};

use super::RedisOptions;
use crate::store::{Rejection, RejectionCause, StoreError};

/// Where the store lives: one server, or the seed nodes of a cluster.
/// `Debug` and `Display` hide credentials, so the target can be logged.
#[derive(Clone, PartialEq)]
pub enum RedisTarget {
    Standalone(String),
    Cluster(Vec<String>),
}

impl std::fmt::Display for RedisTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RedisTarget::Standalone(url) => f.write_str(&redact(url)),
            RedisTarget::Cluster(nodes) => {
                let nodes: Vec<String> = nodes.iter().map(|n| redact(n)).collect();
                write!(f, "cluster {}", nodes.join(","))
            }
        }
    }
}

impl std::fmt::Debug for RedisTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// Credentials given beside the URL (a password from `${VAR}` need not be
/// URL-encoded). `Debug` hides the password.
#[derive(Clone, Default, PartialEq)]
pub struct Auth {
    pub username: Option<String>,
    pub password: Option<String>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth")
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .finish()
    }
}

/// PEM files for TLS: a CA to trust instead of the system's roots, and a
/// client certificate with its key for servers that require one.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TlsFiles {
    pub ca_file: Option<std::path::PathBuf>,
    pub cert_file: Option<std::path::PathBuf>,
    pub key_file: Option<std::path::PathBuf>,
}

impl TlsFiles {
    fn read(&self) -> Result<TlsCertificates, StoreError> {
        let read = |path: &std::path::Path| {
            std::fs::read(path).map_err(|error| {
                StoreError::Refused(format!("cannot read {}: {error}", path.display()))
            })
        };
        let client_tls = match (&self.cert_file, &self.key_file) {
            (Some(cert), Some(key)) => Some(ClientTlsConfig {
                client_cert: read(cert)?,
                client_key: read(key)?,
            }),
            _ => None,
        };
        Ok(TlsCertificates {
            client_tls,
            root_cert: self.ca_file.as_deref().map(read).transpose()?,
        })
    }
}

/// `redis://user:secret@host:6379/0` -> `redis://***@host:6379/0`.
pub(crate) fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}***{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_string(),
    }
}

/// A command and the key it routes by.
#[derive(Clone)]
pub(crate) struct Keyed {
    pub(crate) key: Vec<u8>,
    pub(crate) cmd: Cmd,
}

#[derive(Clone)]
pub(crate) enum Conn {
    Standalone(ConnectionManager),
    /// With the options, to reach each master on its own (start-up checks,
    /// INFO figures) with the same credentials and TLS.
    Cluster(ClusterConnection, RedisOptions),
}

/// Commands time out after this long: the breaker, not a hung socket,
/// decides what happens next.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// A failed call: credentials the server refused are a refusal (a config
/// to fix, named as the server names it); anything else is the store being
/// unavailable.
pub(crate) fn unavailable(error: RedisError) -> StoreError {
    match error.code() {
        Some("NOAUTH") => StoreError::Refused(format!(
            "redis wants a password (NOAUTH): set store.password (or put it in the url): {error}"
        )),
        Some("WRONGPASS") => StoreError::Refused(format!(
            "redis refused the username or password (WRONGPASS): {error}"
        )),
        Some("NOPERM") => StoreError::Refused(format!("redis refused a command (NOPERM): {error}")),
        // redis-rs keeps only its own words for a failed AUTH; the server
        // said WRONGPASS (a wrong password, an unknown or disabled user).
        _ if error.kind() == redis::ErrorKind::AuthenticationFailed => StoreError::Refused(
            format!("redis refused the username or password (WRONGPASS): {error}"),
        ),
        _ if is_refused_command(&error) => StoreError::Refused(error.to_string()),
        _ => StoreError::Unavailable(error.to_string()),
    }
}

/// A command's error reply inside a round, `what` naming the command's
/// part in it: a permanent refusal (NOPERM, WRONGTYPE, OOM, READONLY) is
/// a rejection with its cause, anything else a protocol error.
pub(crate) fn reply_error(what: &str, error: RedisError) -> StoreError {
    let text = error.to_string();
    match RejectionCause::of_reply(error.code(), &text) {
        Some(cause) => StoreError::Rejected(Rejection {
            cause,
            detail: format!("{what}: {text}"),
        }),
        None => StoreError::Protocol(format!("{what}: {text}")),
    }
}

/// As [`reply_error`], for an error answer inside a value (a pipeline's
/// nested reply).
pub(crate) fn server_error(what: &str, error: &redis::ServerError) -> StoreError {
    let text = format!("{} {}", error.code(), error.details().unwrap_or_default());
    match RejectionCause::of_reply(Some(error.code()), &text) {
        Some(cause) => StoreError::Rejected(Rejection {
            cause,
            detail: format!("{what}: {text}"),
        }),
        None => StoreError::Protocol(format!("{what}: {text}")),
    }
}

/// `ERR unknown command 'CONFIG'` (a renamed or disabled command).
fn is_refused_command(error: &RedisError) -> bool {
    let text = error.to_string();
    text.contains("unknown command") || text.contains("unknown subcommand")
}

/// One node's client: its URL with the options' credentials and TLS files.
fn client(url: &str, options: &RedisOptions) -> Result<Client, StoreError> {
    let mut info: ConnectionInfo = url.into_connection_info().map_err(unavailable)?;
    let mut redis_info = info.redis_settings().clone();
    if let Some(username) = &options.auth.username {
        redis_info = redis_info.set_username(username);
    }
    if let Some(password) = &options.auth.password {
        redis_info = redis_info.set_password(password);
    }
    info = info.set_redis_settings(redis_info);
    match &options.tls {
        Some(files) => Client::build_with_tls(info, files.read()?).map_err(unavailable),
        None => Client::open(info).map_err(unavailable),
    }
}

impl Conn {
    /// Connects, and asks every node for PING so that a missing or wrong
    /// password is reported as such at start.
    pub(crate) async fn connect(options: &RedisOptions) -> Result<Conn, StoreError> {
        let conn = Conn::open(options).await?;
        conn.on_every_node(&redis::cmd("PING")).await?;
        Ok(conn)
    }

    async fn open(options: &RedisOptions) -> Result<Conn, StoreError> {
        match &options.target {
            RedisTarget::Standalone(url) => {
                let client = client(url, options)?;
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(CONNECT_TIMEOUT))
                    .set_response_timeout(Some(RESPONSE_TIMEOUT))
                    .set_number_of_retries(2)
                    .set_max_delay(Duration::from_secs(1));
                let manager = tokio::time::timeout(
                    CONNECT_TIMEOUT * 2,
                    client.get_connection_manager_with_config(config),
                )
                .await
                .map_err(|_| StoreError::Unavailable("connect timed out".into()))?
                .map_err(unavailable)?;
                Ok(Conn::Standalone(manager))
            }
            RedisTarget::Cluster(nodes) => {
                let mut builder = ClusterClientBuilder::new(nodes.clone())
                    .connection_timeout(CONNECT_TIMEOUT)
                    .response_timeout(RESPONSE_TIMEOUT)
                    .retries(2);
                if let Some(username) = &options.auth.username {
                    builder = builder.username(username);
                }
                if let Some(password) = &options.auth.password {
                    builder = builder.password(password);
                }
                if let Some(files) = &options.tls {
                    builder = builder.certs(files.read()?);
                }
                let client = builder.build().map_err(unavailable)?;
                let connection = client.get_async_connection().await.map_err(unavailable)?;
                Ok(Conn::Cluster(connection, options.clone()))
            }
        }
    }

    /// On a cluster a trip goes out as one pipeline per slot, in parallel:
    /// commands on different slots have no order among them.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Conn::Cluster(..))
    }

    /// Runs every command, one round trip for the whole batch. Server-side
    /// errors come back per command; a connection error fails the batch.
    pub(crate) async fn run(
        &self,
        commands: Vec<Keyed>,
    ) -> Result<Vec<RedisResult<Value>>, StoreError> {
        if commands.is_empty() {
            return Ok(Vec::new());
        }
        match self {
            Conn::Standalone(manager) => {
                let mut pipe = redis::pipe();
                pipe.ignore_errors();
                for command in commands {
                    pipe.add_command(command.cmd);
                }
                let mut connection = manager.clone();
                pipe.query_async(&mut connection).await.map_err(unavailable)
            }
            Conn::Cluster(cluster, _) => run_by_slot(cluster, commands).await,
        }
    }

    /// Runs one command against every master (standalone: the server), for
    /// start-up checks and INFO figures. A server's error answer (NOAUTH,
    /// NOPERM) is an error, classified by `unavailable`.
    pub(crate) async fn on_every_node(&self, cmd: &Cmd) -> Result<Vec<Value>, StoreError> {
        match self {
            Conn::Standalone(manager) => {
                let mut connection = manager.clone();
                let value = connection
                    .req_packed_command(cmd)
                    .await
                    .and_then(Value::extract_error)
                    .map_err(unavailable)?;
                Ok(vec![value])
            }
            Conn::Cluster(cluster, options) => {
                let mut connection = cluster.clone();
                let mut nodes_cmd = redis::cmd("CLUSTER");
                nodes_cmd.arg("NODES");
                let nodes: String = nodes_cmd
                    .query_async(&mut connection)
                    .await
                    .map_err(unavailable)?;
                let mut values = Vec::new();
                let seed = match &options.target {
                    RedisTarget::Cluster(seeds) => seeds.first().cloned().unwrap_or_default(),
                    RedisTarget::Standalone(url) => url.clone(),
                };
                for address in masters(&nodes) {
                    let client = client(&node_url(&seed, &address), options)?;
                    let mut node = client
                        .get_multiplexed_async_connection()
                        .await
                        .map_err(unavailable)?;
                    let value = node
                        .req_packed_command(cmd)
                        .await
                        .and_then(Value::extract_error)
                        .map_err(unavailable)?;
                    values.push(value);
                }
                Ok(values)
            }
        }
    }
}

/// A seed URL with its host and port replaced by another node's `address`:
/// the scheme (TLS or not), the credentials and the database are kept.
fn node_url(seed: &str, address: &str) -> String {
    let (scheme, rest) = seed.split_once("://").unwrap_or(("redis", seed));
    let (userinfo, hostpart) = match rest.rfind('@') {
        Some(at) => (&rest[..=at], &rest[at + 1..]),
        None => ("", rest),
    };
    let path = hostpart.find('/').map_or("", |slash| &hostpart[slash..]);
    format!("{scheme}://{userinfo}{address}{path}")
}

/// Addresses of the masters in `CLUSTER NODES` output
/// (`<id> <ip:port@cport[,host]> <flags> ...`).
fn masters(nodes: &str) -> Vec<String> {
    nodes
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let address = fields.nth(1)?;
            let flags = fields.next()?;
            let is_live_master = flags.split(',').any(|f| f == "master")
                && !flags.split(',').any(|f| f == "fail" || f == "noaddr");
            let address = address.split('@').next()?;
            is_live_master.then(|| address.to_string())
        })
        .collect()
}

async fn run_by_slot(
    cluster: &ClusterConnection,
    commands: Vec<Keyed>,
) -> Result<Vec<RedisResult<Value>>, StoreError> {
    let total = commands.len();
    let mut groups: HashMap<Slot, (Vec<usize>, redis::Pipeline)> = HashMap::new();
    for (index, command) in commands.into_iter().enumerate() {
        let (indices, pipe) = groups
            .entry(Slot::for_key(&command.key))
            .or_insert_with(|| {
                let mut pipe = redis::pipe();
                pipe.ignore_errors();
                (Vec::new(), pipe)
            });
        indices.push(index);
        pipe.add_command(command.cmd);
    }
    let sent = groups.into_values().map(|(indices, pipe)| {
        let mut connection = cluster.clone();
        async move {
            let results: RedisResult<Vec<RedisResult<Value>>> =
                pipe.query_async(&mut connection).await;
            (indices, results)
        }
    });
    let mut out: Vec<Option<RedisResult<Value>>> = (0..total).map(|_| None).collect();
    for (indices, results) in join_all(sent).await {
        let results = results.map_err(unavailable)?;
        if results.len() != indices.len() {
            return Err(StoreError::Protocol(format!(
                "pipeline of {} commands answered {}",
                indices.len(),
                results.len()
            )));
        }
        for (index, result) in indices.into_iter().zip(results) {
            out[index] = Some(result);
        }
    }
    out.into_iter()
        .map(|r| r.ok_or_else(|| StoreError::Protocol("command without an answer".into())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{masters, node_url, redact, RedisTarget};

    #[test]
    fn a_node_is_reached_like_the_seed_it_was_learnt_from() {
        assert_eq!(
            node_url("rediss://app:pw@seed:7000/0", "10.0.0.2:7001"),
            "rediss://app:pw@10.0.0.2:7001/0"
        );
        assert_eq!(
            node_url("redis://seed:7000", "10.0.0.3:7002"),
            "redis://10.0.0.3:7002"
        );
    }

    #[test]
    fn credentials_never_reach_a_log_line() {
        let target = RedisTarget::Standalone("rediss://app:hunter2@cache:6380/0".into());
        let shown = format!("{target} {target:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert_eq!(redact("redis://cache:6379"), "redis://cache:6379");
    }

    #[test]
    fn masters_are_read_from_cluster_nodes() {
        let nodes = "a 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460\n\
                     b 127.0.0.1:7002@17002 master - 0 0 2 connected 5461-10922\n\
                     c 127.0.0.1:7004@17004 slave b 0 0 2 connected\n\
                     d 127.0.0.1:7003@17003 master,fail - 0 0 3 connected\n";
        assert_eq!(masters(nodes), vec!["127.0.0.1:7001", "127.0.0.1:7002"]);
    }
}
