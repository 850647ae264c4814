//! The tokio shell of [`super::partition`]: one task watches the view Lease, one writes it.
//!
//! ```text
//!  watch of Lease ferrolb-l2-view ──► watch: the view on record ──┐
//!                                                                 ├─► Arbiter (core, in the main loop)
//!  write: create / replace (resourceVersion) ◄── queue of 1 ◄─────┤
//!       └──► watch: (sequence, how it ended) ─────────────────────┘
//! ```
//!
//! A write is given [`WRITE_TIMEOUT`]: a minority that cannot reach the API server must learn it
//! soon, not after the client's own minute. Only the Lease named [`LEASE_NAME`] is watched (a
//! field selector), so no other Lease of the namespace reaches the speakers.
use super::partition::{LEASE_NAME, VIEW_ANNOTATION, View, Write, Written};
use ferrolb_telemetry::apicall::ApiCallError;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};
use tokio::sync::{mpsc, watch};
use tracing::{debug, warn};

/// How long a write may take before it counts as [`Written::Unreachable`].
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(1);

/// The running shell. Dropping it stops nothing: its tasks live as long as the speaker.
pub struct ViewLease {
    /// The view on record (`None`: no Lease, or not listed yet).
    pub view: watch::Receiver<Option<View>>,
    /// How the last write ended, with a sequence number that grows with every write.
    pub written: watch::Receiver<(u64, Option<Written>)>,
    writes: mpsc::Sender<Write>,
}

impl ViewLease {
    /// Starts watching and writing the view Lease in `namespace` as the speaker of `node`.
    pub fn start(client: kube::Client, namespace: &str, node: &str) -> Self {
        let api: Api<Lease> = Api::namespaced(client, namespace);
        let (view_tx, view) = watch::channel(None);
        let (written_tx, written) = watch::channel((0, None));
        let (writes, mut queue) = mpsc::channel::<Write>(1);
        let config = watcher::Config::default()
            .fields(&format!("metadata.name={LEASE_NAME}"))
            .any_semantic();
        let watched = api.clone();
        tokio::spawn(async move {
            let stream = watcher(watched, config).default_backoff();
            let mut stream = std::pin::pin!(stream);
            while let Some(item) = stream.next().await {
                match item {
                    Ok(watcher::Event::InitApply(lease) | watcher::Event::Apply(lease)) => {
                        view_tx.send_replace(view_of(&lease));
                    }
                    Ok(watcher::Event::Delete(_)) => {
                        view_tx.send_replace(None);
                    }
                    Ok(watcher::Event::Init | watcher::Event::InitDone) => {}
                    Err(e) => {
                        warn!(error = %e, lease = LEASE_NAME, "watch error; retrying with back-off")
                    }
                }
            }
        });
        let node = node.to_owned();
        tokio::spawn(async move {
            let mut sequence = 0;
            while let Some(write) = queue.recv().await {
                let outcome = match tokio::time::timeout(
                    WRITE_TIMEOUT,
                    write_view(&api, &node, &write),
                )
                .await
                {
                    Ok(Ok(())) => Written::Done,
                    Ok(Err(e)) if matches!(ApiCallError::from(&e), ApiCallError::Conflict) => {
                        Written::Conflict
                    }
                    Ok(Err(e)) => {
                        warn!(error = %e, lease = LEASE_NAME, "cannot write this speaker's view of the live speakers");
                        Written::Unreachable
                    }
                    Err(_) => {
                        warn!(timeout = ?WRITE_TIMEOUT, lease = LEASE_NAME, "the API server did not take this speaker's view of the live speakers in time");
                        Written::Unreachable
                    }
                };
                debug!(?outcome, live = ?write.live, "view written");
                sequence += 1;
                written_tx.send_replace((sequence, Some(outcome)));
            }
        });
        Self {
            view,
            written,
            writes,
        }
    }

    /// Queues `write`; `false` when it could not be (the core keeps one write in flight, so
    /// only a stopped writer task refuses): the caller reports it as [`Written::Unreachable`].
    pub fn write(&self, write: Write) -> bool {
        self.writes.try_send(write).is_ok()
    }
}

/// Creates the Lease (no version on record) or replaces it under the version the core saw.
async fn write_view(api: &Api<Lease>, node: &str, write: &Write) -> Result<(), kube::Error> {
    let live: Vec<&str> = write.live.iter().map(String::as_str).collect();
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some(LEASE_NAME.to_owned()),
            resource_version: write.replaces.clone(),
            annotations: Some(BTreeMap::from([(
                VIEW_ANNOTATION.to_owned(),
                live.join(","),
            )])),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(node.to_owned()),
            renew_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::now())),
            ..LeaseSpec::default()
        }),
    };
    match &write.replaces {
        None => api.create(&PostParams::default(), &lease).await.map(drop),
        Some(_) => api
            .replace(LEASE_NAME, &PostParams::default(), &lease)
            .await
            .map(drop),
    }
}

/// The view a Lease holds; a Lease without a holder or a version holds none.
fn view_of(lease: &Lease) -> Option<View> {
    let spec = lease.spec.as_ref()?;
    let writer = spec.holder_identity.clone()?;
    let version = lease.metadata.resource_version.clone()?;
    let live: BTreeSet<String> = lease
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(VIEW_ANNOTATION))
        .map(|v| {
            v.split(',')
                .filter(|n| !n.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let renewed = spec
        .renew_time
        .as_ref()
        .and_then(|t| {
            let ns = u64::try_from(t.0.as_nanosecond()).ok()?;
            SystemTime::UNIX_EPOCH.checked_add(Duration::from_nanos(ns))
        })
        .unwrap_or(SystemTime::UNIX_EPOCH);
    Some(View {
        writer,
        live,
        version,
        renewed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_lease_written_by_a_speaker_reads_back_as_its_view() {
        let lease: Lease = serde_json::from_value(json!({
            "metadata": {
                "name": LEASE_NAME,
                "resourceVersion": "42",
                "annotations": {VIEW_ANNOTATION: "node-b,node-c"}
            },
            "spec": {"holderIdentity": "node-b", "renewTime": "2026-12-03T20:00:00.500000Z"}
        }))
        .unwrap();
        let view = view_of(&lease).unwrap();
        assert_eq!(view.writer, "node-b");
        assert_eq!(view.version, "42");
        assert_eq!(
            view.live,
            BTreeSet::from(["node-b".to_owned(), "node-c".to_owned()])
        );
        let ms = view
            .renewed
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_millis();
        assert_eq!(ms % 1000, 500);
    }

    #[test]
    fn a_lease_without_a_holder_holds_no_view() {
        let lease: Lease = serde_json::from_value(json!({
            "metadata": {"name": LEASE_NAME, "resourceVersion": "1"},
            "spec": {}
        }))
        .unwrap();
        assert_eq!(view_of(&lease), None);
    }
}
