//! `BGPPeer` and `BGPAdvertisement`: which routers the speakers peer with, and what they announce.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::ConfigStatus;
use super::community::{COMMUNITY_PATTERN, COMMUNITY_RANGE_RULE};

/// The duration syntax accepted for timers (`90s`, `1m30s`, `500ms`), as a CEL regex literal.
macro_rules! duration_re {
    () => {
        "^([0-9]+(\\\\.[0-9]+)?(ms|s|m|h))+$"
    };
}

/// `holdTime` is 0 (no keepalives) or at least 3 s (RFC 4271 §4.2). Ill-formed durations are
/// left to the field's own rule so the user sees one clear message.
const HOLD_TIME_RULE: &str = concat!(
    "!self.holdTime.matches('",
    duration_re!(),
    "')",
    " || duration(self.holdTime) == duration('0s') || duration(self.holdTime) >= duration('3s')"
);

/// A Linux interface name as the kernel accepts one (`dev_valid_name`): 1 to 15 characters
/// (`IFNAMSIZ` 16 with the terminating NUL), no `/`, `:` or whitespace, and not `.` or `..`.
/// For `interface` and `vrf`.
const INTERFACE_NAME_RULE: &str =
    "self.matches('^[^/:\\\\s]{1,15}$') && self != '.' && self != '..'";

/// `keepaliveTime` is not above `holdTime` (which defaults to 90s).
const KEEPALIVE_RULE: &str = concat!(
    "!has(self.keepaliveTime) || !self.keepaliveTime.matches('",
    duration_re!(),
    "')",
    " || !self.holdTime.matches('",
    duration_re!(),
    "')",
    " || duration(self.keepaliveTime) <= duration(self.holdTime)"
);

/// `disableMP: true` asks for one family, `dualStackAddressFamily: true` for both: not together.
const DUAL_STACK_RULE: &str = "!(has(self.disableMP) && self.disableMP && has(self.dualStackAddressFamily) && self.dualStackAddressFamily)";
/// With service selectors, only host routes can be announced: an aggregate would also attract
/// the traffic of the Services left out.
const SERVICE_SELECTORS_RULE: &str = "!has(self.serviceSelectors) || size(self.serviceSelectors) == 0 || ((!has(self.aggregationLength) || self.aggregationLength == 32) && (!has(self.aggregationLengthV6) || self.aggregationLengthV6 == 128))";

/// Announces the addresses of the selected pools to BGP peers.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "ferrolb.io",
    version = "v1beta1",
    kind = "BGPAdvertisement",
    plural = "bgpadvertisements",
    namespaced,
    status = "ConfigStatus",
    shortname = "bgpadv",
    category = "ferrolb",
    printcolumn(
        name = "IPAddressPools",
        type_ = "string",
        json_path = ".spec.ipAddressPools"
    ),
    printcolumn(name = "Peers", type_ = "string", json_path = ".spec.peers"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new(SERVICE_SELECTORS_RULE)
    .message("serviceSelectors need host routes: leave aggregationLength at 32 and aggregationLengthV6 at 128 (an aggregate would attract the traffic of the Services not selected too)")
    .field_path(".serviceSelectors"))]
#[serde(rename_all = "camelCase")]
pub struct BGPAdvertisementSpec {
    /// Prefix length announced for IPv4 addresses (32 announces each address; shorter lengths
    /// announce the covering prefix once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 32))]
    pub aggregation_length: Option<i32>,
    /// Prefix length announced for IPv6 addresses.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "aggregationLengthV6"
    )]
    #[schemars(range(min = 0, max = 128))]
    pub aggregation_length_v6: Option<i32>,
    /// LOCAL_PREF attached on iBGP sessions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 4294967295u32))]
    pub local_pref: Option<u32>,
    /// Communities attached: `65000:100`, `large:64512:1:2`, or a `Community` alias name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    // Bounded so kube-apiserver accepts the CEL rule's estimated cost.
    #[schemars(length(max = 64), inner(length(max = 63), regex(pattern = COMMUNITY_PATTERN)))]
    #[x_kube(validation = Rule::new(COMMUNITY_RANGE_RULE)
        .message("standard communities are two numbers up to 65535 (65000:100); large ones three numbers up to 4294967295 (large:64512:1:2)"))]
    pub communities: Vec<String>,
    /// Pools announced, by name (all pools when neither this nor the selectors are set).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        rename = "ipAddressPools"
    )]
    pub ip_address_pools: Vec<String>,
    /// Pools announced, by label.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        rename = "ipAddressPoolSelectors"
    )]
    pub ip_address_pool_selectors: Vec<LabelSelector>,
    /// Nodes that announce (all nodes when empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_selectors: Vec<LabelSelector>,
    /// `BGPPeer` names to announce to (all peers when empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub peers: Vec<String>,
    /// Services announced, by label (every Service of the selected pools when empty). Only
    /// with the default aggregation lengths (32 and 128).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub service_selectors: Vec<LabelSelector>,
}

