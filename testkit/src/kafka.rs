//! The Kafka side of a test: its topics, the producer that writes a
//! workload, and the reader that collects what the gateway wrote (and reads
//! the inputs back to learn their coordinates). Works on any broker: the
//! mock cluster (topics made through it) or Apache Kafka (topics made with
//! the admin client).
//!
//! Readers start at the beginning and count records, never ask for lag:
//! what a test waits for is "every input has an output", which no
//! watermark tells.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use futures::executor::block_on;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer as _};
use rdkafka::{Message, Offset, TopicPartitionList};

use idemgate::demo::mock::MockKafka;

use crate::workload::Planned;
use crate::{unique, TEST_ID};

/// An admin client for `brokers`.
pub fn admin(brokers: &str) -> AdminClient<DefaultClientContext> {
    ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("log_level", "3")
        .create()
        .expect("admin client")
}

/// One test's topics: a raw input, and the gateway's clean and audit
/// outputs, all with names no other test uses.
#[derive(Clone, Debug)]
pub struct Topics {
    pub input: String,
    pub clean: String,
    pub audit: String,
    pub input_partitions: i32,
    pub output_partitions: i32,
}

impl Topics {
    /// Names for the three topics; nothing is created.
    pub fn named(test: &str, input_partitions: i32, output_partitions: i32) -> Topics {
        Topics {
            input: unique(&format!("{test}-raw")),
            clean: unique(&format!("{test}-clean")),
            audit: unique(&format!("{test}-audit")),
            input_partitions,
            output_partitions,
        }
    }

    /// Creates the three topics on `brokers` with rdkafka's admin client and
    /// waits until the broker's metadata lists every partition.
    pub fn create(
        brokers: &str,
        test: &str,
        input_partitions: i32,
        output_partitions: i32,
    ) -> Topics {
        let topics = Topics::named(test, input_partitions, output_partitions);
        create_topics(brokers, &topics.all());
        topics
    }

    /// Creates the three topics on the mock cluster, which has no
    /// CreateTopics handler.
    pub fn create_on_mock(
        kafka: &MockKafka,
        test: &str,
        input_partitions: i32,
        output_partitions: i32,
    ) -> Topics {
        let topics = Topics::named(test, input_partitions, output_partitions);
        for (name, partitions) in topics.all() {
            kafka
                .create_topic(name, partitions)
                .expect("creating a mock topic");
        }
        topics
    }

    fn all(&self) -> Vec<(&str, i32)> {
        let mut all = vec![(self.input.as_str(), self.input_partitions)];
        all.extend(self.outputs());
        all
    }

    pub fn outputs(&self) -> Vec<(&str, i32)> {
        vec![
            (self.clean.as_str(), self.output_partitions),
            (self.audit.as_str(), self.output_partitions),
        ]
    }
}

