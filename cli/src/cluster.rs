//! The cluster shell: reads MetalLB's objects, copies peers' password Secrets, applies the
//! FerroLB objects. Every decision is the core's ([`crate::migrate`]); this only talks to the
//! API server and records what it answered.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind, TypeMeta};

use crate::migrate::kinds::{Kind, METALLB_GROUP};
use crate::migrate::report::{Entry, Finding};
use crate::migrate::{Conversion, Document};
use crate::{Error, FIELD_MANAGER, Result};

/// Reads every MetalLB configuration object in `namespace`, one LIST per kind.
///
/// A kind is read at the first version in [`Kind::versions`] that the cluster serves: MetalLB
/// serves `BGPPeer` at `v1beta2` (its storage version) and `v1beta1`, two views of the same
/// objects, so reading both would convert each peer twice; `v1beta2` loses nothing, and
/// `v1beta1` is read only from a MetalLB old enough not to serve `v1beta2`. A version the
/// cluster does not serve (404: CRD not installed) is a report entry, not an error.
pub async fn read_metallb(client: &Client, namespace: &str) -> Result<(Vec<Document>, Vec<Entry>)> {
    let source = format!("cluster {namespace}");
    let mut docs = Vec::new();
    let mut report = Vec::new();
    for kind in Kind::ALL {
        for version in kind.versions() {
            let gvk = GroupVersionKind::gvk(METALLB_GROUP, version, kind.name());
            let ar = ApiResource::from_gvk_with_plural(&gvk, kind.plural());
            let api = Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &ar);
            match api.list(&ListParams::default()).await {
                Ok(list) => {
                    for mut item in list.items {
                        item.types.get_or_insert_with(|| TypeMeta {
                            api_version: ar.api_version.clone(),
                            kind: ar.kind.clone(),
                        });
                        let value = serde_json::to_value(&item).expect("objects serialize");
                        docs.push(Document {
                            source: source.clone(),
                            value,
                        });
                    }
                    break;
                }
                Err(kube::Error::Api(status)) if status.is_not_found() => report.push(Entry {
                    source: source.clone(),
                    object: None,
                    finding: Finding::KindNotServed {
                        kind,
                        version: version.to_string(),
                    },
                }),
                Err(source) => {
                    return Err(Error::Kube {
                        action: format!("list {}.{METALLB_GROUP} in {namespace}", kind.plural()),
                        source,
                    });
                }
            }
        }
    }
    Ok((docs, report))
}

/// Copies each converted peer's password Secret (its type and data) into FerroLB's namespace,
/// unless a Secret of that name is already there, which is left as it is.
pub async fn copy_password_secrets(client: &Client, conversion: &Conversion) -> Vec<Entry> {
    let mut done = BTreeSet::new();
    let mut report = Vec::new();
    for c in &conversion.objects {
        let Some(copy) = &c.password_secret else {
            continue;
        };
        if !done.insert((copy.name.clone(), copy.from_namespace.clone())) {
            continue;
        }
        let finding =
            copy_secret(client, &copy.name, &copy.from_namespace, &copy.to_namespace).await;
        report.push(Entry {
            source: c.source.clone(),
            object: Some(c.from.clone()),
            finding,
        });
    }
    report
}

async fn copy_secret(client: &Client, name: &str, from: &str, to: &str) -> Finding {
    let not_copied = |error: String| Finding::SecretNotCopied {
        name: name.into(),
        from_namespace: from.into(),
        error,
    };
    let there = || Finding::SecretAlreadyThere {
        name: name.into(),
        namespace: to.into(),
    };
    let target: Api<Secret> = Api::namespaced(client.clone(), to);
    match target.get_opt(name).await {
        Ok(Some(_)) => return there(),
        Ok(None) => {}
        Err(e) => return not_copied(format!("cannot look in `{to}`: {}", describe(&e))),
    }
    let source: Api<Secret> = Api::namespaced(client.clone(), from);
    let secret = match source.get_opt(name).await {
        Ok(Some(s)) => s,
        Ok(None) => return not_copied("it does not exist".into()),
        Err(e) => return not_copied(describe(&e)),
    };
    let copy = Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(to.into()),
            ..ObjectMeta::default()
        },
        type_: secret.type_,
        data: secret.data,
        ..Secret::default()
    };
    let pp = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PostParams::default()
    };
    match target.create(&pp, &copy).await {
        Ok(_) => Finding::SecretCopied {
            name: name.into(),
            from_namespace: from.into(),
            to_namespace: to.into(),
        },
        Err(kube::Error::Api(status)) if status.is_already_exists() => there(),
        Err(e) => not_copied(describe(&e)),
    }
}

/// Applies each converted object with server-side apply under [`FIELD_MANAGER`], not forced:
/// a field another manager owns is a conflict, reported for that object, and the others are
/// still applied.
pub async fn apply(client: &Client, conversion: &Conversion) -> Vec<Entry> {
    let params = PatchParams::apply(FIELD_MANAGER);
    let mut report = Vec::new();
    for c in &conversion.objects {
        let namespace = c.object.metadata().namespace.clone().unwrap_or_default();
        let api = Api::<DynamicObject>::namespaced_with(
            client.clone(),
            &namespace,
            &c.object.api_resource(),
        );
        let body = c.object.to_json();
        let resource = c.object.display_name();
        let finding = match api
            .patch(&c.object.name(), &params, &Patch::Apply(&body))
            .await
        {
            Ok(_) => Finding::Applied { resource },
            Err(e) => Finding::ApplyRefused {
                resource,
                error: describe(&e),
            },
        };
        report.push(Entry {
            source: c.source.clone(),
            object: Some(c.from.clone()),
            finding,
        });
    }
    report
}

/// The API server's answer on one line: its message and reason for an API error (kube's own
/// rendering spans lines and repeats the whole status).
fn describe(e: &kube::Error) -> String {
    let text = match e {
        kube::Error::Api(status) if !status.message.is_empty() => {
            format!("{} ({} {})", status.message, status.code, status.reason)
        }
        other => other.to_string(),
    };
    text.split('\n')
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(" ")
}