/// A reference to a Secret in the install namespace holding a TCP-MD5 password under `password`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretRef {
    /// The Secret's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// A BGP session to a router, opened by the speakers on the selected nodes.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "ferrolb.io",
    version = "v1beta1",
    kind = "BGPPeer",
    plural = "bgppeers",
    namespaced,
    status = "ConfigStatus",
    shortname = "bgpp",
    category = "ferrolb",
    printcolumn(name = "Address", type_ = "string", json_path = ".spec.peerAddress"),
    printcolumn(name = "Interface", type_ = "string", json_path = ".spec.interface"),
    printcolumn(name = "ASN", type_ = "integer", json_path = ".spec.peerASN"),
    printcolumn(name = "My ASN", type_ = "integer", json_path = ".spec.myASN"),
    printcolumn(
        name = "Local ASN",
        type_ = "integer",
        json_path = ".spec.localASN",
        priority = 1
    ),
    printcolumn(name = "Hold Time", type_ = "string", json_path = ".spec.holdTime"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new(HOLD_TIME_RULE)
    .message("holdTime must be 0s (no keepalives) or at least 3s (RFC 4271 §4.2)").field_path(".holdTime"))]
#[x_kube(validation = Rule::new(KEEPALIVE_RULE)
    .message("keepaliveTime must not be above holdTime").field_path(".keepaliveTime"))]
#[x_kube(validation = Rule::new("has(self.peerASN) != has(self.dynamicASN)")
    .message("set peerASN, or dynamicASN (internal or external), not both").field_path(".peerASN"))]
#[x_kube(validation = Rule::new("!(has(self.password) && has(self.passwordSecret))")
    .message("set password or passwordSecret, not both").field_path(".passwordSecret"))]
#[x_kube(validation = Rule::new("has(self.peerAddress) != has(self.interface)")
    .message("set peerAddress, or interface (BGP unnumbered), exactly one of them").field_path(".peerAddress"))]
#[x_kube(validation = Rule::new("!(has(self.interface) && has(self.sourceAddress))")
    .message("sourceAddress cannot be set with interface: an unnumbered session runs from the node's IPv6 link-local address on that interface").field_path(".sourceAddress"))]
#[x_kube(validation = Rule::new("!has(self.sourceAddress) || !has(self.peerAddress) || !isIP(self.sourceAddress) || !isIP(self.peerAddress) || ip(self.sourceAddress).family() == ip(self.peerAddress).family()")
    .message("sourceAddress and peerAddress must be of the same IP family").field_path(".sourceAddress"))]
#[x_kube(validation = Rule::new(DUAL_STACK_RULE)
    .message("disableMP: true (one family) contradicts dualStackAddressFamily: true (both families); drop disableMP, which is deprecated")
    .field_path(".disableMP"))]
#[x_kube(validation = Rule::new("!(has(self.strictRole) && self.strictRole) || has(self.role)")
    .message("strictRole needs role: the speaker can only require the router's BGP role when it has one of its own").field_path(".strictRole"))]
#[x_kube(validation = Rule::new("!(has(self.announceAllNodes) && self.announceAllNodes) || !has(self.interface)")
    .message("announceAllNodes cannot be set with interface: the other nodes' next hops are their InternalIP addresses, which an unnumbered link has none of").field_path(".announceAllNodes"))]
