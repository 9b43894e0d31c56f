#!/usr/bin/env bash
# Builds a statically linked netproxy and the FROM-scratch image around it.
# Usage: deploy/build-netproxy-image.sh [TAG]   (default: netproxy:latest; DOCKER_HOST is used)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
tag="${1:-netproxy:latest}"
target_dir="${NETPROXY_STATIC_TARGET_DIR:-$root/target/static}"
# crt-static on the gnu target gives a static-pie binary; the explicit --target keeps the flag off
# build scripts and proc macros. The resolver is in-process (hickory), so no NSS is needed.
RUSTFLAGS="-C target-feature=+crt-static" \
CARGO_PROFILE_RELEASE_DEBUG=false CARGO_PROFILE_RELEASE_STRIP=symbols \
  cargo build --quiet --release -p netproxy --target x86_64-unknown-linux-gnu \
  --target-dir "$target_dir" --manifest-path "$root/Cargo.toml"
ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
cp "$target_dir/x86_64-unknown-linux-gnu/release/netproxy" "$ctx/netproxy"
cp "$root/deploy/netproxy.Dockerfile" "$ctx/Dockerfile"
# The classic builder needs no buildx plugin and pulls nothing for FROM scratch.
DOCKER_BUILDKIT=0 docker build --quiet -t "$tag" "$ctx" >/dev/null
echo "$tag"