/// Creates topics on `brokers` and waits until its metadata lists every
/// partition.
pub fn create_topics(brokers: &str, topics: &[(&str, i32)]) {
    let admin = admin(brokers);
    let new: Vec<NewTopic<'_>> = topics
        .iter()
        .map(|(name, partitions)| NewTopic::new(name, *partitions, TopicReplication::Fixed(1)))
        .collect();
    let options = AdminOptions::new()
        .request_timeout(Some(Duration::from_secs(20)))
        .operation_timeout(Some(Duration::from_secs(20)));
    let results = block_on(admin.create_topics(&new, &options)).expect("create_topics request");
    for result in results {
        if let Err((topic, code)) = result {
            panic!("creating topic {topic}: {code:?}");
        }
    }
    // Creation is acknowledged before every broker's metadata may show it.
    let deadline = Instant::now() + Duration::from_secs(20);
    for (name, partitions) in topics {
        loop {
            let metadata = admin
                .inner()
                .fetch_metadata(Some(name), Duration::from_secs(5))
                .expect("metadata");
            let seen = metadata
                .topics()
                .iter()
                .find(|t| t.name() == *name && t.error().is_none())
                .map_or(0, |t| t.partitions().len() as i32);
            if seen == *partitions {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "topic {name}: metadata shows {seen} of {partitions} partitions after 20s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Not a header the broker sees: a planned record carrying it (see
/// [`Planned::stamped`]) is written with this record timestamp (ms since
/// the epoch, decimal) instead of the producer's clock, and without the
/// header. For tests on event time.
pub const TIMESTAMP: &str = "x-test-timestamp";

/// Where the broker says an input record landed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Landed {
    pub partition: i32,
    pub offset: i64,
}

/// Writes planned records in order: keyed by account (so the copies of an
/// event share a partition), each with its `x-test-id` header, and the
/// record timestamp of a [`TIMESTAMP`] header where it has one.
pub struct Producer {
    inner: FutureProducer,
}

impl Producer {
    pub fn new(brokers: &str) -> Producer {
        Producer::with_properties(brokers, &[])
    }

    /// With further librdkafka properties (`compression.type`, say).
    pub fn with_properties(brokers: &str, properties: &[(&str, &str)]) -> Producer {
        let mut config = ClientConfig::new();
        for (key, value) in properties {
            config.set(*key, *value);
        }
        let inner = config
            .set("bootstrap.servers", brokers)
            // Order within a partition is what makes an event's first copy
            // its first offset; idempotence keeps it across retries.
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("linger.ms", "5")
            .set("message.timeout.ms", "30000")
            .create()
            .expect("producer");
        Producer { inner }
    }

    /// Produces `records` to `topic` in chunks, `pause` between chunks (a
    /// paced stream), waiting for every delivery. Returns where each landed,
    /// by test id.
    pub fn send(
        &self,
        topic: &str,
        records: &[Planned],
        chunk: usize,
        pause: Duration,
    ) -> HashMap<String, Landed> {
        let mut landed = HashMap::new();
        for (index, part) in records.chunks(chunk.max(1)).enumerate() {
            if index > 0 && !pause.is_zero() {
                std::thread::sleep(pause);
            }
            let mut pending = Vec::with_capacity(part.len());
            for record in part {
                let mut headers = OwnedHeaders::new().insert(Header {
                    key: TEST_ID,
                    value: Some(record.id.as_bytes()),
                });
                for (key, value) in record.headers.iter().filter(|(k, _)| k != TIMESTAMP) {
                    headers = headers.insert(Header {
                        key,
                        value: Some(value.as_slice()),
                    });
                }
                let mut message: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(topic)
                    .key(record.key.as_slice())
                    .headers(headers);
                if let Some(at) = record.timestamp() {
                    message = message.timestamp(at);
                }
                if let Some(partition) = record.partition {
                    message = message.partition(partition);
                }
                if let Some(payload) = record.payload.as_deref() {
                    message = message.payload(payload);
                }
                loop {
                    match self.inner.send_result(message) {
                        Ok(delivery) => break pending.push((record.id.clone(), delivery)),
                        Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                            message = back;
                            std::thread::sleep(Duration::from_millis(10));
                        }
                        Err((error, _)) => panic!("producing {}: {error}", record.id),
                    }
                }
            }
            for (id, delivery) in pending {
                let delivered = block_on(delivery)
                    .expect("delivery future dropped")
                    .unwrap_or_else(|(error, _)| panic!("delivering {id}: {error}"));
                landed.insert(
                    id,
                    Landed {
                        partition: delivered.partition,
                        offset: delivered.offset,
                    },
                );
            }
        }
        let _ = self.inner.flush(Duration::from_secs(10));
        landed
    }
}

/// Produces `record` to `partition` of `topic` with no key at all (the
/// kit's producer always sets one), its test id its only header; waits
/// for its delivery: where it landed.
pub fn send_keyless(brokers: &str, topic: &str, partition: i32, record: &Planned) -> Landed {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .expect("keyless producer");
    let headers = OwnedHeaders::new().insert(Header {
        key: TEST_ID,
        value: Some(record.id.as_bytes()),
    });
    let payload = record.payload.clone().unwrap_or_default();
    let message: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(topic)
        .partition(partition)
        .payload(payload.as_slice())
        .headers(headers);
    let delivered = block_on(producer.send(message, Duration::from_secs(30)))
        .map_err(|(error, _)| error)
        .expect("delivering the keyless record");
    Landed {
        partition: delivered.partition,
        offset: delivered.offset,
    }
}

/// Writes one record whose header *name* is raw bytes (not UTF-8, say),
/// beside its `x-test-id`, which rdkafka's safe API cannot express:
/// straight through librdkafka's `rd_kafka_produceva`. Waits for it to
/// leave the client.
pub fn send_with_raw_header_name(
    brokers: &str,
    topic: &str,
    record: &Planned,
    name: &[u8],
    value: &[u8],
) {
    use rdkafka::bindings as rd;
    use std::ffi::CString;
    let producer: rdkafka::producer::BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("log_level", "3")
        .create()
        .expect("raw producer");
    let topic_c = CString::new(topic).expect("topic name");
    let name_c = CString::new(name).expect("a header name without NUL");
    let id_c = CString::new(TEST_ID).expect("test id header");
    let payload = record.payload.clone().unwrap_or_default();
    // SAFETY: every pointer handed over is alive until produceva returns;
    // on success librdkafka owns `headers` (and copies the payload), on
    // failure we destroy them.
    unsafe {
        let headers = rd::rd_kafka_headers_new(2);
        rd::rd_kafka_header_add(
            headers,
            id_c.as_ptr(),
            -1,
            record.id.as_ptr().cast(),
            record.id.len() as isize,
        );
        rd::rd_kafka_header_add(
            headers,
            name_c.as_ptr(),
            -1,
            value.as_ptr().cast(),
            value.len() as isize,
        );
        let mut vus: Vec<rd::rd_kafka_vu_t> = Vec::new();
        let mut vu = |vtype, u| vus.push(rd::rd_kafka_vu_t { vtype, u });
        vu(
            rd::rd_kafka_vtype_t::RD_KAFKA_VTYPE_TOPIC,
            rd::rd_kafka_vu_s__bindgen_ty_1 {
                cstr: topic_c.as_ptr(),
            },
        );
        vu(
            rd::rd_kafka_vtype_t::RD_KAFKA_VTYPE_PARTITION,
            rd::rd_kafka_vu_s__bindgen_ty_1 {
                i32_: record.partition.unwrap_or(-1),
            },
        );
        vu(
            rd::rd_kafka_vtype_t::RD_KAFKA_VTYPE_MSGFLAGS,
            rd::rd_kafka_vu_s__bindgen_ty_1 {
                i: rd::RD_KAFKA_MSG_F_COPY,
            },
        );
        vu(
            rd::rd_kafka_vtype_t::RD_KAFKA_VTYPE_VALUE,
            rd::rd_kafka_vu_s__bindgen_ty_1 {
                mem: rd::rd_kafka_vu_s__bindgen_ty_1__bindgen_ty_1 {
                    ptr: payload.as_ptr() as *mut _,
                    size: payload.len(),
                },
            },
        );
        vu(
            rd::rd_kafka_vtype_t::RD_KAFKA_VTYPE_KEY,
            rd::rd_kafka_vu_s__bindgen_ty_1 {
                mem: rd::rd_kafka_vu_s__bindgen_ty_1__bindgen_ty_1 {
                    ptr: record.key.as_ptr() as *mut _,
                    size: record.key.len(),
                },
            },
        );
        vu(
            rd::rd_kafka_vtype_t::RD_KAFKA_VTYPE_HEADERS,
            rd::rd_kafka_vu_s__bindgen_ty_1 { headers },
        );
        let error = rd::rd_kafka_produceva(producer.client().native_ptr(), vus.as_ptr(), vus.len());
        if !error.is_null() {
            rd::rd_kafka_headers_destroy(headers);
            let reason = std::ffi::CStr::from_ptr(rd::rd_kafka_error_string(error))
                .to_string_lossy()
                .into_owned();
            rd::rd_kafka_error_destroy(error);
            panic!("producing {} with a raw header name: {reason}", record.id);
        }
    }
    producer
        .flush(Duration::from_secs(30))
        .expect("the raw record left the client");
}

/// A record read back from a topic, owned.
#[derive(Clone, Debug)]
pub struct Out {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub payload: Option<Vec<u8>>,
    pub headers: idemgate::worker::HeaderList,
    /// The record's timestamp (ms), as the broker gave it.
    pub timestamp: Option<i64>,
    /// When the test saw it: orders outputs against the test's own steps.
    pub seen: Instant,
}

impl Out {
    /// A header's value as text; `None` when absent or without a value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| v.as_deref())
            .and_then(|v| std::str::from_utf8(v).ok())
    }

    pub fn test_id(&self) -> &str {
        self.header(TEST_ID).unwrap_or_else(|| {
            panic!(
                "{}/{}/{} has no {TEST_ID} header: outputs must keep the input's headers",
                self.topic, self.partition, self.offset
            )
        })
    }

    pub fn decision(&self) -> &str {
        self.header(idemgate::decision::DECISION)
            .unwrap_or("<none>")
    }
}

/// Reads topics from their first offset, without a group, keeping every
/// record. Assignment instead of subscription: nothing to rebalance, and the
/// test's reading never races the gateway's group.
pub struct Reader {
    consumer: BaseConsumer,
    pub records: Vec<Out>,
    /// Test ids among `records`: the inputs that have an output.
    pub ids: HashSet<String>,
}

impl Reader {
    pub fn new(brokers: &str, topics: &[(&str, i32)]) -> Reader {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", brokers)
            .set("group.id", unique("reader"))
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            .create()
            .expect("reader");
        let mut list = TopicPartitionList::new();
        for (topic, partitions) in topics {
            for partition in 0..*partitions {
                list.add_partition_offset(topic, partition, Offset::Beginning)
                    .expect("assignment");
            }
        }
        consumer.assign(&list).expect("assign");
        Reader {
            consumer,
            records: Vec::new(),
            ids: HashSet::new(),
        }
    }

    /// Reads whatever arrives for `duration`.
    pub fn read_for(&mut self, duration: Duration) {
        let until = Instant::now() + duration;
        while Instant::now() < until {
            self.poll_once(until.saturating_duration_since(Instant::now()));
        }
    }

    /// Reads until `done` holds (true) or `bound` passes (false), calling
    /// `alive` between polls so a crashed gateway fails the test at once.
    /// `done` is asked after each drained poll, not after every record.
    pub fn read_until(
        &mut self,
        bound: Duration,
        done: impl Fn(&Reader) -> bool,
        mut alive: impl FnMut(),
    ) -> bool {
        let until = Instant::now() + bound;
        loop {
            if done(self) {
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            alive();
            self.poll_once(Duration::from_millis(200));
        }
    }

    /// Reads until each of `inputs` inputs has an output, calling `alive`
    /// between polls (a crashed gateway fails the test at once), then for
    /// `SETTLE` longer: a doubled output arrives then or not at all. Panics
    /// with `what` if `bound` passes first.
    pub fn read_every_input(
        &mut self,
        inputs: usize,
        bound: Duration,
        what: &str,
        alive: impl FnMut(),
    ) {
        let all = self.read_until(bound, |reader| reader.ids.len() >= inputs, alive);
        assert!(
            all,
            "{} of {inputs} inputs have an output within {bound:?} {what}",
            self.ids.len()
        );
        self.read_for(crate::SETTLE);
    }

    /// As [`Reader::read_every_input`], for the inputs `landed` lists:
    /// past `bound` the panic names the inputs without an output, with
    /// where they landed (up to 20), so a missing one can be traced.
    pub fn read_every_landed(
        &mut self,
        landed: &HashMap<String, Landed>,
        bound: Duration,
        what: &str,
        alive: impl FnMut(),
    ) {
        let all = self.read_until(
            bound,
            |reader| landed.keys().all(|id| reader.ids.contains(id)),
            alive,
        );
        if !all {
            let mut missing: Vec<(i32, i64, &str)> = landed
                .iter()
                .filter(|(id, _)| !self.ids.contains(*id))
                .map(|(id, at)| (at.partition, at.offset, id.as_str()))
                .collect();
            missing.sort();
            let count = missing.len();
            missing.truncate(20);
            panic!(
                "{} of {} inputs have an output within {bound:?} {what}; without one ({count}, as partition, offset, id): {missing:?}",
                landed.len() - count,
                landed.len()
            );
        }
        self.read_for(crate::SETTLE);
    }

    /// Waits up to `timeout` for a record, then takes whatever else is
    /// already there.
    fn poll_once(&mut self, timeout: Duration) {
        let mut wait = timeout.min(Duration::from_millis(200));
        for _ in 0..10_000 {
            let Some(result) = self.consumer.poll(wait) else {
                return;
            };
            wait = Duration::ZERO;
            match result {
                Ok(message) => {
                    let out = Out {
                        topic: message.topic().to_string(),
                        partition: message.partition(),
                        offset: message.offset(),
                        key: message.key().map(<[u8]>::to_vec),
                        payload: message.payload().map(<[u8]>::to_vec),
                        // The product's reader: rdkafka's panics on a header
                        // name that is not UTF-8.
                        headers: idemgate::worker::read_headers(&message).0,
                        timestamp: message.timestamp().to_millis(),
                        seen: Instant::now(),
                    };
                    if let Some(id) = out.header(TEST_ID) {
                        self.ids.insert(id.to_string());
                    }
                    self.records.push(out);
                }
                Err(KafkaError::PartitionEOF(_)) => {}
                Err(error) => eprintln!("reader: {error}"),
            }
        }
    }
}

/// `read_inputs` of a test's input topic, checked against where the
/// producer's delivery reports said each record went.
pub fn read_inputs_as_delivered(
    brokers: &str,
    topics: &Topics,
    delivered: &HashMap<String, Landed>,
) -> HashMap<String, Landed> {
    let landed = read_inputs(
        brokers,
        &topics.input,
        topics.input_partitions,
        delivered.len(),
    );
    for (id, at) in &landed {
        assert_eq!(
            delivered.get(id),
            Some(at),
            "input {id}: the delivery report disagrees with the log"
        );
    }
    landed
}

/// Reads an input topic back: where each planned record really is, by test
/// id. Panics if a record is missing or was written twice (the workload's
/// own producer must not be the source of a duplicate).
pub fn read_inputs(
    brokers: &str,
    topic: &str,
    partitions: i32,
    expected: usize,
) -> HashMap<String, Landed> {
    let mut reader = Reader::new(brokers, &[(topic, partitions)]);
    let read = reader.read_until(
        Duration::from_secs(60),
        |reader| reader.records.len() >= expected,
        || {},
    );
    reader.read_for(Duration::from_millis(500));
    assert!(
        read,
        "input {topic}: read {} of {expected} records back",
        reader.records.len()
    );
    let mut landed = HashMap::new();
    for record in &reader.records {
        let previous = landed.insert(
            record.test_id().to_string(),
            Landed {
                partition: record.partition,
                offset: record.offset,
            },
        );
        assert!(
            previous.is_none(),
            "input {topic}: {} was written twice by the test producer",
            record.test_id()
        );
    }
    assert_eq!(landed.len(), expected, "input {topic}: records read back");
    landed
}

/// Commits `offsets` (partition, next offset) of `topic` for `group` from
/// outside the group, as an operator's `kafka-consumer-groups
/// --reset-offsets` does while no member runs: no idemgate metadata.
/// Retries (up to a minute) while the broker still counts a member in the
/// group; reads them back and panics unless the broker kept them.
pub fn commit_offsets(brokers: &str, group: &str, topic: &str, offsets: &[(i32, i64)]) {
    commit_offsets_with(brokers, group, topic, offsets, "");
}

/// [`commit_offsets`] with `metadata` on every partition's commit (what
/// a replica of idemgate wrote, for a test that plays one).
pub fn commit_offsets_with(
    brokers: &str,
    group: &str,
    topic: &str,
    offsets: &[(i32, i64)],
    metadata: &str,
) {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .expect("offset tool");
    let mut list = TopicPartitionList::new();
    for (partition, offset) in offsets {
        list.add_partition_offset(topic, *partition, Offset::Offset(*offset))
            .expect("offset list");
        if let Some(mut element) = list.find_partition(topic, *partition) {
            element.set_metadata(metadata);
        }
    }
    // The broker refuses it while the group still has a member (as the
    // operator's tool does): a killed one goes after its session timeout.
    let until = Instant::now() + Duration::from_secs(60);
    while let Err(error) = consumer.commit(&list, rdkafka::consumer::CommitMode::Sync) {
        assert!(
            Instant::now() < until,
            "committing {offsets:?} for {group}: {error}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let partitions: Vec<i32> = offsets.iter().map(|(p, _)| *p).collect();
    let committed = committed_offsets(brokers, group, topic, &partitions);
    let wanted: Vec<Option<i64>> = offsets.iter().map(|(_, o)| Some(*o)).collect();
    assert_eq!(committed, wanted, "{group}: committed offsets read back");
}

/// The offsets `group` has committed for `partitions` of `topic` (`None`
/// where nothing is).
pub fn committed_offsets(
    brokers: &str,
    group: &str,
    topic: &str,
    partitions: &[i32],
) -> Vec<Option<i64>> {
    committed(brokers, group, topic, partitions, "read_committed")
        .into_iter()
        .map(|c| c.map(|(offset, _)| offset))
        .collect()
}

/// The offsets `group` has committed for `partitions` of `topic`, with
/// their metadata, without waiting for an open transaction that holds
/// offsets of the group (a replica killed between sending them and its
/// commit): what is committed now. A `read_committed` reader asks the
/// broker for stable offsets, and it answers none until that transaction
/// ends (an abort by the replica's restart, or its timeout).
pub fn committed_now(
    brokers: &str,
    group: &str,
    topic: &str,
    partitions: &[i32],
) -> Vec<Option<(i64, String)>> {
    committed(brokers, group, topic, partitions, "read_uncommitted")
}

/// The metadata of the offsets `group` has committed for `partitions` of
/// `topic` (`None` where nothing is committed).
pub fn committed_metadata(
    brokers: &str,
    group: &str,
    topic: &str,
    partitions: &[i32],
) -> Vec<Option<String>> {
    committed(brokers, group, topic, partitions, "read_committed")
        .into_iter()
        .map(|c| c.map(|(_, metadata)| metadata))
        .collect()
}

/// Per partition, the committed offset and its metadata, if any, read as
/// a consumer of `isolation` reads them.
fn committed(
    brokers: &str,
    group: &str,
    topic: &str,
    partitions: &[i32],
    isolation: &str,
) -> Vec<Option<(i64, String)>> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("isolation.level", isolation)
        .create()
        .expect("offset reader");
    let mut list = TopicPartitionList::new();
    for partition in partitions {
        list.add_partition(topic, *partition);
    }
    let committed = consumer
        .committed_offsets(list, Duration::from_secs(20))
        .expect("committed offsets");
    partitions
        .iter()
        .map(|p| {
            let element = committed.find_partition(topic, *p)?;
            match element.offset() {
                Offset::Offset(offset) => Some((offset, element.metadata().to_string())),
                _ => None,
            }
        })
        .collect()
}
