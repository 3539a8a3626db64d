#!/usr/bin/env bash
# Builds a container image from host files and imports it into every
# running node's containerd: no registry and no container engine are needed (or reachable).
#
#   image.sh [-f SRC[:DST]]... [-e KEY=VALUE]... [-c ARG]... [-w DIR] [-u USER]
#            NAME TAG BINARY [ENTRYPOINT [ARG...]]
#
# The image is $IMAGE_PREFIX/NAME:TAG (docker.io/flashsale/NAME:TAG): give
# pods that full name with `imagePullPolicy: IfNotPresent` (or Never).
# BINARY lands at /usr/local/bin/<its file name>, with every shared library
# `ldd` lists for it, so a glibc binary runs as is; ENTRYPOINT defaults to
# that path. -f adds host files or directories at DST (default: the same
# path), -e sets environment variables, -c appends an argument to the image's
# Cmd (the default arguments a pod's `args` replace), -w sets the working
# directory, -u the user.
#
# Cheap when nothing changed: a build whose inputs match the last one's is
# skipped, and an image containerd already holds with the same digest is not
# imported again. Prints the image's name. A node must be up (node.sh up).
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() { die "usage: $0 [-f SRC[:DST]]... [-e KEY=VALUE]... [-c ARG]... [-w DIR] [-u USER] NAME TAG BINARY [ENTRYPOINT [ARG...]]"; }

PYTHON=/usr/bin/python3
[ -x "$PYTHON" ] || PYTHON=python3
opts=()
while getopts 'f:e:c:w:u:h' o; do
  case $o in
    f) opts+=(--file "$OPTARG") ;;
    e) opts+=(--env "$OPTARG") ;;
    c) opts+=(--cmd "$OPTARG") ;;
    w) opts+=(--workdir "$OPTARG") ;;
    u) opts+=(--user "$OPTARG") ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
[ $# -ge 3 ] || usage
name=$1 tag=$2 binary=$3
shift 3
[ -f "$binary" ] || die "$binary: no such file"
dst=/usr/local/bin/$(basename "$binary")
[ $# -gt 0 ] || set -- "$dst"
ref=$IMAGE_PREFIX/$name:$tag

out=$IMAGES_DIR/$name-$tag.tar
mkdir -p "$IMAGES_DIR"
digest=$("$PYTHON" "$STACK_DIR/oci-image.py" --name "$ref" --out "$out" --stamp "$out.stamp" \
  --file "$binary:$dst" "${opts[@]}" -- "$@")

# import_into_node: the image into the current node's containerd, unless
# it holds this digest already.
import_into_node() {
  local have stale
  have=$(node_ctr -n k8s.io images ls "name==$ref" 2>/dev/null | awk 'NR == 2 { print $3 }')
  if [ "$have" = "$digest" ]; then
    log "image $ref up to date on $NODE_NAME ($digest)"
    return 0
  fi
  node_ctr -n k8s.io images import "$out" >/dev/null ||
    die "importing $out into $NODE_NAME failed"
  log "image $ref imported into $NODE_NAME ($digest)"
  # The kubelet's image GC is off: drop the replaced image's content now, by
  # removing the ID reference (sha256:<config>) the CRI plugin made for it,
  # unless another name still uses it. Running containers keep their files.
  if [ -n "$have" ]; then
    mapfile -t stale < <(node_ctr -n k8s.io images ls 2>/dev/null | awk -v d="$have" '
      NR > 1 && $3 == d { if ($1 ~ /^sha256:/) ids[$1]; else named = 1 }
      END { if (!named) for (i in ids) print i }')
    [ ${#stale[@]} -eq 0 ] || node_ctr -n k8s.io images rm "${stale[@]}" >/dev/null 2>&1 || true
  fi
}

imported=0
for n in "${NODE_INDICES[@]}"; do
  use_node "$n"
  node_ctr version >/dev/null 2>&1 || continue
  import_into_node
  imported=$((imported + 1))
done
[ "$imported" -gt 0 ] || die "no node's containerd is running (e2e/stack/node.sh up)"
echo "$ref"
