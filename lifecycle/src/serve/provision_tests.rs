//! Table tests of the provisioner API's pure rules (`provision`).

use super::*;

fn body(v: serde_json::Value) -> CreateBody {
    serde_json::from_value(v).expect("a create body")
}

fn root() -> PathBuf {
    PathBuf::from("/srv/df")
}

#[test]
fn deer_flows_body_plans_its_mounts() {
    let b = body(serde_json::json!({
        "sandbox_id": "7d9ac0ff9b98cd06", "thread_id": "thread-1", "user_id": "user-1",
        "extra_mounts": [{"host_path": "/srv/df/users/user-1/threads/thread-1/acp-workspace",
                          "container_path": "/mnt/acp-workspace", "read_only": false}],
        "include_legacy_skills": true, "provision_lark_cli_runtime": false,
        "required_mount_contract_version": 2, "some_future_field": {"x": 1}
    }));
    let p = plan(&b, &root()).expect("valid");
    // The derived ID: the sandbox carries its (user, thread)'s scope label.
    assert_eq!(p.scope, crate::naming::scope_digest("user-1", "thread-1"));
    let specs: Vec<String> = p.binds.iter().map(Bind::spec).collect();
    assert_eq!(
        specs,
        vec![
            "/srv/df/skills_view/public:/mnt/skills/public:ro",
            "/srv/df/users/user-1/skills_view/custom:/mnt/skills/custom:ro",
            "/srv/df/users/user-1/skills_view/legacy:/mnt/skills/legacy:ro",
            "/srv/df/users/user-1/threads/thread-1/user-data:/mnt/user-data",
            "/srv/df/users/user-1/threads/thread-1/acp-workspace:/mnt/acp-workspace",
        ]
    );
    assert_eq!(p.make_dirs.len(), 5);
}

#[test]
fn defaults_and_an_underived_id() {
    let p = plan(
        &body(serde_json::json!({"sandbox_id": "my-box_1"})),
        &root(),
    )
    .expect("ok");
    assert_eq!(
        (p.user_id.as_str(), p.thread_id.as_str()),
        ("default", "my-box_1")
    );
    assert_eq!(
        p.scope,
        crate::naming::user_scope("default"),
        "not derived: the user's"
    );
    // An extra mount at a standard place replaces it.
    let p = plan(
        &body(serde_json::json!({"sandbox_id": "b", "extra_mounts": [
            {"host_path": "/srv/df/x", "container_path": "/mnt/skills/custom", "read_only": true}]})),
        &root(),
    )
    .expect("ok");
    let custom: Vec<&Bind> = p
        .binds
        .iter()
        .filter(|b| b.container == "/mnt/skills/custom")
        .collect();
    assert_eq!(custom.len(), 1);
    assert_eq!(custom[0].host, PathBuf::from("/srv/df/x"));
}

