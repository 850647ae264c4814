//! The speaker's Prometheus metrics (names under `ferrolb_`).

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use ferrolb_telemetry::apicall::ApiCallError;
use prometheus_client::encoding::{
    EncodeLabelSet, EncodeLabelValue, LabelSetEncoder, LabelValueEncoder,
};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::planner::ServiceKey;

/// Per-peer labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PeerLabels {
    /// `BGPPeer` name.
    pub peer: String,
}

/// Per-peer, per-NOTIFICATION labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NotificationLabels {
    /// `BGPPeer` name.
    pub peer: String,
    /// `sent` or `received`.
    pub direction: String,
    /// The NOTIFICATION, as `code/subcode` or a named error.
    pub code: String,
}

/// Per-peer labels of malformed UPDATEs survived (RFC 7606).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MalformedLabels {
    /// `BGPPeer` name.
    pub peer: String,
    /// `treat_as_withdraw` or `attribute_discard`.
    pub handling: String,
}

/// Labels of the per-address announcement gauge: `namespace`, `service`, `ip` and `protocol`.
///
/// There is one series per announced (address, protocol) of every Service, 10,000 and more on a
/// large cluster, so a label set holds no string of its own: the Service's key is shared with
/// the speaker's record of its series, the address stays an address until a scrape writes it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct AnnouncedLabels {
    /// The Service (its `namespace` and `service` labels).
    pub service: Arc<ServiceKey>,
    /// The address.
    pub ip: IpAddr,
    /// `layer2` or `bgp`.
    pub protocol: &'static str,
}

impl EncodeLabelSet for AnnouncedLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder<'_>) -> Result<(), std::fmt::Error> {
        // The order and names of the labels as they were when each was a `String` field.
        [
            ("namespace", self.service.namespace.as_str()),
            ("service", self.service.name.as_str()),
        ]
        .encode(encoder)?;
        [("ip", AddressValue(self.ip))].encode(encoder)?;
        [("protocol", self.protocol)].encode(encoder)
    }
}

/// An address as a label value, written when a scrape encodes it.
struct AddressValue(IpAddr);

impl EncodeLabelValue for AddressValue {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
        use std::fmt::Write;
        write!(encoder, "{}", self.0)
    }
}

/// Per-reason label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// Why.
    pub reason: String,
}

/// Every metric the speaker exports. Counters that mirror a core's own counters are advanced
/// by the difference since the last sync.
#[derive(Clone, Default)]
pub struct Metrics {
    /// ARP requests and Neighbor Solicitations received.
    pub l2_requests: Counter,
    /// ARP replies and solicited advertisements sent.
    pub l2_responses: Counter,
    /// Gratuitous ARP and unsolicited advertisements sent.
    pub l2_gratuitous: Counter,
    /// Malformed frames dropped.
    pub l2_malformed: Counter,
    /// Addresses this node answers for.
    pub l2_announced: Gauge,
    /// 1 for each address this node announces, per Service and protocol.
    pub announced: Family<AnnouncedLabels, Gauge>,
    /// Live members seen by gossip.
    pub gossip_members: Gauge,
    /// Gossip datagrams refused by authentication.
    pub gossip_auth_failures: Counter,
    /// Suspicions of another member this speaker held on someone else's word until they went
    /// stale (a death or a refutation it missed), and asked the suspect about.
    pub gossip_stale_suspicions: Counter,
    /// 1 while another side of a gossip partition holds the layer-2 addresses (a fresh view on
    /// the API server leaves this speaker out) and it keeps only what that side cannot hold.
    pub l2_fenced: Gauge,
    /// 1 while the session to the peer is Established.
    pub bgp_session_up: Family<PeerLabels, Gauge>,
    /// 1 while the peer's BFD session is Up, 0 otherwise (only peers with a BFD profile).
    pub bfd_session_up: Family<PeerLabels, Gauge>,
    /// BGP sessions closed because BFD went down.
    pub bfd_downs: Family<PeerLabels, Counter>,
    /// BFD packets dropped on receive (or not sent), by reason (`ttl_not_255`, `no_session`,
    /// `no_session`, `send_failed`, a malformed packet's own label, ...).
    pub bfd_dropped_packets: Family<ReasonLabels, Counter>,
    /// UPDATE messages sent.
    pub bgp_updates: Family<PeerLabels, Counter>,
    /// Prefixes the peer holds from us.
    pub bgp_announced_prefixes: Family<PeerLabels, Gauge<i64, std::sync::atomic::AtomicI64>>,
    /// NOTIFICATIONs sent and received.
    pub bgp_notifications: Family<NotificationLabels, Counter<u64, AtomicU64>>,
    /// Malformed UPDATEs received that kept the session (RFC 7606), by handling.
    pub bgp_malformed_updates: Family<MalformedLabels, Counter<u64, AtomicU64>>,
    /// Configuration this node could not use, by reason.
    pub config_errors: Family<ReasonLabels, Counter>,
    /// Addresses this node was elected for but cannot answer on any interface, by reason.
    pub l2_cannot_answer: Family<ReasonLabels, Gauge>,
    /// Interfaces this node should answer on but cannot (down, NOARP, missing, reader failed).
    pub l2_interface_faults: Gauge,
    /// Layer-2 Service addresses this node's own kernel answers ARP for as well (or may send
    /// its own ARP requests from), by what lets it (`arp_ignore`, `arp_announce`,
    /// `on_interface`): kube-proxy's IPVS without `strictARP`.
    pub l2_kernel_arp: Family<ReasonLabels, Gauge>,
    /// Services whose status objects wait to be written.
    pub status_pending: Gauge,
    /// Writes of this node's objects (status objects, `BGPSessionState`, `ConfigurationState`)
    /// that failed, by reason ([`ApiCallError::metric_label`]); each is retried with back-off.
    pub status_write_failures: Family<ReasonLabels, Counter>,
    /// Events dropped because the Event queue was full.
    pub events_dropped: Counter,
}

