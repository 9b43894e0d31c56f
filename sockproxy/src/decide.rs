//! The one loop every request is decided by: evaluate, gather the fact the plan needs (its
//! JSON body, an inspect, the stack's own objects, a create's pinned bind sources: `Gather`),
//! evaluate again with it, until the plan needs nothing, relays the engine's answer, or is
//! refused. Every route goes through it; nothing else calls `evaluate`.

use sockproxy_policy::{evaluate, Decision, Fact, Facts, Need, Plan, Policy, Refusal, Request};

/// More evaluations than any route has steps (an exec start takes four; a create with bind
/// sources, under `--require-stack-label`, one per network it joins besides its body and its
/// pins): a plan that asks for this many facts is refused rather than followed.
const MAX_EVALUATIONS: usize = 9;

/// Finds the facts a plan needs: the transport's I/O (`exchange::Exchange`), or a script in
/// tests.
pub(crate) trait Gather {
    /// The fact `plan.need` names (`facts`: what was found before); a refusal ends the
    /// request (an engine that cannot be reached, a body too large to read).
    async fn gather(&mut self, plan: &Plan, facts: &Facts) -> Result<Fact, Refusal>;

    /// Told of each evaluation (tests count them).
    fn evaluated(&mut self) {}
}

/// How a request was decided: the last decision (a final plan, one that relays the engine's
/// answer, or a refusal), and the facts it stood on.
#[derive(Debug)]
pub(crate) struct Settled {
    pub decision: Decision,
    pub facts: Facts,
}

/// Decides `request`, starting from `facts` (none, or those left after a stale pin was taken
/// back), gathering each fact the plan asks for from `g`.
pub(crate) async fn decide(
    request: &Request<'_>,
    policy: &Policy,
    mut facts: Facts,
    g: &mut impl Gather,
) -> Settled {
    let mut evaluations = 0;
    loop {
        let mut decision = evaluate(request, &facts, policy);
        g.evaluated();
        evaluations += 1;
        // The engine round trips made while gathering are counted under the request's op.
        crate::metrics::set_op(decision.label);
        let plan = match &decision.outcome {
            Ok(plan) if plan.need != Need::Nothing => plan,
            _ => break Settled { decision, facts },
        };
        let gathered = if evaluations < MAX_EVALUATIONS {
            g.gather(plan, &facts).await
        } else {
            Err(Refusal::Upstream(format!("still needs {:?}", plan.need)))
        };
        match gathered {
            Ok(fact) => {
                let need = plan.need.clone();
                facts.give(need, fact);
            }
            Err(refusal) => {
                decision.outcome = Err(refusal);
                break Settled { decision, facts };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{HeaderMap, Method, Uri};
    use sockproxy_policy::settings::CreateRules;
    use sockproxy_policy::{Found, Host, Kind, ObjRef, Prefix, Scope};

    const ID: &str = "1111111111111111111111111111111111111111111111111111111111111111";

    /// An engine that knows one container and counts what it is asked.
    #[derive(Default)]
    struct Script {
        asked: Vec<Need>,
        evaluations: usize,
    }

    impl Gather for Script {
        async fn gather(&mut self, plan: &Plan, _: &Facts) -> Result<Fact, Refusal> {
            self.asked.push(plan.need.clone());
            Ok(match &plan.need {
                Need::Body => Fact::Body(serde_json::json!({"Cmd": ["true"]})),
                Need::StackNetwork => {
                    let mut made = sockproxy_policy::facts::stack_network_body(&policy());
                    made["Id"] = ID.into();
                    let held =
                        sockproxy_policy::facts::StackNetwork::read(made.to_string().as_bytes())?;
                    Fact::StackNetwork(held)
                }
                Need::Usage => Fact::Usage(vec![]),
                Need::Own(_) => Fact::Own(vec![(ID.into(), "deer-flow-sandbox-1".into())]),
                _ => Fact::Object {
                    found: Found {
                        id: ID.into(),
                        name: "/deer-flow-sandbox-1".into(),
                        stack_label: None,
                    },
                    engine_api: Some("1.41".into()),
                },
            })
        }

        fn evaluated(&mut self) {
            self.evaluations += 1;
        }
    }

    fn policy() -> Policy {
        Policy {
            scope: Scope::new(Prefix::parse("deer-flow-").expect("valid"), false),
            stack: "atlas".into(),
            create_rules: CreateRules::default(),
            allow_images: vec![],
            min_api_version: (1, 24),
            host: Host::unread(),
        }
    }

    fn run(method: Method, uri: &str) -> (Settled, Script) {
        let uri: Uri = uri.parse().expect("a URI");
        let headers = HeaderMap::new();
        let request = Request {
            method: &method,
            uri: &uri,
            headers: &headers,
        };
        let mut script = Script::default();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        let decided = rt.block_on(decide(&request, &policy(), Facts::default(), &mut script));
        (decided, script)
    }

    #[test]
    fn a_cold_stop_by_name_is_evaluated_twice_around_one_inspect() {
        let (d, script) = run(Method::POST, "/v1.41/containers/deer-flow-sandbox-1/stop");
        let plan = d.decision.outcome.expect("allowed");
        assert_eq!(plan.pin.as_ref().map(|p| p.id()), Some(ID));
        assert_eq!(script.evaluations, 2);
        assert_eq!(
            script.asked,
            [Need::Object(
                Kind::Container,
                ObjRef::Name("deer-flow-sandbox-1".into())
            )]
        );
    }

    #[test]
    fn each_route_asks_for_each_fact_once() {
        for (method, uri, evaluations, needs) in [
            (Method::GET, "/_ping", 1, 0),
            (Method::GET, "/containers/deer-flow-sandbox-1/json", 2, 1),
            // A prefix: the stack's own containers, then the inspect of the full ID.
            (Method::POST, "/containers/1111/stop", 3, 2),
            // The body before the container.
            (Method::POST, "/containers/deer-flow-sandbox-1/exec", 3, 2),
            // The body, the stack's network, the stack's totals.
            (
                Method::POST,
                "/containers/create?name=deer-flow-sandbox-2",
                4,
                3,
            ),
            (
                Method::GET,
                "/containers/json?filters=%7B%22since%22%3A%5B%22deer-flow-sandbox-1%22%5D%7D",
                2,
                1,
            ),
        ] {
            let (d, script) = run(method, uri);
            assert!(
                d.decision.outcome.is_ok(),
                "{uri}: {:?}",
                d.decision.outcome
            );
            let got = (script.evaluations, script.asked.len());
            assert_eq!(got, (evaluations, needs), "{uri}: {:?}", script.asked);
        }
    }

    #[test]
    fn a_refusal_asks_the_engine_nothing() {
        let (d, script) = run(Method::POST, "/containers/other/stop");
        assert_eq!(d.decision.reason.as_str(), "out_of_scope");
        assert_eq!((script.evaluations, script.asked.len()), (1, 0));
    }
}