#[test]
fn refusals_table() {
    let mount = |host: &str, container: &str| serde_json::json!({"host_path": host, "container_path": container});
    let eleven: Vec<_> = EXTRA_MOUNT_PATHS
        .iter()
        .cycle()
        .take(11)
        .enumerate()
        .map(|(i, _)| mount(&format!("/srv/df/{i}"), "/mnt/acp-workspace"))
        .collect();
    let cases = [
        (serde_json::json!({"sandbox_id": ""}), "sandbox_id \"\""),
        (
            serde_json::json!({"sandbox_id": "Upper"}),
            "sandbox_id \"Upper\"",
        ),
        (serde_json::json!({"sandbox_id": "a/b"}), "sandbox_id"),
        (
            serde_json::json!({"sandbox_id": "a".repeat(65)}),
            "sandbox_id",
        ),
        (
            serde_json::json!({"sandbox_id": "s", "thread_id": "a:b"}),
            "thread ID may contain only",
        ),
        (
            serde_json::json!({"sandbox_id": "s", "thread_id": "t".repeat(65)}),
            "thread ID must be at most 64",
        ),
        (
            serde_json::json!({"sandbox_id": "s", "user_id": "../x"}),
            "user ID may contain only",
        ),
        (
            serde_json::json!({"sandbox_id": "s", "user_id": ""}),
            "user ID must not be empty",
        ),
        (
            serde_json::json!({"sandbox_id": "s", "extra_mounts": eleven}),
            "11 given; at most 10",
        ),
        (
            serde_json::json!({"sandbox_id": "s", "extra_mounts": [mount("/srv/df/a", "/etc")]}),
            "container_path \"/etc\"",
        ),
        (
            serde_json::json!({"sandbox_id": "s", "extra_mounts": [mount("/srv/df/a", "/mnt/acp-workspace/")]}),
            "is not one the provisioner mounts",
        ),
        (
            serde_json::json!({"sandbox_id": "s", "extra_mounts": [mount("/srv/df/a", "/mnt/acp-workspace"), mount("/srv/df/b", "/mnt/acp-workspace")]}),
            "given twice",
        ),
        (
            serde_json::json!({"sandbox_id": "s", "extra_mounts": [mount("srv/df/a", "/mnt/acp-workspace")]}),
            "absolute, clean",
        ),
        (
            serde_json::json!({"sandbox_id": "s", "extra_mounts": [mount("/srv/df/../etc", "/mnt/acp-workspace")]}),
            "absolute, clean",
        ),
        (
            serde_json::json!({"sandbox_id": "s", "extra_mounts": [mount("/srv/df/./a", "/mnt/acp-workspace")]}),
            "absolute, clean",
        ),
        (
            serde_json::json!({"sandbox_id": "s", "extra_mounts": [mount("/srv//df/a", "/mnt/acp-workspace")]}),
            "absolute, clean",
        ),
        (
            serde_json::json!({"sandbox_id": "s", "extra_mounts": [mount("/srv/df/a/", "/mnt/acp-workspace")]}),
            "absolute, clean",
        ),
        (
            serde_json::json!({"sandbox_id": "s", "extra_mounts": [mount("/srv/dfX/a", "/mnt/acp-workspace")]}),
            "not under the mount root",
        ),
        (
            serde_json::json!({"sandbox_id": "s", "extra_mounts": [mount("/etc", "/mnt/acp-workspace")]}),
            "not under the mount root",
        ),
    ];
    for (b, want) in cases {
        let got = plan(&body(b.clone()), &root())
            .expect_err("refused")
            .to_string();
        assert!(got.contains(want), "{b}: {got}");
    }
}

/// Ten extra mounts pass the count (the limit is "at most 10"): a body of ten is refused
/// only for what else is wrong with it, here a repeated container path.
#[test]
fn ten_extra_mounts_pass_the_count() {
    let mounts = |n: usize| -> Vec<serde_json::Value> {
        (0..n)
            .map(|i| serde_json::json!({"host_path": format!("/srv/df/{i}"), "container_path": "/mnt/acp-workspace"}))
            .collect()
    };
    let err = |n: usize| {
        plan(
            &body(serde_json::json!({"sandbox_id": "s", "extra_mounts": mounts(n)})),
            &root(),
        )
        .expect_err("refused")
        .to_string()
    };
    assert!(err(10).contains("given twice"), "{}", err(10));
    assert!(err(11).contains("11 given; at most 10"), "{}", err(11));
    // Every allowed path once: seven binds of its own, one replacing a standard one (the upload
    // conversions come from the thread's own data, read-only).
    let all: Vec<serde_json::Value> = EXTRA_MOUNT_PATHS
        .iter()
        .enumerate()
        .map(|(i, c)| match *c {
            "/mnt/user-data/.upload-conversions" => serde_json::json!({
                "host_path": "/srv/df/users/default/threads/s/user-data/.upload-conversions",
                "container_path": c, "read_only": true}),
            _ => serde_json::json!({"host_path": format!("/srv/df/{i}"), "container_path": c}),
        })
        .collect();
    let p = plan(
        &body(serde_json::json!({"sandbox_id": "s", "extra_mounts": all})),
        &root(),
    )
    .expect("valid");
    assert_eq!(p.binds.len(), 4 - 1 + 8);
}