impl Metrics {
    /// Registers every metric (the registry should carry the `ferrolb` prefix).
    pub fn register(&self, r: &mut Registry) {
        self.register_layer2(r);
        self.register_bgp(r);
        self.register_shell(r);
    }

    /// Layer 2, the announced addresses and gossip.
    fn register_layer2(&self, r: &mut Registry) {
        r.register(
            "layer2_requests_received",
            "ARP requests and Neighbor Solicitations received",
            self.l2_requests.clone(),
        );
        r.register(
            "layer2_responses_sent",
            "ARP replies and solicited Neighbor Advertisements sent",
            self.l2_responses.clone(),
        );
        r.register(
            "layer2_gratuitous_sent",
            "Gratuitous ARP and unsolicited Neighbor Advertisements sent",
            self.l2_gratuitous.clone(),
        );
        r.register(
            "layer2_malformed_frames",
            "Malformed ARP/NDP frames dropped",
            self.l2_malformed.clone(),
        );
        r.register(
            "layer2_announced_addresses",
            "Addresses this node answers ARP/NDP for",
            self.l2_announced.clone(),
        );
        r.register(
            "service_address_announced",
            "1 per address this node announces, by Service and protocol",
            self.announced.clone(),
        );
        r.register(
            "gossip_members",
            "Live speakers seen by gossip",
            self.gossip_members.clone(),
        );
        r.register(
            "l2_fenced",
            "1 while another side of a gossip partition holds the layer-2 addresses and this speaker keeps only what that side cannot hold",
            self.l2_fenced.clone(),
        );
        r.register(
            "gossip_auth_failures",
            "Gossip datagrams refused by authentication",
            self.gossip_auth_failures.clone(),
        );
        r.register(
            "gossip_stale_suspicions",
            "Suspicions held on another speaker's word that went stale (a death or refutation missed) and were asked about",
            self.gossip_stale_suspicions.clone(),
        );
        r.register(
            "layer2_cannot_answer_addresses",
            "Addresses this node was elected for but has no usable interface for, by reason",
            self.l2_cannot_answer.clone(),
        );
        r.register(
            "layer2_interface_faults",
            "Interfaces this node should answer on but cannot (down, NOARP, missing, reader failed)",
            self.l2_interface_faults.clone(),
        );
        r.register(
            "layer2_kernel_arp_addresses",
            "Layer-2 Service addresses this node's kernel also answers ARP for (or may send its own ARP requests from), by reason (arp_ignore, arp_announce, on_interface); set strictARP in kube-proxy's configuration",
            self.l2_kernel_arp.clone(),
        );
    }