#[serde(rename_all = "camelCase")]
pub struct BGPPeerSpec {
    /// The speaker's AS number.
    #[serde(rename = "myASN")]
    #[schemars(range(min = 1, max = 4294967295u32))]
    pub my_asn: u32,
    /// The router's AS number (for iBGP, the AS presented: `localASN`, or else `myASN`).
    /// Exactly one of this and `dynamicASN` is set.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "peerASN")]
    #[schemars(range(min = 1, max = 4294967295u32))]
    pub peer_asn: Option<u32>,
    /// The router's AS number found from its OPEN instead of configured (MetalLB's field):
    /// `internal` is the AS this session presents (`localASN` when set, else `myASN`: iBGP),
    /// `external` any other (eBGP).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "dynamicASN"
    )]
    pub dynamic_asn: Option<DynamicAsn>,
    /// The AS number this session presents to the router instead of `myASN` (FRR's `neighbor
    /// local-as ASN no-prepend replace-as`, MetalLB's field): the OPEN carries it, the AS_PATH
    /// of our routes is this AS alone (`myASN` is neither sent nor prepended), and the session
    /// is iBGP when the router's AS equals it. With `dynamicASN`, `internal` means the router is
    /// in this AS and `external` that it is in any other. Unset, or equal to `myASN`: the
    /// session presents `myASN`. MetalLB honours this field with its FRR backends only.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "localASN")]
    #[schemars(range(min = 1, max = 4294967295u32))]
    pub local_asn: Option<u32>,
    /// The router's address. Exactly one of this and `interface` is set; empty here means
    /// unset (as in MetalLB's type), so an unnumbered peer serialises without it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[x_kube(validation = Rule::new("isIP(self)").message("peerAddress must be an IPv4 or IPv6 address"))]
    pub peer_address: String,
    /// BGP unnumbered (MetalLB's field): the node's interface the router is on, instead of
    /// `peerAddress`. The speaker learns the router's IPv6 link-local address from the router
    /// advertisements it sends on that interface (and sends its own, so the router learns the
    /// speaker's), connects to it from its own link-local address, and announces IPv4 routes
    /// with an IPv6 next hop (RFC 8950) and IPv6 routes with a link-local one (RFC 2545). The
    /// interface must lead to exactly one router.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(INTERFACE_NAME_RULE).message("interface is a Linux interface name: 1 to 15 characters, no '/', ':' or whitespace, and not '.' or '..'"))]
    pub interface: Option<String>,
    /// The router's TCP port.
    #[serde(default = "default_peer_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub peer_port: u16,
    /// Local address to connect from (chosen by the kernel when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("isIP(self)").message("sourceAddress must be an IPv4 or IPv6 address"))]
    pub source_address: Option<String>,
    /// The Linux VRF device the session runs in (MetalLB's `vrf`: peer over an interface that
    /// belongs to that host VRF); the default VRF when unset. The speaker binds the session's
    /// TCP socket and its BFD sockets to this device (`SO_BINDTODEVICE`), so the route to the
    /// peer, the source address (chosen among the device's addresses when `sourceAddress` is
    /// unset) and the next hop announced (the session's local address) come from it. Binding
    /// works the same way for any device, a VRF master or a plain interface; this project's CI
    /// kernel has no VRF support, so only the binding to plain interfaces is tested there. A
    /// device missing on a node keeps that node's session down, says so in its
    /// `BGPSessionState`, and is retried until the device appears.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 15))]
    #[x_kube(validation = Rule::new(INTERFACE_NAME_RULE).message(
        "vrf is a Linux interface name: 1 to 15 characters, no '/', ':' or whitespace, and not '.' or '..'"
    ))]
    pub vrf: Option<String>,
    /// BGP identifier to use (the node's IPv4 address when unset).
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "routerID")]
    #[x_kube(validation = Rule::new("isIP(self) && ip(self).family() == 4").message("routerID must be an IPv4 address"))]
    pub router_id: Option<String>,
    /// Proposed hold time (`90s`); the session uses the smaller of ours and the peer's.
    #[serde(default = "default_hold_time")]
    #[x_kube(validation = Rule::new(concat!("self.matches('", duration_re!(), "')")).message("holdTime is a duration such as 90s or 3m"))]
    pub hold_time: String,
    /// Keepalive interval (a third of the negotiated hold time when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(concat!("self.matches('", duration_re!(), "')")).message("keepaliveTime is a duration such as 30s"))]
    pub keepalive_time: Option<String>,
    /// Initial wait between connection attempts (back-off grows from it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(concat!("self.matches('", duration_re!(), "') && duration(self) >= duration('1s')")).message("connectTime is a duration of at least 1s"))]
    pub connect_time: Option<String>,
    /// Allow the router to be more than one hop away (TTL 255 instead of 1 for eBGP).
    #[serde(default, rename = "ebgpMultiHop")]
    pub ebgp_multi_hop: bool,
    /// Nodes whose speakers open this session (all nodes when empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_selectors: Vec<LabelSelector>,
    /// TCP-MD5 password in clear text (prefer `passwordSecret`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 80))]
    pub password: Option<String>,
    /// Secret in the install namespace holding the TCP-MD5 password under the key `password`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_secret: Option<SecretRef>,
    /// Advertise graceful restart (RFC 4724) so routers keep our routes while a speaker restarts.
    #[serde(default)]
    pub enable_graceful_restart: bool,
    /// Carry both IPv4 and IPv6 unicast over this one session (multiprotocol BGP, RFC 4760):
    /// offered in the OPEN, and each family the router accepts is announced. `false`: only the
    /// family of `peerAddress` is offered and announced (the other family's Services need a
    /// session of their own). Unset means `true` unless `disableMP` is `true`. This is
    /// FerroLB's default since its first release; MetalLB's default is the single family.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "dualStackAddressFamily"
    )]
    pub dual_stack_address_family: Option<bool>,
    /// Deprecated (MetalLB's older spelling): `true` is `dualStackAddressFamily: false`, the
    /// session carries only the family of `peerAddress`. Setting it together with
    /// `dualStackAddressFamily: true` is refused.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "disableMP")]
    pub disable_mp: Option<bool>,
    /// Name of a `BFDProfile` in the install namespace: the speakers run BFD with the peer and
    /// take the session down as soon as BFD says the peer is gone (instead of after the hold
    /// time). A profile that does not exist leaves the session without BFD, and the speakers
    /// say so (log, `ferrolb_config_errors_total`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bfd_profile: Option<String>,
    /// This AS's BGP Role towards the router on an eBGP session (RFC 9234): sent in the OPEN;
    /// a router whose own role does not pair with it (`customer` with `provider`, `peer` with
    /// `peer`, `rs-client` with `rs-server`) is refused with a Role Mismatch NOTIFICATION
    /// (2/11) and the reason shows in `BGPSessionState`; routes sent to a customer, a lateral
    /// peer or a route-server client carry Only-to-Customer with our AS. Ignored on iBGP
    /// sessions, for which RFC 9234 defines no roles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<BgpRole>,
    /// Refuse a router that announces no role at all (RFC 9234 strict mode); needs `role`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub strict_role: bool,
    /// FerroLB's own: this session announces, for each address, a path through every node
    /// that may carry its traffic, not only through its own node (ADD-PATH, RFC 7911; each
    /// other node's path has that node's `InternalIP` of the address's family as next hop, so
    /// the nodes must share the router's link). A node may carry an address when its `Ready`
    /// condition is `True`, it is not excluded (`node.kubernetes.io/exclude-from-external-load-balancers`,
    /// `NetworkUnavailable`), the advertisement's `nodeSelectors` select it and, with
    /// `externalTrafficPolicy: Local`, it has a ready endpoint of the Service. The router
    /// spreads traffic over all of them (ECMP) with sessions from only the nodes this peer's
    /// `nodeSelectors` select: two or three, instead of every node. A router that does not
    /// receive ADD-PATH gets one path per address, through the speaker's own node when it may
    /// carry it. A node that dies leaves the paths when Kubernetes marks it not `Ready`
    /// (`node-monitor-grace-period`, 40 s by default), not within BFD's time: nodes that
    /// need sub-second failover keep sessions of their own.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub announce_all_nodes: bool,
}

