//! Custom seccomp profiles a stack may use (`--allow-seccomp-profile`, issue 40). A profile is
//! known by the SHA-256 of its canonical JSON: parsed with the body's key rule (no duplicate
//! keys and no keys that fold to one, which Go's decoder would read as one field) and written
//! back with sorted keys and no spaces. So the file an operator allows matches however a client
//! formats it (the docker CLI compacts it before sending), and what is forwarded to the engine
//! is that canonical text, the form that was decided on.

use sha2::{Digest, Sha256};

/// A profile text's canonical JSON and the SHA-256 (lowercase hex) of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Canonical {
    pub json: String,
    pub sha256: String,
}

/// `text` as the proxy knows a profile: an error says why it is no profile.
pub fn canonical(text: &str) -> Result<Canonical, String> {
    let value = crate::body::parse_checked(text.as_bytes()).map_err(|r| match r {
        crate::refusal::Refusal::BadRequest(why) => why.replace("body ", "profile "),
        other => other.to_string(),
    })?;
    if !value.is_object() {
        return Err("profile is not a JSON object".into());
    }
    let json = value.to_string();
    let sha256 = Sha256::digest(json.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok(Canonical { json, sha256 })
}

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
    fn one_profile_in_any_formatting_has_one_digest() {
        let pretty = canonical(PROFILE).expect("a profile");
        let compact: String = PROFILE.split_whitespace().collect();
        let reordered = r#"{"syscalls":[{"action":"SCMP_ACT_ALLOW","names":["read","write","exit_group"]}],"architectures":["SCMP_ARCH_X86_64"],"defaultAction":"SCMP_ACT_ERRNO"}"#;
        let escaped = r#"{"defaultAction":"SCMP_ACT_\u0045RRNO","architectures":["SCMP_ARCH_X86_64"],"syscalls":[{"names":["read","write","exit_group"],"action":"SCMP_ACT_ALLOW"}]}"#;
        for text in [compact.as_str(), reordered, escaped] {
            assert_eq!(canonical(text).as_ref(), Ok(&pretty), "{text}");
        }
        assert_eq!(
            pretty.json,
            r#"{"architectures":["SCMP_ARCH_X86_64"],"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{"action":"SCMP_ACT_ALLOW","names":["read","write","exit_group"]}]}"#
        );
        // Pinned: the digest of that canonical text, computed outside the code under test
        // (`printf %s '<json>' | sha256sum`).
        assert_eq!(
            pretty.sha256,
            "e8191fa8466e08ad543ef9980f885409b98eb2d035e16e22be30573aba3de945"
        );
    }

    #[test]
    fn what_go_would_read_another_way_is_no_profile() {
        for (text, why) in [
            (
                r#"{"defaultAction":"SCMP_ACT_ERRNO","DefaultAction":"SCMP_ACT_ALLOW"}"#,
                r#"profile keys that name the same field: "DefaultAction""#,
            ),
            (
                r#"{"defaultAction":"SCMP_ACT_ERRNO","defaultAction":"SCMP_ACT_ALLOW"}"#,
                r#"profile keys that name the same field: "defaultAction""#,
            ),
            ("[]", "profile is not a JSON object"),
        ] {
            assert_eq!(canonical(text), Err(why.to_owned()), "{text}");
        }
        let cut = canonical("{").expect_err("cut short");
        assert!(cut.starts_with("profile is not JSON: "), "{cut}");
    }

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
