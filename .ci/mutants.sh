#!/usr/bin/env bash
# Mutation testing of the pure rule modules with cargo-mutants (crates.io): each mutant is a
# one-line break of a rule; a missed one is a rule no test pins. Bounded in time; not part of
# .ci/run (too slow for two cores). Writes one line per mutant outcome under mutants.out/ and
# prints the caught / missed / unviable counts per crate.
#
#   cargo install cargo-mutants --locked
#   .ci/mutants.sh                 # the whole set (about an hour on two quiet cores)
#   .ci/mutants.sh quick           # stackmodel and lifecycle's smaller pure modules
#   .ci/mutants.sh sockproxy       # sockproxy-policy's decision modules
#   .ci/mutants.sh diff            # only mutants in the last commit's diff (--in-diff)
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo-mutants >/dev/null || { echo ".ci/mutants.sh: cargo-mutants is not installed (cargo install cargo-mutants --locked)" >&2; exit 2; }
limit="${MUTANTS_SECONDS:-3600}"
out="${MUTANTS_OUT:-mutants.out}"
mode="${1:-all}"

# The pure rule modules, per crate: each is tested by its crate's own unit tests.
stackmodel=(stackmodel/src/lib.rs)
lifecycle_quick=(lifecycle/src/teardown_plan.rs lifecycle/src/naming.rs lifecycle/src/decide.rs
  lifecycle/src/serve/cap.rs lifecycle/src/serve/provision.rs)
lifecycle_all=("${lifecycle_quick[@]}" lifecycle/src/ledger.rs lifecycle/src/serve/pool.rs)
netproxy=(netproxy/src/addr.rs netproxy/src/policy.rs)
egress=(egress/src/rules.rs)
sockproxy_policy=(sockproxy-policy/src/policy.rs sockproxy-policy/src/scope.rs
  sockproxy-policy/src/list_query.rs sockproxy-policy/src/seccomp.rs)

run() { # crate, files...
  local crate="$1"; shift
  local args=()
  for f in "$@"; do args+=(-f "$f"); done
  if [ "$mode" = diff ]; then
    git diff HEAD~1 > "$out.diff"
    args+=(--in-diff "$out.diff")
  fi
  echo "== cargo mutants -p $crate ${*}"
  timeout "$limit" cargo mutants -p "$crate" "${args[@]}" --output "$out/$crate" --timeout-multiplier 3 -- --lib || true
  for kind in caught missed unviable timeout; do
    f="$out/$crate/mutants.out/$kind.txt"
    printf '%s %s: %s\n' "$crate" "$kind" "$( [ -f "$f" ] && wc -l < "$f" || echo 0)"
  done
}

mkdir -p "$out"
case "$mode" in
  quick) run stackmodel "${stackmodel[@]}"; run lifecycle "${lifecycle_quick[@]}" ;;
  sockproxy) run sockproxy-policy "${sockproxy_policy[@]}" ;;
  all|diff) run stackmodel "${stackmodel[@]}"; run lifecycle "${lifecycle_all[@]}"; run netproxy "${netproxy[@]}"; run egress "${egress[@]}"
    run sockproxy-policy "${sockproxy_policy[@]}" ;;
  *) echo ".ci/mutants.sh: unknown mode $mode (all, quick, sockproxy, diff)" >&2; exit 2 ;;
esac