/// `BGPPeer.spec.role`: what this AS is to the router's (RFC 9234 §3.1), named as in FRR's
/// `neighbor local-role`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum BgpRole {
    /// This AS sells the router's AS transit.
    Provider,
    /// This AS buys transit from the router's AS (a cluster behind its top-of-rack router).
    Customer,
    /// Lateral peers: neither gives the other transit.
    Peer,
    /// This side is a route server.
    RsServer,
    /// The router is a route server and this side its client.
    RsClient,
}

impl BGPPeerSpec {
    /// The AS number the session presents to the router: `localASN` when set, else `myASN`.
    pub fn local_as(&self) -> u32 {
        self.local_asn.unwrap_or(self.my_asn)
    }

    /// Whether the session carries both address families (`dualStackAddressFamily`, which
    /// defaults to `true` unless the deprecated `disableMP` is `true`).
    pub fn dual_stack(&self) -> bool {
        self.dual_stack_address_family
            .unwrap_or(self.disable_mp != Some(true))
    }
}

/// `BGPPeer.spec.dynamicASN`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DynamicAsn {
    /// The peer is in the AS we present to it (`localASN`, else `myASN`): iBGP.
    Internal,
    /// The peer is in any other AS: eBGP.
    External,
}

fn default_peer_port() -> u16 {
    179
}

fn default_hold_time() -> String {
    "90s".into()
}
