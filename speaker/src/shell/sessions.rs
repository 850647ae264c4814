//! `BGPSessionState`: one object per (node, `BGPPeer`) selecting the node, written by that
//! node's speaker, so that `kubectl get bgpsessionstates` answers "is my BGP up".
//!
//! ```text
//!  Speaker::tick ── SessionStates::desired (pure, time passed in) ──► watch (latest only)
//!                                                                        │ a pass at most every
//!                                                                        ▼ MIN_PASS_INTERVAL
//!                              SessionStateWriter: create / patch status / delete what differs
//! ```
//!
//! # Guarantees
//! - The sessions never wait on these writes: the sync loop hands the latest states to a
//!   `watch` and goes on; a slow API server only makes the objects later (the writer keeps only
//!   the newest states, so nothing queues up).
//! - The objects grow with nodes × peers selecting them (a handful per node), never with
//!   Services. Counters that move with every UPDATE are not in them (they are metrics); a
//!   session whose state does not change costs no write.
//! - Each object is owned by its Node (`ownerReferences`), so a Node's objects go with it; a
//!   peer removed or no longer selecting the node has its object deleted by the speaker.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use ferrolb_api::names;
use ferrolb_api::v1beta1::{
    BGPNotificationInfo, BGPSessionState, BGPSessionStateStatus, CONDITION_READY,
};
use ferrolb_telemetry::apicall;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::ObjectMeta;
use kube::{Api, Client};
use tokio::sync::watch;
use tracing::warn;

use super::metrics::Metrics;
use super::names::node_owned;
use super::status::Written;
use crate::bgp::config::{PeerConfig, PeerId};
use crate::bgp::{NotificationRecord, PeerStatus, State};
use crate::cluster::peers::PeerConfigError;

/// Shortest time between two passes of writes (a flapping session is written at this rate at
/// most; its latest state always lands).
pub const MIN_PASS_INTERVAL: Duration = Duration::from_secs(1);

/// `bgpState` of a `BGPPeer` that selects this node but cannot be used.
pub const NOT_CONFIGURED: &str = "NotConfigured";

/// What this node's `BGPSessionState` objects should say: by object name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// This node's UID (the objects' owner), once known.
    pub node_uid: Option<String>,
    /// The objects, by name.
    pub states: BTreeMap<String, BGPSessionStateStatus>,
}

/// The name of the object for `peer` on `node`: `<peer>.<node>`, shortened with a hash when
/// it would pass the 253-character limit.
pub fn object_name(peer: &str, node: &str) -> String {
    super::names::object_name(&[peer, node])
}

