#!/usr/bin/env bash
# Apache Kafka (KRaft, one node acting as broker and controller) on
# $KAFKA_PORT (and over TLS on $KAFKA_TLS_PORT, with a SASL login on
# $KAFKA_SASL_PORT), from jars gathered off Maven Central. Usage: kafka.sh up|down|status|sweep|topics ARGS
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
  if ip -4 addr show 2>/dev/null | grep -q "inet $BRIDGE_IP/"; then
    listeners+=",BRIDGE://$BRIDGE_IP:$KAFKA_BRIDGE_PORT"
    advertised+=",BRIDGE://$BRIDGE_IP:$KAFKA_BRIDGE_PORT"
    protocols+=",BRIDGE:PLAINTEXT"
  fi
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
  cat >"$KAFKA_DATA/log4j2.properties" <<'PROPS'
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
topics() { kafka_java org.apache.kafka.tools.TopicCommand --bootstrap-server "127.0.0.1:$KAFKA_PORT" "$@"; }

sweep() {
  is_running kafka || return 0
  local listed count
  listed=$(topics --list) || return 1
  count=$(grep -cxE "$TEST_TOPICS" <<<"$listed" || true)
  [ "$count" -gt 0 ] || return 0
  topics --delete --if-exists --topic "$TEST_TOPICS"
  log "kafka: test sales' topics removed: $count"
}

status() {
  if metadata_ok; then echo "kafka          up    127.0.0.1:$KAFKA_PORT"; else echo "kafka          DOWN"; fi
}

"${@:-up}"
