#!/usr/bin/env bash
# scripts/kafka.sh — Apache Kafka's own command-line tools, by the names of Kafka's bin/
# scripts without `kafka-` and `.sh`, run from the jars scripts/test-services.sh fetched:
#
#   scripts/kafka.sh topics --bootstrap-server 127.0.0.1:19092 --list
#   scripts/kafka.sh console-consumer --bootstrap-server ... --topic t --from-beginning
#   scripts/kafka.sh consumer-groups --bootstrap-server ... --describe --group g
#   scripts/kafka.sh list             the tools and the classes they run
#
# Arguments pass to the tool as they are: Kafka's own documentation applies. The jars are
# those of $IDEMGATE_TEST_KAFKA_LIBS (what `scripts/test-services.sh env` and
# `scripts/try-kafka.sh up` export); without it, those of a running scripts/try-kafka.sh.
# The tools log warnings and errors only, on stderr (scripts/kafka/tools-log4j2.properties).
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# The class behind each of Kafka 4.4's bin/kafka-<tool>.sh (checked against the jars by
# tests/getting_started.rs).
declare -A CLASS=(
  [acls]=org.apache.kafka.tools.AclCommand
  [broker-api-versions]=org.apache.kafka.tools.BrokerApiVersionsCommand
  [client-metrics]=org.apache.kafka.tools.ClientMetricsCommand
  [configs]=org.apache.kafka.tools.ConfigCommand
  [console-consumer]=org.apache.kafka.tools.consumer.ConsoleConsumer
  [console-producer]=org.apache.kafka.tools.ConsoleProducer
  [consumer-groups]=org.apache.kafka.tools.consumer.group.ConsumerGroupCommand
  [delete-records]=org.apache.kafka.tools.DeleteRecordsCommand
  [features]=org.apache.kafka.tools.FeatureCommand
  [get-offsets]=org.apache.kafka.tools.GetOffsetShell
  [groups]=org.apache.kafka.tools.GroupsCommand
  [leader-election]=org.apache.kafka.tools.LeaderElectionCommand
  [log-dirs]=org.apache.kafka.tools.LogDirsCommand
  [metadata-quorum]=org.apache.kafka.tools.MetadataQuorumCommand
  [reassign-partitions]=org.apache.kafka.tools.reassign.ReassignPartitionsCommand
  [share-groups]=org.apache.kafka.tools.consumer.group.ShareGroupCommand
  [storage]=kafka.tools.StorageTool
  [streams-groups]=org.apache.kafka.tools.streams.StreamsGroupCommand
  [topics]=org.apache.kafka.tools.TopicCommand
  [transactions]=org.apache.kafka.tools.TransactionsCommand
)

usage() {
  sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

tool=${1:-}
[[ -n $tool ]] || usage
shift
tool=${tool#kafka-}
tool=${tool%.sh}

if [[ $tool == list ]]; then
  for name in $(printf '%s\n' "${!CLASS[@]}" | sort); do
    printf '%-20s %s\n' "$name" "${CLASS[$name]}"
  done
  exit 0
fi
class=${CLASS[$tool]:-}
[[ -n $class ]] || { echo "kafka.sh: no tool '$tool' (scripts/kafka.sh list names them)" >&2; exit 2; }

libs=${IDEMGATE_TEST_KAFKA_LIBS:-}
if [[ -z $libs ]]; then
  env_file=$(IDEMGATE_TEST_SERVICES_DIR=${IDEMGATE_TRY_DIR:-$REPO_ROOT/target/try-kafka} \
    "$REPO_ROOT/scripts/test-services.sh" env-file)
  libs=$(sed -n 's/^IDEMGATE_TEST_KAFKA_LIBS=//p' "$env_file" 2>/dev/null || true)
fi
[[ -f ${libs:-/nonexistent}/.complete ]] || {
  echo "kafka.sh: no Kafka jars: set IDEMGATE_TEST_KAFKA_LIBS, or run: eval \"\$(scripts/try-kafka.sh up)\"" >&2
  exit 1
}
command -v java >/dev/null 2>&1 || { echo "kafka.sh: 'java' not found (scripts/install-deps.sh installs it)" >&2; exit 1; }

# C1 only (TieredStopAtLevel=1): a tool lives for seconds, and the optimising compiler
# costs more than it saves there (`topics --list`: 1.0 s of CPU against 1.5-1.6 s, measured
# on a busy two-core machine).
exec java -Xmx256m -XX:TieredStopAtLevel=1 \
  -Dlog4j2.configurationFile="$REPO_ROOT/scripts/kafka/tools-log4j2.properties" \
  -cp "$libs/*" "$class" "$@"
