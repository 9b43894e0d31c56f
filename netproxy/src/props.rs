//! Properties the fuzz targets (`fuzz/`) assert and the stable replay test
//! (`tests/tests/tools/fuzz_corpus.rs`) checks again on every committed corpus input; `Err(why)` when
//! one does not hold. Only the public parsing and deciding functions are used; every call into
//! `addr` and `framing` goes through one of two small adapters (`address_allowed`, `scanner`),
//! so a change to those modules touches only them here.
//!
//! - `target`: a parsed target's canonical host (and port, and origin-form path) is the same
//!   when its canonical form is parsed again; a name is never an IP spelling. The input's first
//!   byte also picks a policy, and an IP literal in a special-purpose range (or the proxy's own
//!   network) is never allowed unless an `--allow-cidr` range names it.
//! - `framing`: the request-stream scanner never panics, reads the same verdicts however the
//!   stream is split into reads, and never lets the first head through when the reading
//!   hyper's parser makes (bare LF line ends accepted) finds CL+TE or a repeated
//!   Content-Length.

use ipnet::IpNet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use tokio::io::AsyncReadExt;

use crate::addr;
use crate::framing::{HeadLimits, Scanner, Verdicts};
use crate::rules::{self, NameDecision, Rule};
use crate::target::{self, Host};

/// Whether the address check lets `ip` be dialed (the one call into `addr`).
fn address_allowed(ip: IpAddr, allow: &[IpNet], own: &[IpNet]) -> bool {
    addr::judge(ip, allow, own, &[]).is_ok()
}

/// The scanner the server puts in front of hyper, over `stream`.
fn scanner(stream: &[u8], verdicts: Verdicts) -> Scanner<&[u8]> {
    let limits = HeadLimits {
        max_bytes: 16 * 1024,
        max_headers: 100,
        timeout: std::time::Duration::from_secs(3600),
        upgrades: false,
    };
    Scanner::new(stream, verdicts, limits)
}

/// Policies the target property's first byte picks from: (allow rules, `--allow-cidr`, own
/// networks).
const POLICIES: [(&[&str], &[&str], &[&str]); 6] = [
    (&["example.com", "*.example.org"], &[], &["172.18.0.0/16"]),
    (&["127.0.0.1", "[::1]:80", "169.254.169.254"], &[], &[]),
    (&["10.0.0.1:80,443"], &["10.0.0.0/8"], &["10.0.0.0/24"]),
    (
        &["[64:ff9b::7f00:1]:80", "[2002:7f00:1::1]:443"],
        &["64:ff9b::/96", "2002::/16"],
        &[],
    ),
    (
        &["0.0.0.0", "[::]:80", "[::ffff:127.0.0.1]:80"],
        &["0.0.0.0/0"],
        &["192.168.0.0/16"],
    ),
    (
        &["100.64.0.1", "[fe80::1]:443"],
        &["100.64.0.0/10"],
        &["100.64.0.0/24"],
    ),
];

/// Input: byte 0 picks a policy and whether the rest is a CONNECT authority or an absolute
/// `http://` target.
pub fn target(data: &[u8]) -> Result<(), String> {
    let [sel, rest @ ..] = data else {
        return Ok(());
    };
    let Ok(raw) = std::str::from_utf8(rest) else {
        return Ok(());
    };
    let parsed = if sel & 0x80 == 0 {
        let Ok(t) = target::parse_authority(raw) else {
            return Ok(());
        };
        let again = format!("{}:{}", t.host, t.port);
        match target::parse_authority(&again) {
            Ok(t2) if t2 == t => {}
            other => return Err(format!("{raw:?} → {again:?} → {other:?}, not {t:?}")),
        }
        t
    } else {
        let Ok((t, path)) = target::parse_absolute(raw) else {
            return Ok(());
        };
        let again = format!("http://{}:{}{path}", t.host, t.port);
        match target::parse_absolute(&again) {
            Ok((t2, p2)) if t2 == t && p2 == path => {}
            other => return Err(format!("{raw:?} → {again:?} → {other:?}, not {t:?}")),
        }
        t
    };
    match target::canonical_host(&parsed.host.to_string()) {
        Ok(h) if h == parsed.host => {}
        other => return Err(format!("host {} re-reads as {other:?}", parsed.host)),
    }
    match &parsed.host {
        Host::Name(n) => name_is_canonical(n)?,
        Host::Ip(IpAddr::V6(v6)) if v6.to_ipv4_mapped().is_some() => {
            return Err(format!("{v6} is IPv4-mapped, not folded"));
        }
        Host::Ip(_) => {}
    }
    policy_holds(usize::from(*sel & 0x7f), &parsed.host, parsed.port)
}

