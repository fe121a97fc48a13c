//! The worker in-process on librdkafka's mock cluster: failed deliveries,
//! brokers down, poison records, rebalances, restarts, and the demo. Each
//! test has its own mock cluster, topics, group and key prefix.

mod demo;
mod faults;
mod group;
mod poison;
mod support;
