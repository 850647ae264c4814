//! The gossip shell: one tokio task that owns a UDP socket and the membership core.
//!
//! ```text
//!  socket.recv_from ─┐                       ┌─► socket.send_to
//!  due timers ───────┼─► Membership (core) ──┼─► tokio::time::sleep ─► due timers
//!  set_seeds ────────┘                       └─► watch: live nodes, counters
//! ```

use super::auth::GossipKey;
use super::core::{Membership, MembershipConfig, MembershipCounters, Output, SpeakerId, Timer};
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

/// Largest datagram read (foca's packets stay under 1400 bytes plus framing).
const MAX_DATAGRAM: usize = 2048;

/// Errors of the membership shell.
#[derive(Debug, thiserror::Error)]
pub enum MembershipError {
    /// The gossip port could not be bound.
    #[error("cannot bind the gossip socket on {addr} (is the port in use?): {source}")]
    Bind {
        /// Address asked for.
        addr: SocketAddr,
        /// The system error.
        #[source]
        source: std::io::Error,
    },
}

/// A running gossip member. Dropping it stops the task (peers then declare this node down).
pub struct Gossip {
    live: watch::Receiver<BTreeSet<String>>,
    counters: watch::Receiver<MembershipCounters>,
    seeds: mpsc::UnboundedSender<Vec<(String, SocketAddr)>>,
    task: JoinHandle<()>,
}

impl Gossip {
    /// Binds `bind`, joins as `node` reachable at `advertise`, and starts gossiping. The
    /// generation is the start time in milliseconds, so a restart replaces the former self.
    pub async fn start(
        node: String,
        bind: SocketAddr,
        advertise: SocketAddr,
        key: GossipKey,
        config: MembershipConfig,
    ) -> Result<Gossip, MembershipError> {
        let socket = UdpSocket::bind(bind)
            .await
            .map_err(|source| MembershipError::Bind { addr: bind, source })?;
        let generation = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| d.as_millis() as u64);
        let me = SpeakerId {
            node: node.clone(),
            addr: advertise,
            generation,
        };
        let seed = generation ^ super::super::l2::election::score(&node, advertise.ip());
        let core = Membership::new(me, key, &config, seed);
        let (live_tx, live) = watch::channel(core.live_nodes());
        let (counters_tx, counters) = watch::channel(MembershipCounters::default());
        let (seeds, seeds_rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(run(core, socket, seeds_rx, live_tx, counters_tx));
        Ok(Gossip {
            live,
            counters,
            seeds,
            task,
        })
    }

    /// A watch of the live nodes (this one included).
    pub fn live(&self) -> watch::Receiver<BTreeSet<String>> {
        self.live.clone()
    }

    /// Announces to these peers (node name, gossip address), typically the speaker Pods.
    pub fn set_seeds(&self, peers: Vec<(String, SocketAddr)>) {
        let _ = self.seeds.send(peers);
    }

    /// The counters at this moment.
    pub fn counters(&self) -> MembershipCounters {
        self.counters.borrow().clone()
    }
}

impl Drop for Gossip {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn run(
    mut core: Membership,
    socket: UdpSocket,
    mut seeds: mpsc::UnboundedReceiver<Vec<(String, SocketAddr)>>,
    live: watch::Sender<BTreeSet<String>>,
    counters: watch::Sender<MembershipCounters>,
) {
    let (timer_tx, mut timers) = mpsc::unbounded_channel::<Timer>();
    let mut buf = vec![0u8; MAX_DATAGRAM];
    loop {
        let out = tokio::select! {
            r = socket.recv_from(&mut buf) => match r {
                Ok((n, _from)) => core.handle_datagram(&buf[..n]),
                Err(e) => {
                    tracing::debug!(error = %e, "gossip receive failed");
                    continue;
                }
            },
            Some(t) = timers.recv() => core.handle_timer(t),
            Some(peers) = seeds.recv() => core.join(&peers),
        };
        for o in out {
            match o {
                Output::Send { to, datagram } => {
                    if let Err(e) = socket.send_to(&datagram, to).await {
                        tracing::debug!(%to, error = %e, "gossip send failed");
                    }
                }
                Output::After { delay, timer } => {
                    let tx = timer_tx.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(delay).await;
                        let _ = tx.send(timer);
                    });
                }
                Output::MembersChanged => {
                    live.send_if_modified(|v| {
                        let now = core.live_nodes();
                        let changed = *v != now;
                        *v = now;
                        changed
                    });
                }
            }
        }
        counters.send_if_modified(|c| {
            let changed = c != core.counters();
            if changed {
                *c = core.counters().clone();
            }
            changed
        });
    }
}
