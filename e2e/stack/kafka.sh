#!/usr/bin/env bash
# Apache Kafka (KRaft, one node acting as broker and controller) on
# $KAFKA_PORT (and over TLS on $KAFKA_TLS_PORT, with a SASL login on
# $KAFKA_SASL_PORT), from jars gathered off Maven Central; and the
# replicated topology's three KRaft nodes beside it (below). Usage:
# kafka.sh up|down|status|sweep|topics ARGS           the single broker
# kafka.sh replicated_up|replicated_down|node_up N|wipe_data N|single|
#          node_group N|active_controller              the three nodes
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

KAFKA_DATA=$RUN_DIR/kafka
KAFKA_BRIDGE_PORT=19094

install_jars() {
  [ -f "$KAFKA_HOME/.complete" ] && return 0
  log "gathering Kafka $KAFKA_VERSION jars from Maven Central"
  rm -rf "$KAFKA_HOME.tmp" && mkdir -p "$KAFKA_HOME.tmp"
  mvn -q -B -Dstyle.color=never -f "$STACK_DIR/kafka/pom.xml" -Dmaven.repo.local="$CACHE_DIR/m2" \
    -Dkafka.version="$KAFKA_VERSION" \
    dependency:copy-dependencies -DoutputDirectory="$KAFKA_HOME.tmp/lib"
  touch "$KAFKA_HOME.tmp/.complete"
  rm -rf "$KAFKA_HOME" && mv "$KAFKA_HOME.tmp" "$KAFKA_HOME"
}

kafka_java() { java -cp "$KAFKA_HOME/lib/*" -Dlog4j2.configurationFile="$KAFKA_DATA/log4j2.properties" "$@"; }

# write_log4j FILE: Kafka's logging, warnings only (and the start line).
write_log4j() {
  cat >"$1" <<'PROPS'
rootLogger.level=INFO
rootLogger.appenderRef.stdout.ref=STDOUT
appender.stdout.type=Console
appender.stdout.name=STDOUT
appender.stdout.layout.type=PatternLayout
appender.stdout.layout.pattern=[%d] %p %m (%c)%n
logger.kafka.name=kafka
logger.kafka.level=WARN
logger.apache.name=org.apache.kafka
logger.apache.level=WARN
logger.started.name=kafka.server.KafkaRaftServer
logger.started.level=INFO
PROPS
}

# add_bridge_listener PORT: once the bridge is up, a listener on it for the
# pods, appended to the caller's listeners, advertised and protocols.
add_bridge_listener() {
  bridge_up || return 0
  listeners+=",BRIDGE://$BRIDGE_IP:$1"
  advertised+=",BRIDGE://$BRIDGE_IP:$1"
  protocols+=",BRIDGE:PLAINTEXT"
}

write_config() {
  mkdir -p "$KAFKA_DATA"
  local listeners="PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT"
  local advertised="PLAINTEXT://127.0.0.1:$KAFKA_PORT"
  local protocols="PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
  # And over TLS, with the services' certificate (clients: ssl://...), and
  # over TLS with a SASL PLAIN login (sasl_ssl://user:password@...).
  listeners+=",SSL://127.0.0.1:$KAFKA_TLS_PORT,SASL_SSL://127.0.0.1:$KAFKA_SASL_PORT"
  advertised+=",SSL://127.0.0.1:$KAFKA_TLS_PORT,SASL_SSL://127.0.0.1:$KAFKA_SASL_PORT"
  protocols+=",SSL:SSL,SASL_SSL:SASL_SSL"
  # Through toxiproxy (toxiproxy.sh): advertised at the proxy, so a client
  # that bootstraps there reaches every partition's leader through it too.
  listeners+=",PROXIED://127.0.0.1:$KAFKA_PROXIED_PORT"
  advertised+=",PROXIED://127.0.0.1:$KAFKA_PROXY_PORT"
  protocols+=",PROXIED:PLAINTEXT"
  # Pods reach the broker through the test bridge, on a listener of their own.
  add_bridge_listener "$KAFKA_BRIDGE_PORT"
  cat >"$KAFKA_DATA/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$KAFKA_CONTROLLER_PORT
listeners=$listeners
advertised.listeners=$advertised
listener.security.protocol.map=$protocols
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
log.dirs=$KAFKA_DATA/data
num.partitions=1
offsets.topic.num.partitions=10
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
ssl.keystore.type=PEM
ssl.keystore.location=$KAFKA_DATA/tls-keystore.pem
sasl.enabled.mechanisms=PLAIN
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_$KAFKA_SASL_USER="$KAFKA_SASL_PASSWORD";
PROPS
  # The key and its certificate in one file, as a PEM keystore is.
  services_pki
  (umask 077 && cat "$SERVICES_PKI/server.key" "$SERVICES_PKI/server.crt" >"$KAFKA_DATA/tls-keystore.pem")
  write_log4j "$KAFKA_DATA/log4j2.properties"
}

metadata_ok() { kcat -b "127.0.0.1:$KAFKA_PORT" -L -m 2 2>/dev/null | grep -q '1 brokers'; }

