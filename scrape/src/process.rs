//! What every program's `/metrics` carries besides its own families: `{program}_build_info`
//! (the version, as a label on a constant 1) and the `process_*` families Prometheus clients
//! conventionally export (CPU seconds, resident and virtual memory, open and maximum
//! descriptors, threads, start time), read from `/proc` at each scrape.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Registry;

/// Registers `{program}_build_info{version}` (1) and the process collector in `registry`.
pub fn register_standard(registry: &mut Registry, program: &str, version: &str) {
    let info = Family::<Vec<(String, String)>, Gauge>::default();
    info.get_or_create(&vec![("version".to_owned(), version.to_owned())])
        .set(1);
    registry.register(
        format!("{program}_build_info"),
        format!("{program}'s version (a constant 1 labelled with it)"),
        info,
    );
    registry.register_collector(Box::new(ProcessCollector));
}

/// Reads this process's `/proc` entries at each scrape; a value it cannot read is left out of
/// that scrape rather than written as 0.
#[derive(Debug)]
struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Ok(me) = procfs::process::Process::myself() else {
            return Ok(());
        };
        if let Ok(stat) = me.stat() {
            let ticks = procfs::ticks_per_second() as f64;
            counter(
                &mut encoder,
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds",
                (stat.utime + stat.stime) as f64 / ticks,
            )?;
            gauge(
                &mut encoder,
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                stat.vsize as f64,
            )?;
            gauge(
                &mut encoder,
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                (stat.rss * procfs::page_size()) as f64,
            )?;
            gauge(
                &mut encoder,
                "process_threads",
                "Number of OS threads in the process",
                stat.num_threads as f64,
            )?;
            if let Ok(boot) = procfs::boot_time_secs() {
                gauge(
                    &mut encoder,
                    "process_start_time_seconds",
                    "Start time of the process since the Unix epoch in seconds",
                    boot as f64 + stat.starttime as f64 / ticks,
                )?;
            }
        }
        if let Ok(n) = me.fd_count() {
            gauge(
                &mut encoder,
                "process_open_fds",
                "Number of open file descriptors",
                n as f64,
            )?;
        }
        if let Ok(limits) = me.limits() {
            if let procfs::process::LimitValue::Value(n) = limits.max_open_files.soft_limit {
                gauge(
                    &mut encoder,
                    "process_max_fds",
                    "Maximum number of open file descriptors",
                    n as f64,
                )?;
            }
        }
        Ok(())
    }
}

fn counter(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: f64,
) -> Result<(), std::fmt::Error> {
    let c = ConstCounter::new(value);
    c.encode(encoder.encode_descriptor(name, help, None, c.metric_type())?)
}

fn gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: f64,
) -> Result<(), std::fmt::Error> {
    let g = ConstGauge::new(value);
    g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_info_and_process_families_are_written() {
        let mut registry = Registry::default();
        register_standard(&mut registry, "sockproxy", "1.2.3");
        let text = crate::encode(&registry);
        assert!(
            text.contains("sockproxy_build_info{version=\"1.2.3\"} 1\n"),
            "{text}"
        );
        for family in [
            "process_cpu_seconds_total ",
            "process_resident_memory_bytes ",
            "process_virtual_memory_bytes ",
            "process_open_fds ",
            "process_max_fds ",
            "process_threads ",
            "process_start_time_seconds ",
        ] {
            assert!(
                text.lines().any(|l| l.starts_with(family)),
                "{family} in {text}"
            );
        }
    }
}
