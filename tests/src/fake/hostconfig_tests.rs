use super::*;

fn host(flavor: Flavor, body: &str) -> Option<Map<String, Value>> {
    decode(flavor, body.as_bytes()).expect("decodes").host
}

#[test]
fn members_keep_order_and_duplicates() {
    let m = members(r#" {"a" : [1, {"x":"}"}], "b":"q\"}", "a":null , "c": 2.5e1, "d":true}"#)
        .expect("object");
    let keys: Vec<&str> = m.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["a", "b", "a", "c", "d"]);
    assert_eq!(m[1].1, json!("q\"}"));
    assert_eq!(m[2].1, Value::Null);
    assert_eq!(m[3].1, json!(25.0));
    assert_eq!(members("[1]"), None);
}

#[test]
fn top_level_host_config_is_used_on_20_10_when_the_key_is_absent_or_null() {
    for body in [
        r#"{"Image":"x","Binds":["/:/host"],"Privileged":true,"PidMode":"host"}"#,
        r#"{"Image":"x","HostConfig":null,"binds":["/:/host"],"PRIVILEGED":true,"pidmode":"host"}"#,
        r#"{"Image":"x","HostConfig":{"Privileged":false},"hostconfig":null,"Binds":["/:/host"],"Privileged":true,"PidMode":"host"}"#,
    ] {
        let hc = host(Flavor::Debian2010, body).expect("a host config");
        assert_eq!(hc["Binds"], json!(["/:/host"]), "{body}");
        assert_eq!(hc["Privileged"], json!(true), "{body}");
        assert_eq!(hc["PidMode"], json!("host"), "{body}");
        assert_eq!(hc["NetworkMode"], json!("default"), "{body}");
        // Docker 29 ignores them.
        assert_eq!(host(Flavor::Docker29, body), None, "{body}");
    }
}

#[test]
fn last_spelling_wins_and_go_folds_long_s_and_kelvin() {
    let hc = host(
        Flavor::Debian2010,
        r#"{"Image":"x","Privileged":false,"privileged":true,"ſecurityOpt":["a"],"KernelMemory":1,"\u212Aernelmemory":2}"#,
    )
    .expect("host config");
    assert_eq!(hc["Privileged"], json!(true));
    assert_eq!(hc["SecurityOpt"], json!(["a"]));
    assert_eq!(hc["KernelMemory"], json!(2));
}

#[test]
fn inner_host_config_wins_but_takes_five_resource_fields_from_the_top() {
    let body = r#"{"Image":"x","HostConfig":{"binds":["/a:/a"],"Memory":0,"logconfig":{"type":"syslog"}},
        "Binds":["/:/host"],"Privileged":true,"Memory":1048576,"CpusetCpus":"0","VolumeDriver":"evil"}"#;
    let hc = host(Flavor::Debian2010, body).expect("host config");
    assert_eq!(hc["Binds"], json!(["/a:/a"]));
    assert_eq!(hc.get("Privileged"), None);
    assert_eq!(hc["Memory"], json!(1_048_576));
    assert_eq!(hc["CpusetCpus"], json!("0"));
    assert_eq!(hc["VolumeDriver"], json!("evil"));
    assert_eq!(hc["LogConfig"], json!({ "Type": "syslog" }));
    let hc = host(Flavor::Docker29, body).expect("host config");
    assert_eq!(hc.get("Memory"), Some(&json!(0)));
    assert_eq!(hc.get("VolumeDriver"), None);
}

