//! bollard (what lifecycle uses) through sockproxy in front of the real dockerd: version
//! negotiation, list, create, inspect, start, remove; refusals arrive as dockerd-shaped errors.

use std::collections::HashMap;

use bollard::container::{
    Config, CreateContainerOptions, ListContainersOptions, RemoveContainerOptions,
    StartContainerOptions,
};
use bollard::Docker;
use sockproxy_tests::cli::docker;
use sockproxy_tests::engine::{each_engine_async, Cleanup, Fakes};
use sockproxy_tests::stack::StackProxy;
use sockproxy_tests::step::step_async;
use sockproxy_tests::unique_prefix;

#[tokio::test]
async fn bollard_negotiates_lists_creates_and_inspects() {
    each_engine_async(
        "bollard_negotiates_lists_creates_and_inspects",
        Fakes::Debian,
        |e| {
            Box::pin(async move {
                let prefix = unique_prefix();
                let mut clean = Cleanup::new(&e.socket);
                let outsider = clean.container(&format!("o{prefix}outside"));
                let out = docker(
                    &e.socket,
                    &["create", "--name", &outsider, &e.image, "true"],
                );
                assert!(out.ok(), "{}", out.stderr);
                let p = StackProxy::start(&e.socket, &prefix, false);
                let client = step_async("version negotiation through the proxy", async {
                    let client = Docker::connect_with_unix(
                        &p.socket().display().to_string(),
                        60,
                        bollard::API_DEFAULT_VERSION,
                    )
                    .expect("client")
                    .negotiate_version()
                    .await
                    .expect("version negotiation through the proxy");
                    let version = client.version().await.expect("GET /version");
                    assert!(version.api_version.is_some());
                    client
                })
                .await;

                let name = step_async("create, start and inspect in scope", async {
                    let name = clean.container(&format!("{prefix}sandbox-bollard"));
                    let mut labels = HashMap::new();
                    labels.insert("deerflow.role", "sandbox");
                    let created = client
                        .create_container(
                            Some(CreateContainerOptions {
                                name: name.as_str(),
                                platform: None,
                            }),
                            Config {
                                image: Some(e.image.as_str()),
                                cmd: Some(vec!["sleep", "600"]),
                                labels: Some(labels),
                                ..Default::default()
                            },
                        )
                        .await
                        .expect("create in scope");
                    client
                        .start_container(&name, None::<StartContainerOptions<String>>)
                        .await
                        .expect("start");
                    let inspected = client
                        .inspect_container(&name, None)
                        .await
                        .expect("inspect");
                    assert_eq!(inspected.id.as_deref(), Some(created.id.as_str()));
                    assert_eq!(inspected.name.as_deref(), Some(format!("/{name}").as_str()));
                    name
                })
                .await;

                step_async("the list holds the stack's container only", async {
                    let listed = client
                        .list_containers(Some(ListContainersOptions::<String> {
                            all: true,
                            ..Default::default()
                        }))
                        .await
                        .expect("list");
                    let names: Vec<String> = listed
                        .iter()
                        .flat_map(|c| c.names.clone().unwrap_or_default())
                        .collect();
                    assert_eq!(names, [format!("/{name}")]);
                })
                .await;

                step_async(
                    "out-of-scope create and foreign inspect are refused as dockerd errors",
                    async {
                        let refused = client
                            .create_container(
                                Some(CreateContainerOptions {
                                    name: "not-this-stack",
                                    platform: None,
                                }),
                                Config {
                                    image: Some(e.image.as_str()),
                                    ..Default::default()
                                },
                            )
                            .await
                            .expect_err("out-of-scope create is refused");
                        match refused {
                            bollard::errors::Error::DockerResponseServerError {
                                status_code,
                                message,
                            } => {
                                assert_eq!(status_code, 403);
                                assert_eq!(
                message,
                "sockproxy: containers.create: not-this-stack is not one of this stack's sandboxes"
            );
                            }
                            other => panic!("unexpected error {other:?}"),
                        }
                        let refused = client
                            .inspect_container(&outsider, None)
                            .await
                            .expect_err("foreign inspect");
                        assert!(matches!(
                            refused,
                            bollard::errors::Error::DockerResponseServerError {
                                status_code: 403,
                                ..
                            }
                        ));
                    },
                )
                .await;

                step_async("remove, then inspect is 404", async {
                    client
                        .remove_container(
                            &name,
                            Some(RemoveContainerOptions {
                                force: true,
                                ..Default::default()
                            }),
                        )
                        .await
                        .expect("remove");
                    let gone = client
                        .inspect_container(&name, None)
                        .await
                        .expect_err("removed");
                    assert!(matches!(
                        gone,
                        bollard::errors::Error::DockerResponseServerError {
                            status_code: 404,
                            ..
                        }
                    ));
                })
                .await;
            })
        },
    )
    .await;
}
