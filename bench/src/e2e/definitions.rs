//! The fixed text of `BENCHMARKS.md`: what each run measures (before the
//! results) and what each figure means (at the end).

pub(crate) const RUNS: &str = "## The runs\n\n\
Each invocation runs, over the same raw topic, each with its own consumer group and output \
topics and with Redis emptied before it (and, for a PostgreSQL run, the store's schema dropped); \
once a run is counted its output topics are deleted (the broker drops their files soon \
after), so that no later run shares the page cache and disk with them, and the raw topics go at \
the end:\n\n\
- **clean runs**, one per mode and replica count: the figures of the mode. Each replica is a \
child process running exactly what `idemgate run` runs (`idemgate::app::run_with_store` on the \
plain `idemgate::app::open_store` store): its Redis connection goes straight to redis-server, its \
metrics recorder is the product's own Prometheus recorder, installed by its /metrics listener. \
Nothing of the bench sits in its path: the harness reads `/proc` (CPU, memory) and the group's \
committed offsets from outside, scrapes the replica's /metrics every 10 ms only until its first \
store round shows (the start of the run) and once more when every record is committed (latency, \
decisions), and reads Redis memory after the replicas stop.\n\
- **PostgreSQL runs** (*exact, PostgreSQL*), clean runs like the others, with one and two \
replicas: the same stream in exact mode (the same TTL) on `store.kind = \"postgres\"` with the \
store's defaults (schema `idemgate`, its connection pool and janitor), against a PostgreSQL \
server of the bench's own, its settings at their defaults (see Machine and versions). The \
replicas connect to it directly; after they stop the harness reads the claims table's size on \
disk. They have no counting run: the round-trip proxy speaks Redis's RESP, so their round-trip \
columns stay empty.\n\
- **counting runs**, one per Redis mode (one replica unless `--counting-replicas` says otherwise): the \
same config, with the replica's Redis connection through the bench's RESP proxy (round trips \
and commands on the wire), its store wrapped in the test kit's counting decorator (store rounds, \
claim outcomes) and its recorder tapped for the timeline (phases of a round). They give the \
Redis round trips, commands and store rounds per batch in the results; their own throughput \
and latency carry the counting and are never reported as the mode's.\n\
- **the passthrough**: one child process that consumes the raw topic with the exact run's \
consumer settings, produces every record (key, payload, headers, timestamp) to a clean topic \
and commits every 100 ms the offsets whose outputs (and every output before them in the \
partition) are delivered, with no store, no fingerprint, no decision. Its clients are built by \
the worker's own `idemgate::config::client_configs` from the same TOML as the exact run (its \
own `group.id`), and it reads batches of `batch.max_records` within `batch.linger`, as the \
worker's polling thread does. It is the ceiling any Kafka-to-Kafka worker has on this machine: \
*x passthrough* is each run's records/s over it.\n\
- **the per-record baseline**: one `SET NX PX` round trip per record, then produce, then commit \
(see below); exact mode with one replica is compared with it.\n\
- **the handover runs**, one per guarantee (`--handover`), exact mode: two clean replicas on a \
stream the harness produces at a steady rate, one of them SIGTERMed; how long each partition it \
gave up goes without output (see Handover).\n\n";

