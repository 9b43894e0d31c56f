//! Network operations (the proxy is `--restricted`, so `{P}net-*` is the stack's): create,
//! duplicate-name refusal, internal flag, connect, active-endpoint refusal, disconnect, remove,
//! absent, list filter.

use serde_json::json;

use crate::each_subject;
use crate::lookup::enc;
use sockproxy_tests::step::step;

#[test]
fn networks_behave_like_dockerd() {
    each_subject("networks_behave_like_dockerd", |s| {
        let f = s.engine.flavor;
        let net = s.network("c");
        let internal = s.network("i");
        let create = |name: &str, internal: bool| {
            s.req(
                "POST",
                "/networks/create",
                Some(&json!({ "Name": name, "CheckDuplicate": true, "Internal": internal })),
            )
        };
        let net_id = step("create, a duplicate name refused, internal", || {
            let made = create(&net, false);
            assert_eq!(made.status, 201, "{}", made.text());
            let net_id = made.json()["Id"].as_str().unwrap_or_default().to_owned();
            let dup = create(&net, false);
            assert_eq!((dup.status, dup.message()), (409, f.network_exists(&net)));
            assert_eq!(create(&internal, true).status, 201);
            let got = s.get(&format!("/networks/{internal}"));
            assert_eq!(got.json()["Internal"], json!(true));
            assert_eq!(
                s.get(&format!("/networks/{net}")).json()["Id"],
                json!(net_id)
            );
            net_id
        });

        let c = step("connect a running container", || {
            let c = s.sandbox("n");
            let cid = s.create(&c, &["sleep", "600"], json!({}));
            s.start(&c);
            let connect = s.req(
                "POST",
                &format!("/networks/{net}/connect"),
                Some(&json!({ "Container": c })),
            );
            assert_eq!(connect.status, 200, "{}", connect.text());
            let on_net = s.get(&format!("/networks/{net}"));
            assert!(
                on_net.json()["Containers"].get(&cid).is_some(),
                "{}",
                on_net.text()
            );
            assert!(
                s.get(&format!("/containers/{c}/json")).json()["NetworkSettings"]["Networks"]
                    .get(&net)
                    .is_some()
            );
            c
        });

        step("an active endpoint blocks removal", || {
            let busy = s.req("DELETE", &format!("/networks/{net}"), None);
            assert_eq!(busy.status, 403, "{}", busy.text());
            let expected = f.network_active_endpoints(&net, &net_id, &[]);
            let stem = expected.split(" (").next().unwrap_or(&expected);
            assert!(
                busy.message().starts_with(stem),
                "{} vs {stem}",
                busy.message()
            );
        });

        step("disconnect, remove, then absent", || {
            let disconnect = s.req(
                "POST",
                &format!("/networks/{net}/disconnect"),
                Some(&json!({ "Container": c })),
            );
            assert_eq!(disconnect.status, 200, "{}", disconnect.text());
            assert_eq!(
                s.req("DELETE", &format!("/networks/{net}"), None).status,
                204
            );
            let gone = s.get(&format!("/networks/{net}"));
            assert_eq!(
                (gone.status, gone.message()),
                (404, f.no_such_network(&net))
            );
        });

        step("the name filter lists what is left", || {
            let listed = s.get(&format!(
                "/networks?filters={}",
                enc(&json!({ "name": [s.prefix.clone()] }))
            ));
            let names: Vec<String> = listed
                .json()
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|n| n["Name"].as_str().map(str::to_owned))
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
                .into_iter()
                // The stack's own network, which the proxy made for an earlier create.
                .filter(|n| s.proxy.as_ref().is_none_or(|p| *n != p.stack_network))
                .collect();
            assert_eq!(names, vec![internal.clone()]);
        });
    });
}
