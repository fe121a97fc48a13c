//! librdkafka's in-process mock cluster: real wire protocol, consumer
//! groups, fault injection. The demo runs on it, and so do the tests that
//! inject faults.

use anyhow::{anyhow, Result};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseProducer, DefaultProducerContext, Producer};
use rdkafka::ClientConfig;

/// Owns the mock cluster: it lives as long as this value.
pub struct MockKafka {
    owner: BaseProducer,
}

impl MockKafka {
    /// Starts `brokers` mock brokers. A new group normally waits 3 s before
    /// its first rebalance; here it waits `rebalance_delay_ms`.
    pub fn start(brokers: u32, rebalance_delay_ms: i32) -> Result<MockKafka> {
        let owner: BaseProducer = ClientConfig::new()
            .set("test.mock.num.brokers", brokers.to_string())
            .set("log_level", "3")
            .create()?;
        let native = owner.client().native_ptr();
        // SAFETY: `native` is a live client handle owned by `owner`, and the
        // mock cluster it returns lives as long as that client.
        unsafe {
            let cluster = rdkafka::bindings::rd_kafka_handle_mock_cluster(native);
            if cluster.is_null() {
                return Err(anyhow!("librdkafka did not start a mock cluster"));
            }
            rdkafka::bindings::rd_kafka_mock_group_initial_rebalance_delay_ms(
                cluster,
                rebalance_delay_ms,
            );
        }
        Ok(MockKafka { owner })
    }

    pub fn cluster(&self) -> Result<MockCluster<'_, DefaultProducerContext>> {
        self.owner
            .client()
            .mock_cluster()
            .ok_or_else(|| anyhow!("mock cluster is gone"))
    }

    pub fn bootstrap_servers(&self) -> Result<String> {
        Ok(self.cluster()?.bootstrap_servers())
    }

    /// The mock cluster has no CreateTopics handler: topics are made here.
    pub fn create_topic(&self, name: &str, partitions: i32) -> Result<()> {
        self.cluster()?
            .create_topic(name, partitions, 1)
            .map_err(|e| anyhow!("creating topic {name}: {e}"))
    }
}
