#!/usr/bin/env bash
# schemathesis, the OpenAPI fuzzer the API's document is checked with
# (workload/tests/openapi_fuzz.rs), in a venv of its own under the cache.
#
#   schemathesis.sh install   install it unless present
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

install() {
  # The marker is written last: a venv half-made by an interrupted pip is
  # made again.
  if [ ! -f "$SCHEMATHESIS_VENV/.complete" ]; then
    log "installing schemathesis $SCHEMATHESIS_VERSION into $SCHEMATHESIS_VENV"
    rm -rf "$SCHEMATHESIS_VENV"
    /usr/bin/python3 -m venv "$SCHEMATHESIS_VENV"
    "$SCHEMATHESIS_VENV/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION"
    touch "$SCHEMATHESIS_VENV/.complete"
  fi
}

case ${1:-} in
  install) install ;;
  *) die "usage: $0 install" ;;
esac
