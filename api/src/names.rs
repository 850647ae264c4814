//! Well-known names: the API group, annotations, labels, field managers.
//!
//! Service annotations are read in three spellings so that Services move over from MetalLB
//! unchanged: `ferrolb.io/` first, then `metallb.io/`, then `metallb.universe.tf/`.

/// The API group of FerroLB's custom resources.
pub const GROUP: &str = "ferrolb.io";
/// The served and stored version of FerroLB's custom resources.
pub const VERSION: &str = "v1beta1";

/// Asks for a specific `IPAddressPool` by name.
pub const ADDRESS_POOL: &str = "ferrolb.io/address-pool";
/// Asks for specific addresses, comma-separated, at most one per IP family.
pub const LOAD_BALANCER_IPS: &str = "ferrolb.io/loadBalancerIPs";
/// A sharing key: Services with the same key may share an address.
pub const ALLOW_SHARED_IP: &str = "ferrolb.io/allow-shared-ip";
/// Overrides the pool's `ipMode` for one Service (`VIP` or `Proxy`).
pub const IP_MODE: &str = "ferrolb.io/ip-mode";
/// Written by the controller: the pool the Service's addresses come from.
pub const IP_ALLOCATED_FROM_POOL: &str = "ferrolb.io/ip-allocated-from-pool";

/// `metallb.io/` spelling of [`ADDRESS_POOL`], honoured when the FerroLB one is absent.
pub const METALLB_ADDRESS_POOL: &str = "metallb.io/address-pool";
/// `metallb.io/` spelling of [`LOAD_BALANCER_IPS`].
pub const METALLB_LOAD_BALANCER_IPS: &str = "metallb.io/loadBalancerIPs";
/// `metallb.io/` spelling of [`ALLOW_SHARED_IP`].
pub const METALLB_ALLOW_SHARED_IP: &str = "metallb.io/allow-shared-ip";
/// Legacy `metallb.universe.tf/` spelling of [`ADDRESS_POOL`].
pub const LEGACY_ADDRESS_POOL: &str = "metallb.universe.tf/address-pool";
/// Legacy `metallb.universe.tf/` spelling of [`LOAD_BALANCER_IPS`].
pub const LEGACY_LOAD_BALANCER_IPS: &str = "metallb.universe.tf/loadBalancerIPs";
/// Legacy `metallb.universe.tf/` spelling of [`ALLOW_SHARED_IP`].
pub const LEGACY_ALLOW_SHARED_IP: &str = "metallb.universe.tf/allow-shared-ip";

/// Every spelling of the address-pool annotation, in the order they are consulted.
pub const ADDRESS_POOL_KEYS: [&str; 3] = [ADDRESS_POOL, METALLB_ADDRESS_POOL, LEGACY_ADDRESS_POOL];
/// Every spelling of the requested-addresses annotation, in the order they are consulted.
pub const LOAD_BALANCER_IPS_KEYS: [&str; 3] = [
    LOAD_BALANCER_IPS,
    METALLB_LOAD_BALANCER_IPS,
    LEGACY_LOAD_BALANCER_IPS,
];
/// Every spelling of the sharing-key annotation, in the order they are consulted.
pub const ALLOW_SHARED_IP_KEYS: [&str; 3] = [
    ALLOW_SHARED_IP,
    METALLB_ALLOW_SHARED_IP,
    LEGACY_ALLOW_SHARED_IP,
];

/// Nodes carrying this label never attract traffic for load-balancer addresses.
pub const EXCLUDE_FROM_EXTERNAL_LB: &str =
    "node.kubernetes.io/exclude-from-external-load-balancers";
/// The label EndpointSlices carry to name their Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// The `spec.loadBalancerClass` FerroLB handles by default.
pub const DEFAULT_LOAD_BALANCER_CLASS: &str = "ferrolb.io/ferrolb";

/// Field manager of the controller's writes (Service status, pool status).
pub const CONTROLLER_FIELD_MANAGER: &str = "ferrolb-controller";
/// Field manager of the speaker's writes (ServiceL2Status, ServiceBGPStatus).
pub const SPEAKER_FIELD_MANAGER: &str = "ferrolb-speaker";
/// Finalizer the speaker puts on the status objects it owns.
pub const SPEAKER_FINALIZER: &str = "ferrolb.io/speaker";

/// Label on ServiceL2Status / ServiceBGPStatus objects: the announcing node.
pub const STATUS_NODE_LABEL: &str = "ferrolb.io/node";
/// Label on ServiceL2Status / ServiceBGPStatus objects: the Service's name.
pub const STATUS_SERVICE_NAME_LABEL: &str = "ferrolb.io/service-name";
/// Label on ServiceL2Status / ServiceBGPStatus objects: the Service's namespace.
pub const STATUS_SERVICE_NAMESPACE_LABEL: &str = "ferrolb.io/service-namespace";
/// Label on BGPSessionState objects: the `BGPPeer`'s name (the node is [`STATUS_NODE_LABEL`]).
pub const STATUS_PEER_LABEL: &str = "ferrolb.io/peer";

/// Label on ConfigurationState objects: the component that writes it (`controller` or
/// `speaker`; a speaker's object also carries [`STATUS_NODE_LABEL`]).
pub const COMPONENT_TYPE_LABEL: &str = "ferrolb.io/component-type";

/// Label that identifies speaker Pods (used to discover gossip peers).
pub const SPEAKER_POD_LABEL: &str = "app.kubernetes.io/component";
/// Value of [`SPEAKER_POD_LABEL`] on speaker Pods.
pub const SPEAKER_POD_LABEL_VALUE: &str = "speaker";

/// Returns the first annotation value found under any of `keys`, in order.
pub fn first_annotation<'a>(
    annotations: &'a std::collections::BTreeMap<String, String>,
    keys: &[&str],
) -> Option<&'a str> {
    keys.iter()
        .find_map(|k| annotations.get(*k))
        .map(String::as_str)
}
