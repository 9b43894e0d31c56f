//! Issue 46's restarts, and a swap loop: a pinned bind source stays the checked directory
//! across a proxy restart between create and start, across dockerd's own restart (the test's
//! own dockerd), and while a source is swapped back and forth during 200 starts and restarts;
//! a pin lost as at a reboot fails the start, and no directory appears in its place. On the
//! fake engine's `docker-29` flavor, a link planted with `PUT /archive` changes nothing either.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use sockproxy_tests::bindroot::{can_pin, BindRootDir};
use sockproxy_tests::engine::{Cleanup, Engine};
use sockproxy_tests::fake::Flavor;
use sockproxy_tests::own_dockerd::OwnDockerd;
use sockproxy_tests::raw;
use sockproxy_tests::stack::{PinnedDir, StackProxy};
use sockproxy_tests::unique_prefix;

use crate::bypasses::send;
use crate::pins::{post, wait_for, Ground, MARK};

fn mounted(path: &Path) -> bool {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .contains(&format!(" {} ", path.display()))
}

fn staging_of(g: &Ground, name: &str) -> std::path::PathBuf {
    let c = g.inspect(name);
    c["Mounts"][0]["Source"].as_str().unwrap_or_default().into()
}

/// A pin directory the test keeps across proxies (detached at the end).
fn shared_pins() -> PinnedDir {
    PinnedDir::new(
        tempfile::Builder::new()
            .prefix("pinshared")
            .tempdir()
            .expect("dir"),
    )
}

/// The proxy stopped between create and start, the source swapped meanwhile, the container
/// started on the engine itself with no proxy running: still the checked directory. The next
/// proxy on the same directory keeps the pin while the container is there and releases it
/// when it goes.
#[test]
fn a_proxy_restart_between_create_and_start_keeps_the_pin() {
    let Some(mut g) = Ground::new("a_proxy_restart_between_create_and_start_keeps_the_pin") else {
        return;
    };
    let shared = shared_pins();
    let dir = shared.pins();
    let p1 = g.proxy_with(|c| c.pins.dir = dir.clone());
    let src = g.src().display().to_string();
    let name = g.create(
        &p1,
        "sandbox-across",
        json!({ "Binds": [format!("{src}:/host")] }),
        &format!("{MARK}; sleep 600"),
    );
    drop(p1);
    let staging = staging_of(&g, &name);
    assert!(mounted(&staging), "the pin outlives the proxy");
    g.swap();
    let r = post(&g.e.socket, &format!("/containers/{name}/start"));
    assert_eq!(r.status, 204, "{}", r.text());
    g.wait_runs(&g.moved(), 1, 30);
    assert_eq!(g.escaped(), Vec::<String>::new());
    let p2 = g.proxy_with(|c| c.pins.dir = dir.clone());
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        mounted(&staging),
        "still referred to: kept by the next proxy"
    );
    assert_eq!(
        post(p2.socket(), &format!("/containers/{name}/restart?t=0")).status,
        204
    );
    g.wait_runs(&g.moved(), 2, 30);
    let r = raw::request(
        p2.socket(),
        "DELETE",
        &format!("/containers/{name}?force=1"),
        None,
    )
    .expect("rm");
    assert_eq!(r.status, 204, "{}", r.text());
    wait_for("the pin released", 30, || {
        !mounted(&staging) && !staging.exists()
    });
    assert_eq!(g.escaped(), Vec::<String>::new());
}

