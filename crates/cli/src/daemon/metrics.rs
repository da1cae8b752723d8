//! The node's Prometheus metrics, encoded from a fresh snapshot at every scrape (a
//! `prometheus_client` collector: the manager keeps plain counters, nothing is double-kept).
//!
//! Invariant: no metric carries an rkey, a tenant secret or a client's address.

use super::view::NodeView;
use patronus_core::manager::{Class, ClassCounters, NodeStats, SERVICE_BUCKETS, ServiceTimes};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet as NoLabels};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The collector: reads the node's stats when scraped.
#[derive(Debug)]
struct NodeCollector {
    node: Arc<dyn NodeView>,
}

fn counter(e: &mut DescriptorEncoder<'_>, name: &str, help: &str, v: u64) -> std::fmt::Result {
    let c = ConstCounter::new(v);
    c.encode(e.encode_descriptor(name, help, None, c.metric_type())?)
}

fn gauge(e: &mut DescriptorEncoder<'_>, name: &str, help: &str, v: i64) -> std::fmt::Result {
    let g = ConstGauge::new(v);
    g.encode(e.encode_descriptor(name, help, None, g.metric_type())?)
}

fn gauge_f(e: &mut DescriptorEncoder<'_>, name: &str, help: &str, v: f64) -> std::fmt::Result {
    let g = ConstGauge::new(v);
    g.encode(e.encode_descriptor(name, help, None, g.metric_type())?)
}

fn service_histogram(e: &mut DescriptorEncoder<'_>, t: &ServiceTimes) -> std::fmt::Result {
    let mut buckets = Vec::with_capacity(SERVICE_BUCKETS);
    for (i, n) in t.buckets.iter().enumerate() {
        let le = ServiceTimes::bound_us(i).map_or(f64::INFINITY, |us| us as f64 / 1e6);
        buckets.push((le, *n));
    }
    let mut m = e.encode_descriptor(
        "patronus_rpc_service_seconds",
        "Time the manager took to answer a control request (its turn, up to the reply)",
        None,
        MetricType::Histogram,
    )?;
    m.encode_histogram::<NoLabels>(t.sum_us as f64 / 1e6, t.count(), &buckets, None)
}

fn as_i64(v: usize) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl Collector for NodeCollector {
    fn encode(&self, mut e: DescriptorEncoder<'_>) -> std::fmt::Result {
        let s: NodeStats = self.node.stats();
        let c = s.counters;
        let revoked = c.ended.saturating_sub(c.expired + c.forced);
        let e = &mut e;
        counter(e, "patronus_grants", "Permissions granted", c.granted)?;
        counter(
            e,
            "patronus_revokes",
            "Permissions ended by revoke",
            revoked,
        )?;
        counter(
            e,
            "patronus_expiries",
            "Permissions ended by lease expiry",
            c.expired,
        )?;
        counter(
            e,
            "patronus_forced_invalidations",
            "Permissions ended at their maximum lifetime",
            c.forced,
        )?;
        counter(
            e,
            "patronus_extensions_by_cas",
            "Expiry checks that found the lease extended one-sidedly (CAS)",
            c.extended_by_client,
        )?;
        counter(
            e,
            "patronus_extensions_by_rpc",
            "Lease extensions asked for by RPC",
            c.extend_rpcs,
        )?;
        counter(
            e,
            "patronus_refusals",
            "Requests the manager refused",
            c.refused,
        )?;
        counter(
            e,
            "patronus_overloaded_refusals",
            "Requests refused as overloaded (admission control, draining)",
            c.overloaded,
        )?;
        counter(e, "patronus_rpcs", "Control RPCs received", c.rpcs)?;
        counter(e, "patronus_mw_binds", "Window binds that granted", c.binds)?;
        counter(e, "patronus_mw_unbinds", "Window unbinds", c.unbinds)?;
        counter(
            e,
            "patronus_mw_handovers",
            "Binds that also revoked an earlier binding (handover)",
            c.handovers,
        )?;
        counter(
            e,
            "patronus_qp_errors",
            "Client sessions ended because their control QP failed (transport or protocol \
             error, reset, retries exhausted; not a client's orderly disconnect)",
            s.sessions_ended.broken,
        )?;
        counter(
            e,
            "patronus_sessions_closed",
            "Client sessions ended by the client closing its connection in order",
            s.sessions_ended.closed,
        )?;
        counter(
            e,
            "patronus_spare_promotions",
            "Data QPs replaced after an access fault (a client's spare taking over)",
            s.data_reconnects,
        )?;
        counter(
            e,
            "patronus_spare_promotions_refused",
            "Data QP replacements refused (a tenant's fault budget ran out)",
            s.reconnects_refused,
        )?;
        counter(
            e,
            "patronus_sessions_refused_node_rate",
            "New sessions refused at the handshake: the node's session rate was spent",
            s.sessions_rate_refused.0,
        )?;
        counter(
            e,
            "patronus_sessions_refused_tenant_rate",
            "Hellos refused as overloaded: the tenant's session rate was spent",
            s.sessions_rate_refused.1,
        )?;
        counter(
            e,
            "patronus_priority_throttles",
            "Times the priority policy started throttling low-priority tenants' data QPs",
            s.priority.engaged,
        )?;
        counter(
            e,
            "patronus_priority_releases",
            "Times the priority policy lifted that limit",
            s.priority.lifted,
        )?;
        gauge(
            e,
            "patronus_priority_throttled",
            "Whether low-priority tenants' data QPs are throttled now (1) or not (0)",
            i64::from(s.priority.throttled),
        )?;
        gauge(
            e,
            "patronus_priority_high_ops_per_second",
            "High-priority tenants' one-sided operations a second in the policy's last period",
            i64::try_from(s.priority.high_ops_per_s).unwrap_or(i64::MAX),
        )?;
        let occ = s.occupancy.unwrap_or_default();
        gauge(
            e,
            "patronus_live_permissions",
            "Live permissions",
            as_i64(occ.permissions),
        )?;
        gauge(
            e,
            "patronus_live_objects",
            "Allocated objects",
            as_i64(occ.live_objects),
        )?;
        gauge(
            e,
            "patronus_sessions",
            "Client sessions",
            as_i64(s.held.sessions),
        )?;
        gauge(
            e,
            "patronus_pool_bytes_in_use",
            "Pool bytes held by live objects and headers",
            i64::try_from(s.pool_bytes_in_use).unwrap_or(i64::MAX),
        )?;
        gauge(
            e,
            "patronus_unenforced_window_bounds",
            "1 if the node serves although its NIC does not enforce window bounds \
             (allow_unenforced_window_bounds; clients are not isolated within the pool)",
            i64::from(self.node.unenforced_window_bounds()),
        )?;
        gauge(
            e,
            "patronus_pool_bytes",
            "Pool bytes in all",
            i64::try_from(self.node.pool_bytes()).unwrap_or(i64::MAX),
        )?;
        gauge(
            e,
            "patronus_headers_free",
            "Free permission headers",
            as_i64(occ.headers_free),
        )?;
        gauge(
            e,
            "patronus_windows_free",
            "Free memory windows",
            as_i64(occ.mw_free),
        )?;
        gauge_f(
            e,
            "patronus_manager_cpu_seconds",
            "CPU time of the manager threads (idle polling included)",
            s.manager_cpu.as_secs_f64(),
        )?;
        gauge_f(
            e,
            "patronus_manager_busy_cpu_seconds",
            "CPU time of the manager threads handling batches",
            s.busy_cpu.as_secs_f64(),
        )?;
        gauge_f(
            e,
            "patronus_manager_nic_call_seconds",
            "Of the busy time, wall time inside NIC calls (sampled): the software NIC's work runs there",
            s.nic_calls.as_secs_f64(),
        )?;
        service_histogram(e, &s.service)?;
        class_counters(e, &s.classes)
    }
}

