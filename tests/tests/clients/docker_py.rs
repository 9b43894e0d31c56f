//! docker-py (what many gateways are written with) against each engine, directly and through
//! sockproxy: version negotiation, run detached, list, logs, exec_run, stop, remove. `.ci/run`
//! installs it from PyPI; locally a missing module is skipped with a notice, never in CI.

use std::process::Command;

use sockproxy_tests::engine::{each_engine, Cleanup, Fakes};
use sockproxy_tests::skip::skip;
use sockproxy_tests::stack::StackProxy;
use sockproxy_tests::unique_prefix;

const SCRIPT: &str = r#"
import json, sys, time, docker
sock, name, image = sys.argv[1], sys.argv[2], sys.argv[3]
client = docker.DockerClient(base_url="unix://" + sock, version="auto", timeout=60)
out = {"api": client.version()["ApiVersion"]}
c = client.containers.run(image, ["sh", "-c", "echo from-py; sleep 600"], name=name, detach=True)
out["listed"] = sorted(x.name for x in client.containers.list(all=True))
# The container's first line comes once its shell has run, which the start's answer does not
# wait for: asked until it is there, for at most 20 s.
for _ in range(200):
    out["logs"] = c.logs().decode()
    if out["logs"]:
        break
    time.sleep(0.1)
code, output = c.exec_run(["echo", "exec-ok"])
out["exec"] = [code, output.decode()]
c.stop(timeout=1)
c.reload()
out["status"] = c.status
c.remove()
try:
    client.containers.get(name)
    out["removed"] = False
except docker.errors.NotFound:
    out["removed"] = True
print(json.dumps(out))
"#;

/// Whether docker-py can be imported; when not, `test` is skipped.
fn docker_py_available(test: &str) -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import docker"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        skip(
            test,
            "python3 -c 'import docker' fails",
            "python3 -m pip install docker, as .ci/run does",
        );
    }
    ok
}

#[test]
fn docker_py_works_directly_and_through_the_proxy() {
    if !docker_py_available("docker_py_works_directly_and_through_the_proxy") {
        return;
    }
    each_engine(
        "docker_py_works_directly_and_through_the_proxy",
        Fakes::Debian,
        |e| {
            for via_proxy in [false, true] {
                let prefix = unique_prefix();
                let mut clean = Cleanup::new(&e.socket);
                let name = clean.container(&format!("{prefix}sandbox-py"));
                let proxy = via_proxy.then(|| StackProxy::start(&e.socket, &prefix, false));
                let sock = proxy.as_ref().map_or(e.socket.clone(), |p| p.socket_buf());
                let out = Command::new("python3")
                    .args(["-c", SCRIPT])
                    .arg(&sock)
                    .arg(&name)
                    .arg(&e.image)
                    .output()
                    .expect("python3 runs");
                let label = format!("{} (through sockproxy: {via_proxy})", e.label());
                assert!(
                    out.status.success(),
                    "{label}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
                assert_eq!(v["logs"], "from-py\n", "{label}: {v}");
                assert_eq!(
                    v["exec"],
                    serde_json::json!([0, "exec-ok\n"]),
                    "{label}: {v}"
                );
                assert_eq!(v["status"], "exited", "{label}: {v}");
                assert_eq!(v["removed"], true, "{label}: {v}");
                let listed = v["listed"].as_array().cloned().unwrap_or_default();
                assert!(listed.contains(&serde_json::json!(name)), "{label}: {v}");
                if via_proxy {
                    assert_eq!(
                        listed.len(),
                        1,
                        "{label}: only the stack's own container is listed: {v}"
                    );
                }
            }
        },
    );
}
