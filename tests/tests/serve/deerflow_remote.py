"""The calls deer-flow's remote sandbox backend makes to a provisioner, in the order it makes
them, with `requests` as it does: a test client for `lifecycle serve`'s provisioner API.

Usage: deerflow_remote.py BASE_URL KEY create SANDBOX_ID USER THREAD EXTRA_MOUNTS_JSON
       deerflow_remote.py BASE_URL KEY create-newest SANDBOX_ID USER THREAD EXTRA_MOUNTS_JSON
       deerflow_remote.py BASE_URL KEY delete SANDBOX_ID

`create-newest` is deer-flow's newest backend: it negotiates the mount contract from the
capabilities, sends it with `skills_container_path` and `max_shell_sessions`, and reads back
the identity, the contract and the shell capacity from every answer.
Prints one JSON line with what the test needs next; exits 1 naming the first broken promise.
"""

import json
import sys

import requests


def fail(why, response=None):
    extra = ""
    if response is not None:
        extra = f" (HTTP {response.status_code}: {response.text!r})"
    print(f"contract broken: {why}{extra}")
    sys.exit(1)


def expect(cond, why, response=None):
    if not cond:
        fail(why, response)


def main():
    base, key, phase = sys.argv[1], sys.argv[2], sys.argv[3]
    headers = {"X-API-Key": key} if key else {}
    sandbox_id = sys.argv[4]
    one = f"{base}/api/sandboxes/{sandbox_id}"

    if phase == "create":
        user, thread, extra = sys.argv[5], sys.argv[6], json.loads(sys.argv[7])
        r = requests.get(f"{base}/health", timeout=10)
        expect(r.status_code == 200 and r.json() == {"status": "ok"}, "GET /health", r)
        r = requests.get(f"{base}/api/capabilities", headers=headers, timeout=10)
        expect(r.status_code == 200, "GET /api/capabilities", r)
        caps = r.json()
        expect(caps.get("lark_cli_init_image") is False, "capabilities: lark_cli_init_image", r)
        expect(caps.get("lark_cli_broker_image") is False, "capabilities: lark_cli_broker_image", r)
        payload = {
            "sandbox_id": sandbox_id,
            "thread_id": thread,
            "user_id": user,
            "include_legacy_skills": True,
            "provision_lark_cli_runtime": False,
            "provision_lark_cli_broker": False,
            "extra_mounts": extra,
        }
        # create (idempotent: the backend may post again for the same ID)
        r = requests.post(f"{base}/api/sandboxes", json=payload, headers=headers, timeout=120)
        expect(r.status_code == 200, "POST /api/sandboxes", r)
        made = r.json()
        expect(made.get("sandbox_id") == sandbox_id, "create: sandbox_id", r)
        expect(made.get("status") == "Running", "create: status Running", r)
        url = made.get("sandbox_url")
        expect(isinstance(url, str) and url.startswith("http://"), "create: sandbox_url", r)
        r = requests.post(f"{base}/api/sandboxes", json=payload, headers=headers, timeout=120)
        expect(r.status_code == 200 and r.json().get("sandbox_url") == url, "create again: same URL", r)
        # discover
        r = requests.get(one, headers=headers, timeout=10)
        expect(r.status_code == 200 and r.json().get("sandbox_url") == url, "discover", r)
        # is_alive
        expect(r.json().get("status") == "Running", "is_alive: status Running", r)
        # list_running (orphan reconciliation)
        r = requests.get(f"{base}/api/sandboxes", headers=headers, timeout=10)
        expect(r.status_code == 200, "GET /api/sandboxes", r)
        listed = r.json()
        ids = [s.get("sandbox_id") for s in listed.get("sandboxes", [])]
        expect(sandbox_id in ids, "list holds the sandbox", r)
        expect(listed.get("count") == len(ids), "list: count", r)
        print(json.dumps({"sandbox_url": url}))
    elif phase == "create-newest":
        user, thread, extra = sys.argv[5], sys.argv[6], json.loads(sys.argv[7])
        r = requests.get(f"{base}/api/capabilities", headers=headers, timeout=5)
        expect(r.status_code == 200, "GET /api/capabilities", r)
        version = r.json().get("mount_contract_version", 0)
        expect(isinstance(version, int) and version >= 2, "capabilities: mount_contract_version", r)
        payload = {
            "sandbox_id": sandbox_id,
            "thread_id": thread,
            "user_id": user,
            "required_mount_contract_version": version,
            "include_legacy_skills": False,
            "skills_container_path": "/custom-skills",
            "max_shell_sessions": 13,
            "provision_lark_cli_runtime": False,
            "provision_lark_cli_broker": False,
            "extra_mounts": extra,
        }
        r = requests.post(f"{base}/api/sandboxes", json=payload, headers=headers, timeout=30)
        expect(r.status_code == 200, "POST /api/sandboxes", r)
        made = r.json()
        got = (made.get("sandbox_id"), made.get("user_id"), made.get("thread_id"), made.get("mount_contract_version"))
        expect(got == (sandbox_id, user, thread, version), "create: identity and contract read back", r)
        expect(made.get("max_shell_sessions") == 13, "create: shell capacity read back", r)
        url = made.get("sandbox_url")
        # A stale contract is refused before anything, in deer-flow's shape.
        stale = dict(payload, required_mount_contract_version=version - 1)
        r = requests.post(f"{base}/api/sandboxes", json=stale, headers=headers, timeout=30)
        detail = r.json().get("detail") if r.status_code == 409 else None
        expect(isinstance(detail, dict) and detail.get("code") == "mount_contract_changed"
               and detail.get("actual") == version, "stale contract: 409 mount_contract_changed", r)
        # discover: the contract and the identity, as the newest backend checks them
        r = requests.get(one, headers=headers, timeout=10)
        expect(r.status_code == 200, "discover", r)
        found = r.json()
        expect(found.get("mount_contract_version") == version and found.get("user_id") == user
               and found.get("thread_id") == thread and found.get("sandbox_url") == url, "discover: contract and identity", r)
        expect(found.get("max_shell_sessions") == 13, "discover: shell capacity", r)
        r = requests.get(f"{base}/api/sandboxes", headers=headers, timeout=10)
        mine = [s for s in r.json().get("sandboxes", []) if s.get("sandbox_id") == sandbox_id]
        expect(len(mine) == 1 and mine[0].get("max_shell_sessions") == 13, "list: shell capacity", r)
        print(json.dumps({"sandbox_url": url}))
    elif phase == "delete":
        r = requests.delete(one, headers=headers, timeout=60)
        expect(r.status_code == 200 and r.json() == {"ok": True, "sandbox_id": sandbox_id}, "DELETE", r)
        r = requests.get(one, headers=headers, timeout=10)
        expect(r.status_code == 404, "discover after destroy: 404", r)
        expect(r.json() == {"detail": f"Sandbox '{sandbox_id}' not found"}, "404 detail", r)
        r = requests.get(f"{base}/api/sandboxes", headers=headers, timeout=10)
        ids = [s.get("sandbox_id") for s in r.json().get("sandboxes", [])]
        expect(sandbox_id not in ids, "list no longer holds it", r)
        r = requests.delete(one, headers=headers, timeout=60)
        expect(r.status_code == 200 and r.json().get("ok") is True, "DELETE of a gone sandbox is ok", r)
        print(json.dumps({"deleted": sandbox_id}))
    else:
        fail(f"unknown phase {phase}")


if __name__ == "__main__":
    main()
