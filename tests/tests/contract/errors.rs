//! Error statuses and bodies: name conflict 409, 304 for start/stop that change nothing,
//! remove-running and kill-stopped 409, absent container/exec/image 404, each in dockerd's
//! `{"message": …}` shape with the engine's own wording. Through the proxy the engine's answers
//! for in-scope names pass unchanged.

use serde_json::json;

use crate::each_subject;
use sockproxy_tests::step::step;

#[test]
fn errors_have_dockerds_statuses_and_words() {
    each_subject("errors_have_dockerds_statuses_and_words", |s| {
        let f = s.engine.flavor;
        let e1 = s.sandbox("e1");
        let id = s.create(&e1, &["sleep", "600"], json!({}));
        step("a name conflict is 409 in dockerd's shape", || {
            let again = s.req(
                "POST",
                &format!("/containers/create?name={e1}"),
                Some(&json!({ "Image": s.engine.image, "Cmd": ["true"] })),
            );
            assert_eq!(
                (again.status, again.message()),
                (409, f.name_conflict(&e1, &id))
            );
            assert_eq!(again.header("content-type"), Some("application/json"));
            assert!(
                again.body.ends_with(b"}\n"),
                "dockerd's encoder ends with a newline"
            );
        });

        step("start and stop that change nothing are 304", || {
            assert_eq!(
                s.req("POST", &format!("/containers/{e1}/stop"), None)
                    .status,
                304
            );
            s.start(&e1);
            assert_eq!(
                s.req("POST", &format!("/containers/{e1}/start"), None)
                    .status,
                304
            );
        });
        step(
            "removing a running and killing a stopped container are 409",
            || {
                // Messages that echo the reference show what the engine was asked: through the proxy
                // that is the pinned full ID, not the name the client gave.
                let given = if s.via_proxy() {
                    id.clone()
                } else {
                    e1.clone()
                };
                let rm = s.req("DELETE", &format!("/containers/{e1}"), None);
                assert_eq!(
                    (rm.status, rm.message()),
                    (409, f.remove_running(&given, &id))
                );
                assert_eq!(
                    s.req("POST", &format!("/containers/{e1}/stop?t=1"), None)
                        .status,
                    204
                );
                let kill = s.req("POST", &format!("/containers/{e1}/kill"), None);
                assert_eq!(
                    (kill.status, kill.message()),
                    (409, f.kill_not_running(&given, &id))
                );
            },
        );

        step("absent container, exec and image are 404", || {
            let nope = format!("{}sandbox-nope", s.prefix);
            let absent = s.get(&format!("/containers/{nope}/json"));
            assert_eq!(
                (absent.status, absent.message()),
                (404, f.no_such_container(&nope))
            );
            let exec_id = "0".repeat(64);
            let absent = s.get(&format!("/exec/{exec_id}/json"));
            assert_eq!(
                (absent.status, absent.message()),
                (404, f.no_such_exec(&exec_id))
            );
            let no_image = s.sandbox("noimage");
            let r = s.req(
                "POST",
                &format!("/containers/create?name={no_image}"),
                Some(&json!({ "Image": "sockproxy-no-such-image", "Cmd": ["true"] })),
            );
            assert_eq!(
                (r.status, r.message()),
                (404, f.no_such_image("sockproxy-no-such-image"))
            );
        });

        step("a stopped container is removed", || {
            let rm = s.req("DELETE", &format!("/containers/{e1}"), None);
            assert_eq!(rm.status, 204, "{}", rm.text());
            let gone = s.get(&format!("/containers/{e1}/json"));
            assert_eq!(gone.status, 404);
        });
    });
}
