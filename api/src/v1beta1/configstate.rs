//! `ConfigurationState`: whether the configuration as a whole can take effect, in one object
//! per component (MetalLB's kind, with the same `result` and `errorSummary`). The controller
//! writes one, named [`CONTROLLER_OBJECT`], for what spans objects (overlapping pools, missing
//! references); each speaker writes one per node, named by [`speaker_object_name`] and owned by
//! its Node, for what only that node can check (interfaces, peers it cannot reach).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The name of the controller's object.
pub const CONTROLLER_OBJECT: &str = "controller";

/// The longest `errorSummary` the schema accepts (the writers stay well below it: see
/// [`crate::summary::MAX_SUMMARY_LEN`]).
pub const ERROR_SUMMARY_MAX_LENGTH: usize = 4096;

/// The name of `node`'s speaker object: `speaker-<node>`, shortened with a hash when it would
/// pass the 253-character limit of an object name.
pub fn speaker_object_name(node: &str) -> String {
    let full = format!("speaker-{node}");
    if full.len() <= 253 {
        return full;
    }
    // FNV-1a: stable across processes and releases, unlike the standard library's hasher.
    let hash = full.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    let mut cut = 230;
    while !full.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}.{hash:016x}", &full[..cut])
}

/// Whether a component's configuration is valid (status only: nothing in the spec).
#[derive(CustomResource, JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "ferrolb.io",
    version = "v1beta1",
    kind = "ConfigurationState",
    plural = "configurationstates",
    namespaced,
    status = "ConfigurationStateStatus",
    shortname = "cfgstate",
    category = "ferrolb",
    printcolumn(name = "Component", type_ = "string", json_path = ".status.component"),
    printcolumn(name = "Node", type_ = "string", json_path = ".status.node"),
    printcolumn(name = "Result", type_ = "string", json_path = ".status.result"),
    printcolumn(
        name = "ErrorSummary",
        type_ = "string",
        json_path = ".status.errorSummary"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ConfigurationStateSpec {}

/// The outcome of checking a component's configuration.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ConfigurationResult {
    /// Every configuration object the component checks can take effect.
    Valid,
    /// At least one cannot; `errorSummary` says which and why.
    Invalid,
    /// The component has not checked yet (it has not listed every kind once).
    #[default]
    Unknown,
}

/// The component that writes a `ConfigurationState`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Component {
    /// `ferrolb-controller`: the checks that span objects.
    Controller,
    /// `ferrolb-speaker` on one node: what only that node can check.
    Speaker,
}

impl Component {
    /// The value of the [`crate::names::COMPONENT_TYPE_LABEL`] label.
    pub fn label(self) -> &'static str {
        match self {
            Component::Controller => "controller",
            Component::Speaker => "speaker",
        }
    }
}

/// What the component found.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.result) || self.result != 'Valid' || !has(self.errorSummary) || self.errorSummary == ''")
    .message("errorSummary must be empty when result is Valid").field_path(".errorSummary"))]
#[x_kube(validation = Rule::new("!has(self.component) || self.component != 'speaker' || has(self.node)")
    .message("a speaker's ConfigurationState names its node").field_path(".node"))]
pub struct ConfigurationStateStatus {
    /// Who wrote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub component: Option<Component>,
    /// The node, for a speaker's object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub node: Option<String>,
    /// `Valid`, `Invalid`, or `Unknown` until the component has checked.
    #[serde(default)]
    pub result: ConfigurationResult,
    /// The errors, sorted by kind and object name, `; `-separated, cut short with a count of
    /// those left out when long; empty when `result` is `Valid`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 4096))]
    pub error_summary: String,
    /// `Valid`: `True`, `False` (reason `ConfigurationError`) or `Unknown` (reason
    /// `NotChecked`), with the time the result last changed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub conditions: Vec<Condition>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_speaker_object_is_named_after_its_node_within_the_name_limit() {
        assert_eq!(speaker_object_name("node-a"), "speaker-node-a");
        let long = "n".repeat(253);
        let name = speaker_object_name(&long);
        assert!(name.len() <= 253, "{}", name.len());
        assert_eq!(name, speaker_object_name(&long), "stable");
        assert_ne!(name, speaker_object_name(&"m".repeat(253)));
    }

    // The schema's limit holds the longest summary the writers make.
    const _: () = assert!(crate::summary::MAX_SUMMARY_LEN < ERROR_SUMMARY_MAX_LENGTH);

    #[test]
    fn the_schema_limits_the_error_summary_to_the_documented_length() {
        use kube::CustomResourceExt;
        let crd = serde_json::to_value(ConfigurationState::crd()).unwrap();
        let summary = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
            ["properties"]["errorSummary"];
        assert_eq!(summary["maxLength"], ERROR_SUMMARY_MAX_LENGTH);
    }
}