/// The manager's fair queue, per class of senders: label `class` is `unauthenticated` or
/// `tenant-N` (a tenant id is not a secret).
fn class_counters(
    e: &mut DescriptorEncoder<'_>,
    classes: &BTreeMap<Class, ClassCounters>,
) -> std::fmt::Result {
    let label = |c: &Class| match c {
        Class::Unauthenticated => "unauthenticated".to_owned(),
        Class::Tenant(t) => format!("tenant-{t}"),
    };
    type Field = fn(&ClassCounters) -> f64;
    let families: [(&str, &str, MetricType, Field); 5] = [
        (
            "patronus_manager_requests_served",
            "Control messages the manager's fair queue gave a batch, per class",
            MetricType::Counter,
            |c| c.served as f64,
        ),
        (
            "patronus_manager_cost_units",
            "Cost units charged for them (4 for a request that binds windows or frees memory, 1 otherwise)",
            MetricType::Counter,
            |c| c.cost_units as f64,
        ),
        (
            "patronus_manager_requests_refused",
            "Control messages dropped because their session had its share queued already",
            MetricType::Counter,
            |c| c.refused as f64,
        ),
        (
            "patronus_manager_queue_delay_seconds",
            "Time served messages waited in the fair queue, summed",
            MetricType::Counter,
            |c| c.queue_delay_us as f64 / 1e6,
        ),
        (
            "patronus_manager_max_queue_delay_seconds",
            "Longest time a served message waited in the fair queue",
            MetricType::Gauge,
            |c| c.max_queue_delay_us as f64 / 1e6,
        ),
    ];
    for (name, help, kind, field) in families {
        let mut family = e.encode_descriptor(name, help, None, kind)?;
        for (class, c) in classes {
            let labels = [("class", label(class))];
            let m = family.encode_family(&labels)?;
            match kind {
                MetricType::Counter => ConstCounter::new(field(c)).encode(m)?,
                _ => ConstGauge::new(field(c)).encode(m)?,
            }
        }
    }
    Ok(())
}

/// A registry holding the node's collector.
pub fn registry(node: Arc<dyn NodeView>) -> Registry {
    let mut r = Registry::default();
    r.register_collector(Box::new(NodeCollector { node }));
    r
}

/// The text exposition of `registry`.
pub fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    // Encoding into a String cannot fail but for a collector's error, reported in the text.
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, registry) {
        out.push_str(&format!("# encoding failed: {e}\n"));
    }
    out
}
