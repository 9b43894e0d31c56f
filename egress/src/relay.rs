//! The relay rule (`--relay LISTEN=TARGET`): where netproxy accepts inbound connections, and
//! the one target they are all carried to, fixed at start. `LISTEN` is a numeric socket address
//! (`0.0.0.0:8080`, `[::]:8080`, `127.0.0.1:8080`); `TARGET` is `HOST:PORT`, a name (resolved on
//! the sidecar's networks at each connection) or an IP (`10.0.0.5`, `[fd00::5]`), canonical
//! as request targets are (`target::parse_authority`). Nothing a client sends chooses or
//! changes the target. Pure; lifecycle checks its flags with it.

use std::fmt;
use std::net::SocketAddr;

use crate::target::{parse_authority, Target};

/// One relay: its listening address and its fixed target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relay {
    pub listen: SocketAddr,
    pub target: Target,
}

/// Why a relay rule is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("relay {rule:?}: {why}")]
pub struct RelayError {
    pub rule: String,
    pub why: String,
}

impl Relay {
    /// `LISTEN=TARGET`.
    pub fn parse(rule: &str) -> Result<Self, RelayError> {
        let err = |why: String| RelayError {
            rule: rule.to_owned(),
            why,
        };
        let (listen, target) = rule
            .split_once('=')
            .ok_or_else(|| err("expected LISTEN_ADDR:PORT=TARGET_HOST:PORT".into()))?;
        let listen: SocketAddr = listen.parse().map_err(|_| {
            err(format!(
                "listen address {listen:?} is not a numeric address and port (0.0.0.0:8080, [::]:8080)"
            ))
        })?;
        if listen.port() == 0 {
            return Err(err("the listen port must be 1-65535".into()));
        }
        let target = parse_authority(target).map_err(|e| err(format!("target {target:?}: {e}")))?;
        Ok(Self { listen, target })
    }
}

impl fmt::Display for Relay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}={}:{}",
            self.listen, self.target.host, self.target.port
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relay_rules_table() {
        for (rule, shown) in [
            ("0.0.0.0:8080=sandbox:8080", "0.0.0.0:8080=sandbox:8080"),
            (
                "127.0.0.1:18080=Deer-Flow-Sandbox-1.:8080",
                "127.0.0.1:18080=deer-flow-sandbox-1:8080",
            ),
            ("[::]:8080=[fd00::5]:80", "[::]:8080=[fd00::5]:80"),
            ("0.0.0.0:1=10.0.0.5:65535", "0.0.0.0:1=10.0.0.5:65535"),
            ("0.0.0.0:80=stack_web_1:80", "0.0.0.0:80=stack_web_1:80"),
        ] {
            let r = Relay::parse(rule).unwrap_or_else(|e| panic!("{rule}: {e}"));
            assert_eq!(r.to_string(), shown, "{rule}");
            assert_eq!(Relay::parse(shown), Ok(r), "{shown} parses back the same");
        }
        for (rule, why) in [
            ("0.0.0.0:8080", "expected LISTEN_ADDR:PORT=TARGET_HOST:PORT"),
            (
                "localhost:8080=sandbox:8080",
                "listen address \"localhost:8080\" is not a numeric address and port (0.0.0.0:8080, [::]:8080)",
            ),
            ("0.0.0.0:0=sandbox:8080", "the listen port must be 1-65535"),
            ("0.0.0.0:8080=sandbox", "target \"sandbox\": missing port"),
            (
                "0.0.0.0:8080=sandbox:0",
                "target \"sandbox:0\": port must be 1-65535 without leading zeros",
            ),
            ("0.0.0.0:8080=*.test:80", "target \"*.test:80\": malformed host"),
            (
                "0.0.0.0:8080=fd00::5:80",
                "target \"fd00::5:80\": IPv6 addresses must be in brackets",
            ),
            (
                "0.0.0.0:8080=a@sandbox:80",
                "target \"a@sandbox:80\": userinfo is not allowed in the target",
            ),
            (
                "0.0.0.0:8080=sandbox=other:80",
                "target \"sandbox=other:80\": malformed host",
            ),
        ] {
            assert_eq!(
                Relay::parse(rule).map_err(|e| e.why),
                Err(why.to_owned()),
                "{rule}"
            );
        }
    }
}
