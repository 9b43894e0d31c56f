//! Request targets (docs/architecture.md, "netproxy"): `CONNECT host:port` authorities and absolute-form `http://`
//! URIs, parsed strictly (explicit port 1–65535 without leading zeros, no userinfo, IPv6 only in
//! brackets) into one canonical host that policy, dialing and logging all use: ASCII,
//! lowercase, one trailing dot dropped, IP spellings read the way `inet_aton` reads them (so
//! `127.1` and `0x7f000001` are 127.0.0.1, not names), IPv4-mapped IPv6 folded to IPv4.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    #[error("missing port")]
    MissingPort,
    #[error("port must be 1-65535 without leading zeros")]
    BadPort,
    #[error("userinfo is not allowed in the target")]
    Userinfo,
    #[error("IPv6 addresses must be in brackets")]
    UnbracketedV6,
    #[error("malformed host")]
    BadHost,
    #[error("only http:// targets are proxied (use CONNECT for https)")]
    Scheme,
    #[error("empty host")]
    EmptyHost,
}

/// A canonical host.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Host {
    Name(String),
    Ip(IpAddr),
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Name(n) => f.write_str(n),
            Self::Ip(IpAddr::V4(a)) => write!(f, "{a}"),
            Self::Ip(IpAddr::V6(a)) => write!(f, "[{a}]"),
        }
    }
}

/// A canonical target: host and port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub host: Host,
    pub port: u16,
}

fn port(raw: &str) -> Result<u16, TargetError> {
    if raw.is_empty() {
        return Err(TargetError::MissingPort);
    }
    if !raw.bytes().all(|b| b.is_ascii_digit()) || (raw.len() > 1 && raw.starts_with('0')) {
        return Err(TargetError::BadPort);
    }
    raw.parse::<u16>()
        .ok()
        .filter(|p| *p != 0)
        .ok_or(TargetError::BadPort)
}

/// `host:port` (CONNECT). The port is required.
pub fn parse_authority(raw: &str) -> Result<Target, TargetError> {
    if raw.contains('@') {
        return Err(TargetError::Userinfo);
    }
    let (host, p) = split_host_port(raw)?;
    let p = p.ok_or(TargetError::MissingPort)?;
    Ok(Target {
        host: canonical_host(host)?,
        port: port(p)?,
    })
}

/// `http://host[:port]/path?query` (absolute form); returns the target and the origin-form
/// path to send upstream.
pub fn parse_absolute(raw: &str) -> Result<(Target, String), TargetError> {
    let lower = raw.get(..7).map(str::to_ascii_lowercase);
    if lower.as_deref() != Some("http://") {
        return Err(TargetError::Scheme);
    }
    let rest = &raw[7..];
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    if authority.contains('@') {
        return Err(TargetError::Userinfo);
    }
    let (host, p) = split_host_port(authority)?;
    let port = match p {
        Some(p) => port(p)?,
        None => 80,
    };
    let path = path.split('#').next().unwrap_or("");
    let path = if path.is_empty() {
        "/".to_owned()
    } else if path.starts_with('?') {
        format!("/{path}")
    } else {
        path.to_owned()
    };
    Ok((
        Target {
            host: canonical_host(host)?,
            port,
        },
        path,
    ))
}

/// Splits `host[:port]` with bracketed IPv6; a bare IPv6 (two colons) is refused.
fn split_host_port(raw: &str) -> Result<(&str, Option<&str>), TargetError> {
    if let Some(rest) = raw.strip_prefix('[') {
        let close = rest.find(']').ok_or(TargetError::BadHost)?;
        let host = &raw[..close + 2];
        return match &rest[close + 1..] {
            "" => Ok((host, None)),
            p => p
                .strip_prefix(':')
                .map(|p| (host, Some(p)))
                .ok_or(TargetError::BadHost),
        };
    }
    match raw.matches(':').count() {
        0 => Ok((raw, None)),
        1 => {
            let (h, p) = raw.split_once(':').unwrap_or((raw, ""));
            Ok((h, Some(p)))
        }
        _ => Err(TargetError::UnbracketedV6),
    }
}

/// The one canonical form of a host, or why it is malformed.
pub fn canonical_host(raw: &str) -> Result<Host, TargetError> {
    if let Some(inner) = raw.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
        let v6: Ipv6Addr = inner.parse().map_err(|_| TargetError::BadHost)?;
        return Ok(Host::Ip(fold_mapped(v6)));
    }
    if raw.is_empty() {
        return Err(TargetError::EmptyHost);
    }
    if !raw.is_ascii() {
        return Err(TargetError::BadHost);
    }
    let lower = raw.to_ascii_lowercase();
    let name = lower.strip_suffix('.').unwrap_or(&lower);
    if let Some(v4) = inet_aton(name) {
        return Ok(Host::Ip(IpAddr::V4(v4)));
    }
    let labels_ok = !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                && !l.starts_with('-')
                && !l.ends_with('-')
        });
    // A last label of digits only is an IP spelling that inet_aton refused: never a name.
    let numeric_tail = name
        .rsplit('.')
        .next()
        .is_some_and(|l| l.bytes().all(|b| b.is_ascii_digit()));
    if !labels_ok || numeric_tail || name.starts_with("0x") && name.split('.').count() == 1 {
        return Err(TargetError::BadHost);
    }
    Ok(Host::Name(name.to_owned()))
}