fn name_is_canonical(n: &str) -> Result<(), String> {
    let ip_spelling = n.parse::<IpAddr>().is_ok()
        || target::inet_aton(n).is_some()
        || n.rsplit('.')
            .next()
            .is_some_and(|l| l.bytes().all(|b| b.is_ascii_digit()));
    if ip_spelling {
        return Err(format!("name {n:?} is an IP spelling"));
    }
    if n.is_empty()
        || n.ends_with('.')
        || n.bytes().any(|b| b.is_ascii_uppercase() || !b.is_ascii())
    {
        return Err(format!("name {n:?} is not canonical"));
    }
    Ok(())
}

fn nets(list: &[&str]) -> Result<Vec<IpNet>, String> {
    list.iter()
        .map(|n| n.parse().map_err(|e| format!("policy net {n}: {e}")))
        .collect()
}

/// The name decision and, for an IP literal, the address check, as the proxy makes them
/// before dialing: special-purpose (by an independent reading) or own-network literals are
/// never allowed unless `--allow-cidr` trusts them, and own networks never.
fn policy_holds(sel: usize, host: &Host, port: u16) -> Result<(), String> {
    let (allow, cidrs, own) = POLICIES[sel % POLICIES.len()];
    let allow: Vec<Rule> = allow
        .iter()
        .map(|r| Rule::parse(r).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    let (cidrs, own) = (nets(cidrs)?, nets(own)?);
    let Host::Ip(ip) = host else {
        return Ok(());
    };
    if matches!(
        rules::decide(&allow, &[], host, port),
        NameDecision::Deny { .. }
    ) {
        return Ok(());
    }
    if !address_allowed(*ip, &cidrs, &own) {
        return Ok(());
    }
    if own.iter().any(|n| n.contains(ip)) {
        return Err(format!(
            "{ip} is in the proxy's own network and was allowed"
        ));
    }
    for a in with_embedded(*ip) {
        if is_special(a) && !cidrs.iter().any(|n| n.contains(&a)) {
            return Err(format!(
                "{ip} (judged as {a}) is special-purpose and was allowed"
            ));
        }
        if own.iter().any(|n| n.contains(&a)) {
            return Err(format!(
                "{ip} embeds {a} of the proxy's own network and was allowed"
            ));
        }
    }
    Ok(())
}

/// `ip` and any IPv4 address an IPv6 translator form embeds (mapped, compatible, NAT64, 6to4,
/// Teredo's client).
fn with_embedded(ip: IpAddr) -> Vec<IpAddr> {
    let mut out = vec![ip];
    if let IpAddr::V6(v6) = ip {
        let o = v6.octets();
        let s = v6.segments();
        let tail = Ipv4Addr::new(o[12], o[13], o[14], o[15]);
        if s[..6] == [0, 0, 0, 0, 0, 0xffff]
            || (s[..6] == [0; 6] && u32::from(tail) > 1)
            || s[..6] == [0x64, 0xff9b, 0, 0, 0, 0]
        {
            out.push(IpAddr::V4(tail));
        }
        if s[0] == 0x2002 {
            out.push(IpAddr::V4(Ipv4Addr::new(o[2], o[3], o[4], o[5])));
        }
        if s[0] == 0x2001 && s[1] == 0 {
            out.push(IpAddr::V4(Ipv4Addr::from(!u32::from(tail))));
        }
    }
    out
}

/// Special-purpose ranges read from the standard library and the IANA registries, apart from
/// `addr`'s table.
fn is_special(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => {
            let [b0, b1, b2, _] = a.octets();
            a.is_private()
                || a.is_loopback()
                || a.is_link_local()
                || a.is_multicast()
                || a.is_broadcast()
                || a.is_documentation()
                || b0 == 0
                || b0 >= 240
                || (b0 == 100 && (64..128).contains(&b1))
                || (b0 == 198 && (18..20).contains(&b1))
                || (b0 == 192 && b1 == 0 && b2 == 0)
        }
        IpAddr::V6(a) => {
            let s = a.segments();
            let v6: Ipv6Addr = a;
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00
                || (s[0] & 0xffc0) == 0xfe80
                || (s[0] & 0xffc0) == 0xfec0
                || (s[0] == 0x2001 && s[1] == 0x0db8)
        }
    }
}

