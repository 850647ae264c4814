//! The explanations as text, for people (`-o json` prints the structs instead).

use std::fmt::Write;

use super::node::NodeExplanation;
use super::service::ServiceExplanation;
use super::status::ClusterStatus;

/// `ferrolb explain service` as text.
pub fn service(e: &ServiceExplanation) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Service {}/{}", e.namespace, e.name);
    let _ = writeln!(out, "  {}", e.handling);
    if let Some(p) = &e.pool {
        let _ = writeln!(out, "  Pool: {} ({})", p.name, p.message);
        for o in &p.passed_over {
            let _ = writeln!(
                out,
                "    passed over `{}`: {} ({})",
                o.pool, o.reason.message, o.reason.code
            );
        }
    }
    if let Some(r) = &e.no_address {
        let _ = writeln!(out, "  No address: {} ({})", r.message, r.code);
    }
    for a in &e.addresses {
        let mut head = format!("  Address {}", a.ip);
        let mut detail = Vec::new();
        if let Some(m) = &a.ip_mode {
            detail.push(format!("ipMode {m}"));
        }
        if let Some(p) = &a.pool {
            detail.push(format!("pool {p}"));
        }
        if !a.shared_with.is_empty() {
            detail.push(format!("shared with {}", a.shared_with.join(", ")));
        }
        if !detail.is_empty() {
            head.push_str(&format!(" ({})", detail.join(", ")));
        }
        let _ = writeln!(out, "{head}");
        if let Some(r) = &a.layer2 {
            let _ = writeln!(out, "    {} ({})", r.message, r.code);
        }
        for n in &a.nodes {
            if n.announces {
                let _ = writeln!(out, "    {}: announces: {}", n.node, n.how.join("; "));
                for r in &n.routers {
                    let _ = writeln!(out, "      the router {r} holds the route");
                }
                for r in &n.reasons {
                    let _ = writeln!(out, "      but {} ({})", r.message, r.code);
                }
            } else {
                let reasons: Vec<String> = n
                    .reasons
                    .iter()
                    .map(|r| format!("{} ({})", r.message, r.code))
                    .collect();
                let _ = writeln!(
                    out,
                    "    {}: does not announce: {}",
                    n.node,
                    reasons.join("; ")
                );
            }
        }
    }
    if !e.events.is_empty() {
        let _ = writeln!(out, "  Events (latest last):");
        for ev in &e.events {
            let _ = writeln!(out, "    {ev}");
        }
    }
    out
}

/// `ferrolb explain node` as text.
pub fn node(e: &NodeExplanation) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Node {}", e.name);
    if !e.found {
        let _ = writeln!(out, "  no Node object of that name");
    }
    let _ = writeln!(
        out,
        "  Ready: {}; speaker: {}",
        if e.ready { "True" } else { "not True" },
        if e.speaker_ready {
            "a ready Pod runs here"
        } else {
            "no ready speaker Pod"
        }
    );
    if e.not_eligible.is_empty() {
        let _ = writeln!(out, "  May announce: yes");
    }
    for r in &e.not_eligible {
        let _ = writeln!(out, "  May not announce: {} ({})", r.message, r.code);
    }
    if let Some(c) = &e.configuration {
        let _ = writeln!(out, "  Speaker configuration: {c}");
    }
    if !e.l2_not_selected_by.is_empty() {
        let _ = writeln!(
            out,
            "  Not selected by L2Advertisement(s): {}",
            e.l2_not_selected_by.join(", ")
        );
    }
    let _ = writeln!(
        out,
        "  BGP peers selecting it: {}",
        if e.peers.is_empty() {
            "none".to_string()
        } else {
            e.peers.join(", ")
        }
    );
    for s in &e.sessions {
        let _ = writeln!(out, "    session {s}");
    }
    let _ = writeln!(out, "  Answers over layer 2 for: {}", or_none(&e.layer2));
    let _ = writeln!(out, "  Announces over BGP: {}", or_none(&e.bgp));
    out
}

/// `ferrolb status` as text.
pub fn status(s: &ClusterStatus) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "FerroLB: {} LoadBalancer Services, speakers ready on {} of {} nodes",
        s.services, s.speakers_ready, s.nodes
    );
    let _ = writeln!(out, "Pools:");
    if s.pools.is_empty() {
        let _ = writeln!(out, "  none");
    }
    for p in &s.pools {
        let _ = writeln!(
            out,
            "  {}{}: IPv4 {} used, {} free; IPv6 {} used, {} free",
            p.name,
            if p.ready { "" } else { " (not ready)" },
            p.ipv4.0,
            p.ipv4.1,
            p.ipv6.0,
            free(p.ipv6.1)
        );
    }
    let _ = writeln!(
        out,
        "Services without an address: {}",
        s.without_address.len()
    );
    for p in &s.without_address {
        let _ = writeln!(
            out,
            "  {}: {} ({})",
            p.service, p.reason.message, p.reason.code
        );
    }
    let _ = writeln!(
        out,
        "BGP sessions not Established or BFD not Up: {}",
        s.sessions_down.len()
    );
    for d in &s.sessions_down {
        let mut line = format!("  {} to {}: {}", d.node, d.peer, d.state);
        if let Some(b) = &d.bfd {
            line.push_str(&format!(", BFD {b}"));
        }
        if let Some(e) = &d.last_error {
            line.push_str(&format!("; last error: {e}"));
        }
        let _ = writeln!(out, "{line}");
    }
    let _ = writeln!(out, "Configuration problems: {}", s.problems.len());
    for p in &s.problems {
        let _ = writeln!(out, "  {p}");
    }
    out
}

fn or_none(items: &[String]) -> String {
    if items.is_empty() {
        "nothing".into()
    } else {
        items.join("; ")
    }
}

/// A free count, with the saturated IPv6 count (a /64 and more) said as such.
fn free(n: u128) -> String {
    if n >= i64::MAX as u128 {
        "over 2^63".into()
    } else {
        n.to_string()
    }
}
