//! The shell of `ferrolb explain` and `ferrolb status`: lists what the explanation is made of,
//! read-only, one LIST per kind. Every decision is the core's ([`crate::explain`]).

use ferrolb_api::names;
use k8s_openapi::api::core::v1::{Event, Namespace, Node, Pod};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

use crate::explain::{Objects, Settings};
use crate::{Error, Result};

/// What to read beyond the objects every command needs.
#[derive(Debug, Clone, Default)]
pub struct Scope {
    /// The Service explained: its Events, EndpointSlices and status objects only.
    pub service: Option<(String, String)>,
    /// Every EndpointSlice (for what a node announces: `Local` Services need their endpoints).
    pub all_endpoints: bool,
}

/// Lists the objects for an explanation in `scope`.
pub async fn read(client: &Client, settings: &Settings, scope: &Scope) -> Result<Objects> {
    let ns = settings.namespace.as_str();
    let all = ListParams::default();
    let mut o = Objects {
        services: list(Api::all(client.clone()), &all).await?,
        namespaces: list(Api::<Namespace>::all(client.clone()), &all).await?,
        nodes: list(Api::<Node>::all(client.clone()), &all).await?,
        pools: list(Api::namespaced(client.clone(), ns), &all).await?,
        l2_advertisements: list(Api::namespaced(client.clone(), ns), &all).await?,
        bgp_advertisements: list(Api::namespaced(client.clone(), ns), &all).await?,
        peers: list(Api::namespaced(client.clone(), ns), &all).await?,
        communities: list(Api::namespaced(client.clone(), ns), &all).await?,
        speaker_pods: list(
            Api::<Pod>::namespaced(client.clone(), ns),
            &ListParams::default().labels(&format!(
                "{}={}",
                names::SPEAKER_POD_LABEL,
                names::SPEAKER_POD_LABEL_VALUE
            )),
        )
        .await?,
        sessions: list(Api::namespaced(client.clone(), ns), &all).await?,
        config_states: list(Api::namespaced(client.clone(), ns), &all).await?,
        ..Objects::default()
    };
    match &scope.service {
        Some((namespace, name)) => {
            o.events = list(
                Api::<Event>::namespaced(client.clone(), namespace),
                &ListParams::default().fields(&format!(
                    "involvedObject.kind=Service,involvedObject.name={name}"
                )),
            )
            .await?;
            o.slices = list(
                Api::<EndpointSlice>::namespaced(client.clone(), namespace),
                &ListParams::default().labels(&format!("{}={name}", names::SERVICE_NAME_LABEL)),
            )
            .await?;
            let of_service = ListParams::default().labels(&format!(
                "{}={name},{}={namespace}",
                names::STATUS_SERVICE_NAME_LABEL,
                names::STATUS_SERVICE_NAMESPACE_LABEL
            ));
            o.l2_statuses = list(Api::namespaced(client.clone(), ns), &of_service).await?;
            o.bgp_statuses = list(Api::namespaced(client.clone(), ns), &of_service).await?;
        }
        None => {
            o.l2_statuses = list(Api::namespaced(client.clone(), ns), &all).await?;
            o.bgp_statuses = list(Api::namespaced(client.clone(), ns), &all).await?;
            if scope.all_endpoints {
                o.slices = list(Api::all(client.clone()), &all).await?;
            }
        }
    }
    Ok(o)
}

/// Every object of one kind, all pages.
async fn list<K>(api: Api<K>, params: &ListParams) -> Result<Vec<K>>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
    K::DynamicType: Default,
{
    let mut items = Vec::new();
    let mut params = params.clone().limit(500);
    loop {
        let page = api.list(&params).await.map_err(|source| Error::Kube {
            action: format!("list {}", K::plural(&K::DynamicType::default())),
            source,
        })?;
        items.extend(page.items);
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(items),
        }
    }
}
