#!/usr/bin/env bash
# Issue 37: what a stack's container list costs through sockproxy on a host full of other
# stacks' containers, for two sockproxy builds (e.g. before and after 46201cb, which sends the
# engine an anchored name filter for the prefix). Needs bash, curl, jq and a real dockerd;
# the --max-list-bytes check at the end of `measure` also needs the docker CLI. Only Unix
# sockets are used; no image is pulled.
#
#   .ci/bench-foreign-list.sh populate ENGINE_SOCK
#       Creates (does not start) FOREIGN containers named other-stack-N and OWN containers
#       named ${PREFIX}sandbox-N from IMAGE, each with about 400 bytes of labels, PARALLEL
#       API calls at a time. Existing names are skipped (409), so it can be rerun.
#   .ci/bench-foreign-list.sh measure ENGINE_SOCK BEFORE_BIN AFTER_BIN
#       Starts both proxies (--prefix PREFIX, --upstream the engine) on temporary sockets and
#       runs ROUNDS rounds of `GET /v1.41/containers/json?all=1`: once on the engine directly,
#       once on the engine with the name filter the newer proxy adds (filters={"name":
#       {"^/?PREFIX":true}}, a reference) and once through each proxy, the order rotating every
#       round. Prints a markdown table: latency median and p90 (curl's time_total), bytes of
#       the answer, and the proxy's peak RSS (VmHWM) at the end; then, if strace is installed, the bytes each proxy read from the
#       engine for one more list (its reads under `strace -f`, on every descriptor but the
#       client's). Then restarts both with --max-list-bytes SMALL_LIST_BYTES and runs
#       `docker ps -a` through each (the user-visible difference).
#
# Environment: PREFIX (deer-flow-), FOREIGN (10000), OWN (10), PARALLEL (8),
# IMAGE (sockproxy-test-busybox:latest), ROUNDS (30), SMALL_LIST_BYTES (1048576).
set -euo pipefail

prefix="${PREFIX:-deer-flow-}"
api=/v1.41

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d' >&2
  exit 2
}

[ $# -ge 2 ] || usage
cmd=$1
engine=$2

create_one() {
  # $1 = container name; the labels imitate a compose project's (about 400 bytes).
  local name=$1 body
  body=$(printf '{"Image":"%s","Cmd":["sleep","600"],"Labels":{"com.docker.compose.project":"%s","com.docker.compose.service":"worker","com.docker.compose.config-hash":"%s","com.docker.compose.version":"2.24.5","com.docker.compose.oneoff":"False","com.docker.compose.project.working_dir":"/srv/stacks/%s","com.docker.compose.project.config_files":"/srv/stacks/%s/docker-compose.yml","org.opencontainers.image.source":"https://git.example.invalid/%s/worker"}}' \
    "${IMAGE:-sockproxy-test-busybox:latest}" "$name" \
    "$(printf '%s' "$name" | sha256sum | cut -c1-64)" "$name" "$name" "$name")
  curl -s -o /dev/null -w '%{http_code}\n' --unix-socket "$engine" -X POST \
    -H 'Content-Type: application/json' -d "$body" "http://engine$api/containers/create?name=$name"
}

populate() {
  export -f create_one
  export engine api IMAGE="${IMAGE:-sockproxy-test-busybox:latest}"
  local began codes
  began=$(date +%s)
  codes=$({
    seq 1 "${FOREIGN:-10000}" | sed 's/^/other-stack-/'
    seq 1 "${OWN:-10}" | sed "s/^/${prefix}sandbox-/"
  } | xargs -P "${PARALLEL:-8}" -I{} bash -c 'create_one {}' | sort | uniq -c)
  echo "created in $(($(date +%s) - began)) s; HTTP status counts:"
  echo "$codes"
}

# pids of the proxies this script started, killed on exit
pids=()
stop_proxies() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do
    for _ in $(seq 1 100); do
      kill -0 "$p" 2>/dev/null || break
      sleep 0.1
    done
  done
  pids=()
}
cleanup() {
  stop_proxies
  rm -rf "$tmp"
}

start_proxy() {
  # $1 = binary, $2 = socket, $3 = log, rest = extra flags; prints the pid
  local bin=$1 sock=$2 log=$3
  shift 3
  "$bin" --listen "$sock" --prefix "$prefix" --upstream "unix://$engine" "$@" >"$log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 100); do
    [ -S "$sock" ] && break
    sleep 0.1
  done
  [ -S "$sock" ] || { echo "proxy $bin did not listen on $sock:" >&2; cat "$log" >&2; exit 1; }
  echo "$pid"
}

# bytes process $1 reads from the engine for one request to socket $2 at $3: every successful
# read under strace, less those on the client's descriptor (the one a read starting "GET " came on)
engine_bytes() {
  command -v strace >/dev/null || { echo "-"; return; }
  local st=$tmp/strace.$1 s
  strace -f -qq -e trace=read,recvfrom,recvmsg,readv -e signal=none -p "$1" -o "$st" &
  s=$!
  sleep 1
  curl -s -o /dev/null --unix-socket "$2" "$3"
  sleep 0.5
  kill -INT "$s"
  wait "$s" 2>/dev/null || true
  awk '{
      if (!match($0, /(read|recvfrom|recvmsg|readv)\([0-9]+/)) next
      call = substr($0, RSTART, RLENGTH); sub(/.*\(/, "", call)
      if (index($0, "(" call ", \"GET ") > 0) client[call] = 1
      if (match($0, /= [0-9]+$/)) n[call] += substr($0, RSTART + 2)
    } END { for (fd in n) if (!(fd in client)) t += n[fd]; print t + 0 }' "$st"
}
hwm_mib() { awk '/^VmHWM:/ {printf "%.1f", $2 / 1024}' "/proc/$1/status"; }

# median and p90 (nearest rank) of the numbers on stdin
stats() {
  sort -n | awk '{v[NR] = $1} END {
    m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    r = int(0.9 * NR); if (r < 0.9 * NR) r++
    printf "%.1f | %.1f", m * 1000, v[r] * 1000 }'
}

