//! The images `deploy/` ships (issue 40, point 6): each Dockerfile builds inside (a Rust build
//! stage) and ends in a `FROM scratch` stage with the OCI labels; `deploy/build-images.sh` builds
//! that last stage offline from binaries made on the host, and the image it makes carries the
//! labels (the workspace's version, the licence), runs as nobody and starts the binary.

use std::path::{Path, PathBuf};
use std::process::Command;

use sockproxy_tests::engine::real_engine;
use sockproxy_tests::raw;
use sockproxy_tests::unique_prefix;

const COMPONENTS: [&str; 3] = ["sockproxy", "netproxy", "lifecycle"];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn each_dockerfile_builds_inside_and_ends_from_scratch_with_its_labels() {
    for c in COMPONENTS {
        let path = repo().join(format!("deploy/{c}.Dockerfile"));
        let text = std::fs::read_to_string(&path).expect("Dockerfile");
        let froms: Vec<&str> = text.lines().filter(|l| l.starts_with("FROM ")).collect();
        assert_eq!(
            froms,
            ["FROM rust:1-bookworm AS build", "FROM scratch"],
            "{c}"
        );
        assert!(
            text.contains(&format!("cargo build --locked --release -p {c} ")),
            "{c} is built inside"
        );
        // The online route's default version is the workspace's.
        let version = format!("ARG VERSION={}", env!("CARGO_PKG_VERSION"));
        assert!(text.lines().any(|l| l == version), "{c}: {version}");
        for label in [
            "org.opencontainers.image.source=\"$SOURCE\"",
            "org.opencontainers.image.version=\"$VERSION\"",
            "org.opencontainers.image.licenses=\"Apache-2.0\"",
        ] {
            assert!(text.contains(label), "{c}: {label}");
        }
    }
}

#[test]
fn build_images_makes_labelled_scratch_images_offline() {
    let Some(e) = real_engine("build_images_makes_labelled_scratch_images_offline") else {
        return;
    };
    let prefix = format!("{}img-", unique_prefix());
    let out = Command::new(repo().join("deploy/build-images.sh"))
        .arg(&prefix)
        .env("DOCKER_HOST", format!("unix://{}", e.socket.display()))
        .output()
        .expect("build script runs");
    let removed = |c: &str| {
        raw::request(
            &e.socket,
            "DELETE",
            &format!("/images/{prefix}{c}:latest"),
            None,
        )
    };
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed = String::from_utf8_lossy(&out.stdout).into_owned();
    for c in COMPONENTS {
        assert!(listed.contains(&format!("{prefix}{c}:latest")), "{listed}");
        let r = raw::get(&e.socket, &format!("/images/{prefix}{c}:latest/json")).expect("answer");
        assert_eq!(r.status, 200, "{}", r.text());
        let image = r.json();
        let config = &image["Config"];
        let labels = &config["Labels"];
        assert_eq!(
            labels["org.opencontainers.image.version"],
            env!("CARGO_PKG_VERSION")
        );
        assert_eq!(labels["org.opencontainers.image.licenses"], "Apache-2.0");
        assert_eq!(labels["org.opencontainers.image.title"], c);
        assert!(
            labels["org.opencontainers.image.source"].is_string(),
            "{labels}"
        );
        assert_eq!(config["User"], "65534:65534", "{c}");
        assert_eq!(config["Entrypoint"], serde_json::json!([format!("/{c}")]));
        // FROM scratch: the binary's layer and its empty directories only (sockproxy's two:
        // the socket's and --state-dir's).
        let layers = image["RootFS"]["Layers"].as_array().map_or(0, Vec::len);
        let most = if c == "sockproxy" { 3 } else { 2 };
        assert!((1..=most).contains(&layers), "{c}: {layers} layers");
    }
    for c in COMPONENTS {
        let _ = removed(c);
    }
}
