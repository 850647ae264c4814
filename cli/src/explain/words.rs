//! Every planner reason in words, with the planner's own label as its code.

use ferrolb_api::names::EXCLUDE_FROM_EXTERNAL_LB;
use ferrolb_speaker::planner::{NotAnnounced, NotEligible};

use super::Reason;

/// Why `node` may not announce an address of pool `pool` in the mode whose advertisement kind
/// is `kind` (`L2Advertisement` or `BGPAdvertisement`).
pub fn not_eligible(why: NotEligible, pool: Option<&str>, node: &str, kind: &str) -> Reason {
    let pool = pool.map_or_else(|| "its pool".to_string(), |p| format!("pool `{p}`"));
    let mode = if kind == "L2Advertisement" {
        "layer 2"
    } else {
        "BGP"
    };
    let message = match why {
        NotEligible::Excluded => {
            format!("{mode}: the node carries the label {EXCLUDE_FROM_EXTERNAL_LB}")
        }
        NotEligible::NetworkUnavailable => {
            format!("{mode}: the node's NetworkUnavailable condition is True")
        }
        NotEligible::SpeakerNotLive => {
            format!("{mode}: no ready FerroLB speaker Pod runs on {node}")
        }
        NotEligible::NoMatchingAdvertisement => format!("{mode}: no {kind} covers {pool}"),
        NotEligible::NodeSelectorMismatch => {
            format!("{mode}: no {kind} of {pool} selects this node (their nodeSelectors)")
        }
        NotEligible::ServiceSelectorMismatch => {
            format!("{mode}: no {kind} of {pool} selects this Service (their serviceSelectors)")
        }
        NotEligible::NoLocalEndpoint => format!(
            "{mode}: externalTrafficPolicy is Local and no ready endpoint of the Service runs on {node}"
        ),
        NotEligible::NoReadyEndpoints => {
            format!("{mode}: the Service has no ready endpoint on any node")
        }
        NotEligible::CannotAnswer => format!(
            "{mode}: the node's speaker reported that it has no usable interface for the address"
        ),
    };
    Reason::new(why.label(), message)
}

/// Why nobody announces an address over layer 2.
pub fn not_announced(why: NotAnnounced, pool: Option<&str>) -> Reason {
    let pool = pool.map_or_else(|| "its pool".to_string(), |p| format!("pool `{p}`"));
    let message = match why {
        NotAnnounced::NotInAnyPool => "layer 2: the address lies in no ready IPAddressPool".into(),
        NotAnnounced::NoMatchingAdvertisement => {
            format!("layer 2: no L2Advertisement covers {pool}")
        }
        NotAnnounced::NoServiceSelected => format!(
            "layer 2: the L2Advertisements of {pool} select no Service holding the address (serviceSelectors)"
        ),
        NotAnnounced::NoReadyEndpoints => {
            "layer 2: no Service on the address has a ready endpoint".into()
        }
        NotAnnounced::NoEligibleNode => {
            "layer 2: no node may answer for it (each node's reason is listed)".into()
        }
    };
    Reason::new(why.label(), message)
}

/// `a, b and c`.
pub fn list(items: impl IntoIterator<Item = String>) -> String {
    let items: Vec<String> = items.into_iter().collect();
    match items.as_slice() {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}
