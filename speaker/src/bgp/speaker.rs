//! [`BgpSpeaker`]: the handle the rest of the speaker uses, one task per configured peer. I/O.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::config::{Advertisement, BfdSettings, Community, PeerConfig, PeerId};
use super::error::CeaseReason;
use super::peer::{PeerStatus, PeerTask};

/// The GRACEFUL_SHUTDOWN well-known community, 65535:0 (RFC 8326).
pub const GRACEFUL_SHUTDOWN: Community = Community(0xffff_0000);

/// The routes of `advertisements` as a leaving speaker announces them (RFC 8326): with
/// GRACEFUL_SHUTDOWN, and LOCAL_PREF 0 (sent to iBGP peers only), so the routers prefer every
/// other path while this one still carries traffic.
pub fn draining(advertisements: &[Advertisement]) -> Vec<Advertisement> {
    advertisements
        .iter()
        .cloned()
        .map(|mut a| {
            a.attrs.communities.insert(GRACEFUL_SHUTDOWN);
            a.attrs.local_pref = Some(0);
            a
        })
        .collect()
}

struct PeerHandle {
    config: PeerConfig,
    stop: watch::Sender<Option<CeaseReason>>,
    /// The BFD settings, changed in place: a new BFD profile does not restart the session.
    bfd: watch::Sender<Option<BfdSettings>>,
    status: watch::Receiver<PeerStatus>,
    task: JoinHandle<()>,
}

#[derive(Default)]
struct Inner {
    peers: HashMap<PeerId, PeerHandle>,
    advertisements: HashMap<PeerId, watch::Sender<Arc<Vec<Advertisement>>>>,
    /// BFD sessions of every peer that has BFD configured (sockets open on first use).
    bfd: crate::bfd::sessions::BfdSessions,
}

/// Runs the BGP sessions of this node. Cheap to share behind an `Arc`; every method may be called
/// from any task of the tokio runtime it was created in.
///
/// # Guarantees
/// - Each configured peer has exactly one task, which reconnects with back-off until removed.
/// - Advertisements are declarative: the last set given for a peer is what it ends up with, also
///   when it is given before the peer is configured or while the session is down.
#[derive(Default)]
pub struct BgpSpeaker {
    inner: Mutex<Inner>,
}

impl BgpSpeaker {
    /// A speaker with no peers.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes the configured peers exactly `peers`: new ones start, removed ones end with Cease
    /// "peer de-configured", changed ones restart with Cease "other configuration change";
    /// a change of the BFD settings alone is applied to the running session (BFD is started,
    /// stopped or given its new timers; BGP stays up). Must be called within a tokio runtime.
    pub fn set_peers(&self, peers: Vec<PeerConfig>) {
        let mut inner = self.lock();
        let wanted: HashMap<PeerId, PeerConfig> =
            peers.into_iter().map(|p| (p.id.clone(), p)).collect();
        let current: Vec<PeerId> = inner.peers.keys().cloned().collect();
        for id in current {
            let (Some(want), Some(h)) = (wanted.get(&id), inner.peers.get_mut(&id)) else {
                if let Some(h) = inner.peers.remove(&id) {
                    let _ = h.stop.send(Some(CeaseReason::PeerDeconfigured));
                }
                continue;
            };
            let keep = *want == h.config;
            let bfd_only = PeerConfig {
                bfd: want.bfd,
                ..h.config.clone()
            } == *want;
            if !keep && bfd_only {
                h.config = want.clone();
                h.bfd.send_replace(want.bfd);
                continue;
            }
            if !keep && let Some(h) = inner.peers.remove(&id) {
                let reason = if wanted.contains_key(&id) {
                    CeaseReason::OtherConfigurationChange
                } else {
                    CeaseReason::PeerDeconfigured
                };
                let _ = h.stop.send(Some(reason));
            }
        }
        for (id, config) in wanted {
            if inner.peers.contains_key(&id) {
                continue;
            }
            let advs = inner
                .advertisements
                .entry(id.clone())
                .or_insert_with(|| watch::channel(Arc::new(Vec::new())).0)
                .subscribe();
            let (stop, stop_rx) = watch::channel(None);
            let (bfd, bfd_rx) = watch::channel(config.bfd);
            let (status_tx, status) = watch::channel(PeerStatus::default());
            let task = tokio::spawn(PeerTask::run(
                config.clone(),
                advs,
                stop_rx,
                bfd_rx,
                status_tx,
                inner.bfd.clone(),
            ));
            inner.peers.insert(
                id,
                PeerHandle {
                    config,
                    stop,
                    bfd,
                    status,
                    task,
                },
            );
        }
    }

