#!/usr/bin/env bash
# Builds static sockproxy, netproxy and lifecycle binaries and a FROM-scratch image around each.
# Usage: deploy/build-images.sh [TAG_PREFIX]   (images TAG_PREFIXsockproxy:latest, …; DOCKER_HOST
# is used). No base image is pulled, so this works with no registry.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
prefix="${1:-}"
target_dir="${STATIC_TARGET_DIR:-$root/target/static}"
# crt-static on the gnu target gives static-pie binaries; the explicit --target keeps the flag
# off build scripts and proc macros. netproxy resolves in-process (hickory), so no NSS is needed.
RUSTFLAGS="-C target-feature=+crt-static" \
CARGO_PROFILE_RELEASE_DEBUG=false CARGO_PROFILE_RELEASE_STRIP=symbols \
  cargo build --quiet --release -p sockproxy -p netproxy -p lifecycle \
  --target x86_64-unknown-linux-gnu --target-dir "$target_dir" --manifest-path "$root/Cargo.toml"
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/Cargo.toml" | head -n 1)"
source="$(git -C "$root" remote get-url origin 2>/dev/null || echo unknown)"
for component in sockproxy netproxy lifecycle; do
  ctx="$(mktemp -d)"
  cp "$target_dir/x86_64-unknown-linux-gnu/release/$component" "$ctx/$component"
  mkdir "$ctx/empty"
  # Only the Dockerfile's last stage (FROM scratch), reading from this context what its build
  # stage would have left under /out: the same image without pulling the Rust image.
  awk '/^FROM /{stage=$0} stage ~ /^FROM scratch/' "$root/deploy/$component.Dockerfile" |
    sed -e 's#--from=build \(--chown=[0-9:]* \)\{0,1\}/out/#\1#' > "$ctx/Dockerfile"
  # The classic builder needs no buildx plugin and pulls nothing for FROM scratch.
  DOCKER_BUILDKIT=0 docker build --quiet --build-arg "VERSION=$version" --build-arg "SOURCE=$source" \
    -t "${prefix}${component}:latest" "$ctx" >/dev/null
  rm -rf "$ctx"
  echo "${prefix}${component}:latest"
done
