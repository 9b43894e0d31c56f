//! The `lifecycle` command, built in the tests crate so it is always built before this crate's
//! tests run it (`sockproxy_tests::bins::lifecycle`); identical to `lifecycle/src/main.rs`.

fn main() -> std::process::ExitCode {
    lifecycle::cli::main()
}
