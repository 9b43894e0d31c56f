//! lifecycle against the real dockerd through sockproxy (CI; locally when an engine answers):
//! the incident end to end, and restricted mode creating and destroying network, sidecar and
//! sandbox.

use std::path::Path;
use std::process::Output;

use lifecycle::naming::sandbox_id;
use sockproxy_tests::bounded::{OutputWithin, LONG};
use sockproxy_tests::engine::{ensure_netproxy_image, real_engine, Cleanup};
use sockproxy_tests::lc::{lifecycle_base, lifecycle_command, names as names_of};
use sockproxy_tests::raw;
use sockproxy_tests::stack::StackProxy;
use sockproxy_tests::step::step;
use sockproxy_tests::unique_prefix;

/// busybox's httpd answers every request (404 for /), which is all readiness needs.
const SANDBOX_CMD: &str = "httpd -f -p 8080 -h /tmp";

fn lifecycle(sock: &Path, prefix: &str, mode: &str, state: &Path, args: &[&str]) -> Output {
    lifecycle_command(sock, prefix, mode, state)
        .args([
            "--sandbox-cmd",
            SANDBOX_CMD,
            "--ready-timeout",
            "30",
            "--stop-timeout",
            "1",
        ])
        .args(args)
        .output_within(LONG)
        .expect("lifecycle runs")
}

