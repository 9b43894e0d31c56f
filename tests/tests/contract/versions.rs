//! Version negotiation: `/_ping` names the API version in its headers (what the docker CLI
//! reads first), `/version` agrees, and a versioned path outside the engine's window is 400
//! with dockerd's words. Through the proxy the version segment is kept, so the engine decides.

use sockproxy_tests::raw;

use crate::each_subject;

#[test]
fn version_negotiation_matches_the_engine() {
    each_subject("version_negotiation_matches_the_engine", |s| {
        let head = s.req("HEAD", "/_ping", None);
        assert_eq!(head.status, 200);
        assert!(head.body.is_empty());
        let api = head.header("api-version").unwrap_or_default().to_owned();
        assert!(!api.is_empty(), "{:?}", head.headers);
        let ping = s.get("/_ping");
        assert_eq!(ping.body, b"OK");
        assert!(ping
            .header("cache-control")
            .is_some_and(|c| c.contains("no-cache")));
        assert_eq!(ping.header("ostype"), Some("linux"));
        let version = s.get("/version").json();
        assert_eq!(version["ApiVersion"].as_str(), Some(api.as_str()));
        let min = version["MinAPIVersion"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if let Some(fake) = &s.engine.fake {
            assert_eq!(
                (api.as_str(), min.as_str()),
                (fake.flavor().api_version(), fake.flavor().min_api_version())
            );
        }
        let too_new = s.get("/v99.0/version");
        assert_eq!(too_new.status, 400);
        assert_eq!(
            too_new.message(),
            format!("client version 99.0 is too new. Maximum supported API version is {api}")
        );
        let at_min = s.get(&format!("/v{min}/version"));
        let below_proxy_min =
            sockproxy_policy::settings::api_version(&min).is_some_and(|v| v < (1, 24));
        if s.via_proxy() && below_proxy_min {
            // Below 1.24 a start body replaces the HostConfig: the proxy refuses such versions.
            assert_eq!(at_min.status, 400, "{}", at_min.text());
            assert_eq!(
                at_min.message(),
                format!("sockproxy: bad request: API version v{min} is older than this proxy's minimum 1.24")
            );
            let old_start = s.req(
                "POST",
                "/v1.23/containers/x/start",
                Some(&serde_json::json!({ "Binds": ["/:/host"] })),
            );
            assert_eq!(old_start.status, 400, "{}", old_start.text());
            let at_proxy_min = s.get("/v1.24/version");
            assert_eq!(at_proxy_min.status, 200, "{}", at_proxy_min.text());
        } else {
            assert_eq!(at_min.status, 200, "{}", at_min.text());
        }
        if min == "1.44" {
            let old = s.get("/v1.41/containers/json");
            assert_eq!(old.status, 400);
            assert_eq!(
                old.message(),
                "client version 1.41 is too old. Minimum supported API version is 1.44, please upgrade your client to a newer version"
            );
        }
        // The proxy forwards the version segment it was given.
        let versioned = raw::get(s.socket(), &format!("/v{api}/containers/json")).expect("answer");
        assert_eq!(versioned.status, 200);
    });
}

/// `/info` answers on the engine and, through the proxy, for the stack alone (the docker CLI's
/// `inspect` asks it); `/events` streams on both, and through the proxy only the stack's own objects appear.
#[test]
fn info_and_events_answer_on_the_engine_and_events_are_filtered_by_the_proxy() {
    each_subject(
        "info_and_events_answer_on_the_engine_and_events_are_filtered_by_the_proxy",
        |s| {
            let info = s.get("/info");
            if s.via_proxy() {
                // Answered for the stack alone: the engine's facts, the stack's counts.
                assert_eq!(info.status, 200, "{}", info.text());
                let direct = sockproxy_tests::raw::get(&s.engine.socket, "/info")
                    .expect("answer")
                    .json();
                let got = info.json();
                assert_eq!(got["ServerVersion"], direct["ServerVersion"]);
                assert_eq!(got["OperatingSystem"], direct["OperatingSystem"]);
                assert_eq!(got["ID"], "");
                assert_ne!(got["Name"], direct["Name"]);
                assert_eq!(got["Images"], 0);
                assert!(got["Containers"].is_u64(), "{}", info.text());
                assert!(got.get("DockerRootDir").is_none(), "{}", info.text());
            } else {
                assert_eq!(info.status, 200);
                assert!(info.json()["Containers"].is_u64(), "{}", info.text());
            }
            let mut events = sockproxy_tests::raw::Conn::open(
                s.socket(),
                b"GET /events HTTP/1.1\r\nHost: docker\r\n\r\n",
            )
            .expect("events");
            assert_eq!(events.status, 200, "the head arrives before any event");
            // A foreign container first, then the stack's own: through the proxy only the latter.
            let foreign = s.clean.container(&format!("o{}ev", s.prefix));
            let made = sockproxy_tests::raw::request(
                &s.engine.socket,
                "POST",
                &format!("/containers/create?name={foreign}"),
                Some(
                    serde_json::json!({ "Image": s.engine.image, "Cmd": ["true"] })
                        .to_string()
                        .as_bytes(),
                ),
            )
            .expect("answer");
            assert_eq!(made.status, 201);
            let own = s.sandbox("ev");
            s.create(&own, &["true"], serde_json::json!({}));
            let got = events.read_until(std::time::Duration::from_secs(30), |b| {
                String::from_utf8_lossy(b).contains(&own)
            });
            let text = String::from_utf8_lossy(&got);
            assert!(text.contains("\"create\"") && text.contains(&own), "{text}");
            if s.via_proxy() {
                assert!(
                    !text.contains(&foreign),
                    "a foreign container's event came through: {text}"
                );
            }
        },
    );
}
