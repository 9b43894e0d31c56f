#!/usr/bin/env bash
# The chaos soak (tests/src/bin/chaos): N stacks, a hostile tenant in each, faults, on a dockerd
# of the run's own in a network namespace of its own, so no other engine is touched.
# Usage: .ci/chaos.sh --stacks N --seconds S [--seed K] [more chaos flags]   (as root)
# Builds sockproxy, lifecycle-cli and chaos first (debug profile; CHAOS_PROFILE=release for a
# release build), unless CHAOS_BIN_DIR names where they are built already.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "chaos.sh: needs root (a network namespace, dockerd, mounts)" >&2
  exit 2
fi
if [ -z "${CHAOS_BIN_DIR:-}" ]; then
  profile="${CHAOS_PROFILE:-debug}"
  flag=""; [ "$profile" = release ] && flag="--release"
  cargo build --quiet $flag -p sockproxy -p sockproxy-tests \
    --bin sockproxy --bin lifecycle-cli --bin chaos
  CHAOS_BIN_DIR="$(pwd)/target/$profile"
fi
ns="chaos-$$"
ip netns add "$ns"
cleanup() { ip netns delete "$ns" 2>/dev/null || true; }
trap cleanup EXIT
ip -n "$ns" link set lo up
# The run's dockerd (started by chaos itself) gets this namespace's iptables and bridges.
CHAOS_BIN_DIR="$CHAOS_BIN_DIR" nsenter --net="/run/netns/$ns" \
  "$CHAOS_BIN_DIR/chaos" --bin-dir "$CHAOS_BIN_DIR" "$@"
