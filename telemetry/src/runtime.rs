//! The async runtime's own figures on `/metrics`, read at each scrape.
//!
//! A task that is spawned per event and never ends (a watch restarted without the old one
//! stopping, a peer task left behind by a configuration change) shows as a count that grows
//! while nothing else does; the soak bench (`tests/benches/soak.rs`) samples it every minute
//! beside RSS and open file descriptors.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

/// Reads the runtime it was registered on at every scrape.
#[derive(Debug)]
struct RuntimeCollector {
    handle: tokio::runtime::Handle,
}

impl Collector for RuntimeCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let metrics = self.handle.metrics();
        let tasks = ConstGauge::new(metrics.num_alive_tasks() as i64);
        let task_encoder = encoder.encode_descriptor(
            "runtime_tasks",
            "Tasks alive on the process's async runtime (spawned and not yet finished)",
            None,
            tasks.metric_type(),
        )?;
        tasks.encode(task_encoder)?;
        let workers = ConstGauge::new(metrics.num_workers() as i64);
        let worker_encoder = encoder.encode_descriptor(
            "runtime_workers",
            "Worker threads of the process's async runtime",
            None,
            workers.metric_type(),
        )?;
        workers.encode(worker_encoder)
    }
}

/// Registers `runtime_tasks` and `runtime_workers` (with the registry's prefix:
/// `ferrolb_runtime_tasks`), read from the runtime this is called on. Call it from inside the
/// runtime (`main` under `#[tokio::main]`); outside one it registers nothing and says so.
pub fn register_runtime_metrics(registry: &mut Registry) {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => registry.register_collector(Box::new(RuntimeCollector { handle })),
        Err(e) => tracing::warn!(error = %e, "no async runtime: runtime metrics not registered"),
    }
}
