//! Image references as dockerd reads them, so that `--allow-image` and a create's `Image`
//! compare equal when the engine would pull the same image.

/// `busybox` → `busybox:latest`; `docker.io/library/x` and `library/x` → `x`, as dockerd reads
/// them (its `library/` is implied for one-component names only: `docker.io/library/a/b` stays
/// `library/a/b`); `index.docker.io/` is `docker.io/`; a digest is kept as it is.
pub fn normalize_image(reference: &str) -> String {
    let r = reference
        .strip_prefix("docker.io/")
        .or_else(|| reference.strip_prefix("index.docker.io/"))
        .unwrap_or(reference);
    let r = match r.strip_prefix("library/") {
        Some(rest) if !rest.contains('/') => rest,
        _ => r,
    };
    let last = r.rsplit('/').next().unwrap_or(r);
    if last.contains(':') || r.contains('@') {
        r.to_owned()
    } else {
        format!("{r}:latest")
    }
}
