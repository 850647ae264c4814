//! The records the cluster model keeps: a Service, an EndpointSlice and a Node, each stripped
//! to what the planners read, and the digest that names slices and their Services. Pure: plain
//! data.

use std::hash::{Hash, Hasher};
use std::net::IpAddr;

use super::input::{EndpointInfo, NodeInfo, ServiceKey, ServiceLabels};

/// A Service as kept: what the planners read, no endpoints (those are in the slices).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceRec {
    /// Its key.
    pub key: ServiceKey,
    /// `status.loadBalancer.ingress[].ip`, sorted, without duplicates; never empty.
    pub ingress: Vec<IpAddr>,
    /// `externalTrafficPolicy: Local`.
    pub local_traffic_policy: bool,
    /// `metadata.uid`, for Events about it.
    pub uid: Option<String>,
    /// `metadata.labels`, compact, for `serviceSelectors`.
    pub labels: ServiceLabels,
}

/// An EndpointSlice of a Service FerroLB handles, as kept: a digest and its endpoints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SliceRec {
    /// [`digest`] of the Service it belongs to (`kubernetes.io/service-name`, its namespace).
    pub service: Digest,
    /// Its endpoints.
    pub endpoints: Box<[EndpointInfo]>,
}

/// A 128-bit digest of a `namespace/name`: two independent 64-bit SipHashes. Identities of
/// slices and their Services are kept as digests instead of strings; two names sharing one is
/// as likely as a random 128-bit collision.
pub type Digest = u128;

/// The [`Digest`] of `namespace/name`.
pub fn digest(namespace: &str, name: &str) -> Digest {
    let half = |salt: u8| {
        let mut h = std::hash::DefaultHasher::new();
        (salt, namespace, name).hash(&mut h);
        h.finish()
    };
    (u128::from(half(1)) << 64) | u128::from(half(2))
}

/// A Node as kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeRec {
    /// What the planners read (its `ready` is also the Kubernetes view of live speakers).
    pub info: NodeInfo,
}
