#!/usr/bin/env bash
# Run by `make test` against the running stack: what a newcomer meets.
#  1. PostgreSQL keeps its data outside the clone, in a directory the
#     `postgres` user owns, so a clone under a 0700 directory works.
#  2. Missing prerequisites are named, one line each, before anything is
#     built or started.
#  3. A second clone of the project on the same machine neither starts a
#     stack of its own nor stops this one's.
#  4. A stack process that died without `make down` (a killed container, a
#     reboot) is not mistaken for the process that has its pid now.
#  5. The topics test sales leave on a developer's broker are swept (a
#     broker holding hundreds of them took over a minute to start); others stay.
# shellcheck source-path=SCRIPTDIR source=stack/lib.sh
source "$(dirname "$0")/stack/lib.sh"

failures=0
pass() { printf '  \033[32mok\033[0m   %s\n' "$*"; }
fail() {
  printf '  \033[31mFAIL\033[0m %s\n' "$*"
  failures=$((failures + 1))
}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

echo "newcomer checks:"

# 1. Where PostgreSQL's data is.
pg_version=$PG_HOME/data/PG_VERSION
if as_root test -f "$pg_version" && [ "${PG_HOME#"$REPO_DIR"/}" = "$PG_HOME" ] &&
  (cd / && as_root runuser -u postgres -- test -r "$pg_version") && [ ! -e "$RUN_DIR/postgres" ]; then
  pass "PostgreSQL's data is in $PG_HOME, outside the clone, and postgres reaches it"
else
  fail "PostgreSQL's data must live outside the clone in $PG_HOME, readable by postgres (found: $(ls -d "$RUN_DIR"/postgres/data "$PG_HOME"/data 2>/dev/null | tr '\n' ' '))"
fi

# 2. A machine without Rust, Maven, with Go 1.25 and Java 11: `make up` says so at once.
bin=$scratch/bin
mkdir -p "$bin"
for tool in bash sh env make sed grep awk sort head tail cut cat id sha256sum realpath \
  mkdir dirname basename ps tr sleep rm mv ln ls date sudo; do
  p=$(command -v "$tool") && ln -s "$p" "$bin/$tool"
done
printf '#!/bin/sh\necho go1.25.0\n' >"$bin/go"
printf '#!/bin/sh\necho '\''openjdk version "11.0.2" 2019-01-15'\'' >&2\n' >"$bin/java"
chmod +x "$bin/go" "$bin/java"
started=$SECONDS
out=$(PATH=$bin "$(command -v timeout)" 60 make --no-print-directory -C "$REPO_DIR" up RUN="$scratch/run" 2>&1) && rc=0 || rc=$?
took=$((SECONDS - started))
expected=("Rust 1.9" "Go 1.26 or newer (found 1.25.0)" "Java 17 or newer (found 11)" "Maven")
missing_lines=()
for line in "${expected[@]}"; do grep -qF "$line" <<<"$out" || missing_lines+=("$line"); done
if [ "$rc" -ne 0 ] && [ ${#missing_lines[@]} -eq 0 ] && [ "$took" -le 10 ] &&
  [ -z "$(ls "$scratch/run/pids" 2>/dev/null)" ]; then
  pass "missing prerequisites named before anything starts (${took}s)"
else
  fail "make up without Rust, Maven, Go 1.26 and Java 17: exit $rc after ${took}s, lines missing: ${missing_lines[*]:-none}; output:"
  sed 's/^/         /' <<<"$out" | tail -20
fi

# 3. A second clone: its `make up` is refused in one line, its `make down` stops nothing.
other=$scratch/other-clone
mkdir -p "$other"
(cd "$REPO_DIR" && git ls-files -co --exclude-standard -z | tar --null -cf - -T -) | tar -xf - -C "$other"
out=$(timeout 120 make --no-print-directory -C "$other" up 2>&1) && rc=0 || rc=$?
if [ "$rc" -ne 0 ] && grep -qF "belongs to the clone whose run directory is $RUN_DIR" <<<"$out" &&
  [ -z "$(ls "$other/.run/pids" 2>/dev/null)" ] && [ ! -d "$other/target" ]; then
  pass "a second clone's make up is refused: $(grep -F 'belongs to' <<<"$out" | sed 's/\x1b\[[0-9;]*m//g')"
else
  fail "a second clone's make up must be refused before it builds or starts anything (exit $rc):"
  sed 's/^/         /' <<<"$out" | tail -20
fi
make --no-print-directory -C "$other" down >/dev/null 2>&1 || true
down=$("$STACK_DIR/status.sh" 2>&1 | grep -v '^local-' | grep DOWN || true)
if [ -z "$down" ]; then
  pass "a second clone's make down leaves this clone's stack up"
else
  fail "after the second clone's make down, this clone's stack lost: $down"
fi

# 4. A recorded process died; its pid now belongs to another process.
stale=$(
  PID_DIR=$scratch/pids LOG_DIR=$scratch/logs
  mkdir -p "$PID_DIR" "$LOG_DIR"
  start_bg fresh sleep 60 2>/dev/null
  is_running fresh && echo "a fresh process counts as running;"
  stop_pid fresh 2>/dev/null
  start_bg gone sleep 60 2>/dev/null
  kill -KILL "$(cat "$(pid_file gone)")"
  sleep 0.1
  sleep 60 >/dev/null & # not holding this substitution's output open
  reused=$!
  echo "$reused" >"$(pid_file gone)" # as if the pid had come back to it
  is_running gone && echo "the dead process counts as running;"
  stop_pid gone 2>/dev/null
  alive "$reused" || echo "stop_pid killed the process that has its pid now;"
  kill "$reused" 2>/dev/null || true
)
if [ "$stale" = "a fresh process counts as running;" ]; then
  pass "a stack process that died is not mistaken for the one that has its pid now"
else
  fail "recorded pids: ${stale:-a fresh process does not count as running;} (expected only: a fresh process counts as running)"
fi

# 5. One topic shaped like a test sale's, one like a merchant's: the sweep
#    takes the first only.
test_topic=flashsale.ns-$$beef-0.newcomer.orders
shop_topic=flashsale.newcomer-shop-$$.summer.orders
kafka_topics() { "$STACK_DIR/kafka.sh" topics "$@"; }
# The merchant's topic goes whatever happens below (a test sale's the sweep
# after the tests takes).
trap 'rm -rf "$scratch"; kafka_topics --delete --if-exists --topic "$shop_topic" >/dev/null 2>&1 || true' EXIT
for t in "$test_topic" "$shop_topic"; do kafka_topics --create --if-not-exists --topic "$t" --partitions 1 >/dev/null; done
"$STACK_DIR/kafka.sh" sweep 2>/dev/null
left=$(kafka_topics --list | { grep -xF -e "$test_topic" -e "$shop_topic" || true; } | tr '\n' ' ')
if [ "$left" = "$shop_topic " ]; then
  pass "a test sale's topic is swept, a merchant's stays"
else
  fail "topics after the sweep: ${left:-none} (expected only $shop_topic)"
fi

[ "$failures" -eq 0 ] || {
  echo "$failures newcomer check(s) failed" >&2
  exit 1
}
