//! `Community`: named BGP community values that advertisements refer to.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::ConfigStatus;

/// A standard (`65000:100`), or large (`large:64512:1:2`) BGP community, or the name of an alias
/// defined in a [`Community`] object.
pub const COMMUNITY_PATTERN: &str = r"^(([0-9]{1,5}):([0-9]{1,5})|large:[0-9]{1,10}:[0-9]{1,10}:[0-9]{1,10}|[a-z0-9]([-a-z0-9]*[a-z0-9])?)$";

/// A CEL rule true when every standard community in `self` has both halves at most 65535, and
/// every large community has three parts at most 4294967295.
pub const COMMUNITY_RANGE_RULE: &str = concat!(
    "self.all(c, !c.matches('^[0-9]+:[0-9]+$') || c.split(':').all(p, int(p) <= 65535))",
    " && self.all(c, !c.startsWith('large:') || c.split(':').slice(1, 4).all(p, int(p) <= 4294967295))"
);

/// Named community values, so advertisements can say `communities: [no-advertise]`.
#[derive(CustomResource, JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "ferrolb.io",
    version = "v1beta1",
    kind = "Community",
    plural = "communities",
    namespaced,
    status = "ConfigStatus",
    shortname = "comm",
    category = "ferrolb",
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct CommunitySpec {
    /// The aliases this object defines.
    #[serde(default)]
    pub communities: Vec<CommunityAlias>,
}

/// One alias: a name and the community value it stands for.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CommunityAlias {
    /// The alias, as written in `BGPAdvertisement.spec.communities`.
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub name: String,
    /// The community value: `65000:100` or `large:64512:1:2`.
    #[schemars(regex(
        pattern = r"^([0-9]{1,5}:[0-9]{1,5}|large:[0-9]{1,10}:[0-9]{1,10}:[0-9]{1,10})$"
    ))]
    pub value: String,
}