/// `lifecycle` with the real netproxy image as the sidecar (its default command: the
/// relay lifecycle's URL and readiness wait go through).
fn lifecycle_netproxy(
    sock: &Path,
    prefix: &str,
    sidecar: &str,
    state: &Path,
    args: &[&str],
) -> Output {
    lifecycle_base(sock, prefix, "restricted", state)
        .args(["--sidecar-image", sidecar, "--sandbox-cmd", SANDBOX_CMD])
        .args(["--ready-timeout", "30", "--stop-timeout", "1"])
        .args(args)
        .output_within(LONG)
        .expect("lifecycle runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_default()
}

fn records(sock: &Path, prefix: &str, state: &Path) -> usize {
    let out = lifecycle(sock, prefix, "open", state, &["quarantine", "ls"]);
    String::from_utf8_lossy(&out.stdout).lines().count()
}

#[test]
fn the_incident_end_to_end_on_the_real_engine() {
    let Some(e) = real_engine("the_incident_end_to_end_on_the_real_engine") else {
        return;
    };
    let prefix = unique_prefix();
    let id = sandbox_id("user-1", "thread-9a38e323").expect("valid");
    let names = names_of(&prefix, &id);
    let mut clean = Cleanup::new(&e.socket);
    clean.container(&names.sandbox);
    let proxy = StackProxy::start(&e.socket, &prefix, false);
    let state = tempfile::tempdir().expect("dir");
    let (sock, st) = (proxy.socket_buf(), state.path());
    let create = ["create", "--user", "user-1", "--thread", "thread-9a38e323"];

    let made = lifecycle(&sock, &prefix, "open", st, &create);
    assert!(made.status.success(), "{}", stderr(&made));
    let url = json(&made)["url"].as_str().unwrap_or_default().to_owned();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let mark = lifecycle(&sock, &prefix, "open", st, &["quarantine", "mark", &id]);
    assert!(mark.status.success(), "{}", stderr(&mark));
    let gone = raw::request(
        &e.socket,
        "DELETE",
        &format!("/containers/{}?force=1", names.sandbox),
        None,
    )
    .expect("rm");
    assert_eq!(gone.status, 204, "removed out of band");

    // Open mode: the next create in that thread retires the record, with no refusal.
    let denied_before = proxy.decisions().1;
    let again = lifecycle(&sock, &prefix, "open", st, &create);
    assert!(again.status.success(), "{}", stderr(&again));
    assert_eq!(
        proxy.decisions().1,
        denied_before,
        "the proxy refused nothing during that call"
    );
    assert_eq!(records(&sock, &prefix, st), 0, "the record is gone");
    assert!(stderr(&again).contains(&format!(
        "Retiring open-mode sandbox {id} without restricted cleanup: no network proxy {} is listed.",
        names.sidecar
    )));

    // Restricted mode, same situation: strict, refused, the record is kept.
    let mark = lifecycle(&sock, &prefix, "open", st, &["quarantine", "mark", &id]);
    assert!(mark.status.success());
    let gone = raw::request(
        &e.socket,
        "DELETE",
        &format!("/containers/{}?force=1", names.sandbox),
        None,
    )
    .expect("rm");
    assert_eq!(gone.status, 204);
    let strict = lifecycle(&sock, &prefix, "restricted", st, &create);
    assert_eq!(strict.status.code(), Some(3), "{}", stderr(&strict));
    // No sidecar exists (its inspect answers 404), so the first step the proxy refuses is
    // the removal of the sandbox's network.
    let refusal = "sockproxy: networks.remove: not allowed for this stack";
    assert!(stderr(&strict).contains(refusal), "{}", stderr(&strict));
    assert_eq!(records(&sock, &prefix, st), 1, "the record is kept");
}

#[test]
fn restricted_mode_creates_and_destroys_network_sidecar_and_sandbox() {
    let Some(e) = real_engine("restricted_mode_creates_and_destroys_network_sidecar_and_sandbox")
    else {
        return;
    };
    let prefix = unique_prefix();
    let id = sandbox_id("user-2", "thread-r").expect("valid");
    let names = names_of(&prefix, &id);
    let mut clean = Cleanup::new(&e.socket);
    clean.container(&names.sandbox);
    clean.container(&names.sidecar);
    clean.network(&names.network);
    clean.network(&names.egress);
    let sidecar = ensure_netproxy_image(&e.socket);
    let proxy = StackProxy::start(&e.socket, &prefix, true);
    let state = tempfile::tempdir().expect("dir");
    let (sock, st) = (proxy.socket_buf(), state.path());

    let c = step("lifecycle creates a restricted sandbox", || {
        let made = lifecycle_netproxy(
            &sock,
            &prefix,
            &sidecar,
            st,
            &["create", "--user", "user-2", "--thread", "thread-r"],
        );
        assert!(made.status.success(), "{}", stderr(&made));
        let c = json(&made);
        assert_eq!(c["mode"], "restricted");
        c
    });
    let inspect = |path: &str| raw::get(&e.socket, path).expect("answer");
    step(
        "the sandbox is on its internal network only, with the sidecar as its proxy",
        || {
            let net = inspect(&format!("/networks/{}", names.network));
            assert_eq!(net.status, 200);
            assert_eq!(net.json()["Internal"], true);
            let sandbox = inspect(&format!("/containers/{}/json", names.sandbox)).json();
            assert_eq!(
                sandbox["Config"]["Labels"]["deerflow.network_mode"], "allowlist",
                "restricted is written as deer-flow's allowlist"
            );
            let egress = inspect(&format!("/networks/{}", names.egress));
            assert_eq!(egress.status, 200, "the sandbox's own egress network");
            assert_eq!(egress.json()["Labels"]["deerflow.sandbox_id"], id.as_str());
            let sandbox_nets: Vec<String> = sandbox["NetworkSettings"]["Networks"]
                .as_object()
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default();
            assert_eq!(
                sandbox_nets,
                vec![names.network.clone()],
                "the sandbox is on its internal network only"
            );
            // Its URL is the sidecar's relay, published on loopback (issue 49).
            let sidecar = inspect(&format!("/containers/{}/json", names.sidecar)).json();
            let port = sidecar["NetworkSettings"]["Ports"]["8080/tcp"][0]["HostPort"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            assert_eq!(c["url"], format!("http://127.0.0.1:{port}").as_str());
            let env = sandbox["Config"]["Env"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            assert!(
                env.contains(&serde_json::json!(format!(
                    "HTTP_PROXY=http://{}:3128",
                    names.sidecar
                ))),
                "{env:?}"
            );
        },
    );
    step(
        "the sidecar runs on the internal and the egress network",
        || {
            let sidecar = inspect(&format!("/containers/{}/json", names.sidecar)).json();
            assert_eq!(sidecar["State"]["Running"], true);
            let mut sidecar_nets: Vec<String> = sidecar["NetworkSettings"]["Networks"]
                .as_object()
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default();
            sidecar_nets.sort();
            let mut want = vec![names.network.clone(), names.egress.clone()];
            want.sort();
            assert_eq!(sidecar_nets, want);
        },
    );

    step("destroy removes sandbox, sidecar and both networks", || {
        let destroyed = lifecycle_netproxy(&sock, &prefix, &sidecar, st, &["destroy", &id]);
        assert!(destroyed.status.success(), "{}", stderr(&destroyed));
        assert_eq!(
            inspect(&format!("/containers/{}/json", names.sandbox)).status,
            404
        );
        assert_eq!(
            inspect(&format!("/containers/{}/json", names.sidecar)).status,
            404
        );
        assert_eq!(inspect(&format!("/networks/{}", names.network)).status, 404);
        assert_eq!(
            inspect(&format!("/networks/{}", names.egress)).status,
            404,
            "the sandbox's own egress network goes with it"
        );
        assert_eq!(proxy.decisions().1, 0, "nothing was refused");
    });
}

/// A network someone made under the sandbox's internal network name without `--internal` (any
/// client the proxy lets create `{P}sandbox-net-*`) must not be used: a sandbox on it would
/// have a default route around its proxy. The create fails closed, makes no sandbox, and
/// leaves that network as it found it.
#[test]
fn restricted_create_refuses_a_non_internal_network_under_the_sandbox_net_name() {
    let Some(e) =
        real_engine("restricted_create_refuses_a_non_internal_network_under_the_sandbox_net_name")
    else {
        return;
    };
    let prefix = unique_prefix();
    let id = sandbox_id("user-3", "thread-r1").expect("valid");
    let names = names_of(&prefix, &id);
    let mut clean = Cleanup::new(&e.socket);
    clean.container(&names.sandbox);
    clean.container(&names.sidecar);
    clean.network(&names.network);
    clean.network(&names.egress);
    let body = serde_json::json!({ "Name": names.network, "Driver": "bridge" });
    let made = raw::request(
        &e.socket,
        "POST",
        "/networks/create",
        Some(body.to_string().as_bytes()),
    )
    .expect("answer");
    assert_eq!(made.status, 201, "{}", made.text());
    let proxy = StackProxy::start(&e.socket, &prefix, true);
    let state = tempfile::tempdir().expect("dir");
    let (sock, st) = (proxy.socket_buf(), state.path());

    let out = lifecycle(
        &sock,
        &prefix,
        "restricted",
        st,
        &["create", "--user", "user-3", "--thread", "thread-r1"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("network {} already exists", names.network))
            && err.contains("not internal"),
        "{err}"
    );
    let inspect = |path: &str| raw::get(&e.socket, path).expect("answer");
    assert_eq!(
        inspect(&format!("/containers/{}/json", names.sandbox)).status,
        404,
        "no sandbox container"
    );
    assert_eq!(
        inspect(&format!("/containers/{}/json", names.sidecar)).status,
        404,
        "no sidecar"
    );
    assert_eq!(
        inspect(&format!("/networks/{}", names.egress)).status,
        404,
        "nothing of this create is left"
    );
    let net = inspect(&format!("/networks/{}", names.network));
    assert_eq!(
        net.status, 200,
        "the network it did not make is left as found"
    );
    assert_eq!(net.json()["Internal"], false);
    assert_eq!(
        records(&sock, &prefix, st),
        0,
        "nothing was left to quarantine"
    );
}
