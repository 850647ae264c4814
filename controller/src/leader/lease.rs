//! The shell of leader election: reads and writes the Lease, always under a `resourceVersion`
//! precondition, and publishes until when this replica may act.
//!
//! While this replica leads, the GET is skipped: the Lease its last write returned stands in.
//!
//! ```text
//!   loop every retry period:  GET lease ──► Elector::decide ──► create / replace(rv) ──► written()
//!                                                                      │
//!   watch::Sender<Option<Instant>> ◄── leading_until() ◄───────────────┘
//!        │
//!        └──► reconciler: acts only while now < leading_until
//! ```

use std::time::Instant;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::sync::watch;
use tracing::{debug, info, warn};

use super::{Action, Elector, Observed, Role};
use crate::apicall::ApiCallError;

/// Reads `leading_until` published by [`run`]: whether this replica may act now.
#[derive(Debug, Clone)]
pub struct Leadership(watch::Receiver<Option<Instant>>);

impl Leadership {
    /// A receiver over the value [`run`] publishes.
    pub fn new(rx: watch::Receiver<Option<Instant>>) -> Self {
        Self(rx)
    }

    /// Whether this replica may act at this instant.
    pub fn is_leader(&self) -> bool {
        self.0.borrow().is_some_and(|until| Instant::now() < until)
    }

    /// Until when this replica may act as things stand (it leads, without a renewal, until
    /// then); `None` while it does not lead.
    pub fn leading_until(&self) -> Option<Instant> {
        (*self.0.borrow()).filter(|until| Instant::now() < *until)
    }

    /// Waits until this replica leads.
    pub async fn wait_until_leader(&mut self) {
        loop {
            if self.is_leader() {
                return;
            }
            let _ =
                tokio::time::timeout(std::time::Duration::from_millis(200), self.0.changed()).await;
        }
    }
}

fn now_micro() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

fn observed(lease: &Lease) -> Observed {
    let spec = lease.spec.clone().unwrap_or_default();
    Observed {
        holder: spec.holder_identity.unwrap_or_default(),
        renew_time: spec.renew_time.map(|t| format!("{:?}", t.0)),
        transitions: spec.lease_transitions.unwrap_or(0),
    }
}

/// Runs the election until `shutdown` fires, then releases the Lease if this replica holds it.
pub async fn run(
    api: Api<Lease>,
    name: String,
    mut elector: Elector,
    until_tx: watch::Sender<Option<Instant>>,
    mut shutdown: watch::Receiver<bool>,
) {
    let timing = elector.timing();
    let mut last_role = Role::Follower;
    // The Lease as our last successful write left it, kept while we lead: a renewal writes over
    // it without reading it first (client-go does the same), one request every retry period
    // instead of two. Anyone else's write since makes ours fail with 409 (the resourceVersion
    // is ours), and the next attempt reads again.
    let mut ours: Option<Lease> = None;
    loop {
        let sent = Instant::now();
        let leading = elector.role(sent) == Role::Leader;
        let known = ours.take().filter(|_| leading);
        let attempt =
            tokio::time::timeout(timing.retry_period.max(timing.renew_deadline / 2), async {
                let current = match known {
                    Some(lease) => Some(lease),
                    None => api.get_opt(&name).await?,
                };
                let action = elector.decide(sent, current.as_ref().map(observed));
                debug!(?action, "lease decision");
                let duration_s = timing.lease_duration.as_secs() as i32;
                match action {
                    Action::Wait => Ok::<Option<Lease>, kube::Error>(None),
                    Action::Create => {
                        let lease = Lease {
                            metadata: ObjectMeta {
                                name: Some(name.clone()),
                                ..Default::default()
                            },
                            spec: Some(LeaseSpec {
                                holder_identity: Some(elector.identity().to_string()),
                                lease_duration_seconds: Some(duration_s),
                                acquire_time: Some(now_micro()),
                                renew_time: Some(now_micro()),
                                lease_transitions: Some(0),
                                ..Default::default()
                            }),
                        };
                        api.create(&PostParams::default(), &lease).await.map(Some)
                    }
                    Action::Acquire { .. } | Action::Renew if current.is_some() => {
                        let mut lease = current.expect("checked above");
                        let spec = lease.spec.get_or_insert_with(Default::default);
                        if let Action::Acquire { transitions } = action {
                            spec.holder_identity = Some(elector.identity().to_string());
                            spec.acquire_time = Some(now_micro());
                            spec.lease_transitions = Some(transitions);
                        }
                        spec.lease_duration_seconds = Some(duration_s);
                        spec.renew_time = Some(now_micro());
                        // `lease` still carries the resourceVersion we read: the write is refused
                        // with 409 if anyone wrote in between.
                        api.replace(&name, &PostParams::default(), &lease)
                            .await
                            .map(Some)
                    }
                    Action::Acquire { .. } | Action::Renew => Ok(None),
                }
            })
            .await;
        match attempt {
            Ok(Ok(Some(written))) => {
                elector.written(sent);
                ours = Some(written);
            }
            Ok(Ok(None)) => {}
            Ok(Err(e)) if matches!(ApiCallError::from(&e), ApiCallError::Conflict) => {
                debug!("lease changed under us")
            }
            Ok(Err(e)) => warn!(error = %e, "lease request failed"),
            Err(_) => warn!("lease request timed out"),
        }
        until_tx.send_replace(elector.leading_until());
        let role = elector.role(Instant::now());
        if role != last_role {
            info!(?role, identity = elector.identity(), "leadership changed");
            last_role = role;
        }
        tokio::select! {
            _ = tokio::time::sleep(timing.retry_period) => {}
            _ = shutdown.changed() => break,
        }
    }
    elector.step_down();
    until_tx.send_replace(None);
    release(&api, &name, elector.identity()).await;
}

/// Gives the Lease up (empty holder) so another replica takes over at once, not after expiry.
async fn release(api: &Api<Lease>, name: &str, identity: &str) {
    let Ok(Some(mut lease)) = api.get_opt(name).await else {
        return;
    };
    let spec = lease.spec.get_or_insert_with(Default::default);
    if spec.holder_identity.as_deref() != Some(identity) {
        return;
    }
    spec.holder_identity = None;
    spec.renew_time = Some(now_micro());
    match api.replace(name, &PostParams::default(), &lease).await {
        Ok(_) => info!("lease released"),
        Err(e) => warn!(error = %e, "could not release the lease"),
    }
}
