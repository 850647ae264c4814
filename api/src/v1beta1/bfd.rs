//! `BFDProfile`: BFD timers that `BGPPeer.spec.bfdProfile` refers to (MetalLB's kind, same
//! fields and defaults).

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::ConfigStatus;

/// BFD (RFC 5880) settings for the BGP sessions of the peers that name this profile. A session
/// whose BFD goes down after it was up is taken down at once, instead of after the hold time.
#[derive(CustomResource, JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "ferrolb.io",
    version = "v1beta1",
    kind = "BFDProfile",
    plural = "bfdprofiles",
    namespaced,
    status = "ConfigStatus",
    shortname = "bfdp",
    category = "ferrolb",
    printcolumn(name = "Passive", type_ = "boolean", json_path = ".spec.passiveMode"),
    printcolumn(
        name = "Transmit",
        type_ = "integer",
        json_path = ".spec.transmitInterval"
    ),
    printcolumn(
        name = "Receive",
        type_ = "integer",
        json_path = ".spec.receiveInterval"
    ),
    printcolumn(
        name = "Multiplier",
        type_ = "integer",
        json_path = ".spec.detectMultiplier"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct BFDProfileSpec {
    /// The fastest rate, in milliseconds, at which this node accepts the peer's packets
    /// (default 300).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 10, max = 60000))]
    pub receive_interval: Option<u32>,
    /// How often, in milliseconds, this node would like to send (default 300); the slower of
    /// this and the peer's receive interval is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 10, max = 60000))]
    pub transmit_interval: Option<u32>,
    /// Missed packets after which the peer is declared down (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 2, max = 255))]
    pub detect_multiplier: Option<u32>,
    /// The echo function's interval in milliseconds (MetalLB's field; FerroLB does not run the
    /// echo function and says so in the peer's speaker log when `echoMode` is on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 10, max = 60000))]
    pub echo_interval: Option<u32>,
    /// Ask for the echo function (not run by FerroLB; see `echoInterval`).
    #[serde(default)]
    pub echo_mode: bool,
    /// Wait for the peer to send first.
    #[serde(default)]
    pub passive_mode: bool,
    /// For multihop sessions, the lowest TTL accepted on received packets (default 254;
    /// single hop always requires 255).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 254))]
    pub minimum_ttl: Option<u32>,
}
