//! The objects that say who announces what: one `ServiceL2Status` / `ServiceBGPStatus` per
//! (Service, node), written by that node's speaker, and the `nodeAssigned` Event.

use std::collections::BTreeMap;
use std::fmt::Debug;

use ferrolb_api::names;
use ferrolb_api::v1beta1::{
    InterfaceInfo, ServiceBGPStatus, ServiceBGPStatusSpec, ServiceBGPStatusStatus, ServiceL2Status,
    ServiceL2StatusSpec, ServiceL2StatusStatus,
};
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::warn;

use super::snapshot::{status_labels, status_object_name};
use crate::planner::ServiceKey;

/// A status object kind the speaker maintains.
pub trait StatusKind:
    Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
    + Clone
    + Debug
    + Serialize
    + DeserializeOwned
{
    /// The status payload.
    type Payload: Serialize + PartialEq + Clone;
    /// A new object with no status.
    fn empty(meta: ObjectMeta) -> Self;
    /// The current status.
    fn payload(&self) -> Option<&Self::Payload>;
}

impl StatusKind for ServiceL2Status {
    type Payload = ServiceL2StatusStatus;
    fn empty(metadata: ObjectMeta) -> Self {
        ServiceL2Status {
            metadata,
            spec: ServiceL2StatusSpec {},
            status: None,
        }
    }
    fn payload(&self) -> Option<&Self::Payload> {
        self.status.as_ref()
    }
}

impl StatusKind for ServiceBGPStatus {
    type Payload = ServiceBGPStatusStatus;
    fn empty(metadata: ObjectMeta) -> Self {
        ServiceBGPStatus {
            metadata,
            spec: ServiceBGPStatusSpec {},
            status: None,
        }
    }
    fn payload(&self) -> Option<&Self::Payload> {
        self.status.as_ref()
    }
}

/// The L2 status payload of a Service announced by `node`.
pub fn l2_payload(
    key: &ServiceKey,
    node: &str,
    addresses: &[String],
    interfaces: &[String],
) -> ServiceL2StatusStatus {
    ServiceL2StatusStatus {
        node: node.into(),
        service_name: key.name.clone(),
        service_namespace: key.namespace.clone(),
        addresses: addresses.to_vec(),
        interfaces: interfaces
            .iter()
            .map(|name| InterfaceInfo { name: name.clone() })
            .collect(),
    }
}

/// The BGP status payload of a Service announced by `node` to `peers`.
pub fn bgp_payload(key: &ServiceKey, node: &str, peers: &[String]) -> ServiceBGPStatusStatus {
    ServiceBGPStatusStatus {
        node: node.into(),
        service_name: key.name.clone(),
        service_namespace: key.namespace.clone(),
        peers: peers.to_vec(),
    }
}

/// Makes this node's objects of kind `K` exactly `desired` (by Service): creates, updates the
/// status of, and deletes objects labelled with this node. Returns how many calls failed (the
/// caller retries on its next sync).
pub async fn reconcile<K: StatusKind>(
    client: &Client,
    namespace: &str,
    node: &str,
    desired: &BTreeMap<ServiceKey, K::Payload>,
) -> usize {
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    let selector = format!("{}={node}", names::STATUS_NODE_LABEL);
    let existing = match api.list(&ListParams::default().labels(&selector)).await {
        Ok(list) => list.items,
        Err(e) => {
            warn!(error = %e, kind = %K::kind(&()), "listing status objects failed");
            return 1;
        }
    };
    let mut failures = 0;
    let mut by_name: BTreeMap<String, K> =
        existing.into_iter().map(|o| (o.name_any(), o)).collect();
    for (key, payload) in desired {
        let name = status_object_name(&key.namespace, &key.name, node);
        let current = match by_name.remove(&name) {
            Some(obj) => obj,
            None => {
                let meta = ObjectMeta {
                    name: Some(name.clone()),
                    namespace: Some(namespace.into()),
                    labels: Some(status_labels(&key.namespace, &key.name, node)),
                    ..Default::default()
                };
                match api.create(&PostParams::default(), &K::empty(meta)).await {
                    Ok(obj) => obj,
                    Err(e) => {
                        warn!(error = %e, object = %name, "creating status object failed");
                        failures += 1;
                        continue;
                    }
                }
            }
        };
        if current.payload() == Some(payload) {
            continue;
        }
        let patch = Patch::Merge(serde_json::json!({ "status": payload }));
        if let Err(e) = api
            .patch_status(&name, &PatchParams::default(), &patch)
            .await
        {
            warn!(error = %e, object = %name, "writing status failed");
            failures += 1;
        }
    }
    for name in by_name.keys() {
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                warn!(error = %e, object = %name, "deleting status object failed");
                failures += 1;
            }
        }
    }
    failures
}

/// Deletes the `ServiceL2Status` objects that other, no longer live, nodes left for Services
/// this node now answers for: a killed speaker cannot remove its own. Returns how many calls
/// failed.
pub async fn remove_stale_l2(
    client: &Client,
    namespace: &str,
    node: &str,
    ours: &std::collections::BTreeSet<ServiceKey>,
    live: &std::collections::BTreeSet<String>,
) -> usize {
    if ours.is_empty() {
        return 0;
    }
    let api: Api<ServiceL2Status> = Api::namespaced(client.clone(), namespace);
    let all = match api.list(&ListParams::default()).await {
        Ok(list) => list.items,
        Err(e) => {
            warn!(error = %e, "listing status objects failed");
            return 1;
        }
    };
    let mut failures = 0;
    for obj in all {
        let labels = obj.labels();
        let (Some(owner), Some(name), Some(ns)) = (
            labels.get(names::STATUS_NODE_LABEL),
            labels.get(names::STATUS_SERVICE_NAME_LABEL),
            labels.get(names::STATUS_SERVICE_NAMESPACE_LABEL),
        ) else {
            continue;
        };
        if owner == node
            || live.contains(owner)
            || !ours.contains(&ServiceKey::new(ns.clone(), name.clone()))
        {
            continue;
        }
        match api.delete(&obj.name_any(), &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                warn!(error = %e, "deleting a dead node's status object failed");
                failures += 1;
            }
        }
    }
    failures
}
