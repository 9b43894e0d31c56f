//! The provisioner API's key (`--api-key-file`): read once at start-up from a file that only
//! its owner (and group) may read, and compared in constant time. A TCP listener requires one;
//! a Unix socket enforces one when given.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Why the key file was refused at start-up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("--api-key-file {0}: {1}")]
    Unreadable(String, String),
    #[error("--api-key-file {0}: the file is empty (it must hold the key on one line)")]
    Empty(String),
    #[error("--api-key-file {0}: readable or writable by others (mode {1:04o}); expected 0600 or 0640 (chmod 0600 {0})")]
    Mode(String, u32),
    #[error("--api-key-file {0}: more than one line (the file holds the key on one line)")]
    Lines(String),
    #[error("listening on TCP needs --api-key-file (env LIFECYCLE_API_KEY_FILE): the provisioner API would be open to anyone who can reach the port")]
    Missing,
}

/// The key, kept only as its digest: comparing digests makes the comparison's time independent
/// of where (and whether) a guess first differs, and of the guess's length.
#[derive(Clone)]
pub struct ApiKey {
    digest: [u8; 32],
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(…)")
    }
}

impl ApiKey {
    pub fn new(key: &str) -> Self {
        Self {
            digest: Sha256::digest(key.as_bytes()).into(),
        }
    }

    /// Reads the key file: one line (a trailing newline is dropped), not empty, and no
    /// permission bit for others nor a group write bit.
    pub fn load(path: &Path) -> Result<Self, KeyError> {
        let shown = path.display().to_string();
        let meta = std::fs::metadata(path)
            .map_err(|e| KeyError::Unreadable(shown.clone(), e.to_string()))?;
        let mode = meta.permissions().mode() & 0o7777;
        if mode & 0o027 != 0 {
            return Err(KeyError::Mode(shown, mode));
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| KeyError::Unreadable(shown.clone(), e.to_string()))?;
        let line = text.strip_suffix('\n').unwrap_or(&text);
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.contains('\n') {
            return Err(KeyError::Lines(shown));
        }
        if line.trim().is_empty() {
            return Err(KeyError::Empty(shown));
        }
        Ok(Self::new(line))
    }

    /// Whether `offered` (an `X-API-Key` header's bytes) is the key, in constant time.
    pub fn matches(&self, offered: &[u8]) -> bool {
        let d: [u8; 32] = Sha256::digest(offered).into();
        self.digest.ct_eq(&d).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(body: &str, mode: u32) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().expect("dir");
        let p = dir.path().join("key");
        std::fs::write(&p, body).expect("write");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).expect("chmod");
        (dir, p)
    }

    #[test]
    fn key_files_table() {
        // The refusal a file gets, made from its path; None: the key is loaded.
        type Why = Option<fn(String, u32) -> KeyError>;
        let mode: Why = Some(KeyError::Mode);
        let empty: Why = Some(|p, _| KeyError::Empty(p));
        let lines: Why = Some(|p, _| KeyError::Lines(p));
        for (body, m, why) in [
            ("s3cret\n", 0o600, None),
            ("s3cret", 0o640, None),
            ("s3cret\r\n", 0o400, None),
            ("s3cret\n", 0o644, mode),
            ("s3cret\n", 0o660, mode),
            ("s3cret\n", 0o604, mode),
            ("", 0o600, empty),
            ("\n", 0o600, empty),
            ("a\nb\n", 0o600, lines),
        ] {
            let (_d, p) = file(body, m);
            let got = ApiKey::load(&p);
            match why {
                None => assert!(
                    got.as_ref().is_ok_and(|k| k.matches(b"s3cret")),
                    "{body:?} {m:o}: {got:?}"
                ),
                Some(why) => assert_eq!(
                    got.map(|_| ()),
                    Err(why(p.display().to_string(), m)),
                    "{body:?} {m:o}"
                ),
            }
        }
        let (_d, p) = file("x\n", 0o644);
        assert_eq!(
            ApiKey::load(&p).map(|_| ()),
            Err(KeyError::Mode(p.display().to_string(), 0o644))
        );
        let missing = Path::new("/nonexistent/key");
        assert_eq!(
            ApiKey::load(missing).map(|_| ()),
            Err(KeyError::Unreadable(
                "/nonexistent/key".into(),
                "No such file or directory (os error 2)".into()
            ))
        );
    }

    #[test]
    fn only_the_exact_key_matches() {
        let k = ApiKey::new("s3cret");
        assert!(k.matches(b"s3cret"));
        for other in [&b""[..], b"s3cre", b"s3cret ", b"S3CRET", b"s3cret\n", b"x"] {
            assert!(!k.matches(other), "{other:?}");
        }
    }
}
