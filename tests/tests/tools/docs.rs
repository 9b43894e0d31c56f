//! The documentation's shape (issue 40): the README stays a front page (at most 200 lines, the
//! two commands under their heading), and every relative link in the README, `docs/` and
//! `deploy/README.md` names a file that exists.

use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn the_readme_is_a_front_page_with_the_two_commands() {
    let text = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let lines = text.lines().count();
    assert!(
        lines <= 200,
        "README.md has {lines} lines; move detail to docs/"
    );
    let two = text
        .split("## The two commands")
        .nth(1)
        .expect("a section named 'The two commands'");
    assert!(two.contains(
        "cargo run --release -p sockproxy -- --listen /tmp/deer-flow.sock --prefix deer-flow-"
    ));
    assert!(two.contains("cargo test --workspace --no-fail-fast"));
    let ci = std::fs::read_to_string(repo().join(".ci/run")).expect(".ci/run");
    let last = ci
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    assert!(
        last.trim_end()
            .ends_with("cargo test --workspace --no-fail-fast"),
        ".ci/run ends with the README's test command: {last}"
    );
}

#[test]
fn every_relative_link_names_a_file_that_exists() {
    let mut files = vec![repo().join("README.md"), repo().join("deploy/README.md")];
    for e in std::fs::read_dir(repo().join("docs")).expect("docs/") {
        let p = e.expect("entry").path();
        if p.extension().is_some_and(|x| x == "md") {
            files.push(p);
        }
    }
    let mut broken = Vec::new();
    let mut seen = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).expect("readable");
        for (i, _) in text.match_indices("](") {
            let rest = &text[i + 2..];
            let Some(end) = rest.find(')') else { continue };
            let target = &rest[..end];
            if target.contains("://") || target.starts_with('#') || target.starts_with("mailto:") {
                continue;
            }
            let path = target.split('#').next().unwrap_or("");
            seen += 1;
            let dir = file.parent().expect("a directory");
            if !dir.join(path).exists() {
                broken.push(format!("{}: {target}", file.display()));
            }
        }
    }
    assert!(seen > 20, "only {seen} links read: the reader is broken");
    assert!(broken.is_empty(), "broken links: {broken:#?}");
}
