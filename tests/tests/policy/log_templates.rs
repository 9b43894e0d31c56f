//! What the engine expands at every log line (issue 50, finding 1), checked on what the engine
//! holds afterwards: a log `tag` (a Go template dockerd runs for every line), `labels`, `env`
//! and their regex forms are refused unless the operator allows them; an allowed `tag` is a
//! fixed set of placeholders adding at most 256 bytes a line (no definitions, functions or the
//! host's name); a container name is at most 128 bytes. On the real engine, an allowed tag is
//! what each line of the container's log carries.

use serde_json::{json, Value};
use sockproxy_tests::engine::{each_engine, Cleanup, Engine, Fakes};
use sockproxy_tests::raw;
use sockproxy_tests::stack::StackProxy;
use sockproxy_tests::step::step;
use sockproxy_tests::unique_prefix;

use crate::bypasses::{inspect, refused, send};

fn logged(e: &Engine, config: Value) -> Value {
    json!({
        "Image": e.image, "Cmd": ["echo", "a line"],
        "HostConfig": { "LogConfig": { "Type": "json-file", "Config": config } },
    })
}

#[test]
fn log_options_the_engine_expands_need_the_operators_word() {
    each_engine(
        "log_options_the_engine_expands_need_the_operators_word",
        Fakes::Debian,
        |e| {
            let prefix = unique_prefix();
            let mut clean = Cleanup::new(&e.socket);
            let p = StackProxy::start(&e.socket, &prefix, false);
            let held = |name: &str| inspect(&e, "containers", &format!("{name}/json"));
            step("by default: refused, and no container is made", || {
                let rows = [
                    ("tag", "{{.Name}}"),
                    ("tag", "{{.Hostname}}"),
                    ("labels", "a"),
                    ("labels-regex", ".*"),
                    ("env", "PATH"),
                    ("env-regex", ".*"),
                ];
                for (i, (key, value)) in rows.into_iter().enumerate() {
                    let name = clean.container(&format!("{prefix}sandbox-log{i}"));
                    let r = send(
                        p.socket(),
                        "POST",
                        &format!("/containers/create?name={name}"),
                        &logged(&e, json!({ key: value })),
                    );
                    refused(
                        &r,
                        403,
                        &format!("HostConfig.LogConfig.Config {key} is not allowed for this stack (not an option json-file may be given here; --allow-log-opt json-file:{key})"),
                    );
                    assert_eq!(held(&name).status, 404, "{name} not made");
                }
            });
            step(
                "a name over 128 bytes: refused, and no container is made",
                || {
                    let name = format!("{prefix}sandbox-{}", "n".repeat(200));
                    let r = send(
                        p.socket(),
                        "POST",
                        &format!("/containers/create?name={name}"),
                        &logged(&e, json!({})),
                    );
                    refused(&r, 403, "bytes is not allowed for this stack (at most 128)");
                    assert_eq!(held(&name).status, 404, "not made");
                },
            );
        },
    );
}