/// Builds the objects' contents from the sessions' states. Pure: `now` is passed in. Keeps,
/// per peer, when its `Ready` condition last changed.
#[derive(Debug, Default)]
pub struct SessionStates {
    transitions: BTreeMap<String, (bool, &'static str, Time)>,
}

impl SessionStates {
    /// What the objects of `node` should say, for the configured `peers` (with their
    /// `states`) and the `BGPPeer`s selecting the node that could not be configured
    /// (`errors`).
    pub fn desired(
        &mut self,
        now: SystemTime,
        node: &str,
        peers: &[PeerConfig],
        states: &BTreeMap<PeerId, PeerStatus>,
        errors: &[PeerConfigError],
    ) -> BTreeMap<String, BGPSessionStateStatus> {
        let mut out = BTreeMap::new();
        for peer in peers {
            let Some(st) = states.get(&peer.id) else {
                continue;
            };
            let missing_profile = errors.iter().find(|e| {
                e.peer() == peer.id.0 && matches!(e, PeerConfigError::MissingBfdProfile { .. })
            });
            let (ok, reason, message) = if let (Some(_), Some(why)) =
                (st.missing_vrf, st.last_error.as_deref())
                && st.state != State::Established
            {
                (false, "VRFNotFound", why.to_string())
            } else if st.state != State::Established {
                let why = st
                    .last_error
                    .as_deref()
                    .unwrap_or("the session is not up yet");
                (false, "NotEstablished", why.to_string())
            } else if let Some(e) = missing_profile {
                (false, "BFDProfileNotFound", e.to_string())
            } else if st.bfd.is_some_and(|b| b != crate::bfd::State::Up) {
                (
                    false,
                    "BFDNotUp",
                    "BGP is Established but BFD is not Up".into(),
                )
            } else {
                (true, "Established", "the session is Established".into())
            };
            let status = BGPSessionStateStatus {
                node: node.into(),
                peer: peer.id.0.clone(),
                peer_address: match (&peer.interface, st.neighbour) {
                    (Some(i), Some(router)) => format!("[{router}%{i}]:{}", peer.peer_port),
                    (Some(i), None) => format!("{i} (unnumbered)"),
                    (None, _) => {
                        std::net::SocketAddr::new(peer.peer_address, peer.peer_port).to_string()
                    }
                },
                bgp_state: format!("{:?}", st.state),
                bfd_state: st.bfd.map(|b| format!("{b:?}")),
                established_time: st.established_since.and_then(time),
                established_count: i64::try_from(st.established_count).unwrap_or(i64::MAX),
                ipv4_prefixes: st.announced_v4 as i64,
                ipv6_prefixes: st.announced_v6 as i64,
                local_asn: Some(i64::from(peer.local_as())),
                peer_asn: st
                    .peer_as
                    .or((!peer.peer_asn_external).then_some(peer.peer_asn))
                    .map(i64::from),
                hold_time: st.hold_time.map(|d| format!("{}s", d.as_secs())),
                keepalive_time: st.keepalive.map(|d| format!("{}s", d.as_secs())),
                capabilities: st.capabilities.iter().map(|c| c.to_string()).collect(),
                bfd_detection_time: st
                    .bfd_detection_time
                    .map(|d| format!("{}ms", d.as_millis())),
                last_error: st.last_error.clone(),
                last_error_time: st.last_error_at.and_then(time),
                last_notification_received: st.last_notification_received.as_ref().map(info),
                last_notification_sent: st.last_notification_sent.as_ref().map(info),
                conditions: vec![self.ready(now, &peer.id.0, ok, reason, message)],
            };
            out.insert(object_name(&peer.id.0, node), status);
        }
        for e in errors.iter().filter(|e| !e.keeps_the_peer()) {
            let status = BGPSessionStateStatus {
                node: node.into(),
                peer: e.peer().into(),
                bgp_state: NOT_CONFIGURED.into(),
                last_error: Some(e.to_string()),
                conditions: vec![self.ready(now, e.peer(), false, NOT_CONFIGURED, e.to_string())],
                ..Default::default()
            };
            out.insert(object_name(e.peer(), node), status);
        }
        self.transitions
            .retain(|peer, _| out.values().any(|s| s.peer == *peer));
        out
    }

    fn ready(
        &mut self,
        now: SystemTime,
        peer: &str,
        ok: bool,
        reason: &'static str,
        message: String,
    ) -> Condition {
        let since = match self.transitions.get(peer) {
            Some((o, r, t)) if *o == ok && *r == reason => t.clone(),
            _ => {
                let t = time(now).unwrap_or(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
                self.transitions
                    .insert(peer.into(), (ok, reason, t.clone()));
                t
            }
        };
        Condition {
            type_: CONDITION_READY.into(),
            status: if ok { "True" } else { "False" }.into(),
            reason: reason.into(),
            message,
            observed_generation: None,
            last_transition_time: since,
        }
    }
}

/// A wall-clock time as the API writes it (whole seconds: a sub-second change is no change).
fn time(t: SystemTime) -> Option<Time> {
    let secs = t.duration_since(SystemTime::UNIX_EPOCH).ok()?.as_secs();
    k8s_openapi::jiff::Timestamp::from_second(i64::try_from(secs).ok()?)
        .ok()
        .map(Time)
}

fn info(n: &NotificationRecord) -> BGPNotificationInfo {
    BGPNotificationInfo {
        code: n.code.into(),
        subcode: n.subcode.into(),
        message: n.message.clone(),
        time: time(n.at),
    }
}

/// The task that writes this node's `BGPSessionState` objects.
pub struct SessionStateWriter {
    /// The client.
    pub client: Client,
    /// The install namespace.
    pub namespace: String,
    /// This node.
    pub node: String,
    /// Metrics (write failures).
    pub metrics: Metrics,
}

impl SessionStateWriter {
    /// Makes the objects say what `reports` holds, forever. Nothing is written before the
    /// first report (the objects a previous speaker left are kept until then).
    pub async fn run(self, mut reports: watch::Receiver<Option<Arc<Report>>>) {
        let api: Api<BGPSessionState> = Api::namespaced(self.client.clone(), &self.namespace);
        let written =
            super::status::until_listed("listing this node's BGPSessionState objects", || {
                Written::load(api.clone(), &self.node)
            })
            .await;
        let mut failures = 0u32;
        loop {
            let Some(report) = reports.borrow_and_update().clone() else {
                if reports.changed().await.is_err() {
                    return;
                }
                continue;
            };
            match self.pass(&written, &report).await {
                Ok(()) => {
                    failures = 0;
                    tokio::time::sleep(MIN_PASS_INTERVAL).await;
                    if reports.changed().await.is_err() {
                        return;
                    }
                }
                Err(e) => {
                    failures += 1;
                    self.metrics.status_write_failed(&e);
                    warn!(error = %e, attempt = failures, "writing a BGPSessionState failed; retrying");
                    tokio::time::sleep(apicall::backoff(failures)).await;
                }
            }
        }
    }

