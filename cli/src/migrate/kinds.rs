//! The MetalLB kinds the converter reads, and how an object is named in the report. Pure.

use std::fmt;

use serde::Serialize;

/// The API group of MetalLB's custom resources.
pub const METALLB_GROUP: &str = "metallb.io";

/// A MetalLB configuration kind, converted to the FerroLB kind of the same name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Kind {
    /// `Community`: named community values.
    Community,
    /// `BFDProfile`: BFD timers for peers.
    BFDProfile,
    /// `IPAddressPool`: addresses to hand out.
    IPAddressPool,
    /// `BGPPeer`: routers to peer with (MetalLB serves `v1beta1` and `v1beta2`).
    BGPPeer,
    /// `L2Advertisement`: pools announced over ARP/NDP.
    L2Advertisement,
    /// `BGPAdvertisement`: pools announced over BGP.
    BGPAdvertisement,
}

impl Kind {
    /// Every kind, in the order objects are written and applied: what is referred to
    /// (communities, BFD profiles, pools, peers) before what refers to it (advertisements).
    pub const ALL: [Kind; 6] = [
        Kind::Community,
        Kind::BFDProfile,
        Kind::IPAddressPool,
        Kind::BGPPeer,
        Kind::L2Advertisement,
        Kind::BGPAdvertisement,
    ];

    /// The kind's name, the same in MetalLB and FerroLB.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Community => "Community",
            Kind::BFDProfile => "BFDProfile",
            Kind::IPAddressPool => "IPAddressPool",
            Kind::BGPPeer => "BGPPeer",
            Kind::L2Advertisement => "L2Advertisement",
            Kind::BGPAdvertisement => "BGPAdvertisement",
        }
    }

    /// The resource's plural, the same in MetalLB and FerroLB.
    pub fn plural(self) -> &'static str {
        match self {
            Kind::Community => "communities",
            Kind::BFDProfile => "bfdprofiles",
            Kind::IPAddressPool => "ipaddresspools",
            Kind::BGPPeer => "bgppeers",
            Kind::L2Advertisement => "l2advertisements",
            Kind::BGPAdvertisement => "bgpadvertisements",
        }
    }

    /// The versions MetalLB v0.16 serves for this kind, the storage version first.
    pub fn versions(self) -> &'static [&'static str] {
        match self {
            Kind::BGPPeer => &["v1beta2", "v1beta1"],
            _ => &["v1beta1"],
        }
    }

    /// The kind called `name`, if it is a MetalLB configuration kind.
    pub fn from_name(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == name)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A MetalLB object the report talks about.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    /// Its kind.
    pub kind: Kind,
    /// Its MetalLB version (`v1beta1`, `v1beta2`).
    pub version: String,
    /// Its name (empty when the object has none, which makes it invalid).
    pub name: String,
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{} ({METALLB_GROUP}/{})",
            self.kind, self.name, self.version
        )
    }
}
