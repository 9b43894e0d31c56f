//! Lookup order: full ID, exact name (link aliases included), unique ID prefix; an ambiguous
//! prefix is an error. Through the proxy, a link-alias path is refused and an ambiguous or
//! foreign prefix looks absent.

use serde_json::json;
use sockproxy_tests::raw;

use crate::each_subject;

#[test]
fn containers_resolve_by_full_id_then_name_then_unique_prefix() {
    each_subject(
        "containers_resolve_by_full_id_then_name_then_unique_prefix",
        |s| {
            let a = s.sandbox("a");
            let id_a = s.create(&a, &["sleep", "600"], json!({}));
            for r in [a.as_str(), id_a.as_str(), &id_a[..12]] {
                let got = s.get(&format!("/containers/{r}/json"));
                assert_eq!(got.status, 200, "{r} on {}: {}", s.label(), got.text());
                assert_eq!(got.json()["Id"], json!(id_a));
                assert_eq!(got.json()["Name"], json!(format!("/{a}")));
            }

            // A container *named* like a's ID prefix, made on the engine: the engine's exact-name
            // step wins over the prefix step, so the prefix names the other container.
            let hex_name = s.clean.container(&id_a[..10]);
            let made = raw::request(
                &s.engine.socket,
                "POST",
                &format!("/containers/create?name={hex_name}"),
                Some(
                    json!({ "Image": s.engine.image, "Cmd": ["true"] })
                        .to_string()
                        .as_bytes(),
                ),
            )
            .expect("answer");
            assert_eq!(made.status, 201, "{}", made.text());
            let got = s.get(&format!("/containers/{hex_name}/json"));
            if s.via_proxy() {
                // The proxy resolves a hex reference among the stack's own containers only, so
                // another stack's container (here one named like the prefix) changes nothing:
                // the prefix names a, as it would if that container did not exist.
                assert_eq!(got.status, 200, "{}", got.text());
                assert_eq!(got.json()["Name"], json!(format!("/{a}")));
            } else {
                assert_eq!(got.status, 200);
                assert_eq!(got.json()["Name"], json!(format!("/{hex_name}")));
            }
        },
    );
}

#[test]
fn link_aliases_are_names_to_the_engine_and_refused_by_the_proxy() {
    each_subject(
        "link_aliases_are_names_to_the_engine_and_refused_by_the_proxy",
        |s| {
            // Legacy links are the default bridge's (the proxy's subject may use it).
            let a = s.sandbox("target");
            let bridge = json!({ "HostConfig": { "NetworkMode": "bridge" } });
            let id_a = s.create(&a, &["sleep", "600"], bridge);
            let b = s.sandbox("parent");
            s.create(
                &b,
                &["sleep", "600"],
                json!({ "HostConfig": { "NetworkMode": "bridge", "Links": [format!("{a}:alias")] } }),
            );
            let got = s.get(&format!("/containers/{b}/alias/json"));
            if s.via_proxy() {
                assert_eq!(got.status, 403, "{}", got.text());
                assert!(got.message().starts_with("sockproxy: "), "{}", got.text());
            } else {
                assert_eq!(got.status, 200, "{}", got.text());
                assert_eq!(got.json()["Id"], json!(id_a));
            }
            // The alias is listed among the target's names, and the proxy's filter keeps the
            // entry by its own name only.
            let list = s.get(&format!(
                "/containers/json?all=1&filters={}",
                enc(&json!({ "id": [id_a] }))
            ));
            let names = list.json()[0]["Names"].clone();
            assert!(
                names
                    .as_array()
                    .is_some_and(|n| n.contains(&json!(format!("/{b}/alias")))),
                "{names}"
            );
        },
    );
}

#[test]
fn an_ambiguous_prefix_is_an_error_and_looks_absent_through_the_proxy() {
    each_subject(
        "an_ambiguous_prefix_is_an_error_and_looks_absent_through_the_proxy",
        |s| {
            // 17 containers: two of them must share a first hex digit.
            let mut ids: Vec<String> = Vec::new();
            let shared = loop {
                let name = s.sandbox(&format!("amb{}", ids.len()));
                let id = s.create(&name, &["true"], json!({}));
                if let Some(other) = ids.iter().find(|o| o.as_bytes()[0] == id.as_bytes()[0]) {
                    let common = other
                        .bytes()
                        .zip(id.bytes())
                        .take_while(|(x, y)| x == y)
                        .count();
                    break id[..common].to_owned();
                }
                ids.push(id);
                assert!(ids.len() <= 17, "pigeonhole");
            };
            let got = s.get(&format!("/containers/{shared}/json"));
            if s.via_proxy() {
                assert_eq!(got.status, 404, "{}", got.text());
                assert_eq!(got.message(), format!("No such container: {shared}"));
            } else {
                let (status, message) = s.engine.flavor.ambiguous_prefix(&shared);
                assert_eq!((got.status, got.message()), (status, message));
            }
        },
    );
}

pub fn enc(v: &serde_json::Value) -> String {
    form_urlencoded::byte_serialize(v.to_string().as_bytes()).collect()
}
