//! What the session sends once Established: the difference between the desired routes and the
//! Adj-RIB-Out, route refreshes (RFC 2918), path identifiers where ADD-PATH send was
//! negotiated (RFC 7911). Pure: no I/O, no clock.

use std::net::IpAddr;

use ipnet::IpNet;

use super::{Event, NotAnnounced, Output, Session};
use crate::bgp::rib::{
    Changes, NextHop, diff, group_family, record_announced, record_withdrawn, replaced_paths,
};
use crate::bgp::update::{
    EncodeError, EncodeParams, Nlri, PathGroup, encode_announcements, encode_withdrawals, family_of,
};
use crate::bgp::wire::Family;

/// Counts of what went out, for [`Event::UpdatesSent`].
#[derive(Debug, Default)]
struct Sent {
    messages: usize,
    announced: usize,
    withdrawn: usize,
}

impl Sent {
    fn report(self, bytes: Vec<u8>, out: &mut Vec<Output>) {
        if self.messages > 0 {
            out.push(Output::Send(bytes));
            out.push(Output::Event(Event::UpdatesSent {
                messages: self.messages,
                announced: self.announced,
                withdrawn: self.withdrawn,
            }));
        }
    }
}

impl Session {
    pub(super) fn encode_params(&self) -> EncodeParams {
        // Configured, else the session's own address, else the interface's other-family one.
        let candidates = [self.local.map(|l| l.ip()), self.other_family];
        let next_hop_v4 = self.config.next_hop_v4.or_else(|| {
            candidates.iter().find_map(|c| match c {
                Some(IpAddr::V4(a)) => Some(*a),
                _ => None,
            })
        });
        let next_hop_v6 = self.config.next_hop_v6.or_else(|| {
            candidates.iter().find_map(|c| match c {
                Some(IpAddr::V6(a)) if !a.is_unicast_link_local() => Some(*a),
                _ => None,
            })
        });
        // RFC 2545 §3: on a session over a link-local address, that address goes with (or,
        // with no global address, instead of) the global next hop.
        let next_hop_v6_link_local = match self.local.map(|l| l.ip()) {
            Some(IpAddr::V6(a)) if a.is_unicast_link_local() => Some(a),
            _ => None,
        };
        EncodeParams {
            my_asn: self.config.local_as(),
            ibgp: self.config.is_ibgp(),
            four_octet_as: self.negotiated.as_ref().is_some_and(|n| n.four_octet_as),
            next_hop_v4,
            next_hop_v6,
            next_hop_v6_link_local,
            ipv4_over_ipv6: self.negotiated.as_ref().is_some_and(|n| n.ipv4_over_ipv6),
            only_to_customer: self
                .config
                .ebgp_role()
                .filter(|r| r.marks_only_to_customer())
                .map(|_| self.config.local_as()),
        }
    }

    /// Families negotiated, and those of them with path identifiers.
    fn negotiated_families(&self) -> (Vec<Family>, Vec<Family>) {
        self.negotiated
            .as_ref()
            .map(|n| (n.families.clone(), n.add_path_send.clone()))
            .unwrap_or_default()
    }

    /// The wire grouping of the paths of `family` via `next_hop`: with their path identifier
    /// where ADD-PATH send is in force.
    fn path_group(&mut self, family: Family, next_hop: NextHop, add_path: bool) -> PathGroup {
        PathGroup {
            family,
            next_hop,
            path_id: add_path.then(|| self.path_ids.id(next_hop)),
        }
    }

