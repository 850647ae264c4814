//! The controller's Prometheus metrics (names under `ferrolb_`).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

/// Labels of per-pool gauges.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolLabels {
    /// Pool name.
    pub pool: String,
    /// `ipv4` or `ipv6`.
    pub family: String,
}

/// Label of counters by typed reason.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// The reason (an enum's `reason()`), never free text.
    pub reason: String,
}

/// Labels of API error counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabels {
    /// What was attempted (`status_write`, `list`, `event`, ...).
    pub operation: String,
    /// Why it failed: [`crate::apicall::ApiCallError::metric_label`].
    pub reason: String,
}

/// Labels of the per-address assignment gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AssignedLabels {
    /// Service namespace.
    pub namespace: String,
    /// Service name.
    pub service: String,
    /// The address.
    pub ip: String,
}

/// Every metric the controller exports.
#[derive(Clone, Default)]
pub struct Metrics {
    /// Addresses in each pool and family (a float: an IPv6 pool holds more than 2^63).
    pub pool_addresses_total: Family<PoolLabels, Gauge<f64, AtomicU64>>,
    /// Addresses of each pool and family held by Services.
    pub pool_addresses_in_use: Family<PoolLabels, Gauge<f64, AtomicU64>>,
    /// Services that hold at least one address.
    pub services_allocated: Gauge,
    /// Allocation failures by reason.
    pub allocation_failures: Family<ReasonLabels, Counter>,
    /// Kubernetes API errors by operation and reason.
    pub api_errors: Family<OperationLabels, Counter>,
    /// Status writes that changed a Service's addresses.
    pub status_writes: Counter,
    /// Services reconciled by passes (looked at, whether or not anything was written).
    pub services_reconciled: Counter,
    /// Periodic safety-net passes run.
    pub periodic_passes: Counter,
    /// Services the periodic safety net looked up (every cached one in a full look, only
    /// what may have changed in a narrowed one).
    pub periodic_lookups: Counter,
    /// Events dropped because the Event queue was full (the API server is far behind).
    pub events_dropped: Counter,
    /// 1 while this replica leads.
    pub leader: Gauge,
    /// 1 per address assigned, by Service (joined with the speakers' announcements, it shows
    /// an address no node announces).
    pub assigned: Family<AssignedLabels, Gauge>,
}

impl Metrics {
    /// Registers every metric in `registry` (which should carry the `ferrolb` prefix).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "address_pool_addresses_total",
            "Addresses in the pool, per family",
            self.pool_addresses_total.clone(),
        );
        registry.register(
            "address_pool_addresses_in_use",
            "Addresses of the pool assigned to Services, per family",
            self.pool_addresses_in_use.clone(),
        );
        registry.register(
            "services_allocated",
            "Services holding at least one address",
            self.services_allocated.clone(),
        );
        registry.register(
            "allocation_failures",
            "Allocation failures, by reason",
            self.allocation_failures.clone(),
        );
        registry.register(
            "api_errors",
            "Kubernetes API errors, by operation and reason",
            self.api_errors.clone(),
        );
        registry.register(
            "service_status_writes",
            "Service status writes that changed addresses",
            self.status_writes.clone(),
        );
        registry.register(
            "services_reconciled",
            "Services reconciled by passes, whether or not anything was written",
            self.services_reconciled.clone(),
        );
        registry.register(
            "controller_periodic_passes",
            "Periodic safety-net passes run (each reconciles what is not in order)",
            self.periodic_passes.clone(),
        );
        registry.register(
            "controller_periodic_lookups",
            "Services the periodic safety net looked up (all of them only when the cache changed since its last full look, or one look in ten)",
            self.periodic_lookups.clone(),
        );
        registry.register(
            "events_dropped",
            "Events dropped because the Event queue was full",
            self.events_dropped.clone(),
        );
        registry.register(
            "controller_leader",
            "1 while this replica leads",
            self.leader.clone(),
        );
        registry.register(
            "service_address_assigned",
            "1 for each address in a Service's status, by Service and address",
            self.assigned.clone(),
        );
    }

    /// Counts a failed API call of `operation`.
    pub fn api_error(&self, operation: &str, error: &crate::apicall::ApiCallError) {
        self.api_errors
            .get_or_create(&OperationLabels {
                operation: operation.into(),
                reason: error.metric_label().into(),
            })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exposition(m: &Metrics) -> String {
        let mut registry = Registry::with_prefix("ferrolb");
        m.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        text
    }

    #[test]
    fn the_assigned_addresses_the_not_announced_alert_joins_on_are_exported() {
        let m = Metrics::default();
        m.assigned
            .get_or_create(&AssignedLabels {
                namespace: "default".into(),
                service: "web".into(),
                ip: "10.0.0.1".into(),
            })
            .set(1);
        let text = exposition(&m);
        assert!(
            text.contains(
                r#"ferrolb_service_address_assigned{namespace="default",service="web",ip="10.0.0.1"} 1"#
            ),
            "{text}"
        );
    }
}
