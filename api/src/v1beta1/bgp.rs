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
    printcolumn(name = "ASN", type_ = "integer", json_path = ".spec.peerASN"),
    printcolumn(name = "My ASN", type_ = "integer", json_path = ".spec.myASN"),
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
#[x_kube(validation = Rule::new("!has(self.sourceAddress) || !isIP(self.sourceAddress) || !isIP(self.peerAddress) || ip(self.sourceAddress).family() == ip(self.peerAddress).family()")
    .message("sourceAddress and peerAddress must be of the same IP family").field_path(".sourceAddress"))]
#[serde(rename_all = "camelCase")]
pub struct BGPPeerSpec {
    /// The speaker's AS number.
    #[serde(rename = "myASN")]
    #[schemars(range(min = 1, max = 4294967295u32))]
    pub my_asn: u32,
    /// The router's AS number (equal to `myASN` for iBGP). Exactly one of this and
    /// `dynamicASN` is set.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "peerASN")]
    #[schemars(range(min = 1, max = 4294967295u32))]
    pub peer_asn: Option<u32>,
    /// The router's AS number found from its OPEN instead of configured (MetalLB's field):
    /// `internal` is `myASN` (iBGP), `external` any other (eBGP).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "dynamicASN"
    )]
    pub dynamic_asn: Option<DynamicAsn>,
    /// The router's address.
    #[x_kube(validation = Rule::new("isIP(self)").message("peerAddress must be an IPv4 or IPv6 address"))]
    pub peer_address: String,
    /// The router's TCP port.
    #[serde(default = "default_peer_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub peer_port: u16,
    /// Local address to connect from (chosen by the kernel when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("isIP(self)").message("sourceAddress must be an IPv4 or IPv6 address"))]
    pub source_address: Option<String>,
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
    /// Name of a `BFDProfile` in the install namespace: the speakers run BFD with the peer and
    /// take the session down as soon as BFD says the peer is gone (instead of after the hold
    /// time). A profile that does not exist leaves the session without BFD, and the speakers
    /// say so (log, `ferrolb_config_errors_total`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bfd_profile: Option<String>,
}

/// `BGPPeer.spec.dynamicASN`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DynamicAsn {
    /// The peer is in our AS (iBGP).
    Internal,
    /// The peer is in any other AS (eBGP).
    External,
}

fn default_peer_port() -> u16 {
    179
}

fn default_hold_time() -> String {
    "90s".into()
}
