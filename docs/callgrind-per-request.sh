#!/usr/bin/env bash
# Instructions per request of two sockproxy builds, counted by callgrind (repeatable whatever
# else the machine is doing), against the fake engine with 41 containers (1 in scope):
#   docs/callgrind-per-request.sh OLD_SOCKPROXY NEW_SOCKPROXY FAKE_DOCKERD [N]
# (KINDS="ping stop" to measure only some of ping, list, inspect and stop)
# Each cell is (instructions with N requests - instructions with none) / N, on one kept-alive
# connection. Needs valgrind and python3. Prints a Markdown table.
set -euo pipefail
old=$1; new=$2; fake=$3; n=${4:-300}
work=$(mktemp -d /tmp/cgpr.XXXXXX); trap 'rm -rf "$work"' EXIT
cat >"$work/client.py" <<'PY'
import http.client, json, socket, sys
class U(http.client.HTTPConnection):
    def __init__(s, p): super().__init__("docker"); s.p = p
    def connect(s): s.sock = socket.socket(socket.AF_UNIX); s.sock.connect(s.p)
sock, n, kind = sys.argv[1], int(sys.argv[2]), sys.argv[3]
c = U(sock)
if kind == "setup":
    for i in range(41):
        name = "deer-flow-sandbox-cg" if i == 0 else f"other-{i}"
        c.request("POST", f"/containers/create?name={name}",
                  json.dumps({"Image": "busybox", "Cmd": ["sleep", "600"]}),
                  {"Content-Type": "application/json"})
        c.getresponse().read()
    sys.exit(0)
target = {"ping": ("HEAD", "/_ping"), "list": ("GET", "/v1.41/containers/json?all=1"),
          "inspect": ("GET", "/v1.41/containers/deer-flow-sandbox-cg/json"),
          "stop": ("POST", "/v1.41/containers/deer-flow-sandbox-cg/stop")}[kind]
for _ in range(n):
    c.request(*target); r = c.getresponse(); r.read()
    # A stop of the container that never ran is 304, as on dockerd.
    assert r.status in (200, 304), r.status
PY
count() { # BIN KIND N -> total instructions
  local d; d=$(mktemp -d "$work/run.XXXX")
  "$fake" --listen "$d/e.sock" >/dev/null 2>&1 & local fp=$!
  for _ in $(seq 50); do [ -S "$d/e.sock" ] && break; sleep 0.1; done
  python3 "$work/client.py" "$d/e.sock" 0 setup
  valgrind --tool=callgrind --callgrind-out-file="$d/cg.out" "$1" --listen "$d/p.sock" \
    --prefix deer-flow- --upstream "unix://$d/e.sock" >/dev/null 2>"$d/vg.log" & local vp=$!
  for _ in $(seq 200); do [ -S "$d/p.sock" ] && break; sleep 0.1; done
  python3 "$work/client.py" "$d/p.sock" "$3" "$2"
  kill -TERM "$vp"; wait "$vp" || true; kill "$fp"; wait "$fp" 2>/dev/null || true
  awk '/^totals:/ {print $2}' "$d/cg.out"
}
echo "| request | old instructions/req | new instructions/req | new/old |"
echo "|---|---|---|---|"
for kind in ${KINDS:-ping list inspect stop}; do
  o0=$(count "$old" "$kind" 0); on=$(count "$old" "$kind" "$n")
  n0=$(count "$new" "$kind" 0); nn=$(count "$new" "$kind" "$n")
  python3 -c "o=($on-$o0)/$n; w=($nn-$n0)/$n; print(f'| $kind | {o:,.0f} | {w:,.0f} | {w/o:.3f} |')"
done
