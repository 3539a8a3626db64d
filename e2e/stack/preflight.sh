#!/usr/bin/env bash
# Checked before anything is built or started (make up, stack, test, demo,
# bench): the tools the project cannot install itself, one line per missing
# piece with what to install, then whether this machine's stack belongs to
# another clone. Exits 1 when anything is missing or the stack is not ours.
#
#   preflight.sh          both checks (the default)
#   preflight.sh tools    only the tools
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

missing=()
need() { missing+=("$1"); }

# version_at_least HAVE WANT: dotted versions, numerically.
version_at_least() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -1)" = "$2" ]; }

check_tools() {
  local rust_want go_have java_have
  rust_want=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' "$REPO_DIR/Cargo.toml")
  if ! command -v cargo >/dev/null || ! command -v rustc >/dev/null; then
    need "Rust $rust_want or newer: install it with rustup (https://rustup.rs), then open a new shell"
  elif ! version_at_least "$(rustc --version | cut -d' ' -f2)" "$rust_want"; then
    need "Rust $rust_want or newer (found $(rustc --version | cut -d' ' -f2)): run 'rustup update stable'"
  fi
  if ! command -v go >/dev/null; then
    need "Go 1.26 or newer (builds Kubernetes, etcd and helm): install it from https://go.dev/dl"
  else
    go_have=$(go env GOVERSION 2>/dev/null | sed 's/^go//')
    version_at_least "${go_have:-0}" 1.26 ||
      need "Go 1.26 or newer (found ${go_have:-an unknown version}): install it from https://go.dev/dl"
  fi
  if ! command -v java >/dev/null; then
    need "Java 17 or newer (runs Kafka): apt-get install openjdk-17-jre-headless"
  else
    java_have=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1)
    [ "${java_have:-0}" -ge 17 ] ||
      need "Java 17 or newer (found ${java_have:-an unknown version}): apt-get install openjdk-17-jre-headless"
  fi
  command -v mvn >/dev/null || need "Maven (gathers Kafka's jars): apt-get install maven"
  command -v apt-get >/dev/null && command -v dpkg-query >/dev/null ||
    need "a Debian or Ubuntu machine (the stack installs its services with apt-get)"
  local tool
  for tool in make gcc python3 git; do
    command -v "$tool" >/dev/null || need "$tool: apt-get install $tool"
  done
  if [ "$(id -u)" -ne 0 ] && ! sudo -n true 2>/dev/null; then
    need "root, or sudo without a password (the stack creates a bridge, runs a kubelet and installs packages)"
  fi
}

check_owner() {
  local owner
  if owner=$(other_owner); then
    need "this machine's stack belongs to the clone whose run directory is $owner: stop it there first ('make -C $(dirname "$owner") down'), then run this again"
  fi
}

check_tools
[ "${1:-all}" = tools ] || check_owner
if [ ${#missing[@]} -gt 0 ]; then
  printf '\033[1;31m[preflight]\033[0m %s\n' "${missing[@]}" >&2
  exit 1
fi