/// Pins lost as at a reboot (the pin directory's tmpfs gone): the start fails, saying the
/// source does not exist, and the engine makes no directory in its place, neither then nor
/// after a new proxy mounted a fresh pin directory (staging names are never reused).
#[test]
fn lost_pins_fail_the_start_and_make_no_directory() {
    let Some(mut g) = Ground::new("lost_pins_fail_the_start_and_make_no_directory") else {
        return;
    };
    let shared = shared_pins();
    let dir = shared.pins();
    let p1 = g.proxy_with(|c| c.pins.dir = dir.clone());
    let src = g.src().display().to_string();
    let bind = g.create(
        &p1,
        "sandbox-bind",
        json!({ "Binds": [format!("{src}:/host")] }),
        MARK,
    );
    let mount = g.create(
        &p1,
        "sandbox-mount",
        json!({ "Mounts": [{ "Type": "bind", "Source": src, "Target": "/host" }], "RestartPolicy": { "Name": "always" } }),
        MARK,
    );
    drop(p1);
    rustix::mount::unmount(&dir, rustix::mount::UnmountFlags::DETACH).expect("the reboot");
    let mut p2 = None;
    for round in ["after the reboot", "with a new proxy"] {
        for name in [&bind, &mount] {
            let staging = staging_of(&g, name);
            let r = post(&g.e.socket, &format!("/containers/{name}/start"));
            assert!(
                r.status >= 400,
                "{round}: {name} must not start: {}",
                r.text()
            );
            assert!(
                r.message().contains("does not exist") || r.message().contains("no such file"),
                "{round}: {}",
                r.message()
            );
            assert!(
                !staging.exists(),
                "{round}: no directory at {}",
                staging.display()
            );
        }
        if round == "after the reboot" {
            p2 = Some(g.proxy_with(|c| c.pins.dir = dir.clone()));
        }
    }
    drop(p2);
    assert_eq!(Ground::markers(&g.src()), 0);
    assert_eq!(g.escaped(), Vec::<String>::new());
}

/// dockerd's own restart (the test's own dockerd): the container comes back by its restart
/// policy and mounts the checked directory.
#[test]
fn a_dockerd_restart_mounts_what_was_checked() {
    let test = "a_dockerd_restart_mounts_what_was_checked";
    let Some(g) = Ground::new(test) else {
        return;
    };
    let Some(mut d) = OwnDockerd::start(test, &g.e.socket) else {
        return;
    };
    let root = g.root.path().to_owned();
    let p = StackProxy::start_with(&d.socket(), &g.prefix, false, |c| {
        c.create_rules.bind_roots = vec![root];
    });
    let src = g.src().display().to_string();
    let name = format!("{}sandbox-dockerd", g.prefix);
    let body = json!({ "Image": g.e.image, "Cmd": ["sh", "-c", format!("{MARK}; sleep 600")],
        "HostConfig": { "Binds": [format!("{src}:/host")], "NetworkMode": "none",
                        "RestartPolicy": { "Name": "always" } } });
    let r = send(
        p.socket(),
        "POST",
        &format!("/containers/create?name={name}"),
        &body,
    );
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(
        post(p.socket(), &format!("/containers/{name}/start")).status,
        204
    );
    wait_for("the first marker", 30, || Ground::markers(&g.src()) == 1);
    g.swap();
    d.restart();
    g.wait_runs(&g.moved(), 2, 90);
    assert_eq!(g.escaped(), Vec::<String>::new(), "{}", d.log());
    let r = raw::request(
        &d.socket(),
        "DELETE",
        &format!("/containers/{name}?force=1"),
        None,
    )
    .expect("rm");
    assert_eq!(r.status, 204);
}