#[test]
fn an_allowed_tag_is_bounded_and_is_what_each_line_carries() {
    each_engine(
        "an_allowed_tag_is_bounded_and_is_what_each_line_carries",
        Fakes::Debian,
        |e| {
            let prefix = unique_prefix();
            let mut clean = Cleanup::new(&e.socket);
            let p = StackProxy::start_with(&e.socket, &prefix, false, |c| {
                c.create_rules.spend.allow_log_opts = vec!["json-file:tag".into()];
            });
            let held = |name: &str| inspect(&e, "containers", &format!("{name}/json"));
            step(
                "templates beyond the placeholders: refused, nothing made",
                || {
                    let rows = [
                        (
                            "{{.Hostname}}",
                            "{{.Hostname}} is not a placeholder a tag may hold",
                        ),
                        (
                            "{{define \"a\"}}{{.ID}}{{.ID}}{{end}}{{template \"a\"}}",
                            "{{define \"a\"}} is not a placeholder a tag may hold",
                        ),
                        (
                            "{{printf \"%9999d\" 1}}",
                            "is not a placeholder a tag may hold",
                        ),
                        (
                            "{{.LogPath}}",
                            "{{.LogPath}} is not a placeholder a tag may hold",
                        ),
                        (
                            "{{.FullID}}{{.FullID}}{{.FullID}}{{.FullID}}{{.ID}}",
                            "it may add up to 268 bytes to each log line; at most 256",
                        ),
                    ];
                    for (i, (tag, needle)) in rows.into_iter().enumerate() {
                        let name = clean.container(&format!("{prefix}sandbox-tag{i}"));
                        let r = send(
                            p.socket(),
                            "POST",
                            &format!("/containers/create?name={name}"),
                            &logged(&e, json!({ "tag": tag })),
                        );
                        refused(&r, 403, needle);
                        assert_eq!(held(&name).status, 404, "{name} not made");
                    }
                    let name = clean.container(&format!("{prefix}sandbox-tagbig"));
                    let r = send(
                        p.socket(),
                        "POST",
                        &format!("/containers/create?name={name}"),
                        &logged(&e, json!({ "tag": "x".repeat(10_000) })),
                    );
                    refused(&r, 403, "(10000 bytes) is not allowed for this stack");
                    assert!(r.message().len() < 400, "the value is cut: {}", r.message());
                    assert_eq!(held(&name).status, 404, "not made");
                },
            );
            step("within the bound: made with the tag it asked for", || {
                let name = clean.container(&format!("{prefix}sandbox-tagged"));
                let r = send(
                    p.socket(),
                    "POST",
                    &format!("/containers/create?name={name}"),
                    &logged(&e, json!({ "tag": "{{.Name}}/{{ .ID }}" })),
                );
                assert_eq!(r.status, 201, "{}", r.text());
                let c = held(&name).json();
                assert_eq!(
                    c["HostConfig"]["LogConfig"]["Config"]["tag"],
                    "{{.Name}}/{{ .ID }}"
                );
                if e.is_fake() {
                    return;
                }
                // The engine expands it at every line: the line carries the name and short ID.
                let id = c["Id"].as_str().expect("id").to_owned();
                let r = raw::request(
                    p.socket(),
                    "POST",
                    &format!("/containers/{name}/start"),
                    None,
                )
                .expect("start");
                assert_eq!(r.status, 204, "{}", r.text());
                let r = raw::request(
                    p.socket(),
                    "POST",
                    &format!("/containers/{name}/wait"),
                    None,
                )
                .expect("wait");
                assert_eq!(r.status, 200, "{}", r.text());
                let path = held(&name).json()["LogPath"]
                    .as_str()
                    .expect("log path")
                    .to_owned();
                let text = std::fs::read_to_string(&path).expect("the container's log file");
                let line: Value =
                    serde_json::from_str(text.lines().next().expect("a line")).expect("json line");
                assert_eq!(line["log"], "a line\n");
                assert_eq!(line["attrs"]["tag"], format!("{name}/{}", &id[..12]));
            });
        },
    );
}

/// `docker run --log-opt` without `--log-driver` (issue 51): every docker CLI prints the
/// refusal that says how to name the driver, and no container is made.
#[test]
fn log_options_without_a_driver_say_how_to_name_it() {
    each_engine(
        "log_options_without_a_driver_say_how_to_name_it",
        Fakes::Debian,
        |e| {
            let prefix = unique_prefix();
            let mut clean = Cleanup::new(&e.socket);
            let p = StackProxy::start(&e.socket, &prefix, false);
            for (i, cli) in sockproxy_tests::cli::clis().into_iter().enumerate() {
                let name = clean.container(&format!("{prefix}sandbox-opt{i}"));
                let out = sockproxy_tests::cli::docker_with(
                    &cli,
                    p.socket(),
                    &[
                        "create",
                        "--name",
                        &name,
                        "--log-opt",
                        "max-size=1m",
                        &e.image,
                        "true",
                    ],
                    None,
                    std::time::Duration::from_secs(120),
                );
                assert!(!out.ok(), "{}: refused", cli.display());
                assert!(
                    out.stderr.contains("Error response from daemon: sockproxy: containers.create: HostConfig.LogConfig.Config is not allowed for this stack without HostConfig.LogConfig.Type: name the driver the options are for (docker run --log-driver json-file --log-opt …)"),
                    "{}: {}",
                    cli.display(),
                    out.stderr
                );
                assert_eq!(
                    inspect(&e, "containers", &format!("{name}/json")).status,
                    404,
                    "not made"
                );
            }
        },
    );
}