fn fold_mapped(v6: Ipv6Addr) -> IpAddr {
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}

/// IPv4 the way `inet_aton` reads it: 1–4 parts, each decimal, octal (leading 0) or hex (0x);
/// the last part fills the remaining bytes.
pub fn inet_aton(s: &str) -> Option<Ipv4Addr> {
    let parts: Vec<&str> = s.split('.').collect();
    if parts.is_empty() || parts.len() > 4 {
        return None;
    }
    let mut nums = Vec::with_capacity(parts.len());
    for p in &parts {
        let (digits, radix) = if let Some(h) = p.strip_prefix("0x").or_else(|| p.strip_prefix("0X"))
        {
            (h, 16)
        } else if p.len() > 1 && p.starts_with('0') {
            (&p[1..], 8)
        } else {
            (*p, 10)
        };
        if p.is_empty() || (digits.is_empty() && radix != 8) {
            return None;
        }
        let n = if digits.is_empty() {
            0
        } else {
            u64::from_str_radix(digits, radix).ok()?
        };
        nums.push(n);
    }
    let (last, head) = nums.split_last()?;
    if head.iter().any(|n| *n > 255) {
        return None;
    }
    let last_bytes = 4 - head.len();
    if *last >= 1u64 << (8 * last_bytes) {
        return None;
    }
    let mut value: u64 = 0;
    for (i, n) in head.iter().enumerate() {
        value |= n << (8 * (3 - i));
    }
    value |= last;
    Some(Ipv4Addr::from(u32::try_from(value).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(s: &str) -> Result<String, TargetError> {
        canonical_host(s).map(|h| h.to_string())
    }

    #[test]
    fn ip_spellings_are_read_as_inet_aton_reads_them() {
        for (raw, want) in [
            ("127.1", "127.0.0.1"),
            ("0177.0.0.1", "127.0.0.1"),
            ("0x7f000001", "127.0.0.1"),
            ("2130706433", "127.0.0.1"),
            ("0x7f.1", "127.0.0.1"),
            ("169.254.169.254", "169.254.169.254"),
            ("100.100.100.200", "100.100.100.200"),
            ("0.0.0.0", "0.0.0.0"),
            ("0", "0.0.0.0"),
            ("[::ffff:127.0.0.1]", "127.0.0.1"),
            ("[64:ff9b::a9fe:a9fe]", "[64:ff9b::a9fe:a9fe]"),
            ("[2002:7f00:1::1]", "[2002:7f00:1::1]"),
        ] {
            assert_eq!(host(raw).as_deref(), Ok(want), "{raw}");
        }
        for bad in [
            "256.1.1.1",
            "1.2.3.4.5",
            "0x",
            "08.1.1.1",
            "1.2.3.256",
            "[::1",
            "[zz::1]",
        ] {
            assert_eq!(host(bad), Err(TargetError::BadHost), "{bad}");
        }
    }

    #[test]
    fn names_are_canonical() {
        assert_eq!(host("example.com."), Ok("example.com".into()));
        assert_eq!(host("EXAMPLE.com"), Ok("example.com".into()));
        for bad in [
            "example.com..",
            "exa mple.com",
            "ex\u{e4}mple.com",
            "-x.com",
            "a..b",
            ".",
        ] {
            assert_eq!(host(bad), Err(TargetError::BadHost), "{bad:?}");
        }
        assert_eq!(host(""), Err(TargetError::EmptyHost));
    }

    #[test]
    fn authorities_are_strict() {
        assert_eq!(
            parse_authority("[example.com]:443").map_err(|e| e.to_string()),
            Err("malformed host".into())
        );
        assert_eq!(
            parse_authority("example.com:0443"),
            Err(TargetError::BadPort)
        );
        assert_eq!(
            parse_authority("user@example.com:443"),
            Err(TargetError::Userinfo)
        );
        assert_eq!(
            parse_authority("example.com"),
            Err(TargetError::MissingPort)
        );
        assert_eq!(parse_authority("example.com:0"), Err(TargetError::BadPort));
        assert_eq!(
            parse_authority("example.com:65536"),
            Err(TargetError::BadPort)
        );
        assert_eq!(parse_authority("::1:443"), Err(TargetError::UnbracketedV6));
        let t = parse_authority("Example.COM.:443").expect("ok");
        assert_eq!((t.host.to_string(), t.port), ("example.com".into(), 443));
        let t = parse_authority("[::1]:8443").expect("ok");
        assert_eq!(t.host, Host::Ip("::1".parse().expect("ip")));
    }

    #[test]
    fn absolute_form() {
        let (t, path) = parse_absolute("http://Example.com./a/b?c=1#frag").expect("ok");
        assert_eq!(
            (t.host.to_string(), t.port, path.as_str()),
            ("example.com".into(), 80, "/a/b?c=1")
        );
        let (t, path) = parse_absolute("http://example.com:8080").expect("ok");
        assert_eq!((t.port, path.as_str()), (8080, "/"));
        assert_eq!(
            parse_absolute("https://example.com/"),
            Err(TargetError::Scheme)
        );
        assert_eq!(
            parse_absolute("http://u:p@example.com/"),
            Err(TargetError::Userinfo)
        );
        assert_eq!(
            parse_absolute("http://example.com:0080/"),
            Err(TargetError::BadPort)
        );
    }
}
