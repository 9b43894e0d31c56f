//! Issue 48, point 4 (lifecycle's side): what lifecycle makes has memory, CPU and process
//! limits (`--sandbox-memory 2g --sandbox-cpus 2 --sandbox-pids-limit 512`, the sidecar's `256m`,
//! `1`, `128`), checked on what the engine holds. The fork bomb those limits hold is the test
//! binary `isolation`, which runs alone.

use lifecycle::decide::Mode;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use sockproxy_tests::engine::{each_engine_async, Fakes};
use sockproxy_tests::provisioner::{hex, ApiStack};

fn create(id: &str, thread: &str) -> Value {
    json!({"sandbox_id": id, "thread_id": thread, "user_id": "user-1"})
}

fn derived(thread: &str) -> String {
    hex(&Sha256::digest(format!("user-1:{thread}").as_bytes()))[..16].to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandboxes_and_sidecars_get_memory_cpu_and_process_limits() {
    if !sockproxy_tests::bindroot::can_pin(
        "sandboxes_and_sidecars_get_memory_cpu_and_process_limits",
    ) {
        return;
    }
    each_engine_async(
        "sandboxes_and_sidecars_get_memory_cpu_and_process_limits",
        Fakes::Debian,
        |e| {
            Box::pin(async move {
                let s =
                    ApiStack::start(e, Mode::Restricted, Some(sockproxy_tests::provisioner::KEY))
                        .await;
                let id = derived("limited");
                let (status, text) = s.create(&create(&id, "limited")).await;
                assert_eq!(status, 200, "{text}");
                let digest = hex(&Sha256::digest(
                    format!("{}sandbox:{id}", s.prefix).as_bytes(),
                ))[..16]
                    .to_owned();
                let limits = |c: &Value| {
                    let h = &c["HostConfig"];
                    (
                        h["Memory"].clone(),
                        h["MemorySwap"].clone(),
                        h["NanoCpus"].clone(),
                        h["PidsLimit"].clone(),
                    )
                };
                assert_eq!(
                    limits(&s.inspect(&s.name(&id))),
                    (
                        json!(2_147_483_648_i64),
                        json!(2_147_483_648_i64),
                        json!(2_000_000_000_i64),
                        json!(512)
                    ),
                    "the sandbox: 2 GiB and no swap beyond, 2 CPUs, 512 processes"
                );
                assert_eq!(
                    limits(&s.inspect(&format!("{}netproxy-{digest}", s.prefix))),
                    (
                        json!(268_435_456),
                        json!(268_435_456),
                        json!(1_000_000_000),
                        json!(128)
                    ),
                    "the sidecar: 256 MiB, 1 CPU, 128 processes"
                );
            })
        },
    )
    .await;
}