/// A source swapped back and forth (rename away, link to the host, back) all through 200
/// starts and restarts, with a create every tenth round: every run writes in the checked
/// directory, a create racing the swap is pinned to the directory or refused, and nothing
/// reaches the host's directory. Bounded: 200 rounds or 240 s.
#[test]
fn a_swap_loop_during_200_starts_and_restarts_escapes_nothing() {
    let Some(mut g) = Ground::new("a_swap_loop_during_200_starts_and_restarts_escapes_nothing")
    else {
        return;
    };
    let p = g.proxy();
    let src = g.src();
    let bind = json!({ "Binds": [format!("{}:/host", src.display())] });
    let name = g.create(
        &p,
        "sandbox-loop",
        bind.clone(),
        &format!("{MARK}; sleep 600"),
    );
    let (aside, host) = (g.root.path().join("a/aside"), g.host.path().to_owned());
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let (stop, src, aside) = (stop.clone(), src.clone(), aside.clone());
        std::thread::spawn(move || {
            let mut swaps = 0u64;
            while !stop.load(Ordering::Relaxed) {
                std::fs::rename(&src, &aside).expect("aside");
                std::os::unix::fs::symlink(&host, &src).expect("link");
                std::thread::sleep(Duration::from_millis(1));
                std::fs::remove_file(&src).expect("unlink");
                std::fs::rename(&aside, &src).expect("back");
                // As long again the directory itself: a create then may find either.
                std::thread::sleep(Duration::from_millis(1));
                swaps += 1;
            }
            swaps
        })
    };
    // The checked directory, wherever the swap has it: counted through a descriptor.
    let held = std::fs::File::open(&src).expect("the checked directory");
    let checked = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&held));
    let marks = || Ground::markers(Path::new(&checked));
    let (deadline, mut runs, mut late) = (Instant::now() + Duration::from_secs(240), 0, Vec::new());
    for round in 0..200 {
        if Instant::now() > deadline {
            break;
        }
        let target = if round % 2 == 0 {
            format!("/containers/{name}/restart?t=0")
        } else {
            assert_eq!(
                post(p.socket(), &format!("/containers/{name}/stop?t=0")).status,
                204
            );
            format!("/containers/{name}/start")
        };
        let r = post(p.socket(), &target);
        assert_eq!(r.status, 204, "round {round}: {}", r.text());
        runs += 1;
        // Each run's marker before the next stop, so none is cut short.
        wait_for("the run's marker", 30, || {
            assert_eq!(g.escaped(), Vec::<String>::new(), "round {round}: escaped");
            marks() == runs
        });
        if round % 10 == 0 {
            let n = g
                .clean
                .container(&format!("{}sandbox-late{round}", g.prefix));
            let body = json!({ "Image": g.e.image, "Cmd": ["sh", "-c", MARK], "HostConfig": bind });
            let r = send(
                p.socket(),
                "POST",
                &format!("/containers/create?name={n}"),
                &body,
            );
            match r.status {
                201 => late.push(n),
                // The check or the pin met the link, or the name in between.
                403 => assert_eq!(
                    raw::get(&g.e.socket, &format!("/containers/{n}/json"))
                        .expect("inspect")
                        .status,
                    404
                ),
                _ => panic!("round {round}: {}", r.text()),
            }
        }
    }
    for n in &late {
        assert_eq!(
            post(p.socket(), &format!("/containers/{n}/start")).status,
            204
        );
        raw::request(p.socket(), "POST", &format!("/containers/{n}/wait"), None).expect("wait");
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().expect("swapper");
    let want = runs + late.len();
    wait_for("every run's marker", 30, || marks() == want);
    eprintln!(
        "{runs} starts and restarts, {} late creates, {swaps} swaps",
        late.len()
    );
    assert!(swaps > 0);
    assert_eq!(g.escaped(), Vec::<String>::new(), "0 escapes");
}

/// `PUT /archive` (API 1.43 and later: the fake's docker-29 flavor, whose uploads land in the
/// bound directory) plants the link in the parent with no container running: the container
/// created before still has the checked directory as its source (same device and inode).
#[test]
fn a_link_planted_by_an_archive_upload_changes_no_pin() {
    let test = "a_link_planted_by_an_archive_upload_changes_no_pin";
    if !can_pin(test) {
        return;
    }
    let e = Engine::start_fake(Flavor::Docker29);
    let root = BindRootDir::new("pinarch");
    std::fs::create_dir_all(root.path().join("a/b")).expect("a/b");
    let host = tempfile::tempdir().expect("host");
    let prefix = unique_prefix();
    let bind_root = root.path().to_owned();
    let p = StackProxy::start_with(&e.socket, &prefix, false, |c| {
        c.create_rules.bind_roots = vec![bind_root]
    });
    let a = root.path().join("a").display().to_string();
    let b = root.path().join("a/b");
    let mut clean = Cleanup::new(&e.socket);
    let mut make = |n: &str, bind: String| {
        let n = clean.container(&format!("{prefix}{n}"));
        let body = json!({ "Image": e.image, "HostConfig": { "Binds": [bind] } });
        let r = send(
            p.socket(),
            "POST",
            &format!("/containers/create?name={n}"),
            &body,
        );
        assert_eq!(r.status, 201, "{}", r.text());
        n
    };
    let uploader = make("sandbox-up", format!("{a}:/w"));
    let victim = make("sandbox-victim", format!("{}:/host", b.display()));
    std::fs::rename(&b, root.path().join("a/b.old")).expect("the gateway's rename");
    let tar = one_link_tar("b", &host.path().display().to_string());
    let r = raw::request(
        p.socket(),
        "PUT",
        &format!("/v1.52/containers/{uploader}/archive?path=/w"),
        Some(&tar),
    )
    .expect("upload");
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        std::fs::symlink_metadata(&b).is_ok_and(|m| m.file_type().is_symlink()),
        "planted"
    );
    let c = raw::get(&e.socket, &format!("/containers/{victim}/json"))
        .expect("inspect")
        .json();
    let source = c["Mounts"][0]["Source"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    use std::os::unix::fs::MetadataExt;
    let (got, want) = (
        std::fs::metadata(&source).expect("source"),
        std::fs::metadata(root.path().join("a/b.old")).expect("b.old"),
    );
    assert_eq!(
        (got.dev(), got.ino()),
        (want.dev(), want.ino()),
        "{source} is the checked directory"
    );
}