#[test]
fn phases_table() {
    for (state, want) in [
        ("running", "Running"),
        ("created", "Pending"),
        ("restarting", "Pending"),
        ("exited", "Failed"),
        ("dead", "Failed"),
        ("paused", "Unknown"),
        ("removing", "Unknown"),
        ("", "Unknown"),
    ] {
        assert_eq!(phase(state), want, "{state}");
    }
}

/// deer-flow's newest fields: each honoured, or refused before anything when it cannot be.
#[test]
fn the_newest_fields_are_honoured_or_refused() {
    let p = plan(
        &body(serde_json::json!({
            "sandbox_id": "s", "user_id": "alice", "thread_id": "t1",
            "skills_container_path": "/custom-skills", "max_shell_sessions": 13,
            "required_mount_contract_version": 2, "provision_lark_cli_runtime": true,
            "extra_mounts": [
                {"host_path": "/srv/df/x", "container_path": "/mnt/skills/integrations", "read_only": true},
                {"host_path": "/srv/df/users/alice/threads/t1/user-data/.upload-conversions",
                 "container_path": "/mnt/user-data/.upload-conversions", "read_only": true}]
        })),
        &root(),
    )
    .expect("valid");
    assert_eq!(
        p.bind_specs(),
        vec![
            "/srv/df/skills_view/public:/custom-skills/public:ro",
            "/srv/df/users/alice/skills_view/custom:/custom-skills/custom:ro",
            "/srv/df/users/alice/skills_view/legacy:/custom-skills/legacy:ro",
            "/srv/df/users/alice/threads/t1/user-data/.upload-conversions:/mnt/user-data/.upload-conversions:ro",
            "/srv/df/users/alice/threads/t1/user-data:/mnt/user-data",
            "/srv/df/x:/custom-skills/integrations:ro",
        ]
    );
    assert_eq!(p.env(), vec!["MAX_SHELL_SESSIONS=13"]);
    let labels = p.labels();
    for (k, v) in [
        ("lifecycle.user_id", "alice"),
        ("lifecycle.thread_id", "t1"),
        ("lifecycle.mount_contract", "2"),
        ("lifecycle.max_shell_sessions", "13"),
    ] {
        assert!(
            labels.contains(&(k.to_owned(), v.to_owned())),
            "{k}: {labels:?}"
        );
    }
    assert!(labels.contains(&("lifecycle.mounts".to_owned(), p.mounts_digest())));
    // The same binds in another order are the same mounts; another skills root is not.
    let default_root = plan(
        &body(serde_json::json!({"sandbox_id": "s", "user_id": "alice", "thread_id": "t1"})),
        &root(),
    )
    .expect("valid");
    assert_ne!(default_root.mounts_digest(), p.mounts_digest());
    assert!(
        default_root.env().is_empty(),
        "no MAX_SHELL_SESSIONS unless asked"
    );
    // The mount contract's own derivation (`sha256("mount-v2:{user}:{thread}")`) scopes the
    // sandbox to its (user, thread), as the classic one does.
    let v2 = &crate::naming::scope_digest("mount-v2", "alice:t1")[..16];
    let p = plan(
        &body(serde_json::json!({"sandbox_id": v2, "user_id": "alice", "thread_id": "t1"})),
        &root(),
    )
    .expect("valid");
    assert_eq!(p.scope, crate::naming::scope_digest("alice", "t1"));
}

