//! The `lifecycle` binary; everything is in `lifecycle::cli`.

fn main() -> std::process::ExitCode {
    lifecycle::cli::main()
}
