//! Every planner reason in words, with the planner's own label as its code.

use std::net::IpAddr;

use ferrolb_api::names::EXCLUDE_FROM_EXTERNAL_LB;
use ferrolb_speaker::planner::{NotAnnounced, NotEligible};

use super::Reason;

/// The endpoints that serve `ip`, in words: those of its family (`ready IPv4 endpoint`), as
/// kube-proxy counts them; any when the address is not known.
fn ready_endpoint(ip: Option<IpAddr>) -> &'static str {
    match ip {
        Some(IpAddr::V4(_)) => "ready IPv4 endpoint",
        Some(IpAddr::V6(_)) => "ready IPv6 endpoint",
        None => "ready endpoint",
    }
}

/// Why `node` may not announce `ip` (when one address is explained), an address of pool
/// `pool`, in the mode whose advertisement kind is `kind` (`L2Advertisement` or
/// `BGPAdvertisement`).
pub fn not_eligible(
    why: NotEligible,
    ip: Option<IpAddr>,
    pool: Option<&str>,
    node: &str,
    kind: &str,
) -> Reason {
    let endpoint = ready_endpoint(ip);
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
            "{mode}: externalTrafficPolicy is Local and no {endpoint} of the Service runs on {node}"
        ),
        NotEligible::NoReadyEndpoints => {
            format!("{mode}: the Service has no {endpoint} on any node")
        }
        NotEligible::CannotAnswer => format!(
            "{mode}: the node's speaker reported that it has no usable interface for the address"
        ),
    };
    Reason::new(why.label(), message)
}

/// Why nobody announces `ip`, an address of pool `pool`, over layer 2.
pub fn not_announced(why: NotAnnounced, ip: IpAddr, pool: Option<&str>) -> Reason {
    let pool = pool.map_or_else(|| "its pool".to_string(), |p| format!("pool `{p}`"));
    let message = match why {
        NotAnnounced::NotInAnyPool => "layer 2: the address lies in no ready IPAddressPool".into(),
        NotAnnounced::NoMatchingAdvertisement => {
            format!("layer 2: no L2Advertisement covers {pool}")
        }
        NotAnnounced::NoServiceSelected => format!(
            "layer 2: the L2Advertisements of {pool} select no Service holding the address (serviceSelectors)"
        ),
        NotAnnounced::NoReadyEndpoints => format!(
            "layer 2: no Service on the address has a {}",
            ready_endpoint(Some(ip))
        ),
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
