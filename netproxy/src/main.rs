//! netproxy: the restricted-mode egress sidecar. Not implemented yet (issue 6); this binary
//! exists so the workspace layout is final and refuses to run rather than pretending to filter.

fn main() {
    eprintln!("netproxy: not implemented yet (see issue 6); refusing to start");
    std::process::exit(2);
}
