//! The example environment files work as written (issue 51): every variable they set is one the
//! program reads, and the accounts and groups they name are the ones their own set-up lines
//! make (the sockproxy example once named a group nothing made, and the first start failed with
//! "no such group").

use std::collections::BTreeSet;

use clap::CommandFactory;

use crate::systemd::env_file;

fn read(path: &str) -> String {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    std::fs::read_to_string(repo.join(path)).expect("the example")
}

/// Every environment variable a command (and its subcommands) reads.
fn variables(cmd: &clap::Command) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = cmd
        .get_arguments()
        .filter_map(|a| a.get_env())
        .map(|e| e.to_string_lossy().into_owned())
        .collect();
    for sub in cmd.get_subcommands() {
        out.extend(variables(sub));
    }
    out
}

/// The commands in an example's comments (`#   groupadd …`).
fn steps(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .filter_map(|l| l.strip_prefix("#   "))
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect()
}

#[test]
fn the_sockproxy_example_sets_real_variables_and_makes_its_group() {
    let text = read("deploy/systemd/sockproxy.env.example");
    let known = variables(&sockproxy::config::Args::command());
    let env = env_file(&text);
    for (key, _) in &env {
        assert!(known.contains(key), "{key} is not a sockproxy variable");
    }
    let group = env
        .iter()
        .find(|(k, _)| k == "SOCKPROXY_SOCKET_GROUP")
        .map(|(_, v)| v.clone())
        .expect("the example names the socket's group");
    let steps = steps(&text);
    assert!(
        steps
            .iter()
            .any(|s| s.first().is_some_and(|c| c == "groupadd") && s.last() == Some(&group)),
        "a groupadd step makes {group}: {steps:?}"
    );
    assert!(
        steps
            .iter()
            .any(|s| s.iter().any(|w| w == &group) && s[0] == "usermod"),
        "the gateway's account joins {group}"
    );
}

#[test]
fn the_provisioner_example_sets_real_variables_and_makes_its_account() {
    let text = read("deploy/systemd/lifecycle-provisioner.env.example");
    let unit = read("deploy/systemd/lifecycle-provisioner@.service");
    let known = variables(&lifecycle::cli::Args::command());
    let env = env_file(&text);
    for (key, _) in &env {
        assert!(known.contains(key), "{key} is not a lifecycle variable");
    }
    // What the unit sets itself is not left to the example.
    for key in ["LIFECYCLE_DOCKER_HOST", "LIFECYCLE_STATE_DIR"] {
        assert!(
            unit.contains(&format!("Environment={key}=")),
            "{key} in the unit"
        );
        assert!(
            !env.iter().any(|(k, _)| k == key),
            "{key} not in the example"
        );
    }
    let user = unit
        .lines()
        .find_map(|l| l.strip_prefix("User="))
        .expect("the unit names its account");
    let steps = steps(&text);
    assert!(
        steps
            .iter()
            .any(|s| s.first().is_some_and(|c| c == "useradd")
                && s.last().is_some_and(|u| u == user)),
        "a useradd step makes {user}: {steps:?}"
    );
    let root = env
        .iter()
        .find(|(k, _)| k == "LIFECYCLE_MOUNT_ROOT")
        .map(|(_, v)| v.clone())
        .expect("a mount root");
    assert!(
        steps
            .iter()
            .any(|s| s.first().is_some_and(|c| c == "install")
                && s.last() == Some(&root)
                && s.iter().any(|w| w == user)),
        "the mount root is made, owned by {user}"
    );
}