measure() {
  local before=$3 after=$4 rounds=${ROUNDS:-30}
  tmp=$(mktemp -d /tmp/bench-foreign-list.XXXXXX)
  trap cleanup EXIT
  local pb pa
  pb=$(start_proxy "$before" "$tmp/before.sock" "$tmp/before.log")
  pids+=("$pb")
  pa=$(start_proxy "$after" "$tmp/after.sock" "$tmp/after.log")
  pids+=("$pa")
  declare -A sock=([direct]="$engine" [before]="$tmp/before.sock" [after]="$tmp/after.sock")
  declare -A pid=([direct]="" [before]="$pb" [after]="$pa")
  local url="http://engine$api/containers/json?all=1" order=(direct filtered before after)
  local total own filter
  filter=$(printf '{"name":{"^/?%s":true}}' "${prefix//./\\\\.}" | jq -sRr @uri)
  declare -A urls=([direct]="$url" [filtered]="$url&filters=$filter" [before]="$url" [after]="$url")
  sock[filtered]=$engine
  pid[filtered]=""
  total=$(curl -sf --unix-socket "$engine" "$url" | grep -o '"Id":' | wc -l)
  own=$(curl -sf --unix-socket "$tmp/after.sock" "$url" | grep -o '"Id":' | wc -l)
  echo "engine: $total containers; the stack ($prefix) owns $own; $rounds rounds"
  echo "host: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) before the rounds; dockerd $(curl -sf --unix-socket "$engine" "http://engine$api/version" | jq -r .Version)"
  # one warm-up request each (connections, the name cache, page cache)
  for w in "${order[@]}"; do curl -sf -o /dev/null --unix-socket "${sock[$w]}" "${urls[$w]}"; done
  : >"$tmp/results"
  for ((i = 0; i < rounds; i++)); do
    for ((j = 0; j < 4; j++)); do
      local w=${order[$(((i + j) % 4))]} out
      out=$(curl -s -o /dev/null -w '%{http_code} %{time_total} %{size_download}' \
        --unix-socket "${sock[$w]}" "${urls[$w]}")
      echo "$w $out" >>"$tmp/results"
    done
  done
  echo
  echo "| path | requests | HTTP status | median ms | p90 ms | answer bytes | proxy peak RSS MiB (VmHWM) | bytes the proxy read from the engine (one list) |"
  echo "|---|---|---|---|---|---|---|---|"
  for w in "${order[@]}"; do
    local label=$w n codes lat bytes readb hwm="-"
    case $w in
      direct) label="dockerd directly" ;;
      filtered) label="dockerd directly, with the filter \`name=^/?$prefix\` (reference)" ;;
      before) label="sockproxy before ($before)" ;;
      after) label="sockproxy after ($after)" ;;
    esac
    n=$(awk -v w="$w" '$1 == w' "$tmp/results" | wc -l)
    codes=$(awk -v w="$w" '$1 == w {print $2}' "$tmp/results" | sort | uniq -c | awk '{printf "%s%s x%s", s, $2, $1; s = ", "}')
    lat=$(awk -v w="$w" '$1 == w {print $3}' "$tmp/results" | stats)
    bytes=$(awk -v w="$w" '$1 == w {print $4}' "$tmp/results" | sort -n | uniq | paste -sd/)
    readb="-"
    if [ -n "${pid[$w]}" ]; then
      hwm=$(hwm_mib "${pid[$w]}")
      readb=$(engine_bytes "${pid[$w]}" "${sock[$w]}" "$url")
    fi
    echo "| $label | $n | $codes | $lat | $bytes | $hwm | $readb |"
  done
  echo "load average after the rounds: $(cut -d' ' -f1-3 /proc/loadavg)"
  stop_proxies

  local small=${SMALL_LIST_BYTES:-1048576}
  echo
  echo "With --max-list-bytes $small, DOCKER_HOST=unix://PROXY docker ps -a --format '{{.Names}}':"
  echo
  for w in before after; do
    local bin p
    bin=$before
    [ "$w" = after ] && bin=$after
    rm -f "$tmp/$w.sock"
    p=$(start_proxy "$bin" "$tmp/$w.sock" "$tmp/$w-small.log" --max-list-bytes "$small")
    pids+=("$p")
    local rc=0 out
    out=$(DOCKER_HOST="unix://$tmp/$w.sock" docker ps -a --format '{{.Names}}' 2>&1) || rc=$?
    echo "- $w: exit $rc, $(printf '%s\n' "$out" | grep -c .) line(s); first: \`$(printf '%s\n' "$out" | head -n1)\`"
  done
}

case $cmd in
  populate) populate ;;
  measure)
    [ $# -eq 4 ] || usage
    measure "$@"
    ;;
  *) usage ;;
esac
