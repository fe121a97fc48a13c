//! The built `idemgate` binary as a guard: dropping one kills its process,
//! so a failed assertion leaves nothing running; on a panic the gateway's
//! log tail is printed first.

use std::path::PathBuf;
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use std::collections::HashMap;

use idemgate_testkit::kafka::{Landed, Producer, Reader, Topics};
use idemgate_testkit::postgres;
use idemgate_testkit::process::Logged;
use idemgate_testkit::servers::{claim_ttls, signal, unsettled_claims};
use idemgate_testkit::workload::{Bank, Planned};
use idemgate_testkit::{env, kafka_brokers, unique, BOUND};

/// What one gateway process is told, as the TOML file `idemgate run` reads.
#[derive(Clone)]
pub struct GateConfig {
    pub brokers: String,
    pub group: String,
    pub input: String,
    pub clean: String,
    pub audit: String,
    pub redis_url: String,
    /// Seed nodes of a Redis Cluster: when set, the store is `kind =
    /// "cluster"` on them and `redis_url` is not used.
    pub redis_nodes: Vec<String>,
    pub key_prefix: String,
    /// `closed` or `open`.
    pub fail_mode: &'static str,
    pub max_records: usize,
    /// Further librdkafka properties for `[kafka]`.
    pub kafka: Vec<(&'static str, String)>,
    /// Further `[store]` lines (credentials, a `[store.tls]` table last).
    pub store: String,
    /// The stream's lines after its topics, instead of the bank-txn ones
    /// (which use `fail_mode`).
    pub stream: Option<String>,
    /// `[metrics] listen`: `127.0.0.1:0` (any free port) unless a test
    /// scrapes it and needs to know where.
    pub metrics_listen: String,
    /// Further `[metrics]` lines (`output_stall_after = "3s"`).
    pub metrics: String,
    /// Further `[[streams]]` tables, after the bank one.
    pub more_streams: String,
    /// Top-level lines, before `[kafka]` (`guarantee = "exactly-once"`).
    pub top: String,
    /// The store on the test services' PostgreSQL, in this schema of the
    /// test's own (`redis_url` and `key_prefix` are then not used).
    pub postgres_schema: Option<String>,
    /// With `postgres_schema`: the server's URL (role and password in it).
    pub postgres_url: String,
    /// Further `[batch]` lines (`transaction_call_timeout = "2s"`).
    pub batch: String,
    /// The process's environment beyond `RUST_LOG` (a fault point:
    /// `IDEMGATE_FAULT_AT`, `IDEMGATE_FAULT_ACTION`).
    pub env: Vec<(&'static str, String)>,
}

impl GateConfig {
    /// A bank-txn stream in exact mode over `topics`, with its own group and
    /// key prefix.
    pub fn new(test: &str, topics: &Topics, redis_url: String) -> GateConfig {
        GateConfig {
            brokers: kafka_brokers(),
            group: unique(&format!("{test}-group")),
            input: topics.input.clone(),
            clean: topics.clean.clone(),
            audit: topics.audit.clone(),
            redis_url,
            redis_nodes: Vec::new(),
            key_prefix: format!("{}:", unique(test)),
            fail_mode: "closed",
            max_records: 200,
            // A killed member's partitions move on after the full session
            // timeout (librdkafka's default is 45s).
            kafka: vec![
                ("session.timeout.ms", "6000".into()),
                ("heartbeat.interval.ms", "500".into()),
            ],
            store: String::new(),
            stream: None,
            metrics_listen: "127.0.0.1:0".into(),
            metrics: String::new(),
            more_streams: String::new(),
            top: String::new(),
            postgres_schema: None,
            postgres_url: String::new(),
            batch: String::new(),
            env: Vec::new(),
        }
    }

    /// The store on the test services' PostgreSQL over TLS (`verify-full`
    /// against their CA), in a schema of this test's own.
    pub fn on_postgres(mut self) -> GateConfig {
        self.postgres_schema = Some(postgres_schema(&self.key_prefix));
        self.postgres_url = env("IDEMGATE_TEST_POSTGRES_URL");
        self.store = format!(
            "[store.tls]\nca_file = \"{}\"\n",
            env("IDEMGATE_TEST_POSTGRES_CA")
        );
        self
    }

    /// `guarantee = "exactly-once"`, with this replica's transactional id.
    pub fn exactly_once(mut self, transactional_id: &str) -> GateConfig {
        self.top = "guarantee = \"exactly-once\"\n".into();
        self.kafka
            .push(("transactional.id", transactional_id.to_string()));
        self
    }

    /// The test services' TLS Redis: `rediss://`, its ACL user, the CA and
    /// the client certificate the server requires.
    pub fn over_tls(mut self) -> GateConfig {
        let dir = env("IDEMGATE_TEST_REDIS_TLS_DIR");
        self.redis_url = env("IDEMGATE_TEST_REDIS_TLS_URL");
        self.store = format!(
            "username = \"{}\"\npassword = \"{}\"\n[store.tls]\nca_file = \"{dir}/ca.pem\"\ncert_file = \"{dir}/client.pem\"\nkey_file = \"{dir}/client.key\"\n",
            env("IDEMGATE_TEST_REDIS_TLS_USER"),
            env("IDEMGATE_TEST_REDIS_TLS_PASSWORD"),
        );
        self
    }

    /// The store on a Redis Cluster, reached through these seed nodes.
    pub fn on_cluster(mut self, nodes: Vec<String>) -> GateConfig {
        self.redis_nodes = nodes;
        self
    }

    /// How many claims the stream holds in the store, and those not
    /// settled (neither done nor below their partition's watermark): read
    /// from Redis's keys (each checked to carry an expiry) or from
    /// PostgreSQL's claims table.
    pub fn claims(&self) -> (usize, Vec<String>) {
        match &self.postgres_schema {
            Some(schema) => {
                let url = &self.postgres_url;
                let key_id = idemgate::store::key_id("bank");
                (
                    postgres::claims(url, schema, &key_id).len(),
                    postgres::unsettled_claims(url, schema, &key_id),
                )
            }
            None => (
                claim_ttls(&self.redis_url, &self.key_prefix).len(),
                unsettled_claims(&self.redis_url, &self.key_prefix),
            ),
        }
    }

    pub fn toml(&self) -> String {
        let mut kafka = format!(
            "\"bootstrap.servers\" = \"{}\"\n\"group.id\" = \"{}\"\n\"auto.offset.reset\" = \"earliest\"\n",
            self.brokers, self.group
        );
        for (key, value) in &self.kafka {
            kafka.push_str(&format!("\"{key}\" = \"{value}\"\n"));
        }
        // librdkafka's own debug contexts (e.g. `cgrp,eos,topic`), logged
        // under the `librdkafka` target (with `IDEMGATE_E2E_RUST_LOG`
        // naming it).
        if let Ok(contexts) = std::env::var("IT_KAFKA_DEBUG") {
            kafka.push_str(&format!(
                "\"debug\" = {contexts:?}\n\"log_level\" = \"7\"\n"
            ));
        }
        format!(
            r#"{top}
[kafka]
{kafka}
[store]
{target}
{store}
[metrics]
listen = "{listen}"
{metrics}

[batch]
max_records = {max_records}
linger = "20ms"
{batch}

[[streams]]
name = "bank"
inputs = ["{input}"]
clean = "{clean}"
audit = "{audit}"
{stream}
{more_streams}"#,
            target = match &self.postgres_schema {
                Some(schema) => format!(
                    "kind = \"postgres\"\nurl = \"{}\"\nschema = \"{schema}\"",
                    self.postgres_url
                ),
                None if self.redis_nodes.is_empty() => format!(
                    "kind = \"redis\"\nurl = \"{}\"\nkey_prefix = \"{}\"",
                    self.redis_url, self.key_prefix
                ),
                None => format!(
                    "kind = \"cluster\"\nnodes = {:?}\nkey_prefix = \"{}\"",
                    self.redis_nodes, self.key_prefix
                ),
            },
            top = self.top,
            listen = self.metrics_listen,
            metrics = self.metrics,
            more_streams = self.more_streams,
            store = self.store,
            max_records = self.max_records,
            batch = self.batch,
            input = self.input,
            clean = self.clean,
            audit = self.audit,
            stream = self.stream.clone().unwrap_or_else(|| format!(
                "profile = \"bank-txn\"\nmode = \"exact\"\nttl = {{ explicit = \"1h\" }}\nfail_mode = \"{}\"",
                self.fail_mode
            )),
        )
    }
}

/// The fault tests' workload on two replicas: a burst of 2,400 bank
/// records the replicas work through as a backlog (so a fault lands inside
/// a batch), then a paced tail of `tail` that flows on after it: new events
/// and redeliveries of burst events. Copies share their event's key (and
/// partition) only with `copies_share_key`; across partitions waiting
/// copies leave holes above which delivered records settle by done flags.
pub struct BurstAndTail {
    pub topics: Topics,
    pub bank: Bank,
    pub burst: Vec<Planned>,
    pub tail: Vec<Planned>,
}

impl BurstAndTail {
    pub fn new(test: &str, partitions: i32, copies_share_key: bool, tail: usize) -> BurstAndTail {
        let topics = Topics::create(&kafka_brokers(), test, partitions, 2);
        let mut bank = Bank::new(test, 64);
        bank.copy_rate = (0.30, 0.08);
        bank.copies_share_key = copies_share_key;
        let burst = bank.phase(2_400, 0, 30);
        let tail = bank.phase(tail, 1_400, 10);
        BurstAndTail {
            topics,
            bank,
            burst,
            tail,
        }
    }

    /// Every record, burst then tail.
    pub fn plan(&self) -> Vec<Planned> {
        self.burst.iter().chain(&self.tail).cloned().collect()
    }

    /// Produces the burst at once, then the tail `chunk` records every
    /// `pause`, on a thread; it yields where each record landed.
    pub fn produce(
        &self,
        chunk: usize,
        pause: Duration,
    ) -> std::thread::JoinHandle<HashMap<String, Landed>> {
        // Nothing held: the stream goes on at once.
        self.produce_held(chunk, pause, 0).0
    }

    /// As [`BurstAndTail::produce`], with the tail's last `held` records
    /// held back until the test releases them (see [`Held`]).
    pub fn produce_held(
        &self,
        chunk: usize,
        pause: Duration,
        held: usize,
    ) -> (std::thread::JoinHandle<HashMap<String, Landed>>, Held) {
        let cut = self.tail.len().saturating_sub(held);
        produce_paced(
            &self.topics.input,
            self.burst.clone(),
            self.tail.clone(),
            (chunk, pause),
            &[cut],
        )
    }
}

/// Where a paced stream waits: the test releases each part at a step it
/// cannot time (a join, a leave, a kill, a thaw after a takeover whose
/// length the broker sets), so the stream flows there instead of hoping
/// the pace outlasts it. Dropped (as when the test panics), it lets the
/// rest go.
pub struct Held(std::collections::VecDeque<std::sync::mpsc::Sender<()>>);

impl Held {
    /// Lets the stream go on past its next cut.
    pub fn release(&mut self) {
        if let Some(next) = self.0.pop_front() {
            let _ = next.send(());
        }
    }
}

/// Produces `burst` at once, then `paced` in chunks of `chunk` records,
/// `pause` apart, on a thread, stopping at each of `cuts` (indices into
/// `paced`, rising) until [`Held::release`]; the thread yields where each
/// record landed.
pub fn produce_paced(
    topic: &str,
    burst: Vec<Planned>,
    mut paced: Vec<Planned>,
    (chunk, pause): (usize, Duration),
    cuts: &[usize],
) -> (std::thread::JoinHandle<HashMap<String, Landed>>, Held) {
    let mut parts = Vec::new();
    for cut in cuts.iter().rev() {
        parts.push(paced.split_off((*cut).min(paced.len())));
    }
    parts.push(paced);
    parts.reverse();
    let (releases, waits): (std::collections::VecDeque<_>, Vec<_>) = cuts
        .iter()
        .map(|_| std::sync::mpsc::channel::<()>())
        .unzip();
    let topic = topic.to_string();
    let producing = std::thread::spawn(move || {
        let producer = Producer::new(&kafka_brokers());
        let mut landed = producer.send(&topic, &burst, 250, Duration::from_millis(10));
        let mut parts = parts.into_iter();
        landed.extend(producer.send(&topic, &parts.next().unwrap_or_default(), chunk, pause));
        for (released, part) in waits.into_iter().zip(parts) {
            // Err: the test dropped its `Held` (it ended early); go on.
            let _ = released.recv();
            landed.extend(producer.send(&topic, &part, chunk, pause));
        }
        landed
    });
    (producing, Held(releases))
}

/// A PostgreSQL schema name of the test's own from its key prefix:
/// lowercase letters, digits and `_`, at most 63 bytes.
pub fn postgres_schema(prefix: &str) -> String {
    let name: String = prefix
        .trim_end_matches(':')
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    // The unique suffix is at the end: keep it.
    let tail = name.len().saturating_sub(58);
    format!("e2e_{}", &name[tail..])
}

/// What the gateways log: info, and each decision (a debug line of the
/// batch), which is what lets a test aim a kill just after a delivery.
const GATE_LOG: &str = "info,idemgate::worker::sends=debug";

/// One `idemgate run` process, its config file and its log (stdout and
/// stderr, `RUST_LOG` = `GATE_LOG`).
pub struct Gate {
    pub name: String,
    process: Logged,
    config: PathBuf,
}

impl Gate {
    pub fn start(name: &str, config: &GateConfig) -> Gate {
        let stem = unique(name);
        let dir = std::env::temp_dir();
        let config_path = dir.join(format!("idemgate-e2e-{stem}.toml"));
        let log = dir.join(format!("idemgate-e2e-{stem}.log"));
        std::fs::write(&config_path, config.toml()).expect("writing the config");
        let mut command = Command::new(env!("CARGO_BIN_EXE_idemgate"));
        command
            .arg("run")
            .arg("--config")
            .arg(&config_path)
            .env(
                "RUST_LOG",
                std::env::var("IDEMGATE_E2E_RUST_LOG").unwrap_or_else(|_| GATE_LOG.into()),
            )
            .env("NO_COLOR", "1")
            // The config file says everything; overrides from the test
            // runner's environment would silently point elsewhere.
            .env_remove("IDEMGATE_KAFKA_BROKERS")
            .env_remove("IDEMGATE_REDIS_URL")
            .env_remove("IDEMGATE_REDIS_NODES")
            .envs(config.env.iter().map(|(k, v)| (k, v)));
        let process = Logged::spawn(&format!("{name} idemgate"), command, &log);
        println!(
            "[{name}] idemgate pid {} config {} log {}",
            process.pid(),
            config_path.display(),
            log.display()
        );
        Gate {
            name: name.to_string(),
            process,
            config: config_path,
        }
    }

    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    pub fn log_text(&self) -> String {
        self.process.log_text()
    }

    /// The first line of its log saying a stream's store lost its state
    /// (empty where none does).
    pub fn store_loss_line(&self) -> String {
        self.log_text()
            .lines()
            .find(|l| l.contains("lost this stream's state"))
            .unwrap_or_default()
            .to_string()
    }

    pub fn tail(&self, lines: usize) -> String {
        self.process.tail(lines)
    }

    /// Panics (with the log tail) if the process has exited.
    pub fn assert_alive(&mut self) {
        self.process.assert_alive();
    }

    /// The partition count of the last `assigned` line in the log, if any.
    pub fn assigned(&self) -> Option<usize> {
        self.log_text()
            .lines()
            .filter_map(|line| line.split(": assigned partitions=").nth(1))
            .filter_map(|rest| rest.split_whitespace().next()?.parse().ok())
            .next_back()
    }

    /// Calls `between` (a read of the outputs, or a short wait) until
    /// `done` holds for this process, which must stay alive meanwhile;
    /// panics past `until` with `what` and the log's tail.
    pub fn wait_until(
        &mut self,
        until: Instant,
        what: &str,
        mut done: impl FnMut(&Gate) -> bool,
        mut between: impl FnMut(),
    ) {
        while !done(self) {
            self.assert_alive();
            assert!(
                Instant::now() < until,
                "[{}] {what}; its log:\n{}",
                self.name,
                self.tail(30)
            );
            between();
        }
    }

    /// The first log line holding `needle`, waited for as
    /// [`Gate::wait_until`] does.
    pub fn wait_line(
        &mut self,
        needle: &str,
        until: Instant,
        what: &str,
        between: impl FnMut(),
    ) -> String {
        self.wait_until(
            until,
            what,
            |gate| gate.log_text().contains(needle),
            between,
        );
        let text = self.log_text();
        let line = text.lines().find(|l| l.contains(needle));
        line.expect("a line found once stays in the log")
            .to_string()
    }

    /// Reads outputs (so the stream's records are taken as they come) until
    /// the log's last assignment gives this process all `partitions`;
    /// panics past `until`, naming the wait `what`, with the log's tail.
    pub fn read_until_owns(
        &mut self,
        partitions: i32,
        reader: &mut Reader,
        until: Instant,
        what: &str,
    ) {
        self.wait_until(
            until,
            &format!("did not own all {partitions} partitions {what}"),
            |gate| gate.assigned() == Some(partitions as usize),
            || reader.read_for(Duration::from_millis(200)),
        );
    }

    /// Waits (bounded) until the log's last assignment gives this process
    /// at least one partition.
    pub fn wait_assigned(&mut self, bound: Duration) {
        self.wait_until(
            Instant::now() + bound,
            &format!("no partitions assigned within {bound:?}"),
            |gate| gate.assigned().unwrap_or(0) > 0,
            // The log, read again: the group assigns on the broker's time.
            || std::thread::sleep(Duration::from_millis(100)),
        );
    }

    /// Its exit status, if it has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.process.exited()
    }

    /// Waits up to `bound` for the process to exit on its own.
    pub fn wait_exit(&mut self, bound: Duration) -> ExitStatus {
        self.process.wait_exit(bound)
    }

    /// SIGTERM, then waits up to `bound` for the exit.
    pub fn terminate(&mut self, bound: Duration) -> ExitStatus {
        self.assert_alive();
        signal(self.pid(), "TERM");
        self.process.wait_exit(bound)
    }

    /// SIGKILL as soon as the log grows: the gateway logs each decision
    /// right after its delivery and before it finalizes claims and commits
    /// offsets, so this aims the kill at the window whose work must be
    /// replayed. Falls back to a plain kill after `bound`.
    pub fn kill_after_next_log_line(&mut self, bound: Duration) -> bool {
        let grew = self.log_grows_within(bound);
        self.kill();
        grew
    }

    /// SIGSTOP as soon as the log grows, aimed like
    /// `kill_after_next_log_line`: the process keeps its sockets, its group
    /// membership as far as it knows, and its work in flight, frozen (a
    /// replica stalled by a hung VM or a long pause: a zombie once its
    /// session times out). `resume` sends SIGCONT.
    pub fn stop_after_next_log_line(&mut self, bound: Duration) -> bool {
        let grew = self.log_grows_within(bound);
        self.assert_alive();
        signal(self.pid(), "STOP");
        grew
    }

    /// SIGCONT: a stopped process carries on where it was.
    pub fn resume(&mut self) {
        signal(self.pid(), "CONT");
    }

    /// Waits up to `bound` for the log to grow; whether it did.
    fn log_grows_within(&self, bound: Duration) -> bool {
        let size = || std::fs::metadata(&self.process.log).map_or(0, |m| m.len());
        let before = size();
        let until = Instant::now() + bound;
        while Instant::now() < until {
            if size() > before {
                return true;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        false
    }

    /// SIGKILL: no shutdown, no final commit, claims left as they were.
    pub fn kill(&mut self) {
        self.process.kill();
    }
}

/// Reads until `part` outputs are in (within `BOUND`), the gateways alive
/// meanwhile; fails naming the moment it was reading up to (`before`).
pub fn read_part_before(reader: &mut Reader, part: usize, gates: &mut [&mut Gate], before: &str) {
    let reached = reader.read_until(
        BOUND,
        |reader| reader.records.len() >= part,
        || {
            for gate in gates.iter_mut() {
                gate.assert_alive();
            }
        },
    );
    assert!(
        reached,
        "{} of {part} outputs before {before}",
        reader.records.len()
    );
}

/// Two exactly-once replicas of `config`'s group, each with a
/// transactional id of its own (named after its role), the first with
/// `first_env` in its environment (a fault point); started, and waited for
/// until they split the `partitions` between them. Their configs come back
/// too: a restart reuses one (and so fences its dead incarnation).
pub fn exactly_once_pair(
    test: &str,
    config: &GateConfig,
    roles: [&str; 2],
    first_env: Vec<(&'static str, String)>,
    partitions: i32,
) -> ([Gate; 2], [GateConfig; 2]) {
    let [first_role, second_role] = roles;
    let mut first_config = config
        .clone()
        .exactly_once(&unique(&format!("{test}-{first_role}")));
    first_config.env = first_env;
    let second_config = config
        .clone()
        .exactly_once(&unique(&format!("{test}-{second_role}")));
    let mut first = Gate::start(&format!("{test}-{first_role}"), &first_config);
    let mut second = Gate::start(&format!("{test}-{second_role}"), &second_config);
    wait_split(
        &mut first,
        &mut second,
        partitions as usize,
        Duration::from_secs(30),
    );
    ([first, second], [first_config, second_config])
}

/// Waits (bounded) until two gateways are members of one generation with
/// the `partitions` split between them, both alive; returns their shares.
pub fn wait_split(
    a: &mut Gate,
    b: &mut Gate,
    partitions: usize,
    bound: Duration,
) -> (usize, usize) {
    let until = Instant::now() + bound;
    loop {
        a.assert_alive();
        b.assert_alive();
        match (a.assigned(), b.assigned()) {
            (Some(x), Some(y)) if x > 0 && y > 0 && x + y == partitions => return (x, y),
            (x, y) => assert!(
                Instant::now() < until,
                "the group did not settle on two members within {bound:?}: {x:?} + {y:?}"
            ),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        // The process guard prints the log tail of a failing test.
        if !std::thread::panicking() && std::env::var_os("IDEMGATE_E2E_KEEP_LOGS").is_none() {
            let _ = std::fs::remove_file(&self.config);
            let _ = std::fs::remove_file(&self.process.log);
        }
    }
}