# started_since N: the broker logged "Kafka Server started" more than N times
# in all. It says so once it has published its first metadata, i.e. taken up
# the leadership of every partition it holds: listed in the metadata earlier,
# it still answers NOT_LEADER for seconds after a restart (a test that
# restarts Kafka, then makes a sale, saw its produces time out).
started_count() { grep -c 'Kafka Server started' "$LOG_DIR/kafka.log" 2>/dev/null || true; }
started_since() { [ "$(started_count)" -gt "$1" ]; }

up() {
  install_jars
  # Started before the bridge existed: restart it with the BRIDGE listener
  # (and an older stack's without its TLS one).
  if is_running kafka && bridge_up && ! listening "$BRIDGE_IP" "$KAFKA_BRIDGE_PORT"; then
    log "kafka has no listener on $BRIDGE_IP, restarting it"
    stop_pid kafka
  elif is_running kafka && ! listening 127.0.0.1 "$KAFKA_SASL_PORT"; then
    log "kafka has no TLS listeners, restarting it"
    stop_pid kafka
  elif is_running kafka && ! listening 127.0.0.1 "$KAFKA_PROXIED_PORT"; then
    log "kafka has no listener for toxiproxy, restarting it"
    stop_pid kafka
  fi
  if is_running kafka; then
    log "kafka already running"
    return 0
  fi
  write_config
  if [ ! -f "$KAFKA_DATA/data/meta.properties" ]; then
    kafka_java kafka.tools.StorageTool format -t "$(kafka_java kafka.tools.StorageTool random-uuid)" \
      -c "$KAFKA_DATA/server.properties" >"$LOG_DIR/kafka-format.log"
  fi
  local started_before
  started_before=$(started_count)
  # SerialGC: the least CPU on two shared cores. Its young pauses (17-160 ms
  # measured under a storm) are the bench's tail; KAFKA_GC_OPTS tries
  # another collector (docs/performance.md has G1's and ZGC's figures).
  start_bg kafka java -Xms256m -Xmx512m ${KAFKA_GC_OPTS:--XX:+UseSerialGC} -cp "$KAFKA_HOME/lib/*" \
    -Dlog4j2.configurationFile="$KAFKA_DATA/log4j2.properties" kafka.Kafka "$KAFKA_DATA/server.properties"
  wait_until 60 kafka metadata_ok
  wait_until 90 "kafka's partitions" started_since "${started_before:-0}"
  log "kafka ready on $KAFKA_PORT"
}

down() { stop_pid kafka; }

# The topics of test sales: their namespaces come from the testkit's
# unique_name (ns-, t-, chaos-<hex>-<n>). Tests without an operator leave
# them (nothing runs a sale's cleanup): a developer's broker held 542 of
# them, ~2,700 partitions, and once took over a minute to start. `make
# test` sweeps them after the tests; a sale in any other namespace is not
# touched.
TEST_TOPICS='flashsale\.(ns|t|chaos)-[0-9a-f]+-[0-9]+\..*'

# kafka.sh topics ARGS: Kafka's kafka-topics tool against this broker.
topics() { topics_at "127.0.0.1:$KAFKA_PORT" "$@"; }
topics_at() { kafka_java org.apache.kafka.tools.TopicCommand --bootstrap-server "$@"; }

sweep() {
  if is_running kafka; then sweep_at "127.0.0.1:$KAFKA_PORT" kafka; fi
  if is_running "$(node_name 1)"; then sweep_at "$(replicated_bootstrap)" "kafka (replicated)"; fi
}

# sweep_at BOOTSTRAP LABEL: the test sales' topics of one cluster.
sweep_at() {
  local listed count
  listed=$(topics_at "$1" --list) || return 1
  count=$(grep -cxE "$TEST_TOPICS" <<<"$listed" || true)
  [ "$count" -gt 0 ] || return 0
  topics_at "$1" --delete --if-exists --topic "$TEST_TOPICS"
  log "$2: test sales' topics removed: $count"
}

status() {
  if metadata_ok; then echo "kafka          up    127.0.0.1:$KAFKA_PORT"; else echo "kafka          DOWN"; fi
  if [ "$STACK_TOPOLOGY" = replicated ] || is_running "$(node_name 1)"; then
    local brokers
    brokers=$(kcat -b "$(replicated_bootstrap)" -L -m 2 2>/dev/null | grep -o '[0-9]* brokers' || echo "0 brokers")
    echo "kafka-replicated $brokers of 3   $(replicated_bootstrap)"
  fi
}

# --- The replicated topology (STACK_TOPOLOGY=replicated) -------------------
# Three KRaft nodes, each broker and controller (a static quorum of three),
# beside the single broker: what production runs (replication factor 3,
# min.insync.replicas 2), for the chaos kinds that take one node away. Each
# node keeps its metadata log apart from its partitions: a wiped disk is
# the partitions' (re-replicated from the others); wiping a static voter's
# metadata log is unsafe in KRaft itself (Kafka's ops guide, "Replace KRaft
# Controller Disk"), so no kind does that. Each node runs under a group id
# of its own, so that one iptables rule can cut everything it sends.
REPLICATED_ID_FILE=$RUN_DIR/kafka-replicated.id

