//! Loads manifest files (multi-document YAML of any kind the API server serves) into the API
//! server, the way `kubectl create` followed by a status write would. Talks HTTP to the server.

use std::path::{Path, PathBuf};

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::{self, Scope};
use serde::Deserialize;
use serde_json::Value;

use super::LabError;

/// The `*.yaml` files of `dir`, sorted by name (so `00-…` loads before `10-…`).
pub fn yaml_files(dir: &Path) -> Result<Vec<PathBuf>, LabError> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|source| LabError::Io {
            context: format!("reading {}", dir.display()),
            source,
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    files.sort();
    Ok(files)
}

/// The documents of one YAML file, as JSON values; empty documents are skipped.
pub fn documents(path: &Path) -> Result<Vec<Value>, LabError> {
    let text = std::fs::read_to_string(path).map_err(|source| LabError::Io {
        context: format!("reading {}", path.display()),
        source,
    })?;
    let mut docs = Vec::new();
    for de in serde_norway::Deserializer::from_str(&text) {
        let v = Value::deserialize(de).map_err(|e| LabError::Manifest {
            path: path.into(),
            message: e.to_string(),
        })?;
        if !v.is_null() {
            docs.push(v);
        }
    }
    Ok(docs)
}

fn gvk_of(doc: &Value) -> Option<GroupVersionKind> {
    let api_version = doc.get("apiVersion")?.as_str()?;
    let kind = doc.get("kind")?.as_str()?;
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    Some(GroupVersionKind::gvk(group, version, kind))
}

/// The lab's documents as real nodes take them ([`super::nodes`]): without what the kubelets,
/// the chart and the endpointslice controller make there themselves: the Nodes, the speaker
/// Pods, the memberlist Secret and the EndpointSlices (the backends are real Pods,
/// `examples/lab/real/`).
pub fn for_real_nodes(doc: Value) -> Vec<Value> {
    let kind = doc.get("kind").and_then(Value::as_str).unwrap_or_default();
    let name = doc
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let made_there = matches!(kind, "Node" | "Pod" | "EndpointSlice")
        || (kind == "Secret" && name == "ferrolb-memberlist");
    if made_there { Vec::new() } else { vec![doc] }
}

/// Creates every object of `files` (an object that already exists is left alone), then writes
/// its `status` when the document has one (Nodes' conditions, Pods' `podIP`), as the kubelet
/// would. Returns how many objects were created.
pub async fn apply(client: &kube::Client, files: &[PathBuf]) -> Result<usize, LabError> {
    apply_with(client, files, |doc| vec![doc]).await
}

/// [`apply`], each document replaced first by what `transform` makes of it (none, itself, or
/// several).
pub async fn apply_with(
    client: &kube::Client,
    files: &[PathBuf],
    transform: impl Fn(Value) -> Vec<Value>,
) -> Result<usize, LabError> {
    let mut created = 0;
    for file in files {
        for doc in documents(file)?.into_iter().flat_map(&transform) {
            let bad = |message: String| LabError::Manifest {
                path: file.clone(),
                message,
            };
            let gvk =
                gvk_of(&doc).ok_or_else(|| bad("a document lacks apiVersion or kind".into()))?;
            let (ar, caps) = discovery::pinned_kind(client, &gvk)
                .await
                .map_err(|e| bad(format!("{}: {e}", gvk.kind)))?;
            let obj: DynamicObject =
                serde_json::from_value(doc.clone()).map_err(|e| bad(e.to_string()))?;
            let name = obj.metadata.name.clone().unwrap_or_default();
            let api: Api<DynamicObject> = match caps.scope {
                Scope::Cluster => Api::all_with(client.clone(), &ar),
                Scope::Namespaced => {
                    let ns = obj.metadata.namespace.as_deref().unwrap_or("default");
                    Api::namespaced_with(client.clone(), ns, &ar)
                }
            };
            // A real server refuses Pods until kube-controller-manager has made their
            // namespace's `default` ServiceAccount, a moment after the namespace: retry that.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            loop {
                match api.create(&PostParams::default(), &obj).await {
                    Ok(_) => created += 1,
                    Err(kube::Error::Api(e)) if e.code == 409 => {}
                    Err(kube::Error::Api(e))
                        if e.code == 403
                            && e.message.contains("service account")
                            && std::time::Instant::now() < deadline =>
                    {
                        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                        continue;
                    }
                    Err(e) => return Err(bad(format!("creating {} {name}: {e}", gvk.kind))),
                }
                break;
            }
            if let Some(status) = doc.get("status") {
                let patch = serde_json::json!({ "status": status });
                api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map_err(|e| bad(format!("writing the status of {} {name}: {e}", gvk.kind)))?;
            }
        }
    }
    Ok(created)
}