/// Input: byte 0 is the read size (1–256) the stream is split into; the rest is the stream.
pub fn framing(data: &[u8]) -> Result<(), String> {
    let [size, stream @ ..] = data else {
        return Ok(());
    };
    let whole = scan(stream, stream.len().max(1));
    let split = scan(stream, usize::from(*size) + 1);
    if whole != split {
        return Err(format!(
            "verdicts {whole:?} whole, {split:?} in reads of {}",
            usize::from(*size) + 1
        ));
    }
    let Some(end) = stream.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Ok(());
    };
    let head = &stream[..end];
    if let Some(why) = ambiguous(head) {
        if !whole.first().copied().unwrap_or(false) {
            return Err(format!(
                "head with {why} let through: {:?}",
                String::from_utf8_lossy(head)
            ));
        }
    }
    Ok(())
}

/// Whether each head (up to one per CRLF CRLF) was refused, after the stream is read in `size`
/// reads (on a current-thread runtime: the scanner keeps a head deadline).
fn scan(stream: &[u8], size: usize) -> Vec<bool> {
    let verdicts = Verdicts::default();
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
    else {
        return vec![true];
    };
    rt.block_on(async {
        let mut s = scanner(stream, verdicts.clone());
        let mut buf = vec![0u8; size];
        // After a refusal the scanner gives hyper nothing more, not even an end of input.
        while !s.refused() && matches!(s.read(&mut buf).await, Ok(n) if n > 0) {}
    });
    let heads = stream.windows(4).filter(|w| w == b"\r\n\r\n").count();
    (0..=heads).map(|n| verdicts.get(n).is_some()).collect()
}

/// Why a head is ambiguous as hyper's parser (httparse) would read it: a request line and
/// header lines each ended by LF or CRLF, header names tokens, values free of control bytes;
/// a head httparse would refuse is no concern (hyper answers it 400).
fn ambiguous(head: &[u8]) -> Option<&'static str> {
    let mut lines = head.split(|b| *b == b'\n');
    let request_line = lines.next()?;
    let request_line = request_line.strip_suffix(b"\r").unwrap_or(request_line);
    let mut parts = request_line.split(|b| *b == b' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    let request_ok = !method.is_empty()
        && method.iter().all(|b| is_tchar(*b))
        && !target.is_empty()
        && target.iter().all(|b| (0x21..0x7f).contains(b))
        && (version == b"HTTP/1.1" || version == b"HTTP/1.0");
    if !request_ok {
        return None;
    }
    let (mut cl, mut te) = (0, 0);
    for line in lines {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let colon = line.iter().position(|b| *b == b':')?;
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        let valid = !name.is_empty()
            && name.iter().all(|b| is_tchar(*b))
            && value
                .iter()
                .all(|b| *b == b'\t' || *b >= 0x20 && *b != 0x7f);
        if !valid {
            return None;
        }
        if name.eq_ignore_ascii_case(b"content-length") {
            cl += 1;
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            te += 1;
        }
    }
    if cl > 1 {
        Some("a repeated Content-Length")
    } else if cl > 0 && te > 0 {
        Some("Content-Length and Transfer-Encoding")
    } else {
        None
    }
}

/// RFC 9110 token characters.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}