node_dir() { echo "$RUN_DIR/kafka-r$1"; }
node_name() { echo "kafka-r$1"; }

write_node_config() {
  local n=$1 dir voters="" i
  dir=$(node_dir "$n")
  mkdir -p "$dir"
  for i in 1 2 3; do
    voters+="${voters:+,}$i@127.0.0.1:${KAFKA_REPLICATED_CONTROLLER_PORTS[$((i - 1))]}"
  done
  local port=${KAFKA_REPLICATED_PORTS[$((n - 1))]}
  local controller=${KAFKA_REPLICATED_CONTROLLER_PORTS[$((n - 1))]}
  local bridge=${KAFKA_REPLICATED_BRIDGE_PORTS[$((n - 1))]}
  local listeners="PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$controller"
  local advertised="PLAINTEXT://127.0.0.1:$port"
  local protocols="PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
  add_bridge_listener "$bridge"
  cat >"$dir/server.properties" <<PROPS
process.roles=broker,controller
node.id=$n
controller.quorum.voters=$voters
listeners=$listeners
advertised.listeners=$advertised
listener.security.protocol.map=$protocols
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
log.dirs=$dir/data
metadata.log.dir=$dir/meta
num.partitions=1
default.replication.factor=3
min.insync.replicas=2
offsets.topic.num.partitions=10
offsets.topic.replication.factor=3
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
share.coordinator.state.topic.replication.factor=3
share.coordinator.state.topic.min.isr=2
unclean.leader.election.enable=false
broker.session.timeout.ms=3000
broker.heartbeat.interval.ms=500
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
PROPS
  write_log4j "$dir/log4j2.properties"
}

# node_up N: formats what of node N's storage is missing (a wiped data
# directory gets a new directory id; the metadata log is kept) and starts it.
node_up() {
  local n=$1 dir name
  dir=$(node_dir "$n")
  name=$(node_name "$n")
  is_running "$name" && return 0
  write_node_config "$n"
  [ -s "$REPLICATED_ID_FILE" ] || kafka_java kafka.tools.StorageTool random-uuid >"$REPLICATED_ID_FILE"
  kafka_java kafka.tools.StorageTool format --ignore-formatted -t "$(cat "$REPLICATED_ID_FILE")" \
    -c "$dir/server.properties" >>"$LOG_DIR/$name-format.log"
  STACK_GROUP=${KAFKA_REPLICATED_GROUPS[$((n - 1))]} start_bg "$name" java -Xms256m -Xmx512m \
    ${KAFKA_GC_OPTS:--XX:+UseSerialGC} -cp "$KAFKA_HOME/lib/*" \
    -Dlog4j2.configurationFile="$dir/log4j2.properties" kafka.Kafka "$dir/server.properties"
}

replicated_bootstrap() {
  local p csv=""
  for p in "${KAFKA_REPLICATED_PORTS[@]}"; do csv+="${csv:+,}127.0.0.1:$p"; done
  echo "$csv"
}

# Three brokers in the metadata, and no partition short of a replica.
replicated_whole() {
  kcat -b "$(replicated_bootstrap)" -L -m 2 2>/dev/null | grep -q ' 3 brokers:' &&
    [ -z "$(topics_at "$(replicated_bootstrap)" --describe --under-replicated-partitions 2>/dev/null)" ]
}

replicated_up() {
  local n
  install_jars
  mkdir -p "$KAFKA_DATA" && write_log4j "$KAFKA_DATA/log4j2.properties" # the tools'
  for n in 1 2 3; do node_up "$n"; done
  wait_until 90 "the three Kafka nodes, every replica in sync" replicated_whole
  log "kafka (replicated) ready on $(replicated_bootstrap)"
}

replicated_down() {
  local n
  for n in 1 2 3; do stop_pid "$(node_name "$n")"; done
}

# The node leading the metadata quorum (the active controller).
active_controller() {
  kafka_java org.apache.kafka.tools.MetadataQuorumCommand --bootstrap-server "$(replicated_bootstrap)" \
    describe --status 2>/dev/null | awk '/^LeaderId:/ {print $2}'
}

# wipe_data N|single: node N's partitions gone, as with a lost disk (its
# metadata log stays, see above); `single`: the single broker's whole log
# directory, its only copy of everything. The process must be stopped.
wipe_data() {
  local name dir
  if [ "$1" = single ]; then
    name=kafka dir=$KAFKA_DATA/data
  else
    name=$(node_name "$1") dir=$(node_dir "$1")/data
  fi
  if is_running "$name"; then die "$name runs: stop it before wiping its data"; fi
  rm -rf "$dir"
  log "$name: data directory wiped"
}

# node_group N: the group id node N runs under (its packets, for a cut).
node_group() { echo "${KAFKA_REPLICATED_GROUPS[$(($1 - 1))]}"; }


"${@:-up}"
