//! The API version floor: by default 1.24 (docs/architecture.md, "sockproxy: a request's way through"), raised by `--min-api-version`, never
//! lowered below 1.24. Checked where it is set (the flag's parse) and where it acts (a request
//! under the floor is refused 400 before anything reaches the engine).

use clap::Parser;
use sockproxy::config::{Args, Config};
use sockproxy_tests::engine::Engine;
use sockproxy_tests::fake::Flavor;
use sockproxy_tests::raw;
use sockproxy_tests::stack::StackProxy;
use sockproxy_tests::unique_prefix;

fn floor(extra: &[&str]) -> Result<(u32, u32), String> {
    let mut argv = vec![
        "sockproxy",
        "--listen",
        "/tmp/x.sock",
        "--prefix",
        "deer-flow-",
    ];
    argv.extend_from_slice(extra);
    let args = Args::try_parse_from(argv).map_err(|e| e.to_string())?;
    Config::from_args(args, None)
        .map(|c| c.min_api_version)
        .map_err(|e| e.to_string())
}

#[test]
fn the_floor_is_1_24_by_default_and_only_raised_by_the_flag() {
    assert_eq!(floor(&[]), Ok((1, 24)), "the default floor");
    assert_eq!(floor(&["--min-api-version", "1.24"]), Ok((1, 24)));
    assert_eq!(floor(&["--min-api-version", "1.41"]), Ok((1, 41)));
    for lower in ["1.23", "1.0", "0.99", "1.2"] {
        let e = floor(&["--min-api-version", lower]).expect_err("refused");
        assert!(
            e.contains(&format!(
                "--min-api-version \"{lower}\": expected MAJOR.MINOR, at least 1.24"
            )),
            "{lower}: {e}"
        );
    }
}

#[test]
fn a_request_under_the_floor_is_refused_before_the_engine() {
    let e = Engine::start_fake(Flavor::Debian2010);
    for (extra, under, at) in [
        (vec![], "v1.23", "v1.24"),
        (vec!["--min-api-version", "1.41"], "v1.40", "v1.41"),
    ] {
        let min = floor(&extra).expect("valid");
        let p = StackProxy::start_with(&e.socket, &unique_prefix(), false, |c| {
            c.min_api_version = min;
        });
        p.wait_names_live();
        let fake = e.fake.as_ref().expect("fake");
        fake.clear_requests();
        let r = raw::get(p.socket(), &format!("/{under}/version")).expect("answer");
        assert_eq!(r.status, 400, "{extra:?} {under}: {}", r.text());
        assert!(
            r.message().starts_with("sockproxy: bad request:"),
            "{}",
            r.message()
        );
        assert!(
            fake.request_lines().iter().all(|l| !l.contains("/version")),
            "{extra:?}: nothing reached the engine"
        );
        let r = raw::get(p.socket(), &format!("/{at}/version")).expect("answer");
        assert_eq!(r.status, 200, "{extra:?} {at}: {}", r.text());
    }
}