    /// Sets the complete set of routes `peer` should have.
    pub fn set_advertisements(&self, peer: &PeerId, advertisements: Vec<Advertisement>) {
        let mut inner = self.lock();
        let tx = inner
            .advertisements
            .entry(peer.clone())
            .or_insert_with(|| watch::channel(Arc::new(Vec::new())).0);
        tx.send_replace(Arc::new(advertisements));
    }

    /// The state of every configured session.
    pub fn session_states(&self) -> BTreeMap<PeerId, PeerStatus> {
        self.lock()
            .peers
            .iter()
            .map(|(id, h)| (id.clone(), h.status.borrow().clone()))
            .collect()
    }

    /// BFD packets dropped since the first BFD session started, by reason (see
    /// [`crate::bfd::sessions::BfdSessions::drops`]).
    pub fn bfd_drops(&self) -> BTreeMap<&'static str, u64> {
        self.lock().bfd.drops()
    }

    /// A receiver that sees every status change of `peer`, for waiting on a state.
    pub fn watch_status(&self, peer: &PeerId) -> Option<watch::Receiver<PeerStatus>> {
        self.lock().peers.get(peer).map(|h| h.status.clone())
    }

    /// Starts a graceful shutdown (RFC 8326): every route of every peer is announced again
    /// [`draining`]. Returns once each Established session that has routes has written the
    /// UPDATEs, or after `timeout`; then keep the sessions up for the drain time (routers move
    /// traffic meanwhile) and call [`BgpSpeaker::shutdown`]. Advertisements set after this
    /// replace the draining ones.
    pub async fn drain(&self, timeout: Duration) {
        let mut waits = Vec::new();
        {
            let inner = self.lock();
            for (id, tx) in &inner.advertisements {
                let current = tx.borrow().clone();
                let Some(handle) = inner.peers.get(id) else {
                    continue;
                };
                let before = handle.status.borrow().clone();
                let established = before.state == super::fsm::State::Established;
                tx.send_replace(Arc::new(draining(&current)));
                if established && !current.is_empty() {
                    waits.push((handle.status.clone(), before.updates_sent));
                }
            }
        }
        let all_sent =
            futures::future::join_all(waits.into_iter().map(|(mut rx, sent)| async move {
                let _ = rx.wait_for(|s| s.updates_sent > sent).await;
            }));
        let _ = tokio::time::timeout(timeout, all_sent).await;
    }

    /// Ends every session with Cease "administrative shutdown" and waits (up to 5 s) for the
    /// NOTIFICATIONs to be written.
    pub async fn shutdown(&self) {
        let handles: Vec<PeerHandle> = self.lock().peers.drain().map(|(_, h)| h).collect();
        for h in &handles {
            let _ = h.stop.send(Some(CeaseReason::AdministrativeShutdown));
        }
        for h in handles {
            let _ = tokio::time::timeout(Duration::from_secs(5), h.task).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netdev::DeviceName;

    #[tokio::test]
    async fn a_vrf_change_restarts_that_session_only() {
        let speaker = BgpSpeaker::new();
        // Nothing listens on port 1 of the loopback: both sessions just keep trying.
        let mut a = PeerConfig::new("a", 64512, 64513, "127.0.0.1".parse().unwrap());
        a.peer_port = 1;
        let b = PeerConfig {
            id: PeerId("b".into()),
            ..a.clone()
        };
        speaker.set_peers(vec![a.clone(), b.clone()]);
        let a_before = speaker.watch_status(&a.id).unwrap();
        let b_before = speaker.watch_status(&b.id).unwrap();
        let missing = DeviceName::new("flb-none0").unwrap();
        let moved = PeerConfig {
            vrf: Some(missing),
            ..a.clone()
        };
        speaker.set_peers(vec![moved, b.clone()]);
        let mut a_after = speaker.watch_status(&a.id).unwrap();
        assert!(!a_after.same_channel(&a_before), "a restarted");
        assert!(
            speaker.watch_status(&b.id).unwrap().same_channel(&b_before),
            "b kept"
        );
        let seen = tokio::time::timeout(
            Duration::from_secs(10),
            a_after.wait_for(|s| s.missing_vrf == Some(missing)),
        )
        .await
        .is_ok_and(|r| r.is_ok());
        assert!(
            seen,
            "the new session runs in the VRF and reports it missing"
        );
        speaker.shutdown().await;
    }
}
