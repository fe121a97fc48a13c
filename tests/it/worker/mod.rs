//! The worker in-process on librdkafka's mock cluster: failed deliveries,
//! brokers down, delivery timeouts, poison records, rebalances, restarts,
//! event time, the injected clock, and the demo. Each test has its own mock cluster, topics,
//! group and key prefix; workloads, the readers and the exactly-once check
//! are the test kit's.

mod demo;
mod event_time;
mod exactly_once;
mod faults;
mod group;
mod keys;
mod poison;
mod protocol;
mod shadow;
mod support;
mod timeouts;
mod wall_clock;
