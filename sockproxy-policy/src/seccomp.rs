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
    let value = crate::json::parse_checked(text.as_bytes()).map_err(|r| match r {
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
}
