//! The `lifecycle` command, built in the tests crate so its integration tests get its path
//! (`CARGO_BIN_EXE_lifecycle-cli`); identical to `lifecycle/src/main.rs`.

fn main() -> std::process::ExitCode {
    lifecycle::cli::main()
}
