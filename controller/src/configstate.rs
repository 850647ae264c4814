//! The controller's `ConfigurationState` (named [`CONTROLLER_OBJECT`] in the install
//! namespace): `Valid` when every configuration object can be used, `Invalid` with the
//! sorted, bounded summary of what cannot ([`ferrolb_api::summary`]), `Unknown` until every
//! configuration kind has been listed once.
//!
//! # Guarantees
//! - One read of the object per leadership term (to learn what it says), then a write only
//!   when what it should say changed: a pass that finds the same problems costs no API call.
//! - Written by the leader only (the caller checks leadership before each write).
//!
//! # Caveats
//! - The object has no owner: it outlives the controller's Pods (each term takes it over) and
//!   goes with the CRD.

use std::collections::BTreeMap;

use ferrolb_api::names;
use ferrolb_api::summary::{self, Checked, Problem};
use ferrolb_api::v1beta1::{
    CONTROLLER_OBJECT, Component, ConfigurationState, ConfigurationStateSpec,
    ConfigurationStateStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use tracing::{debug, info};

use crate::apicall::ApiCallError;

/// What the controller knows of its `ConfigurationState`.
#[derive(Debug, Clone, PartialEq)]
enum Known {
    /// Not read yet in this term.
    Unread,
    /// Read: it does not exist.
    Absent,
    /// It exists and says this (`None`: no status yet).
    Says(Option<ConfigurationStateStatus>),
}

/// Keeps the controller's `ConfigurationState` in line with the problems found.
pub struct ConfigStateWriter {
    api: Api<ConfigurationState>,
    namespace: String,
    known: Known,
}

impl ConfigStateWriter {
    /// A writer for the object in `namespace`; nothing is read before the first
    /// [`ConfigStateWriter::write`].
    pub fn new(client: Client, namespace: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
            known: Known::Unread,
        }
    }

    /// Makes the object say what `problems` amount to (`Unknown` while `checked` is
    /// [`Checked::NotYet`]); no write when it says so already. Returns whether it wrote.
    pub async fn write(
        &mut self,
        checked: Checked,
        problems: Vec<Problem>,
    ) -> Result<bool, ApiCallError> {
        if self.known == Known::Unread {
            self.known = match self.api.get_opt(CONTROLLER_OBJECT).await? {
                Some(o) => Known::Says(o.status),
                None => Known::Absent,
            };
        }
        let old = match &self.known {
            Known::Says(s) => s.clone(),
            _ => None,
        };
        let old = old.as_ref();
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let desired = summary::status(Component::Controller, None, checked, problems, old, now);
        if old == Some(&desired) {
            return Ok(false);
        }
        if self.known == Known::Absent {
            match self.api.create(&PostParams::default(), &self.empty()).await {
                Ok(_) => {}
                Err(e) => match ApiCallError::from(e) {
                    ApiCallError::Conflict => {}
                    e => return Err(e),
                },
            }
            self.known = Known::Says(None);
        }
        let result = self
            .api
            .patch_status(
                CONTROLLER_OBJECT,
                &PatchParams::default(),
                &Patch::Merge(summary::status_patch(&desired)),
            )
            .await;
        match result {
            Ok(o) => {
                if old.map(|o| o.result) != Some(desired.result) {
                    info!(result = ?desired.result, summary = %desired.error_summary, "configuration state changed");
                } else {
                    debug!(object = %o.name_any(), "configuration state summary changed");
                }
                self.known = Known::Says(Some(desired));
                Ok(true)
            }
            Err(e) => {
                // Deleted behind our back, or in an unknown state: read it again next time.
                self.known = Known::Unread;
                Err(e.into())
            }
        }
    }

    fn empty(&self) -> ConfigurationState {
        let labels = BTreeMap::from([(
            names::COMPONENT_TYPE_LABEL.to_string(),
            Component::Controller.label().to_string(),
        )]);
        ConfigurationState {
            metadata: ObjectMeta {
                name: Some(CONTROLLER_OBJECT.into()),
                namespace: Some(self.namespace.clone()),
                labels: Some(labels),
                ..Default::default()
            },
            spec: ConfigurationStateSpec {},
            status: None,
        }
    }
}