/// Applies `docs` with server-side apply under `manager`, in order, each to the resource its
/// `apiVersion` and `kind` name (found by discovery, so CRDs applied earlier in `docs` must be
/// established first). Returns how many objects were applied; the first refusal is an error
/// naming the object and the server's message.
pub async fn server_side_apply(
    client: &kube::Client,
    docs: &[Value],
    manager: &str,
) -> Result<usize, String> {
    let mut applied = 0;
    for doc in docs {
        let gvk = gvk_of(doc).ok_or("a document lacks apiVersion or kind")?;
        let name = doc["metadata"]["name"].as_str().unwrap_or_default();
        let what = format!("{} {name}", gvk.kind);
        let (ar, caps) = discovery::pinned_kind(client, &gvk)
            .await
            .map_err(|e| format!("{what}: {e}"))?;
        let api: Api<DynamicObject> = match caps.scope {
            Scope::Cluster => Api::all_with(client.clone(), &ar),
            Scope::Namespaced => {
                let ns = doc["metadata"]["namespace"].as_str().unwrap_or("default");
                Api::namespaced_with(client.clone(), ns, &ar)
            }
        };
        api.patch(
            name,
            &PatchParams::apply(manager).force(),
            &Patch::Apply(doc),
        )
        .await
        .map_err(|e| format!("applying {what}: {e}"))?;
        applied += 1;
    }
    Ok(applied)
}

/// The labels of the MetalLB lab's speaker Pods, which its speakers find each other by
/// (`--ml-labels`), as MetalLB's manifests label them.
pub const METALLB_SPEAKER_LABELS: &str = "app=metallb,component=speaker";

/// The lab's pool announced over BGP (`examples/lab/30-pools.yaml`).
pub const METALLB_BGP_POOL: &str = "lab-bgp";

/// The name of the MetalLB lab's speaker Pod object on `node`.
pub fn metallb_speaker_pod(node: &str) -> String {
    format!("speaker-{node}")
}

/// The lab's configuration for MetalLB: each FerroLB object as the MetalLB object an operator
/// would write for the same behaviour, where MetalLB has one.
///
/// - FerroLB's install namespace becomes `metallb-system`, with the controller's Pod object
///   (MetalLB's controller reads its own Pod at start); the speaker Pods are renamed and
///   labelled as MetalLB's manifests do ([`METALLB_SPEAKER_LABELS`]).
/// - `ferrolb.io/v1beta1` kinds become `metallb.io/v1beta1` (`BGPPeer`: `v1beta2`). MetalLB's
///   native BGP mode refuses a configuration with BFD profiles, `bfdProfile`, `keepaliveTime` or
///   `connectTime` (`internal/config/validation.go`), so those are left out: MetalLB's sessions
///   use the same 9 s hold time, a third of it as keepalive, and no BFD.
/// - MetalLB's native BGP mode refuses a configuration whose BGP-announced pool has IPv6
///   ranges ("native bgp mode does not support ipv6"): the BGP pool ([`METALLB_BGP_POOL`]) keeps
///   its IPv4 ranges only, so its Services are IPv4 only under MetalLB.
/// - The gossip Secret goes: MetalLB's speakers read their memberlist key from a file.
/// - Services' `ferrolb.io/` annotations take MetalLB's `metallb.io/` spelling (`ip-mode` has
///   no MetalLB equivalent and goes).
pub fn for_metallb(doc: Value) -> Vec<Value> {
    metallb_doc(doc, false)
}

/// [`for_metallb`] for MetalLB in frr-k8s mode, which takes BFD: the `BFDProfile` stays (as
/// MetalLB's `BFDProfile`, the same three fields: 300 ms transmit and receive, multiplier 3) and
/// the `BGPPeer` keeps `bfdProfile`, `keepaliveTime` and `connectTime`. The BGP pool still keeps
/// its IPv4 ranges only, as under native mode (IPv6 prefixes over the IPv4 session would need
/// MetalLB's `dualStackAddressFamily`), so both MetalLB columns announce the same routes.
pub fn for_metallb_frrk8s(doc: Value) -> Vec<Value> {
    metallb_doc(doc, true)
}

