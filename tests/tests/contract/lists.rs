//! Container list semantics: `name` values are unanchored regular expressions over "/name",
//! ORed; `label`, `status` and `id` filters; both filter encodings; `all`; `limit`; invalid
//! keys are 400. Through the proxy the same answers, limited to the stack's prefix.

use serde_json::{json, Value};

use crate::each_subject;
use crate::lookup::enc;
use sockproxy_tests::step::step;

fn names(s: &sockproxy_tests::subject::Subject<'_>, query: &str) -> Vec<String> {
    let r = s.get(&format!("/containers/json?{query}"));
    assert_eq!(r.status, 200, "{query} on {}: {}", s.label(), r.text());
    let mut out: Vec<String> = r
        .json()
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|c| {
                    c["Names"][0]
                        .as_str()
                        .map(|n| n.trim_start_matches('/').to_owned())
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

fn filters(v: Value) -> String {
    format!("filters={}", enc(&v))
}

#[test]
fn list_filters_behave_like_dockerd() {
    each_subject("list_filters_behave_like_dockerd", |s| {
        let p = s.prefix.clone();
        let f1 = s.sandbox("f1");
        let f2 = s.sandbox("f2");
        let g3 = s.sandbox("g3");
        let id_f1 = s.create(
            &f1,
            &["sleep", "600"],
            json!({ "Labels": { "ct.k": "v1" } }),
        );
        let id_f2 = s.create(
            &f2,
            &["sleep", "600"],
            json!({ "Labels": { "ct.k": "v2" } }),
        );
        s.create(&g3, &["sleep", "600"], json!({}));
        let mine = |extra: Value| {
            let mut f = json!({ "name": [p.clone()] });
            if let (Some(m), Some(e)) = (f.as_object_mut(), extra.as_object()) {
                for (k, v) in e {
                    m.insert(k.clone(), v.clone());
                }
            }
            format!("all=1&{}", filters(f))
        };
        step(
            "name filters: unanchored expressions, ORed, in both encodings",
            || {
                assert_eq!(
                    names(
                        s,
                        &format!(
                            "all=1&{}",
                            filters(json!({ "name": [format!("{p}sandbox-f")] }))
                        )
                    ),
                    [f1.clone(), f2.clone()]
                );
                assert_eq!(
                    names(
                        s,
                        &format!(
                            "all=1&{}",
                            filters(
                                json!({ "name": [format!("{p}sandbox-f1$"), format!("{p}sandbox-g3")] })
                            )
                        )
                    ),
                    [f1.clone(), g3.clone()]
                );
                assert_eq!(
                    names(
                        s,
                        &format!(
                            "all=1&{}",
                            filters(json!({ "name": [format!("^/{p}sandbox-f")] }))
                        )
                    ),
                    [f1.clone(), f2.clone()]
                );
                // The older encoding, a map of value → true, is still accepted.
                assert_eq!(
                    names(
                        s,
                        &format!("all=1&{}", filters(json!({ "name": { f1.clone(): true } })))
                    ),
                    vec![f1.clone()]
                );
            },
        );
        step("label, status and id filters", || {
            assert_eq!(
                names(s, &mine(json!({ "label": ["ct.k=v1"] }))),
                vec![f1.clone()]
            );
            assert_eq!(
                names(s, &mine(json!({ "label": ["ct.k"] }))),
                [f1.clone(), f2.clone()]
            );
            assert_eq!(
                names(s, &mine(json!({ "status": ["created"] }))),
                [f1.clone(), f2.clone(), g3.clone()]
            );
            assert_eq!(
                names(s, &mine(json!({ "id": [&id_f2[..12]] }))),
                vec![f2.clone()]
            );
        });
        step(
            "a started container: status=running, and all=0 lists running only",
            || {
                s.start(&f1);
                assert_eq!(
                    names(s, &mine(json!({ "status": ["running"] }))),
                    vec![f1.clone()]
                );
                assert_eq!(
                    names(s, &filters(json!({ "name": [p.clone()] }))),
                    vec![f1.clone()],
                    "all=0 lists running only"
                );
            },
        );
        step("limit", || {
            let limited = s.get(&format!("/containers/json?{}&limit=2", mine(json!({}))));
            assert_eq!(
                limited.json().as_array().map(Vec::len),
                Some(2),
                "{}",
                limited.text()
            );
        });
        step("an invalid filter key or value is 400", || {
            let bad = s.get(&format!(
                "/containers/json?{}",
                filters(json!({ "bogus": ["x"] }))
            ));
            assert_eq!(
                (bad.status, bad.message()),
                (400, s.engine.flavor.invalid_filter("bogus"))
            );
            let bad = s.get(&format!(
                "/containers/json?{}",
                filters(json!({ "status": ["sleepy"] }))
            ));
            assert_eq!(
                (bad.status, bad.message()),
                (
                    400,
                    s.engine.flavor.invalid_filter_value("status", "sleepy")
                )
            );
        });
        assert!(!id_f1.is_empty());
    });
}