pub(crate) const DEFINITIONS: &str = "## What the figures mean\n\n\
- **records/s** end to end: records of the topic / (the first poll that returned records, to \
the moment the group's committed offsets cover every record). For the clean runs the start is \
the first scrape of a replica's /metrics (every 10 ms) that shows a store round started \
(`idemgate_batch_records`, recorded as the first poll's records are claimed); for the counting \
runs the same metric seen by the tapped recorder; the passthrough notes its own first poll. \
Completion is judged from the committed offsets against each partition's high watermark, \
read once after the load (the topic is written by the loader alone, and the watermarks are \
checked to add up to the records it had acknowledged); the harness polls every 50 ms. With \
two replicas the window includes the rebalance when the second joins. *Per \
replica* is that divided by the replicas.\n\
- **decision latency** (p50, p99), per record: read from the worker's own histogram \
`idemgate_decision_latency_seconds` (\"from a record's poll to its output's delivery \
report\"), scraped from each replica's /metrics once every record is committed and before the \
replicas stop; the buckets (`idemgate::metrics::DECISION_BUCKETS`) are summed over the \
replicas and the quantile is interpolated linearly within its bucket, as PromQL's \
`histogram_quantile` does, so a figure is as fine as the buckets around it (1 ms apart below \
3 ms, 2.5 to 5 ms apart between 10 and 30 ms). It leaves out the time a record waits in the \
topic before it is polled (everything is loaded before the run, so that wait would only \
measure the backlog) and the publish and commit after the delivery report. It does include \
the time a polled record waits in the worker behind the records already in flight (up to \
`batch.read_ahead` batches, 4 by default, that the polling thread reads ahead of the loop): \
with the whole topic as a backlog the worker keeps that window full, so the median is close \
to the records in flight over the records/s. The passthrough \
measures the same span itself (poll to delivery report); the baseline from the consumer \
handing over the record to its output's acknowledgement.\n\
- **worker, Kafka, Redis and PostgreSQL CPU per million records**: user + system CPU seconds \
(`/proc/<pid>/stat`) of the replica processes (or the passthrough or baseline process), of the \
Kafka broker's JVM, of the redis-server the bench owns and of its PostgreSQL server (the \
postmaster and every child: backends, WAL writer, checkpointer, autovacuum; a child that exited \
within the window through the postmaster's `cutime` + `cstime`), from `go` to the moment every \
record is committed, per million records of the run. Whichever store a run does not use sits \
idle beside it. They share the machine's cores with each other and \
with the harness (see Machine and versions). A replica logs at the default level, to a file.\n\
- **store rounds per batch** (counting runs): a batch is a store round carrying claims; store \
rounds are every `ClaimStore::round` call the counting store saw (those with claims, and those \
carrying only a publish: tier-2 inserts, watermark raises, done flags, releases). The publish \
table gives what the publishes carried: watermark raises (one per partition with finished \
records), done flags set (delivered records a raise did not cover) and lost (the claim gone or \
re-stamped by another owner), tier-2 inserts, claims released.\n\
- **Redis round trips and commands per batch** (counting runs): counted on the wire by a proxy \
between the replica and redis-server that parses RESP both ways. A round trip is a burst the \
client starts while none of its requests is unanswered, named by what its commands carry: \
*claims* if any is a claim or a tier-2 probe (`SET`, `BF.MEXISTS`, `BITFIELD_RO`), whatever \
publish rides with them; *publish only* if any is a write (a script: raise, done flag, release, \
re-stamp; `BF.INSERT`/`BITFIELD`/`INCRBY`/`PEXPIRE`: tier-2 inserts), as a publish-only round or \
a round's follow-up (a re-stamp, a NOSCRIPT retry) sends. Commands are the requests of those \
round trips: a pipeline of N commands is one round trip and N commands. Connection set-up and \
the stats watcher's `INFO` every 5 s are listed apart. The protocol fixes a store round at one \
pipelined round trip per node: the publish (tier-2 inserts first, then the watermark raises, \
done flags and releases), the watermark reads and every claim's `SET NX PX GET` with its \
filter probes.\n\
- **tier-1 bytes per key** (clean runs): growth of redis-server's `used_memory` over the run \
(emptied before it), less the `MEMORY USAGE` of the stream's other keys (tier-2 generations \
and counters, the watermark hash), per tier-1 key: the key (the `ig:` prefix, the stream's \
short key id, the hash tag and 16 bytes of hash), the 28-byte claim value (holder, owner token, \
payload digest, claim time, done flag), the expiry entry and the hash tables' share. `MEMORY \
USAGE` of single keys (which leaves out the expiry entry and the table buckets) is given beside \
it.\n\
- **PostgreSQL bytes per claim on disk** (PostgreSQL runs): `pg_total_relation_size` of the \
stream's claims table (heap, free-space and visibility maps, TOAST, every index) after the run, \
over its rows. It holds the dead row versions that done flags and re-stamps (`UPDATE`s) left \
(vacuum makes their space reusable, it does not give it back), as a table does in service; the WAL, and the \
watermark, identity and range tables, are not in it (the whole schema is given apart).\n\
- **tier-2 bits per key** (clean runs): `MEMORY USAGE` of the generation keys (RedisBloom \
filter, or bitmap shards, plus the insert counter) x 8 / the generation's capacity (peak rate \
x horizon, sized for every distinct event of the dataset), beside the sizing formula's m/n and \
the bits per key actually inserted.\n\
- **per-record baseline**: for each record, in order, fingerprint it, one `SET key value NX PX \
ttl` round trip, produce its output and await the acknowledgement, then store its offset for \
commit (librdkafka commits stored offsets every 100 ms, and once synchronously at the end). It \
gets `linger.ms = 0` and a direct Redis connection, its best case. It runs over the first \
records of the exact run's topic (see its record count); the ratio compares records/s.\n\n";

/// The heading of the section BENCHMARKS.md keeps by hand at its end
/// (earlier runs on other machines, experiments measured and not taken): a
/// run replaces everything above it and keeps it.
const HISTORY: &str = "\n## History\n";

/// The report a run wrote, followed by the history section of the file it
/// replaces (`previous`, empty where there was none).
pub(super) fn with_history(generated: String, previous: &str) -> String {
    match previous.find(HISTORY) {
        Some(at) => format!("{}\n{}", generated.trim_end(), &previous[at..]),
        None => generated,
    }
}

#[cfg(test)]
mod tests {
    use super::with_history;

    #[test]
    fn a_run_keeps_the_history_of_the_file_it_replaces() {
        let previous = "# old\n\n| old figures |\n\n## History\n\n- e5ed40c: 0.84x\n";
        let written = with_history("# new\n\n| new figures |\n\n".into(), previous);
        assert_eq!(
            written,
            "# new\n\n| new figures |\n\n## History\n\n- e5ed40c: 0.84x\n"
        );
    }

    #[test]
    fn a_file_without_history_is_replaced_whole() {
        let written = with_history("# new\n".into(), "# old\n## Historyless\n");
        assert_eq!(written, "# new\n");
    }
}