    /// BGP sessions and BFD.
    fn register_bgp(&self, r: &mut Registry) {
        r.register(
            "bgp_session_up",
            "1 while the BGP session is Established",
            self.bgp_session_up.clone(),
        );
        r.register(
            "bfd_session_up",
            "1 while the BFD session with a peer is Up (peers with a BFDProfile only)",
            self.bfd_session_up.clone(),
        );
        r.register(
            "bfd_downs",
            "BGP sessions closed because BFD went down",
            self.bfd_downs.clone(),
        );
        r.register(
            "bfd_dropped_packets",
            "BFD packets dropped on receive or not sent, by reason",
            self.bfd_dropped_packets.clone(),
        );
        r.register(
            "bgp_updates",
            "BGP UPDATE messages sent",
            self.bgp_updates.clone(),
        );
        r.register(
            "bgp_announced_prefixes_total",
            "Prefixes the peer holds from this node (a gauge)",
            self.bgp_announced_prefixes.clone(),
        );
        r.register(
            "bgp_notifications",
            "BGP NOTIFICATIONs sent and received",
            self.bgp_notifications.clone(),
        );
        r.register(
            "bgp_malformed_updates",
            "Malformed UPDATEs received from a peer that kept the session (RFC 7606 treat-as-withdraw or attribute discard)",
            self.bgp_malformed_updates.clone(),
        );
    }

    /// Configuration, status objects and Events.
    fn register_shell(&self, r: &mut Registry) {
        r.register(
            "config_errors",
            "Configuration this node could not use, by reason",
            self.config_errors.clone(),
        );
        r.register(
            "status_pending",
            "Services whose status objects wait to be written",
            self.status_pending.clone(),
        );
        r.register(
            "status_write_failures",
            "Status object writes that failed, by reason (retried with back-off)",
            self.status_write_failures.clone(),
        );
        r.register(
            "events_dropped",
            "Events dropped because the Event queue was full",
            self.events_dropped.clone(),
        );
    }

    /// Counts a failed write of one of this node's objects under the reason of `error`.
    pub fn status_write_failed(&self, error: &kube::Error) {
        let reason = ApiCallError::from(error).metric_label().to_owned();
        self.status_write_failures
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }
}

/// Advances `counter` to `value` (counters never go back; a restarted core starts from 0).
pub fn advance(counter: &Counter, value: u64) {
    let now = counter.get();
    if value > now {
        counter.inc_by(value - now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16) -> kube::Error {
        kube::Error::Api(Box::new(
            kube::core::Status::failure("m", "r").with_code(code),
        ))
    }

    #[test]
    fn an_announced_address_is_exported_with_its_namespace_service_ip_and_protocol_labels() {
        let metrics = Metrics::default();
        let mut registry = Registry::with_prefix("ferrolb");
        metrics.register(&mut registry);
        let service = Arc::new(ServiceKey::new("default", "web"));
        for (ip, protocol) in [("192.0.2.1", "layer2"), ("2001:db8::1", "bgp")] {
            metrics
                .announced
                .get_or_create(&AnnouncedLabels {
                    service: service.clone(),
                    ip: ip.parse().unwrap(),
                    protocol,
                })
                .set(1);
        }
        let mut page = String::new();
        prometheus_client::encoding::text::encode(&mut page, &registry).expect("encoded");
        let mut lines: Vec<&str> = page
            .lines()
            .filter(|l| l.starts_with("ferrolb_service_address_announced{"))
            .collect();
        lines.sort_unstable();
        assert_eq!(
            lines,
            [
                r#"ferrolb_service_address_announced{namespace="default",service="web",ip="192.0.2.1",protocol="layer2"} 1"#,
                r#"ferrolb_service_address_announced{namespace="default",service="web",ip="2001:db8::1",protocol="bgp"} 1"#,
            ]
        );
    }

    #[test]
    fn a_failed_status_write_is_counted_under_its_reason() {
        let metrics = Metrics::default();
        let mut registry = Registry::with_prefix("ferrolb");
        metrics.register(&mut registry);
        metrics.status_write_failed(&api(503));
        metrics.status_write_failed(&api(500));
        metrics.status_write_failed(&api(404));
        let mut page = String::new();
        prometheus_client::encoding::text::encode(&mut page, &registry).expect("encoded");
        let mut lines: Vec<&str> = page
            .lines()
            .filter(|l| l.starts_with("ferrolb_status_write_failures_total{"))
            .collect();
        lines.sort_unstable();
        assert_eq!(
            lines,
            [
                r#"ferrolb_status_write_failures_total{reason="not_found"} 1"#,
                r#"ferrolb_status_write_failures_total{reason="unavailable"} 2"#,
            ]
        );
    }
}