fn metallb_doc(mut doc: Value, keep_bfd: bool) -> Vec<Value> {
    use crate::metallb::{CONTROLLER_POD, NAMESPACE};
    const OURS: &str = super::INSTALL_NS;
    let kind = doc["kind"].as_str().unwrap_or_default().to_string();
    let api = doc["apiVersion"].as_str().unwrap_or_default().to_string();
    let in_ours = doc["metadata"]["namespace"].as_str() == Some(OURS);
    if kind == "Namespace" && doc["metadata"]["name"].as_str() == Some(OURS) {
        doc["metadata"]["name"] = NAMESPACE.into();
        let pod = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": CONTROLLER_POD, "namespace": NAMESPACE,
                         "labels": {"app": "metallb", "component": "controller"}},
            "spec": {"containers": [{"name": "controller", "image": "metallb/controller:lab"}]},
        });
        return vec![doc, pod];
    }
    if in_ours {
        doc["metadata"]["namespace"] = NAMESPACE.into();
    }
    match (api.as_str(), kind.as_str()) {
        ("v1", "Secret") if in_ours => return vec![],
        ("v1", "Pod") if in_ours => {
            let node = doc["spec"]["nodeName"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            doc["metadata"]["name"] = metallb_speaker_pod(&node).into();
            let labels: serde_json::Map<String, Value> = METALLB_SPEAKER_LABELS
                .split(',')
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), v.into()))
                .collect();
            doc["metadata"]["labels"] = labels.into();
        }
        ("ferrolb.io/v1beta1", "BFDProfile") if !keep_bfd => return vec![],
        ("ferrolb.io/v1beta1", "BGPPeer") => {
            doc["apiVersion"] = "metallb.io/v1beta2".into();
            if let Some(spec) = doc["spec"].as_object_mut().filter(|_| !keep_bfd) {
                for refused in ["bfdProfile", "keepaliveTime", "connectTime"] {
                    spec.remove(refused);
                }
            }
        }
        ("ferrolb.io/v1beta1", "IPAddressPool") => {
            doc["apiVersion"] = "metallb.io/v1beta1".into();
            if doc["metadata"]["name"].as_str() == Some(METALLB_BGP_POOL)
                && let Some(addresses) = doc["spec"]["addresses"].as_array_mut()
            {
                addresses.retain(|a| !a.as_str().unwrap_or_default().contains(':'));
            }
        }
        ("ferrolb.io/v1beta1", _) => doc["apiVersion"] = "metallb.io/v1beta1".into(),
        ("v1", "Service") => {
            if let Some(annotations) = doc["metadata"]["annotations"].as_object_mut() {
                let ours: Vec<String> = annotations
                    .keys()
                    .filter(|k| k.starts_with("ferrolb.io/"))
                    .cloned()
                    .collect();
                for key in ours {
                    let value = annotations.remove(&key).unwrap_or_default();
                    let name = key.trim_start_matches("ferrolb.io/");
                    if name != "ip-mode" {
                        annotations.insert(format!("metallb.io/{name}"), value);
                    }
                }
            }
        }
        _ => {}
    }
    vec![doc]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn peer() -> Value {
        json!({"apiVersion": "ferrolb.io/v1beta1", "kind": "BGPPeer",
               "metadata": {"name": "lab-router", "namespace": "ferrolb-system"},
               "spec": {"myASN": 64512, "peerASN": 64513, "peerAddress": "10.99.0.1",
                        "holdTime": "9s", "keepaliveTime": "3s", "connectTime": "2s",
                        "bfdProfile": "lab-bfd"}})
    }

    fn bfd() -> Value {
        json!({"apiVersion": "ferrolb.io/v1beta1", "kind": "BFDProfile",
               "metadata": {"name": "lab-bfd", "namespace": "ferrolb-system"},
               "spec": {"receiveInterval": 300, "transmitInterval": 300, "detectMultiplier": 3}})
    }

    #[test]
    fn native_mode_drops_bfd_and_the_timers_it_refuses() {
        assert!(for_metallb(bfd()).is_empty());
        let [p] = for_metallb(peer()).try_into().unwrap();
        assert_eq!(p["apiVersion"], "metallb.io/v1beta2");
        assert_eq!(p["metadata"]["namespace"], "metallb-system");
        for refused in ["bfdProfile", "keepaliveTime", "connectTime"] {
            assert!(p["spec"].get(refused).is_none(), "{refused} kept");
        }
        assert_eq!(p["spec"]["holdTime"], "9s");
    }

    #[test]
    fn frrk8s_mode_keeps_the_bfd_profile_and_the_peer_refers_to_it() {
        let [b] = for_metallb_frrk8s(bfd()).try_into().unwrap();
        assert_eq!(b["apiVersion"], "metallb.io/v1beta1");
        assert_eq!(b["kind"], "BFDProfile");
        assert_eq!(b["metadata"]["namespace"], "metallb-system");
        assert_eq!(
            b["spec"],
            json!({"receiveInterval": 300, "transmitInterval": 300, "detectMultiplier": 3})
        );
        let [p] = for_metallb_frrk8s(peer()).try_into().unwrap();
        assert_eq!(p["apiVersion"], "metallb.io/v1beta2");
        assert_eq!(p["spec"]["bfdProfile"], "lab-bfd");
        assert_eq!(p["spec"]["keepaliveTime"], "3s");
        assert_eq!(p["spec"]["connectTime"], "2s");
    }

    #[test]
    fn both_modes_keep_only_the_ipv4_ranges_of_the_bgp_pool() {
        let pool = json!({"apiVersion": "ferrolb.io/v1beta1", "kind": "IPAddressPool",
                          "metadata": {"name": METALLB_BGP_POOL, "namespace": "ferrolb-system"},
                          "spec": {"addresses": ["10.99.2.0/28", "fd00:99:2::/124"]}});
        for convert in [for_metallb, for_metallb_frrk8s] {
            let [p] = convert(pool.clone()).try_into().unwrap();
            assert_eq!(p["spec"]["addresses"], json!(["10.99.2.0/28"]));
        }
    }
}
