//! `ServiceL2Status` and `ServiceBGPStatus`: written by speakers, they say who announces what;
//! `BGPSessionState`: written by speakers, the state of each BGP session of each node.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The node announcing a Service over layer 2, and on which interfaces.
#[derive(CustomResource, JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "ferrolb.io",
    version = "v1beta1",
    kind = "ServiceL2Status",
    plural = "servicel2statuses",
    namespaced,
    status = "ServiceL2StatusStatus",
    shortname = "l2st",
    category = "ferrolb",
    printcolumn(name = "Service", type_ = "string", json_path = ".status.serviceName"),
    printcolumn(
        name = "Namespace",
        type_ = "string",
        json_path = ".status.serviceNamespace"
    ),
    printcolumn(name = "Node", type_ = "string", json_path = ".status.node"),
    printcolumn(name = "Addresses", type_ = "string", json_path = ".status.addresses"),
    printcolumn(
        name = "Interfaces",
        type_ = "string",
        json_path = ".status.interfaces[*].name"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ServiceL2StatusSpec {}

/// What a speaker reports while it answers ARP/NDP for a Service.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceL2StatusStatus {
    /// The announcing node.
    #[serde(default)]
    pub node: String,
    /// The Service's name.
    #[serde(default)]
    pub service_name: String,
    /// The Service's namespace.
    #[serde(default)]
    pub service_namespace: String,
    /// The addresses answered for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<String>,
    /// The interfaces answered on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<InterfaceInfo>,
}

/// A network interface.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct InterfaceInfo {
    /// The interface name.
    pub name: String,
}

/// The peers a node announces a Service to over BGP.
#[derive(CustomResource, JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "ferrolb.io",
    version = "v1beta1",
    kind = "ServiceBGPStatus",
    plural = "servicebgpstatuses",
    namespaced,
    status = "ServiceBGPStatusStatus",
    shortname = "bgpst",
    category = "ferrolb",
    printcolumn(name = "Service", type_ = "string", json_path = ".status.serviceName"),
    printcolumn(
        name = "Namespace",
        type_ = "string",
        json_path = ".status.serviceNamespace"
    ),
    printcolumn(name = "Node", type_ = "string", json_path = ".status.node"),
    printcolumn(name = "Peers", type_ = "string", json_path = ".status.peers"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ServiceBGPStatusSpec {}

/// What a speaker reports while it announces a Service over BGP.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceBGPStatusStatus {
    /// The announcing node.
    #[serde(default)]
    pub node: String,
    /// The Service's name.
    #[serde(default)]
    pub service_name: String,
    /// The Service's namespace.
    #[serde(default)]
    pub service_namespace: String,
    /// The `BGPPeer` names the Service's prefixes are announced to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub peers: Vec<String>,
}

/// One BGP session of one node: written by that node's speaker, so that
/// `kubectl get bgpsessionstates` answers "is my BGP up" per node and peer.
#[derive(CustomResource, JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "ferrolb.io",
    version = "v1beta1",
    kind = "BGPSessionState",
    plural = "bgpsessionstates",
    namespaced,
    status = "BGPSessionStateStatus",
    shortname = "bgpss",
    category = "ferrolb",
    printcolumn(name = "Node", type_ = "string", json_path = ".status.node"),
    printcolumn(name = "Peer", type_ = "string", json_path = ".status.peer"),
    printcolumn(name = "BGP", type_ = "string", json_path = ".status.bgpState"),
    printcolumn(name = "BFD", type_ = "string", json_path = ".status.bfdState"),
    printcolumn(name = "Uptime", type_ = "date", json_path = ".status.establishedTime"),
    printcolumn(name = "IPv4", type_ = "integer", json_path = ".status.ipv4Prefixes"),
    printcolumn(name = "IPv6", type_ = "integer", json_path = ".status.ipv6Prefixes"),
    printcolumn(
        name = "Local ASN",
        type_ = "integer",
        json_path = ".status.localASN",
        priority = 1
    ),
    printcolumn(
        name = "Peer ASN",
        type_ = "integer",
        json_path = ".status.peerASN",
        priority = 1
    ),
    printcolumn(
        name = "Last Error",
        type_ = "string",
        json_path = ".status.lastError",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase")]
pub struct BGPSessionStateSpec {}

/// The state of one BGP session, as the node's speaker sees it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BGPSessionStateStatus {
    /// The node.
    #[serde(default)]
    pub node: String,
    /// The `BGPPeer`'s name.
    #[serde(default)]
    pub peer: String,
    /// The peer's address and port.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub peer_address: String,
    /// The BGP state (RFC 4271 §8.2.2): `Idle`, `Connect`, `Active`, `OpenSent`,
    /// `OpenConfirm` or `Established`; `NotConfigured` when the `BGPPeer` selects this node
    /// but cannot be used (see `lastError`).
    #[serde(default)]
    pub bgp_state: String,
    /// The BFD state (`Up`, `Down`, `Init`, `AdminDown`) when the peer has a BFD profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bfd_state: Option<String>,
    /// Since when the session is Established (absent while it is not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub established_time: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    /// Times the session reached Established since the speaker started.
    #[serde(default)]
    pub established_count: i64,
    /// IPv4 prefixes the peer holds from this node.
    #[serde(default)]
    pub ipv4_prefixes: i64,
    /// IPv6 prefixes the peer holds from this node.
    #[serde(default)]
    pub ipv6_prefixes: i64,
    /// The AS number the session presents to the peer: the `BGPPeer`'s `localASN` when set,
    /// else its `myASN`.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "localASN")]
    pub local_asn: Option<i64>,
    /// The peer's AS number: from its OPEN once received (what `dynamicASN` found), else the
    /// configured `peerASN`.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "peerASN")]
    pub peer_asn: Option<i64>,
    /// The hold time agreed at OPEN, such as `90s` (absent before the OPENs are exchanged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_time: Option<String>,
    /// The keepalive interval in force, such as `30s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keepalive_time: Option<String>,
    /// What both sides agreed at OPEN: `ipv4-unicast`, `ipv6-unicast`, `4-octet-as`,
    /// `graceful-restart`, `extended-nexthop`, `bgp-role` (both announced RFC 9234 roles that
    /// pair), `add-path` (we send path identifiers, RFC 7911, for at least one family).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capabilities: Vec<String>,
    /// The BFD detection time in force, such as `900ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bfd_detection_time: Option<String>,
    /// The last reason the session went down or could not come up, for humans.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// When `lastError` happened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error_time: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    /// The last NOTIFICATION the peer sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_notification_received: Option<BGPNotificationInfo>,
    /// The last NOTIFICATION this node sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_notification_sent: Option<BGPNotificationInfo>,
    /// `Ready`: `True` when the session is Established (and its BFD Up, with a profile);
    /// `False` with a reason (`NotEstablished`, `VRFNotFound` (the peer's `vrf` device does
    /// not exist on this node), `BFDNotUp`, `BFDProfileNotFound`, `NotConfigured`) otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
}

/// A BGP NOTIFICATION message (RFC 4271 §4.5).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BGPNotificationInfo {
    /// The error code.
    pub code: i64,
    /// The error subcode.
    pub subcode: i64,
    /// The code and subcode in words, with the shutdown message (RFC 9003) when one was sent.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// When it was sent or received.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
}
