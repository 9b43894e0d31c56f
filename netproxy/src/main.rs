//! netproxy: not a working proxy yet (issue 6 is in progress); it refuses to start rather than
//! pretend to filter egress.

fn main() {
    eprintln!("netproxy: the proxy server is not built yet (issue 6); refusing to start");
    std::process::exit(2);
}
