//! `--allow-seccomp-profile` values as the digests the policy compares: a `sha256:HEX` as it is,
//! or a profile file read now, at start-up, and canonicalized by `sockproxy_policy::seccomp`.

use sockproxy_policy::settings::canonical_seccomp as canonical;

/// One `--allow-seccomp-profile` value as a digest: `sha256:HEX` (the canonical JSON's digest,
/// as `--print-policy` shows it), or the path of a profile file, read and canonicalized now.
pub fn allowed_digest(raw: &str) -> Result<String, String> {
    if let Some(hex) = raw.strip_prefix("sha256:") {
        let ok = hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        return if ok {
            Ok(hex.to_owned())
        } else {
            Err("expected sha256: and 64 lowercase hex characters".into())
        };
    }
    match std::fs::read_to_string(raw) {
        Ok(text) => canonical(&text).map(|c| c.sha256),
        Err(e) => Err(format!(
            "not a readable profile file ({e}); give a file path or sha256:HEX, the SHA-256 of the \
             profile's canonical JSON (sockproxy --print-policy shows it for a file)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROFILE: &str = r#"{
        "defaultAction": "SCMP_ACT_ERRNO",
        "architectures": ["SCMP_ARCH_X86_64"],
        "syscalls": [{ "names": ["read", "write", "exit_group"], "action": "SCMP_ACT_ALLOW" }]
    }"#;

    #[test]
    fn allowed_values_are_a_digest_or_a_file() {
        let dir = tempfile::tempdir().expect("dir");
        let file = dir.path().join("profile.json");
        std::fs::write(&file, PROFILE).expect("write");
        let digest = canonical(PROFILE).expect("a profile").sha256;
        assert_eq!(
            allowed_digest(&file.display().to_string()),
            Ok(digest.clone())
        );
        assert_eq!(
            allowed_digest(&format!("sha256:{digest}")),
            Ok(digest.clone())
        );
        assert_eq!(
            allowed_digest(&format!("sha256:{}", digest.to_uppercase())),
            Err("expected sha256: and 64 lowercase hex characters".into())
        );
        let missing = allowed_digest(&digest).expect_err("a bare digest is no file");
        assert!(
            missing.starts_with("not a readable profile file ("),
            "{missing}"
        );
        std::fs::write(&file, "{\"a\":1,\"A\":2}").expect("write");
        assert_eq!(
            allowed_digest(&file.display().to_string()),
            Err(r#"profile keys that name the same field: "A""#.into())
        );
    }
}