/// A ustar stream with one symbolic link `name -> target`.
fn one_link_tar(name: &str, target: &str) -> Vec<u8> {
    let mut h = [0u8; 512];
    h[..name.len()].copy_from_slice(name.as_bytes());
    h[100..108].copy_from_slice(b"0000777\0");
    for f in [108, 116] {
        h[f..f + 8].copy_from_slice(b"0000000\0");
    }
    h[124..136].copy_from_slice(b"00000000000\0");
    h[136..148].copy_from_slice(b"00000000000\0");
    h[156] = b'2';
    h[157..157 + target.len()].copy_from_slice(target.as_bytes());
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|b| u32::from(*b)).sum();
    h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    let mut out = h.to_vec();
    out.extend_from_slice(&[0u8; 1024]);
    out
}

/// A release pass that runs while a create is still in flight (on the fake engine, its answer
/// held 3 s before the container is made) releases the pin of a container that went, and
/// leaves the in-flight create's alone; that one goes only once its container does.
#[test]
fn a_release_pass_leaves_a_create_in_flight_alone() {
    let test = "a_release_pass_leaves_a_create_in_flight_alone";
    if !can_pin(test) {
        return;
    }
    let e = Engine::start_fake(Flavor::Debian2010);
    let fake = e.fake.as_ref().expect("a fake");
    let root = BindRootDir::new("pinflight");
    std::fs::create_dir(root.path().join("ws")).expect("ws");
    let prefix = unique_prefix();
    let bind_root = root.path().to_owned();
    let p = StackProxy::start_with(&e.socket, &prefix, false, |c| {
        c.create_rules.bind_roots = vec![bind_root]
    });
    let pins = p.pin_dir().join("p");
    let held = || std::fs::read_dir(&pins).map_or(0, Iterator::count);
    let body = json!({ "Image": e.image, "HostConfig": { "Binds": [format!("{}/ws:/ws", root.path().display())] } });
    // A container that will go while the other's create is in flight.
    let gone = format!("{prefix}sandbox-gone");
    let r = send(
        p.socket(),
        "POST",
        &format!("/containers/create?name={gone}"),
        &body,
    );
    assert_eq!(r.status, 201, "{}", r.text());
    wait_for("the first pin", 10, || held() == 1);
    fake.inject(sockproxy_tests::fake::FaultRule {
        times: Some(1),
        ..sockproxy_tests::fake::FaultRule::new(
            Some("POST"),
            "/containers/create",
            sockproxy_tests::fake::Fault::Delay(Duration::from_secs(3)),
        )
    });
    let name = format!("{prefix}sandbox-flight");
    let (sock, target) = (p.socket_buf(), format!("/containers/create?name={name}"));
    let creating = std::thread::spawn(move || send(&sock, "POST", &target, &body));
    wait_for("the in-flight create's pin", 10, || held() == 2);
    // The first container goes on the engine: its destroy event asks for a pass.
    let r = raw::request(&e.socket, "DELETE", &format!("/containers/{gone}"), None).expect("rm");
    assert_eq!(r.status, 204);
    wait_for("the gone container's pin released", 10, || held() == 1);
    assert!(!creating.is_finished(), "the create is still in flight");
    let r = creating.join().expect("create");
    assert_eq!(r.status, 201, "{}", r.text());
    let inspect = raw::get(&e.socket, &format!("/containers/{name}/json")).expect("inspect");
    let staging = inspect.json()["Mounts"][0]["Source"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        mounted(Path::new(&staging)),
        "the in-flight create's pin: {staging}"
    );
    let r = raw::request(p.socket(), "DELETE", &format!("/containers/{name}"), None).expect("rm");
    assert_eq!(r.status, 204, "{}", r.text());
    wait_for("the pin released", 10, || {
        held() == 0 && !mounted(Path::new(&staging))
    });
}