    async fn pass(
        &self,
        written: &Written<BGPSessionState>,
        report: &Report,
    ) -> Result<(), kube::Error> {
        for (name, status) in &report.states {
            let meta = || {
                node_owned(
                    name,
                    &self.namespace,
                    &self.node,
                    report.node_uid.as_deref(),
                    &[
                        (names::STATUS_NODE_LABEL, self.node.as_str()),
                        (names::STATUS_PEER_LABEL, status.peer.as_str()),
                    ],
                )
            };
            written.write(meta, name, Some(status)).await?;
        }
        for name in written.names() {
            if !report.states.contains_key(&name) {
                written.write(ObjectMeta::default, &name, None).await?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(name: &str) -> PeerConfig {
        serde_json::from_value(serde_json::json!({
            "id": name, "my_asn": 64512, "peer_asn": 64513,
            "peer_address": "192.0.2.1", "peer_port": 179, "source_address": null,
            "router_id": null, "hold_time": {"secs": 90, "nanos": 0}, "keepalive_time": null,
            "connect_retry": {"secs": 1, "nanos": 0}, "ebgp_multihop": false,
            "password": null, "graceful_restart": false, "next_hop_v4": null, "next_hop_v6": null,
        }))
        .expect("a peer config")
    }

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
    }

    fn established() -> PeerStatus {
        PeerStatus {
            state: State::Established,
            established_since: Some(at(0)),
            established_count: 1,
            announced_prefixes: 3,
            announced_v4: 2,
            announced_v6: 1,
            hold_time: Some(Duration::from_secs(90)),
            keepalive: Some(Duration::from_secs(30)),
            capabilities: vec!["ipv4-unicast", "ipv6-unicast", "4-octet-as"],
            ..Default::default()
        }
    }

    fn ready(s: &BGPSessionStateStatus) -> (&str, &str) {
        let c = &s.conditions[0];
        (c.status.as_str(), c.reason.as_str())
    }

    #[test]
    fn an_established_session_is_ready_with_its_prefixes_per_family_and_what_was_agreed() {
        let mut s = SessionStates::default();
        let states = BTreeMap::from([(PeerId("tor".into()), established())]);
        let out = s.desired(at(5), "node-a", &[peer("tor")], &states, &[]);
        let st = &out["tor.node-a"];
        assert_eq!(ready(st), ("True", "Established"));
        assert_eq!(st.bgp_state, "Established");
        assert_eq!((st.ipv4_prefixes, st.ipv6_prefixes), (2, 1));
        assert_eq!(st.hold_time.as_deref(), Some("90s"));
        assert_eq!(
            st.capabilities,
            ["ipv4-unicast", "ipv6-unicast", "4-octet-as"]
        );
        assert_eq!(st.peer_address, "192.0.2.1:179");
        assert_eq!(st.established_time, time(at(0)));
        assert_eq!(st.bfd_state, None);
    }

    #[test]
    fn an_unnumbered_session_shows_its_interface_and_then_the_router_found_on_it() {
        let mut s = SessionStates::default();
        let tor = PeerConfig::unnumbered("tor", 64512, 64513, "eth1");
        let mut waiting = PeerStatus::default();
        waiting.set_error("no router advertisement heard on `eth1` yet".into());
        let states = BTreeMap::from([(PeerId("tor".into()), waiting)]);
        let out = s.desired(at(1), "node-a", std::slice::from_ref(&tor), &states, &[]);
        let st = &out["tor.node-a"];
        assert_eq!(st.peer_address, "eth1 (unnumbered)");
        assert_eq!(ready(st), ("False", "NotEstablished"));
        assert!(st.conditions[0].message.contains("no router advertisement"));
        let up = PeerStatus {
            neighbour: Some("fe80::2".parse().unwrap()),
            ..established()
        };
        let states = BTreeMap::from([(PeerId("tor".into()), up)]);
        let out = s.desired(at(2), "node-a", &[tor], &states, &[]);
        assert_eq!(out["tor.node-a"].peer_address, "[fe80::2%eth1]:179");
    }

    #[test]
    fn a_session_that_is_down_says_why_and_keeps_the_time_of_its_transition() {
        let mut s = SessionStates::default();
        let mut down = PeerStatus::default();
        down.set_error("no TCP connection to 192.0.2.1:179 within 1s".into());
        let states = BTreeMap::from([(PeerId("tor".into()), down)]);
        let first = s.desired(at(1), "node-a", &[peer("tor")], &states, &[]);
        let later = s.desired(at(9), "node-a", &[peer("tor")], &states, &[]);
        let st = &later["tor.node-a"];
        assert_eq!(ready(st), ("False", "NotEstablished"));
        assert!(st.conditions[0].message.contains("no TCP connection"));
        assert_eq!(first, later, "nothing changed, nothing to write");
        let up = BTreeMap::from([(PeerId("tor".into()), established())]);
        let after = s.desired(at(20), "node-a", &[peer("tor")], &up, &[]);
        assert_eq!(
            after["tor.node-a"].conditions[0].last_transition_time,
            time(at(20)).unwrap()
        );
    }

    #[test]
    fn a_session_whose_vrf_does_not_exist_on_the_node_is_not_ready_and_says_so() {
        let mut s = SessionStates::default();
        let mut down = PeerStatus::default();
        let red = crate::netdev::DeviceName::new("red").unwrap();
        down.missing_vrf = Some(red);
        down.set_error(crate::netdev::BindError::Missing(red).to_string());
        let states = BTreeMap::from([(PeerId("tor".into()), down)]);
        let out = s.desired(at(1), "node-a", &[peer("tor")], &states, &[]);
        let st = &out["tor.node-a"];
        assert_eq!(ready(st), ("False", "VRFNotFound"));
        assert!(
            st.conditions[0]
                .message
                .contains("VRF `red` does not exist on this node"),
            "{st:?}"
        );
        assert_eq!(st.last_error, Some(st.conditions[0].message.clone()));
    }

    #[test]
    fn a_missing_bfd_profile_makes_an_established_session_not_ready() {
        let mut s = SessionStates::default();
        let states = BTreeMap::from([(PeerId("tor".into()), established())]);
        let errors = [PeerConfigError::MissingBfdProfile {
            peer: "tor".into(),
            profile: "fast".into(),
        }];
        let out = s.desired(at(1), "node-a", &[peer("tor")], &states, &errors);
        let st = &out["tor.node-a"];
        assert_eq!(ready(st), ("False", "BFDProfileNotFound"));
        assert!(st.conditions[0].message.contains("`fast`"), "{st:?}");
    }

    #[test]
    fn bfd_not_up_on_an_established_session_is_not_ready() {
        let mut s = SessionStates::default();
        let mut st = established();
        st.bfd = Some(crate::bfd::State::Down);
        let states = BTreeMap::from([(PeerId("tor".into()), st)]);
        let out = s.desired(at(1), "node-a", &[peer("tor")], &states, &[]);
        assert_eq!(ready(&out["tor.node-a"]), ("False", "BFDNotUp"));
        assert_eq!(out["tor.node-a"].bfd_state.as_deref(), Some("Down"));
    }

    #[test]
    fn a_peer_that_cannot_be_configured_gets_an_object_saying_why() {
        let mut s = SessionStates::default();
        let errors = [PeerConfigError::BadDuration {
            peer: "tor".into(),
            field: "holdTime",
            value: "99999999999999999999s".into(),
        }];
        let out = s.desired(at(1), "node-a", &[], &BTreeMap::new(), &errors);
        let st = &out["tor.node-a"];
        assert_eq!(st.bgp_state, NOT_CONFIGURED);
        assert_eq!(ready(st), ("False", NOT_CONFIGURED));
        assert!(st.last_error.as_deref().unwrap().contains("holdTime"));
    }

    #[test]
    fn a_peer_no_longer_configured_has_no_object() {
        let mut s = SessionStates::default();
        let states = BTreeMap::from([(PeerId("tor".into()), established())]);
        assert_eq!(s.desired(at(1), "n", &[peer("tor")], &states, &[]).len(), 1);
        assert!(s.desired(at(2), "n", &[], &BTreeMap::new(), &[]).is_empty());
        assert!(s.transitions.is_empty());
    }

    #[test]
    fn object_names_join_peer_and_node() {
        assert_eq!(object_name("tor-1", "node-a"), "tor-1.node-a");
        assert!(object_name(&"p".repeat(200), &"n".repeat(200)).len() <= 253);
    }
}
