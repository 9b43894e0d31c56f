//! Writes `docs/reference/{sockproxy,netproxy,lifecycle}.md` from the programs' flag
//! definitions (`sockproxy_tests::reference`).

fn main() -> std::io::Result<()> {
    for (program, text) in sockproxy_tests::reference::pages() {
        let path = sockproxy_tests::reference::path(program);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(&path, text)?;
        println!("{}", path.display());
    }
    Ok(())
}
