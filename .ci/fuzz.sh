#!/usr/bin/env bash
# Fuzzes every cargo-fuzz target in fuzz/ for a bounded time (issue 17), when a nightly
# toolchain is present; otherwise prints a NOTICE and succeeds. Called by .ci/run.
#
#   FUZZ_SECONDS    seconds per target (default 30)
#   FUZZ_TARGETS    targets to run, space-separated (default: every target, `cargo fuzz list`)
#   FUZZ_SANITIZER  cargo-fuzz's --sanitizer (default none: the code under test has no
#                   `unsafe` and every target reports a violated property by panicking, so the
#                   address sanitizer's slower build buys little; `address` to put it back)
#
# libFuzzer starts from a scratch copy of fuzz/corpus/<target>/ and writes what it finds there,
# so the committed seed corpus stays small. Files named known-bug-* are left out of the copy:
# they reproduce bugs not fixed yet (listed in tests/tests/tools/fuzz_corpus.rs's KNOWN_FAILURES) and
# would stop libFuzzer at its first input. A crash (a panic, which is how every target reports
# a violated property) fails this script after all targets ran, and the crashing input is
# copied into fuzz/corpus/<target>/ so the stable replay test keeps it.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${FUZZ_SECONDS:-30}"
sanitizer="${FUZZ_SANITIZER:-none}"

if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "NOTICE: fuzzing skipped: no nightly toolchain ('cargo +nightly --version' failed)"
  exit 0
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
  echo "== install cargo-fuzz"
  cargo install cargo-fuzz --locked
fi

began=$(date +%s)
cd fuzz
echo "== cargo fuzz build --sanitizer $sanitizer ($(cargo +nightly --version))"
cargo +nightly fuzz build --sanitizer "$sanitizer"
built=$(date +%s)
echo "== built in $((built - began)) s"

scratch=$(mktemp -d /tmp/fuzz-scratch.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
failed=()
for t in ${FUZZ_TARGETS:-$(cargo +nightly fuzz list)}; do
  mkdir -p "corpus/$t" "$scratch/$t"
  find "corpus/$t" -maxdepth 1 -type f ! -name 'known-bug-*' -exec cp {} "$scratch/$t/" \;
  rm -rf "artifacts/$t"
  echo "== fuzz $t for ${secs} s ($(find "$scratch/$t" -type f | wc -l) seed inputs)"
  if ! cargo +nightly fuzz run --sanitizer "$sanitizer" "$t" "$scratch/$t" -- \
    -max_total_time="$secs" -timeout=10 -print_final_stats=1 >"$scratch/$t.log" 2>&1; then
    tail -40 "$scratch/$t.log"
    found=0
    for f in "artifacts/$t"/*; do
      [ -f "$f" ] || continue
      cp "$f" "corpus/$t/"
      echo "CRASH: $t: input saved as fuzz/corpus/$t/$(basename "$f")"
      found=1
    done
    [ "$found" = 1 ] || echo "FAILED: $t exited non-zero without an artifact (see the log above)"
    failed+=("$t")
  else
    grep -E "^(Done|stat::number_of_executed_units)" "$scratch/$t.log" || true
  fi
done
echo "== fuzzing took $(($(date +%s) - began)) s in all (build $((built - began)) s)"
if [ "${#failed[@]}" -gt 0 ]; then
  echo "fuzz targets failed: ${failed[*]}" >&2
  exit 1
fi
