//! deer-flow's binds through a proxy that pins them (issue 46), on the real engine with the
//! docker CLI as deer-flow's gateway runs it: every mount `_get_extra_mounts` gives a thread
//! (`UPSTREAM_MOUNTS`, `--mount type=bind,…`) mounts; what the sandbox writes in the read-write
//! ones lands in the thread's directories on the host, the read-only ones refuse writes; and
//! once the sandbox is gone (`--rm`), so are its pins.

use sockproxy_tests::bindroot::can_pin;
use sockproxy_tests::cli::docker;
use sockproxy_tests::deerflow::{BindRoot, UPSTREAM_MOUNTS};
use sockproxy_tests::engine::{real_engine, Cleanup};
use sockproxy_tests::stack::StackProxy;

#[test]
fn deer_flows_binds_mount_and_its_files_land_in_the_thread() {
    let test = "deer_flows_binds_mount_and_its_files_land_in_the_thread";
    if !can_pin(test) {
        return;
    }
    let Some(e) = real_engine(test) else {
        return;
    };
    let bind = BindRoot::create();
    let root = bind.root.clone();
    let p = StackProxy::start_with(&e.socket, "deer-flow-", false, |c| {
        c.create_rules.bind_roots = vec![root];
        c.create_rules.allow_seccomp_unconfined = true;
    });
    let name = format!("deer-flow-sandbox-binds{}", std::process::id());
    let mut clean = Cleanup::new(&e.socket);
    clean.container(&name);
    let mut args: Vec<String> = [
        "run",
        "--security-opt",
        "seccomp=unconfined",
        "--rm",
        "--name",
        &name,
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let mut script = String::from("set -e; ");
    for (src, dst, ro) in UPSTREAM_MOUNTS {
        let ro_opt = if ro { ",readonly" } else { "" };
        args.push("--mount".into());
        args.push(format!(
            "type=bind,src={}/{src},dst={dst}{ro_opt}",
            bind.root.display()
        ));
        if ro {
            script += &format!("if touch {dst}/from-sandbox 2>/dev/null; then exit 7; fi; ");
        } else {
            script += &format!("echo {dst} > {dst}/from-sandbox; ");
        }
    }
    args.extend([e.image.clone(), "sh".into(), "-c".into(), script]);
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = docker(p.socket(), &argv);
    assert!(out.ok(), "{}", out.stderr);
    for (src, dst, ro) in UPSTREAM_MOUNTS {
        let written = std::fs::read_to_string(bind.root.join(src).join("from-sandbox")).ok();
        if ro {
            assert_eq!(written, None, "{dst} is read-only");
        } else {
            assert_eq!(written, Some(format!("{dst}\n")), "{dst} landed in {src}");
        }
    }
    let pins = p.pin_dir().join("p");
    let start = std::time::Instant::now();
    while std::fs::read_dir(&pins).map_or(0, Iterator::count) > 0 {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(30),
            "the sandbox's pins outlived it"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