#[test]
fn config_keys_are_case_insensitive_too() {
    let d = decode(
        Flavor::Docker29,
        br#"{"image":"busybox","CMD":["sh"],"networkingconfig":{"EndpointsConfig":{}}}"#,
    )
    .expect("decodes");
    assert_eq!(d.config["Image"], json!("busybox"));
    assert_eq!(d.config["Cmd"], json!(["sh"]));
    assert_eq!(d.networking, json!({ "EndpointsConfig": {} }));
    assert_eq!(d.host, None);
    assert_eq!(
        decode(Flavor::Debian2010, br#"{"Image":"x","HostConfig":"host"}"#).map(|_| ()),
        Err("json: cannot unmarshal into Go struct field ContainerConfigWrapper.HostConfig of type container.HostConfig".into())
    );
}

#[test]
fn start_body_replaces_below_1_24_and_is_refused_from_1_24() {
    let f = Flavor::Debian2010;
    let body = br#"{"Binds":["/:/host"]}"#;
    let len = Some(body.len() as u64);
    let ct = Some("application/json");
    let hc = start_body(f, Some("1.23"), len, false, ct, body)
        .expect("accepted")
        .expect("a replacement");
    assert_eq!(hc["Binds"], json!(["/:/host"]));
    assert_eq!(hc["Privileged"], json!(false));
    let wrapped = br#"{"HostConfig":{"Privileged":true}}"#;
    let hc = start_body(f, Some("1.12"), None, true, ct, wrapped)
        .expect("accepted")
        .expect("a replacement");
    assert_eq!(hc["Privileged"], json!(true));
    let removed = "starting container with non-empty request body was deprecated since API v1.22 and removed in v1.24";
    for v in [Some("1.24"), Some("1.41"), None] {
        assert_eq!(
            start_body(f, v, len, false, ct, body),
            Err(removed.into()),
            "{v:?}"
        );
    }
    // Seven bytes or fewer is "no body", whatever the version.
    assert_eq!(
        start_body(f, Some("1.41"), Some(2), false, ct, b"{}"),
        Ok(None)
    );
    assert_eq!(start_body(f, None, Some(0), false, None, b""), Ok(None));
    assert!(
        start_body(f, Some("1.23"), len, false, Some("text/plain"), body)
            .is_err_and(|e| e.contains("must be 'application/json'"))
    );
}

mod over_http {
    use super::super::super::{FakeEngine, Flavor};
    use crate::raw;
    use serde_json::{json, Value};

    fn create(e: &FakeEngine, name: &str, body: &str) -> raw::RawResponse {
        raw::request(
            e.socket(),
            "POST",
            &format!("/containers/create?name={name}"),
            Some(body.as_bytes()),
        )
        .expect("answer")
    }

    fn host_config(e: &FakeEngine, name: &str) -> Value {
        let r = raw::get(e.socket(), &format!("/containers/{name}/json")).expect("answer");
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()["HostConfig"].clone()
    }

    #[test]
    fn a_legacy_create_body_takes_effect_on_20_10_only() {
        let body = r#"{"Image":"busybox","Cmd":["sleep","60"],"binds":["/:/host"],"Privileged":true,"PidMode":"host"}"#;
        let e = FakeEngine::start(Flavor::Debian2010);
        assert_eq!(create(&e, "legacy", body).status, 201);
        let hc = host_config(&e, "legacy");
        assert_eq!(hc["Binds"], json!(["/:/host"]));
        assert_eq!(hc["Privileged"], json!(true));
        assert_eq!(hc["PidMode"], json!("host"));

        let e = FakeEngine::start(Flavor::Docker29);
        let r = create(&e, "legacy", body);
        assert_eq!(r.status, 201, "{}", r.text());
        let hc = host_config(&e, "legacy");
        assert_eq!(hc["Binds"], Value::Null);
        assert_eq!(hc["Privileged"], json!(false));
        assert_eq!(hc["PidMode"], json!(""));
    }

    #[test]
    fn an_old_api_start_body_replaces_the_host_config() {
        let e = FakeEngine::start(Flavor::Debian2010);
        let harmless =
            r#"{"Image":"busybox","Cmd":["sleep","60"],"HostConfig":{"NetworkMode":"none"}}"#;
        let r = create(&e, "c1", harmless);
        assert_eq!(r.status, 201, "{}", r.text());
        assert_eq!(create(&e, "c2", harmless).status, 201);
        let evil = br#"{"Binds":["/:/host"],"NetworkMode":"host"}"#;

        let r = raw::request(e.socket(), "POST", "/v1.24/containers/c2/start", Some(evil))
            .expect("answer");
        assert_eq!(r.status, 400);
        assert_eq!(r.message(), "starting container with non-empty request body was deprecated since API v1.22 and removed in v1.24");
        assert_eq!(host_config(&e, "c2")["Binds"], Value::Null);

        let r = raw::request(e.socket(), "POST", "/v1.23/containers/c1/start", Some(evil))
            .expect("answer");
        assert_eq!(r.status, 204, "{}", r.text());
        let hc = host_config(&e, "c1");
        assert_eq!(hc["Binds"], json!(["/:/host"]));
        assert_eq!(hc["NetworkMode"], json!("host"));
        let host = raw::get(e.socket(), "/networks/host")
            .expect("answer")
            .json();
        let names: Vec<&Value> = host["Containers"]
            .as_object()
            .expect("a map")
            .values()
            .map(|c| &c["Name"])
            .collect();
        assert_eq!(names, [&json!("c1")]);

        // Docker 29 refuses the old version before anything else.
        let e = FakeEngine::start(Flavor::Docker29);
        let r = raw::request(e.socket(), "POST", "/v1.23/containers/c1/start", Some(evil))
            .expect("answer");
        assert_eq!(r.status, 400);
        assert!(r.message().contains("too old"), "{}", r.message());
    }
}