#[test]
fn newest_fields_refusals_table() {
    let m = |host: &str, container: &str, ro: bool| serde_json::json!({"host_path": host, "container_path": container, "read_only": ro});
    let conv = "/mnt/user-data/.upload-conversions";
    let mine = "/srv/df/users/default/threads/s/user-data/.upload-conversions";
    let cases = [
        (
            serde_json::json!({"required_mount_contract_version": 0}),
            InputError::ContractChanged(0),
        ),
        (
            serde_json::json!({"required_mount_contract_version": 3}),
            InputError::ContractChanged(3),
        ),
        (
            serde_json::json!({"required_mount_contract_version": -1}),
            InputError::ContractChanged(-1),
        ),
        (
            serde_json::json!({"max_shell_sessions": 0}),
            InputError::ShellSessions(0),
        ),
        (
            serde_json::json!({"max_shell_sessions": -4}),
            InputError::ShellSessions(-4),
        ),
        (
            serde_json::json!({"max_shell_sessions": 1025}),
            InputError::ShellSessions(1025),
        ),
        (
            serde_json::json!({"provision_lark_cli_broker": true}),
            InputError::Broker,
        ),
        (
            serde_json::json!({"skills_container_path": "skills"}),
            InputError::SkillsPath("skills".into()),
        ),
        (
            serde_json::json!({"skills_container_path": "/"}),
            InputError::SkillsPath("/".into()),
        ),
        (
            serde_json::json!({"skills_container_path": "/proc/x"}),
            InputError::SkillsPath("/proc/x".into()),
        ),
        (
            serde_json::json!({"skills_container_path": "/dev"}),
            InputError::SkillsPath("/dev".into()),
        ),
        (
            serde_json::json!({"skills_container_path": "/a/../b"}),
            InputError::SkillsPath("/a/../b".into()),
        ),
        (
            serde_json::json!({"skills_container_path": "/a b"}),
            InputError::SkillsPath("/a b".into()),
        ),
        (
            serde_json::json!({"skills_container_path": "/s/"}),
            InputError::SkillsPath("/s/".into()),
        ),
        (
            serde_json::json!({"skills_container_path": "/mnt/user-data/skills"}),
            InputError::Overlap(
                "/mnt/user-data".into(),
                "/mnt/user-data/skills/public".into(),
            ),
        ),
        (
            serde_json::json!({"skills_container_path": "/mnt/acp-workspace",
                "extra_mounts": [m("/srv/df/a", "/mnt/acp-workspace", false)]}),
            InputError::Overlap(
                "/mnt/acp-workspace".into(),
                "/mnt/acp-workspace/public".into(),
            ),
        ),
        (
            serde_json::json!({"extra_mounts": [m(mine, conv, false)]}),
            InputError::UploadConversions(mine.into()),
        ),
        (
            serde_json::json!({"extra_mounts": [m("/srv/df/users/bob/threads/s/user-data/.upload-conversions", conv, true)]}),
            InputError::UploadConversions(mine.into()),
        ),
        (
            serde_json::json!({"skills_container_path": "/custom",
                "extra_mounts": [m("/srv/df/a", "/mnt/skills/custom", true), m("/srv/df/b", "/custom/custom", true)]}),
            InputError::Duplicate("/custom/custom".into()),
        ),
    ];
    for (extra, want) in cases {
        let mut b = serde_json::json!({"sandbox_id": "s"});
        for (k, v) in extra.as_object().expect("object") {
            b[k] = v.clone();
        }
        let got = plan(&body(b.clone()), &root());
        assert_eq!(got.as_ref().err(), Some(&want), "{b}");
    }
    // A changed contract is deer-flow's 409 with its object detail, the rest are 400s.
    let e = InputError::ContractChanged(1);
    assert_eq!(e.status(), 409);
    assert_eq!(
        e.detail(),
        serde_json::json!({"code": "mount_contract_changed", "expected": 1, "actual": 2})
    );
    assert_eq!(InputError::Broker.status(), 400);
}
