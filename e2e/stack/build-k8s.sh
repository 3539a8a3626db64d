#!/usr/bin/env bash
# Builds the local cluster's binaries from the Go module proxy (no release
# download site is reachable): Kubernetes from the wrapper module in k8s/,
# etcd from the module in etcd/, and helm with `go install`.
#
#   build-k8s.sh [control-plane|node|helm|all]     (default: all)
#
#   control-plane  kube-apiserver kube-controller-manager kube-scheduler
#                  kubectl -> $K8S_BIN, and etcd -> $ETCD_BIN
#   node           kubelet kube-proxy -> $K8S_BIN
#   helm           helm -> $HELM_BIN
#
# Binaries already in the versioned cache directories are skipped, so a
# cached run returns at once. Each build writes to a temporary directory
# and moves the finished binaries into place, so an interrupted build never
# leaves a half-written binary behind. All Go caches live in $CACHE_DIR/go.
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CONTROL_PLANE=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
NODE=(kubelet kube-proxy)

usage() { die "usage: $0 [control-plane|node|helm|all]"; }

target=${1:-all}
k8s_wanted=()
want_etcd=false
want_helm=false
case $target in
  control-plane) k8s_wanted=("${CONTROL_PLANE[@]}"); want_etcd=true ;;
  node) k8s_wanted=("${NODE[@]}") ;;
  helm) want_helm=true ;;
  all) k8s_wanted=("${CONTROL_PLANE[@]}" "${NODE[@]}"); want_etcd=true; want_helm=true ;;
  -h | --help) usage ;;
  *) usage ;;
esac

# What is missing; empty lists mean there is nothing to do.
k8s_missing=()
for b in "${k8s_wanted[@]}"; do
  [ -x "$K8S_BIN/$b" ] || k8s_missing+=("$b")
done
$want_etcd && [ -x "$ETCD_BIN/etcd" ] && want_etcd=false
$want_helm && [ -x "$HELM_BIN/helm" ] && want_helm=false
if [ ${#k8s_missing[@]} -eq 0 ] && ! $want_etcd && ! $want_helm; then
  exit 0
fi

GO=$(command -v go || echo /usr/local/go/bin/go)
[ -x "$GO" ] || die "go not found (PATH or /usr/local/go/bin/go)"
export GOMODCACHE=$CACHE_DIR/go/mod
export GOCACHE=$CACHE_DIR/go/build
export GOWORK=off GOTOOLCHAIN=local CGO_ENABLED=0
BUILD_FLAGS=(-trimpath -pgo=off)

# One build at a time: two concurrent callers would only race each other.
mkdir -p "$K8S_BIN" "$ETCD_BIN" "$HELM_BIN"
exec 9>"$CACHE_DIR/.build.lock"
if ! flock -n 9; then
  log "another build is running, waiting for it"
  flock 9
fi

# Temporary output directories live next to their targets (same file system,
# so the final mv is atomic). Leftovers of a killed build are removed here;
# the lock above makes that safe.
rm -rf "$K8S_BIN"/.tmp.* "$ETCD_BIN"/.tmp.* "$HELM_BIN"/.tmp.*
# tmp_in DIR: set $tmp to a new temporary directory in DIR, removed on exit.
TMP_DIRS=()
cleanup() { [ ${#TMP_DIRS[@]} -eq 0 ] || rm -rf "${TMP_DIRS[@]}"; }
trap cleanup EXIT
tmp_in() {
  tmp=$(mktemp -d "$1/.tmp.XXXXXX")
  TMP_DIRS+=("$tmp")
}

now() { date +%s.%N; }
took() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# install_from TMPDIR DEST NAME...: move finished binaries into place.
install_from() {
  local tmp=$1 dest=$2 n
  shift 2
  for n in "$@"; do
    [ -x "$tmp/$n" ] || die "build produced no $n"
    mv -f "$tmp/$n" "$dest/$n"
  done
}

build_k8s() {
  local mod=$STACK_DIR/k8s t0 tmp date pkgs=() b ldflags v
  t0=$(now)
  # The build date is the release's publication time: reproducible builds.
  date=$(cd "$mod" && "$GO" list -m -f '{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}' k8s.io/kubernetes)
  ldflags="-s -w"
  for v in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $v.gitVersion=v$K8S_VERSION -X $v.gitMajor=${K8S_VERSION%%.*}"
    ldflags+=" -X $v.gitMinor=$(echo "$K8S_VERSION" | cut -d. -f2)"
    ldflags+=" -X $v.gitCommit= -X $v.gitTreeState=clean -X $v.buildDate=$date"
  done
  for b in "${k8s_missing[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
  tmp_in "$K8S_BIN"
  log "building Kubernetes v$K8S_VERSION: ${k8s_missing[*]}"
  (cd "$mod" && "$GO" build "${BUILD_FLAGS[@]}" -ldflags "$ldflags" -o "$tmp/" "${pkgs[@]}")
  install_from "$tmp" "$K8S_BIN" "${k8s_missing[@]}"
  log "built ${k8s_missing[*]} in $(took "$t0") s"
}

build_etcd() {
  local t0 tmp
  t0=$(now)
  tmp_in "$ETCD_BIN"
  log "building etcd v$ETCD_VERSION"
  (cd "$STACK_DIR/etcd" && "$GO" build "${BUILD_FLAGS[@]}" -ldflags "-s -w" -o "$tmp/etcd" .)
  install_from "$tmp" "$ETCD_BIN" etcd
  log "built etcd in $(took "$t0") s"
}

build_helm() {
  local t0 tmp p=helm.sh/helm/v3 gomod minor ldflags
  t0=$(now)
  tmp_in "$HELM_BIN"
  # As helm's own Makefile does for a release: the version, and the
  # Kubernetes version its client-go speaks (v0.34.x -> 1.34) for
  # .Capabilities.KubeVersion and the deprecation lint.
  gomod=$("$GO" mod download -json "$p@v$HELM_VERSION" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')
  minor=$(awk '$1 == "k8s.io/client-go" { split($2, v, "."); print v[2] }' "$gomod")
  [ -n "$minor" ] || die "cannot find helm's k8s.io/client-go version in $gomod"
  ldflags="-s -w -X $p/internal/version.version=v$HELM_VERSION"
  ldflags+=" -X $p/internal/version.metadata= -X $p/internal/version.gitTreeState=clean"
  ldflags+=" -X $p/pkg/lint/rules.k8sVersionMajor=1 -X $p/pkg/lint/rules.k8sVersionMinor=$minor"
  ldflags+=" -X $p/pkg/chartutil.k8sVersionMajor=1 -X $p/pkg/chartutil.k8sVersionMinor=$minor"
  log "building helm v$HELM_VERSION"
  GOBIN=$tmp "$GO" install "${BUILD_FLAGS[@]}" -ldflags "$ldflags" "$p/cmd/helm@v$HELM_VERSION"
  install_from "$tmp" "$HELM_BIN" helm
  log "built helm in $(took "$t0") s"
}

total=$(now)
[ ${#k8s_missing[@]} -eq 0 ] || build_k8s
! $want_etcd || build_etcd
! $want_helm || build_helm
log "build-k8s.sh $target done in $(took "$total") s"