    /// Sends what brings the peer from the Adj-RIB-Out to the desired routes: withdrawals
    /// first, then announcements (a path whose next hop changes is a new path).
    pub(super) fn sync(&mut self, out: &mut Vec<Output>) {
        let (families, add_path) = self.negotiated_families();
        let mut changes = diff(&self.adj_rib_out, &self.desired, &families, &add_path);
        let mut announce_bytes = Vec::new();
        let mut sent = Sent::default();
        let failed = self.announce(&mut changes, &add_path, &mut announce_bytes, &mut sent);
        let mut bytes = Vec::new();
        for (family, paths) in std::mem::take(&mut changes.withdraw) {
            let ap = add_path.contains(&family);
            let nlri: Vec<Nlri> = paths
                .iter()
                .map(|(prefix, nh)| Nlri {
                    path_id: ap.then(|| self.path_ids.id(*nh)),
                    prefix: *prefix,
                })
                .collect();
            sent.messages += encode_withdrawals(&mut bytes, family, nlri);
            sent.withdrawn += paths.len();
            for (p, nh) in &paths {
                record_withdrawn(&mut self.adj_rib_out, p, *nh);
            }
        }
        bytes.extend_from_slice(&announce_bytes);
        sent.report(bytes, out);
        self.report_unannounced(changes.unsupported, failed, out);
    }

    /// Encodes the announcements of `changes` into `bytes` and records them. A group that
    /// cannot be encoded is returned with its error, and what the peer holds in its place is
    /// added to the withdrawals.
    fn announce(
        &mut self,
        changes: &mut Changes,
        add_path: &[Family],
        bytes: &mut Vec<u8>,
        sent: &mut Sent,
    ) -> Vec<(EncodeError, Vec<IpNet>)> {
        let params = self.encode_params();
        let mut failed = Vec::new();
        for ((family, next_hop, attrs), prefixes) in &changes.announce {
            let ap = add_path.contains(family);
            let group = self.path_group(*family, *next_hop, ap);
            match encode_announcements(bytes, &params, attrs, group, prefixes) {
                Ok(n) => {
                    sent.messages += n;
                    sent.announced += prefixes.len();
                    for p in prefixes {
                        record_announced(&mut self.adj_rib_out, ap, *p, *next_hop, attrs);
                    }
                }
                Err(e) => {
                    // What the peer holds under other attributes or another next hop must go.
                    for p in prefixes {
                        let held = replaced_paths(&self.adj_rib_out, ap, p, *next_hop);
                        let w = changes.withdraw.entry(*family).or_default();
                        w.extend(held.into_iter().map(|nh| (*p, nh)));
                    }
                    failed.push((e, prefixes.clone()));
                }
            }
        }
        failed
    }

    /// Says which desired prefixes did not go out, and why.
    fn report_unannounced(
        &self,
        unsupported: Vec<IpNet>,
        failed: Vec<(EncodeError, Vec<IpNet>)>,
        out: &mut Vec<Output>,
    ) {
        // A family the configuration leaves out is a choice; one the peer refused is not.
        let configured = self.config.families();
        let (not_negotiated, not_configured): (Vec<IpNet>, Vec<IpNet>) = unsupported
            .into_iter()
            .partition(|p| configured.contains(&family_of(p)));
        for (prefixes, reason) in [
            (not_negotiated, NotAnnounced::FamilyNotNegotiated),
            (not_configured, NotAnnounced::FamilyNotConfigured),
        ] {
            if !prefixes.is_empty() {
                out.push(Output::Event(Event::NotAnnounced { prefixes, reason }));
            }
        }
        for (e, prefixes) in failed {
            out.push(Output::Event(Event::NotAnnounced {
                prefixes,
                reason: NotAnnounced::Encode(e),
            }));
        }
    }

    /// Answers a ROUTE-REFRESH by re-sending every path of the family in the Adj-RIB-Out,
    /// each under its path identifier where ADD-PATH send is in force (RFC 2918 §4).
    pub(super) fn refresh(&mut self, family: Family, out: &mut Vec<Output>) {
        let (families, add_path) = self.negotiated_families();
        if !families.contains(&family) {
            return;
        }
        let ap = add_path.contains(&family);
        let params = self.encode_params();
        let mut bytes = Vec::new();
        let mut sent = Sent::default();
        for ((next_hop, attrs), prefixes) in group_family(&self.adj_rib_out, family) {
            let group = self.path_group(family, next_hop, ap);
            // These paths were encoded once already, so encoding cannot fail now.
            if let Ok(n) = encode_announcements(&mut bytes, &params, &attrs, group, &prefixes) {
                sent.messages += n;
                sent.announced += prefixes.len();
            }
        }
        sent.report(bytes, out);
    }
}
