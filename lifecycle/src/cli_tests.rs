//! The command line's parsing (`cli`).

use super::*;

#[test]
fn an_egress_rule_with_a_port_list_stays_one_rule() {
    let args = Args::try_parse_from([
        "lifecycle",
        "--docker-host",
        "unix:///x.sock",
        "--prefix",
        "deer-flow-",
        "--mode",
        "restricted",
        "--state-dir",
        "/tmp/s",
        "--egress-allow",
        "api.example.test:80,8080",
        "--egress-allow",
        "*.example.test",
        "ls",
    ])
    .expect("parses");
    assert_eq!(
        args.egress_allow,
        ["api.example.test:80,8080", "*.example.test"]
    );
}
