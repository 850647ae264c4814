//! The ARP/NDP responder shell: packet sockets, threads and timers around the pure [`frame`],
//! [`schedule`] and [`iface`] cores. I/O: pnet datalink channels and one UDP socket.
//!
//! ```text
//!  set_owned(map) ──► reads the host ─┐
//!  refresh(host) ─────────────────────┴─► reconcile: each wanted interface vs the host
//!      │  (close ports whose interface vanished, changed ifindex or MAC, went down or failed;
//!      │   open the missing ones; record a fault for each wanted interface not answering)
//!      ├──► owned view (RwLock<Arc<View>>) ◄── read per frame ── rx thread ──────────────┐
//!      │                                         (one per open port; ends when closed,  │
//!      │                                          or marks the port failed when its     │
//!      │                                          interface is gone: ENETDOWN/ENXIO)    │
//!      ├──► solicited-node joins (UDP socket, per ifindex)                               ▼
//!      └──► announcer thread ── schedule::Schedules (only what is due) ──► GARP / unsolicited NA
//! ```
//!
//! # Guarantees
//! - A request is answered only when its target is in the owned view *for the interface it came
//!   in on*, from the port currently open on it, with that port's MAC; [`Responder::set_owned`]
//!   swaps the view before it returns, so a lost address is not answered from then on.
//! - Every newly owned (address, interface) pair is announced on [`schedule::ANNOUNCE_OFFSETS`],
//!   and so is every pair whose port was reopened (the neighbours learn the new MAC).
//! - When a reconcile ([`Responder::set_owned`], [`Responder::refresh`]) finds an open port's
//!   interface gone, re-created (another ifindex), given another MAC, no longer usable, or its
//!   reader failed, the port is closed before the call returns (nothing is answered from it
//!   any more; its reader ends within [`READ_TIMEOUT`]) and, if the interface is there and
//!   usable, a new port is opened on it in the same call.
//! - After each reconcile, every interface named in the owned set that has no working port has
//!   an entry in [`Responder::interface_errors`], and the others have none; a reader that fails
//!   in between adds its entry at once.
//! - Malformed frames are counted per [`frame::DropReason`] and never parsed past their length.
//! - Each packet socket carries [`RESPONDER_FILTER`]: the kernel passes only received ARP and
//!   Neighbor Solicitations and Advertisements, not the node's other traffic nor the frames it
//!   sends.
//! - An address handed over ([`Responder::hand_over`]) is never announced again, and is no
//!   longer answered from the moment another host's announcement of it is read.
//! - After the speaker stood still ([`schedule::STOOD_STILL`] between two wakes of a reader,
//!   or a reader not heard for as long when the announcer wakes), nothing is answered and no
//!   announcement starts for [`schedule::QUIET_AFTER_STANDING_STILL`]: the others may have
//!   moved its addresses meanwhile, and the shell learns whether they did within that time.
//!   Announcements started meanwhile go out when the quiet ends.
//!
//! # Caveats
//! - An interface re-created, or back up, is answered again only at the next reconcile: call
//!   [`Responder::refresh`] when the host's interfaces change ([`super::hostwatch`]), or every
//!   [`REFRESH_INTERVAL`] without its notifications.
//! - Interfaces are looked up, and threads started, in the calling thread's network namespace.
//! - Ports of interfaces no longer named stay open (they answer nothing) until their interface
//!   changes.
//! - Methods are synchronous and do not block on I/O (one netlink read of the host's
//!   interfaces in [`Responder::set_owned`] and opening an interface aside), so they may be
//!   called from async code.

use super::counters::{CounterSnapshot, Counters};
use super::error::{InterfaceFault, L2Error, Unusable};
use super::filter::RESPONDER_FILTER;
use super::frame::{self, MacAddr, Request, solicited_node};
use super::iface::{self, InterfaceInfo};
use super::schedule;
use pnet::datalink::{self, Channel, DataLinkReceiver, DataLinkSender};
use socket2::{Domain, Protocol, SockFilter, Socket, Type};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::io;
use std::net::{IpAddr, Ipv6Addr, UdpSocket};
use std::os::fd::{IntoRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

/// How often a blocked read wakes up to notice shutdown or its port's closing.
pub const READ_TIMEOUT: Duration = Duration::from_millis(200);

/// How often the shell should call [`Responder::refresh`] when it has no notifications of
/// interface changes ([`super::hostwatch`]): the longest an interface re-created, or brought
/// back up, then stays unanswered.
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(2);

/// Longest pause of a reader after repeated read errors.
const MAX_READ_BACKOFF: Duration = Duration::from_secs(1);

/// Owned addresses per interface name.
type View = HashMap<String, HashSet<IpAddr>>;

/// Source of [`Port::id`].
static NEXT_PORT_ID: AtomicU64 = AtomicU64::new(1);

/// One open interface.
struct Port {
    /// Distinguishes a reopened port from the one it replaces (same name).
    id: u64,
    name: String,
    index: u32,
    mac: MacAddr,
    tx: Mutex<Box<dyn DataLinkSender>>,
    /// A second descriptor of the packet socket, to read its pending error (pnet reports only
    /// "unexpected poll event").
    socket: Socket,
    /// Set by a reconcile: the reader ends and nothing is answered from this port any more.
    closed: AtomicBool,
    /// Set when the socket stopped working for good (its interface is gone); the next
    /// reconcile replaces the port.
    failed: Mutex<Option<String>>,
    /// When its reader last woke (it wakes at least every [`READ_TIMEOUT`]): a reader not
    /// heard for [`schedule::STOOD_STILL`] stood still with the whole speaker, and has not
    /// run since it woke.
    pulse: Mutex<Instant>,
}

impl Port {
    fn send(&self, frame: &[u8], counters: &Counters) -> bool {
        let sent = match self.tx.lock() {
            Ok(mut tx) => tx.send_to(frame, None),
            Err(_) => None,
        };
        match sent {
            Some(Ok(())) => true,
            Some(Err(e)) => {
                Counters::bump(&counters.send_errors);
                if interface_gone(&e) {
                    self.fail(&e);
                }
                false
            }
            None => {
                Counters::bump(&counters.send_errors);
                false
            }
        }
    }

    fn fail(&self, error: &io::Error) {
        let mut failed = lock(&self.failed);
        if failed.is_none() {
            tracing::warn!(interface = %self.name, index = self.index, %error,
                "interface gone under its packet socket; it is reopened on the next refresh");
            *failed = Some(error.to_string());
        }
    }

    fn is_failed(&self) -> bool {
        lock(&self.failed).is_some()
    }
}

/// Whether an I/O error means the socket's interface no longer exists (or is down).
fn interface_gone(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENETDOWN | libc::ENXIO | libc::ENODEV)
    )
}

/// Locks a mutex, going on with the data if a thread panicked while holding it (no section
/// under these locks leaves the data half-updated).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

struct Inner {
    view: RwLock<Arc<View>>,
    ports: Mutex<BTreeMap<String, Arc<Port>>>,
    counters: Counters,
    stop: AtomicBool,
    handover: Mutex<Handover>,
    /// Whether `handover` holds anything: the readers look at it only then.
    handing_over: AtomicBool,
    /// Until when the responder keeps quiet after the speaker stood still
    /// ([`schedule::QUIET_AFTER_STANDING_STILL`]).
    quiet_until: Mutex<Option<Instant>>,
}

impl Inner {
    /// Keeps quiet (answers nothing, starts no announcement) until `until`; said once per stall.
    fn keep_quiet(&self, until: Instant, stood_still: Duration) {
        let mut q = lock(&self.quiet_until);
        let now = Instant::now();
        if q.is_none_or(|q| q <= now) {
            Counters::bump(&self.counters.stood_still);
            tracing::warn!(stood_still = ?stood_still, quiet = ?schedule::QUIET_AFTER_STANDING_STILL,
                "this speaker stood still (a frozen process or a paused machine): the others may have moved its layer-2 addresses meanwhile, so it answers and announces none until it has heard from them");
        }
        *q = Some(q.map_or(until, |q| q.max(until)));
    }

    /// Until when the responder keeps quiet, as of `now`; `None` when it does not.
    fn quiet(&self, now: Instant) -> Option<Instant> {
        lock(&self.quiet_until).filter(|q| *q > now)
    }

    /// A reader of `port` woke at `now`, its previous wake at `last`: after a stall the
    /// responder keeps quiet, and only then is the port's pulse renewed (so that whoever sees
    /// the pulse renewed also sees the quiet).
    fn reader_woke(&self, port: &Port, last: &mut Instant, now: Instant) {
        if let Some(until) = schedule::quiet_after(*last, now) {
            self.keep_quiet(until, now.saturating_duration_since(*last));
        }
        *lock(&port.pulse) = now;
        *last = now;
    }

    /// Until when the announcer keeps quiet at `now`: the readers of open ports are its clock.
    /// One not heard for [`schedule::STOOD_STILL`] stood still with the speaker and has not run
    /// since the wake, which starts the quiet here.
    fn announcer_quiet(
        &self,
        now: Instant,
        ports: &BTreeMap<String, Arc<Port>>,
    ) -> Option<Instant> {
        for port in ports.values() {
            if port.closed.load(Ordering::Relaxed) || port.is_failed() {
                continue;
            }
            let pulse = *lock(&port.pulse);
            if let Some(until) = schedule::quiet_after(pulse, now) {
                self.keep_quiet(until, now.saturating_duration_since(pulse));
            }
        }
        self.quiet(now)
    }

    /// Whether `ip` is being handed over (see [`Responder::hand_over`]): not announced any
    /// more, and no longer answered once another host has announced it.
    fn in_handover(&self, ip: IpAddr) -> (bool, bool) {
        if !self.handing_over.load(Ordering::Acquire) {
            return (false, false);
        }
        let h = lock(&self.handover);
        (
            h.pending.contains(&ip) || h.taken.contains(&ip),
            h.taken.contains(&ip),
        )
    }

    /// Notes another host's announcement in `bytes`, if it is one, of an address this port
    /// answers for: one being handed over is taken over, and no longer answered from now on;
    /// another is remembered for [`RECENT_ANNOUNCEMENT`], in case its handover starts just
    /// after the new owner announced it (both see the same change, in either order).
    fn note_announcement(&self, bytes: &[u8], port: &Port) {
        let Some(a) = frame::announcement(bytes) else {
            return;
        };
        let owned = self
            .view
            .read()
            .is_ok_and(|v| v.get(&port.name).is_some_and(|s| s.contains(&a.ip)));
        if !owned {
            return;
        }
        let now = Instant::now();
        let mut h = lock(&self.handover);
        if h.pending.remove(&a.ip) {
            h.taken.insert(a.ip);
            tracing::info!(ip = %a.ip, interface = %port.name, by = %a.from,
                "another node announced an address this node hands over: no longer answering for it");
        } else if !h.taken.contains(&a.ip) {
            h.recent
                .retain(|_, at| now.duration_since(*at) < RECENT_ANNOUNCEMENT);
            h.recent.insert(a.ip, now);
        }
    }

    /// Forgets the handover of `ips` (given up for good, or owned again).
    fn end_handover(&self, ips: impl IntoIterator<Item = IpAddr>) {
        if !self.handing_over.load(Ordering::Acquire) {
            return;
        }
        let mut h = lock(&self.handover);
        for ip in ips {
            h.pending.remove(&ip);
            h.taken.remove(&ip);
        }
        self.handing_over.store(
            !h.pending.is_empty() || !h.taken.is_empty(),
            Ordering::Release,
        );
    }
}

/// Addresses this node is giving up while it still answers for them (see
/// [`Responder::hand_over`]).
#[derive(Default)]
struct Handover {
    /// Still answered: no other host has announced them yet.
    pending: BTreeSet<IpAddr>,
    /// Announced by another host: no longer answered.
    taken: BTreeSet<IpAddr>,
    /// Owned addresses another host announced lately, and when: handed over within
    /// [`RECENT_ANNOUNCEMENT`] of that, they are taken over at once. Holds only addresses
    /// answered here, and only while another host claims them.
    recent: HashMap<IpAddr, Instant>,
}

/// How long another host's announcement of an address this node still answers for counts as
/// the new owner having taken it, should its handover start later (see
/// [`Responder::hand_over`]). Shorter than the first repeat of an announcement, so that a
/// conflict that outlives it is seen again.
pub const RECENT_ANNOUNCEMENT: Duration = Duration::from_millis(400);

/// What the last [`Responder::set_owned`] asked for, and how it is going.
#[derive(Default)]
struct Control {
    /// The owned set as given.
    wanted: BTreeMap<IpAddr, Vec<String>>,
    /// The interfaces `wanted` names, with how many addresses name each (kept with `wanted`,
    /// so a refresh does not walk every address).
    names: BTreeMap<String, usize>,
    /// Why wanted interfaces without a port have none, as of the last reconcile.
    faults: BTreeMap<String, InterfaceFault>,
    /// Interfaces that had a port once: opening one again is a reopening.
    opened_before: BTreeSet<String>,
}

/// An interface the responder answers on: see [`Responder::open_interfaces`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenInterface {
    /// Kernel interface index the port is bound to.
    pub index: u32,
    /// The MAC it answers and announces with.
    pub mac: MacAddr,
}

/// A handle on the responder. Dropping it stops every thread.
pub struct Responder {
    inner: Arc<Inner>,
    announcer_tx: Option<mpsc::Sender<Command>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    multicast: Mutex<Multicast>,
    control: Mutex<Control>,
}

impl Responder {
    /// A responder that owns nothing yet and has no interface open.
    ///
    /// # Panics
    /// When the system cannot start one more thread.
    pub fn new() -> Responder {
        let inner = Arc::new(Inner {
            view: RwLock::new(Arc::new(View::new())),
            ports: Mutex::new(BTreeMap::new()),
            counters: Counters::default(),
            stop: AtomicBool::new(false),
            handover: Mutex::new(Handover::default()),
            handing_over: AtomicBool::new(false),
            quiet_until: Mutex::new(None),
        });
        let (tx, rx) = mpsc::channel();
        let announcer = {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name("l2-announce".into())
                .spawn(move || announce_loop(&inner, &rx))
                .expect("spawning a thread")
        };
        Responder {
            inner,
            announcer_tx: Some(tx),
            threads: Mutex::new(vec![announcer]),
            multicast: Mutex::new(Multicast::new()),
            control: Mutex::new(Control::default()),
        }
    }

    /// Declares the full set of owned addresses and the interfaces to answer on (as
    /// [`iface::diagnose`] chose them), then reconciles against the host read now, as
    /// [`Responder::refresh`] does. Addresses no longer listed stop being answered before this
    /// returns; newly listed (address, interface) pairs are announced at once and then on
    /// schedule.
    ///
    /// An interface that cannot answer (missing, unusable, or its packet socket cannot be
    /// opened) is left out: its addresses are served on the other interfaces, the reason is
    /// kept in [`Responder::interface_errors`], and the first such error is returned after
    /// everything else was applied.
    pub fn set_owned(&self, owned: &BTreeMap<IpAddr, Vec<String>>) -> Result<(), L2Error> {
        let host = iface::system_interfaces();
        let mut control = lock(&self.control);
        *lock(&self.inner.handover) = Handover::default();
        self.inner.handing_over.store(false, Ordering::Release);
        control.wanted = owned.clone();
        control.names = BTreeMap::new();
        for name in owned.values().flatten() {
            *control.names.entry(name.clone()).or_default() += 1;
        }
        self.reconcile(&mut control, &host, true)
            .map_or(Ok(()), Err)
    }

    /// Applies changes to the owned set: `Some(interfaces)` sets an address's interfaces,
    /// `None` stops answering for it. Costs work proportional to the changes when every
    /// interface named is open already (the usual case: an address came or went); otherwise it
    /// does what [`Responder::set_owned`] does. The guarantees are [`Responder::set_owned`]'s:
    /// an address no longer listed is not answered once this returns, and a newly listed pair
    /// is announced at once and then on schedule.
    pub fn change_owned(
        &self,
        changes: &BTreeMap<IpAddr, Option<Vec<String>>>,
    ) -> Result<(), L2Error> {
        if changes.is_empty() {
            return Ok(());
        }
        let mut control = lock(&self.control);
        self.inner.end_handover(changes.keys().copied());
        let ports = lock(&self.inner.ports).clone();
        let all_open = changes
            .values()
            .flatten()
            .flatten()
            .all(|name| ports.get(name).is_some_and(|p| !p.is_failed()));
        let mut removed = Vec::new();
        let mut added = Vec::new();
        for (ip, names) in changes {
            let old = match names {
                Some(names) => control.wanted.insert(*ip, names.clone()),
                None => control.wanted.remove(ip),
            };
            for name in old.iter().flatten() {
                if names.as_ref().is_none_or(|n| !n.contains(name)) {
                    removed.push((*ip, name.clone()));
                }
            }
            for name in names.iter().flatten() {
                if old.as_ref().is_none_or(|o| !o.contains(name)) {
                    added.push((*ip, name.clone()));
                }
            }
        }
        for (_, name) in &removed {
            if let Some(n) = control.names.get_mut(name) {
                *n -= 1;
                if *n == 0 {
                    control.names.remove(name);
                }
            }
        }
        for (_, name) in &added {
            *control.names.entry(name.clone()).or_default() += 1;
        }
        if !all_open {
            let host = iface::system_interfaces();
            return self
                .reconcile(&mut control, &host, true)
                .map_or(Ok(()), Err);
        }
        let view = {
            let mut guard = self.inner.view.write().unwrap_or_else(|e| e.into_inner());
            // In place unless a reader holds the previous view this instant.
            let view = Arc::make_mut(&mut guard);
            for (ip, name) in &removed {
                if let Some(set) = view.get_mut(name) {
                    set.remove(ip);
                    if set.is_empty() {
                        view.remove(name);
                    }
                }
            }
            for (ip, name) in &added {
                view.entry(name.clone()).or_default().insert(*ip);
            }
            guard.clone()
        };
        if changes.keys().any(IpAddr::is_ipv6) {
            self.update_multicast(&view);
        }
        if let Some(tx) = &self.announcer_tx {
            let added = added
                .into_iter()
                .filter_map(|(ip, name)| Some((ip, ports.get(&name)?.id, name)))
                .collect();
            let _ = tx.send(Command::Delta { added, removed });
        }
        Ok(())
    }

    /// Hands `ips` over: this node gives them up, but another node may not have taken them yet,
    /// so they are still answered (not announced again) until another host announces one
    /// (gratuitous ARP, unsolicited Neighbor Advertisement with override) on the interface it
    /// is answered on, or has announced it within [`RECENT_ANNOUNCEMENT`] before this call:
    /// from then on it is no longer answered, and [`Responder::taken_over`] lists it. Answering on after the new owner's announcement would let a neighbour that
    /// asks again switch back to this node, and its connections would move twice. The handover
    /// ends for an address when [`Responder::change_owned`] or [`Responder::set_owned`] next
    /// names it (owned again, or given up for good); handing over again an address already
    /// taken over leaves it taken.
    pub fn hand_over(&self, ips: impl IntoIterator<Item = IpAddr>) {
        let now = Instant::now();
        let mut h = lock(&self.inner.handover);
        for ip in ips {
            let announced = h
                .recent
                .remove(&ip)
                .is_some_and(|at| now.duration_since(at) < RECENT_ANNOUNCEMENT);
            if announced {
                tracing::info!(%ip, "another node announced an address this node hands over: no longer answering for it");
                h.taken.insert(ip);
            } else if !h.taken.contains(&ip) {
                h.pending.insert(ip);
            }
        }
        self.inner.handing_over.store(
            !h.pending.is_empty() || !h.taken.is_empty(),
            Ordering::Release,
        );
    }

    /// The handed-over addresses another host has announced since (see
    /// [`Responder::hand_over`]): no longer answered here.
    pub fn taken_over(&self) -> BTreeSet<IpAddr> {
        lock(&self.inner.handover).taken.clone()
    }

    /// Compares every open port with the host's interfaces (`host`, from
    /// [`iface::system_interfaces`], read just before the call: an older view could undo a
    /// reopening that [`Responder::set_owned`] made meanwhile) and repairs what changed: a port whose interface vanished,
    /// was re-created (another ifindex), got another MAC, is no longer usable (down, NOARP) or
    /// whose reader failed is closed; an interface of the owned set without a port is opened if
    /// it is there and usable, and its addresses are announced again with its current MAC.
    ///
    /// Call it every [`REFRESH_INTERVAL`]; [`Responder::set_owned`] does the same itself. When
    /// nothing changed, it costs a comparison. Read the outcome with
    /// [`Responder::interface_errors`] and [`Responder::open_interfaces`].
    pub fn refresh(&self, host: &[InterfaceInfo]) {
        let mut control = lock(&self.control);
        let _ = self.reconcile(&mut control, host, false);
    }

    /// Why each interface of the owned set that is not answering is not, by name; empty when
    /// every one answers. A fault clears by itself once a reconcile finds its cause gone.
    pub fn interface_errors(&self) -> BTreeMap<String, InterfaceFault> {
        let control = lock(&self.control);
        let mut errors = control.faults.clone();
        let ports = lock(&self.inner.ports);
        for name in control.names.keys().cloned() {
            if let Some(port) = ports.get(&name)
                && let Some(error) = lock(&port.failed).clone()
            {
                errors.insert(name.clone(), InterfaceFault::ReadFailed { name, error });
            }
        }
        errors
    }

    /// The interfaces with an open port, with the ifindex and MAC it answers on. A change of
    /// either between two calls is a reopening (the interface was re-created or its MAC set).
    pub fn open_interfaces(&self) -> BTreeMap<String, OpenInterface> {
        lock(&self.inner.ports)
            .iter()
            .filter(|(_, p)| !p.is_failed())
            .map(|(name, p)| {
                let open = OpenInterface {
                    index: p.index,
                    mac: p.mac,
                };
                (name.clone(), open)
            })
            .collect()
    }

    /// Announces every owned address again, from the start of the schedule. Call it when the
    /// set of live speakers changes: after a partition heals, neighbours may still hold the MAC
    /// of the node that answered meanwhile, and ownership alone did not change here.
    pub fn announce_again(&self) {
        if let Some(tx) = &self.announcer_tx {
            let _ = tx.send(Command::Restart);
        }
    }

    /// The counters at this moment.
    pub fn counters(&self) -> CounterSnapshot {
        self.inner.counters.snapshot()
    }

    /// The MAC an interface answers with, once it is open.
    pub fn mac_of(&self, interface: &str) -> Option<MacAddr> {
        lock(&self.inner.ports).get(interface).map(|p| p.mac)
    }

    /// Brings the ports in line with `control.wanted` and `host` (see [`Responder::refresh`]),
    /// then publishes the view: built again from `control.wanted` when a port was opened or
    /// closed or `wanted_changed` (else the view is current, and nothing proportional to the
    /// owned set is done). Returns the first error met opening an interface.
    fn reconcile(
        &self,
        control: &mut Control,
        host: &[InterfaceInfo],
        wanted_changed: bool,
    ) -> Option<L2Error> {
        let wanted: Vec<String> = control.names.keys().cloned().collect();
        let mut faults = BTreeMap::new();
        let mut first_error = None;
        let mut changed = false;
        let mut ports = lock(&self.inner.ports);
        ports.retain(|name, port| {
            let info = host.iter().find(|i| i.name == *name);
            let stale = match info {
                None => Some("vanished"),
                Some(i) if i.index != port.index => Some("re-created"),
                Some(i) if i.mac != Some(port.mac) => Some("got another MAC"),
                Some(i) if i.unusable().is_some() => Some("cannot answer any more"),
                Some(_) if port.is_failed() => Some("stopped working"),
                Some(_) => None,
            };
            let Some(what) = stale else { return true };
            tracing::warn!(interface = %name, index = port.index, mac = %port.mac,
                "interface {what}: its packet socket is closed");
            port.closed.store(true, Ordering::SeqCst);
            changed = true;
            false
        });
        for name in &wanted {
            if ports.contains_key(name) {
                continue;
            }
            let info = host.iter().find(|i| i.name == *name);
            let reason = info.map_or(Some(Unusable::Missing), InterfaceInfo::unusable);
            if let Some(reason) = reason {
                let error = match reason {
                    Unusable::Missing => L2Error::InterfaceNotFound { name: name.clone() },
                    Unusable::NoMac => L2Error::NoMac { name: name.clone() },
                    reason => L2Error::Unusable {
                        name: name.clone(),
                        reason,
                    },
                };
                first_error.get_or_insert(error);
                let fault = InterfaceFault::Unusable {
                    name: name.clone(),
                    reason,
                };
                faults.insert(name.clone(), fault);
                continue;
            }
            let Some(info) = info else { continue };
            match self.open(info) {
                Ok(port) => {
                    if !control.opened_before.insert(name.clone()) {
                        Counters::bump(&self.inner.counters.reopened);
                        tracing::warn!(interface = %name, index = port.index, mac = %port.mac,
                            "interface reopened; its addresses are announced again");
                    }
                    ports.insert(name.clone(), port);
                    changed = true;
                }
                Err(e) => {
                    tracing::warn!(interface = %name, error = %e, "cannot answer on interface");
                    let fault = InterfaceFault::Open {
                        name: name.clone(),
                        error: e.to_string(),
                    };
                    faults.insert(name.clone(), fault);
                    first_error.get_or_insert(e);
                }
            }
        }
        control.faults = faults;
        if !changed && !wanted_changed {
            return first_error;
        }
        let mut view = View::new();
        for (ip, names) in &control.wanted {
            for name in names.iter().filter(|n| ports.contains_key(*n)) {
                view.entry(name.clone()).or_default().insert(*ip);
            }
        }
        let port_ids: BTreeMap<String, u64> =
            ports.iter().map(|(name, p)| (name.clone(), p.id)).collect();
        drop(ports);
        let current = self.inner.view.read().map(|v| v.clone()).ok();
        if !changed && current.is_some_and(|v| *v == view) {
            return first_error;
        }
        let view = Arc::new(view);
        if let Ok(mut v) = self.inner.view.write() {
            *v = view.clone();
        }
        self.update_multicast(&view);
        if let Some(tx) = &self.announcer_tx {
            let _ = tx.send(Command::View(view, port_ids));
        }
        first_error
    }

    /// Opens a port on `info` and starts its reader.
    fn open(&self, info: &InterfaceInfo) -> Result<Arc<Port>, L2Error> {
        let (port, rx) = open_port(info)?;
        let port = Arc::new(port);
        let inner = self.inner.clone();
        let reader = port.clone();
        let handle = std::thread::Builder::new()
            .name(format!("l2-rx-{}", info.name))
            .spawn(move || receive_loop(&inner, &reader, rx))
            .map_err(|source| L2Error::Channel {
                name: info.name.clone(),
                source,
            })?;
        let mut threads = lock(&self.threads);
        // Readers of closed ports have ended: forget them rather than keep one per reopening.
        threads.retain(|t| !t.is_finished());
        threads.push(handle);
        Ok(port)
    }

    /// Joins the solicited-node group of every owned IPv6 address on its interfaces and leaves
    /// the groups no longer needed, so the interface accepts solicitations sent to them.
    fn update_multicast(&self, view: &View) {
        let ports = lock(&self.inner.ports).clone();
        let wanted: BTreeSet<(Ipv6Addr, u32)> = view
            .iter()
            .filter_map(|(name, ips)| ports.get(name).map(|p| (p.index, ips)))
            .flat_map(|(index, ips)| {
                ips.iter().filter_map(move |ip| match ip {
                    IpAddr::V6(v6) => Some((solicited_node(*v6), index)),
                    IpAddr::V4(_) => None,
                })
            })
            .collect();
        let failures = lock(&self.multicast).apply(&wanted);
        for _ in 0..failures {
            Counters::bump(&self.inner.counters.multicast_errors);
        }
    }
}

/// Every interface name of an owned set.
impl Default for Responder {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        self.inner.stop.store(true, Ordering::SeqCst);
        self.announcer_tx = None;
        for t in lock(&self.threads).drain(..) {
            let _ = t.join();
        }
    }
}

fn open_port(info: &InterfaceInfo) -> Result<(Port, Box<dyn DataLinkReceiver>), L2Error> {
    let name = &info.name;
    let mac = info
        .mac
        .filter(|m| *m != MacAddr::default())
        .ok_or_else(|| L2Error::NoMac { name: name.clone() })?;
    let (socket_fd, socket) = filtered_packet_socket().map_err(|source| L2Error::Channel {
        name: name.clone(),
        source,
    })?;
    // pnet binds to the index alone: the one this view of the host saw, so a port never
    // opens on an interface other than the one compared later.
    let iface = datalink::NetworkInterface {
        name: name.clone(),
        description: String::new(),
        index: info.index,
        mac: Some(pnet::util::MacAddr::from(mac.0)),
        ips: Vec::new(),
        flags: 0,
    };
    let config = datalink::Config {
        socket_fd: Some(socket_fd),
        read_timeout: Some(READ_TIMEOUT),
        // Broadcast ARP, our own unicast MAC and the joined solicited-node groups are all the
        // interface needs to accept; promiscuous mode would add every other host's traffic.
        promiscuous: false,
        ..Default::default()
    };
    match datalink::channel(&iface, config) {
        Ok(Channel::Ethernet(tx, rx)) => Ok((
            Port {
                id: NEXT_PORT_ID.fetch_add(1, Ordering::Relaxed),
                name: name.clone(),
                index: info.index,
                mac,
                tx: Mutex::new(tx),
                socket,
                closed: AtomicBool::new(false),
                failed: Mutex::new(None),
                pulse: Mutex::new(Instant::now()),
            },
            rx,
        )),
        Ok(_) => Err(L2Error::NotEthernet { name: name.clone() }),
        Err(source) => Err(L2Error::Channel {
            name: name.clone(),
            source,
        }),
    }
}

/// Receive buffer of each packet socket: room for a burst of a few thousand requests.
const RECEIVE_BUFFER: usize = 4 << 20;

/// A packet socket carrying [`RESPONDER_FILTER`], for pnet to bind to the interface (pnet takes
/// ownership of the descriptor), and a second descriptor of it for [`Port::socket`]. Created
/// with protocol 0, it receives nothing until that bind, so no frame of another interface is
/// queued before it.
fn filtered_packet_socket() -> io::Result<(RawFd, Socket)> {
    let socket = Socket::new(Domain::PACKET, Type::RAW, Some(Protocol::from(0)))?;
    let program: Vec<SockFilter> = RESPONDER_FILTER
        .iter()
        .map(|(code, jt, jf, k)| SockFilter::new(*code, *jt, *jf, *k))
        .collect();
    socket.attach_filter(&program)?;
    // Best effort: the kernel caps it at net.core.rmem_max.
    let _ = socket.set_recv_buffer_size(RECEIVE_BUFFER);
    let second = socket.try_clone()?;
    Ok((socket.into_raw_fd(), second))
}

/// The real-time priority of the ARP/NDP readers (`SCHED_FIFO`, low: above every ordinary
/// process, below the kernel's own real-time threads).
const READER_PRIORITY: i32 = 10;

/// Gives the calling reader thread real-time priority, so an answer does not wait behind busy
/// processes for a CPU (the kernel answers its own addresses in softirq context). Needs
/// `CAP_SYS_NICE`; without it the thread keeps its ordinary priority, said once in the log.
/// The kernel's real-time throttling (by default 95 % of each CPU) bounds what a flood of
/// requests can take.
#[allow(unsafe_code)] // sched_setscheduler(2) has no safe wrapper in std or libc.
fn raise_priority() {
    static WARNED: std::sync::Once = std::sync::Once::new();
    // SAFETY: sched_param is plain integers (musl's has more fields than glibc's), for which
    // all zeroes is valid; pid 0 is the calling thread.
    let rc = unsafe {
        let mut param: libc::sched_param = std::mem::zeroed();
        param.sched_priority = READER_PRIORITY;
        libc::sched_setscheduler(0, libc::SCHED_FIFO, &param)
    };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        WARNED.call_once(|| {
            tracing::info!(
                error = %e,
                "ARP/NDP readers keep an ordinary priority (real-time needs CAP_SYS_NICE)"
            );
        });
    }
}

/// Reads and answers until the responder stops or the port is closed or fails.
///
/// When its interface goes down or is deleted, the kernel sets `ENETDOWN` on the socket (pnet
/// then reports an "unexpected poll event" on every read until the error is read). A device
/// that is only down keeps its socket, which the kernel re-arms when it comes back up, so the
/// reader goes on; a deleted one leaves the socket bound to nothing, so the reader marks the
/// port failed and ends, and the next reconcile opens a new port. Other errors are retried
/// with a growing pause, never in a busy loop.
fn receive_loop(inner: &Inner, port: &Port, mut rx: Box<dyn DataLinkReceiver>) {
    raise_priority();
    let mut backoff = Duration::from_millis(10);
    let mut last = Instant::now();
    while !inner.stop.load(Ordering::Relaxed) && !port.closed.load(Ordering::Relaxed) {
        let read = rx.next();
        inner.reader_woke(port, &mut last, Instant::now());
        match read {
            Ok(frame) => {
                backoff = Duration::from_millis(10);
                handle_frame(inner, port, frame);
            }
            Err(e)
                if e.kind() == io::ErrorKind::TimedOut || e.kind() == io::ErrorKind::WouldBlock => {
            }
            Err(e) => {
                Counters::bump(&inner.counters.read_errors);
                let error = port.socket.take_error().ok().flatten().unwrap_or(e);
                tracing::debug!(interface = %port.name, %error, "packet read failed");
                if interface_gone(&error) && !still_there(port) {
                    port.fail(&error);
                    return;
                }
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(MAX_READ_BACKOFF);
            }
        }
    }
}

/// A request older than this when read is not answered: it waited while the speaker stood
/// still (a frozen process, a paused VM), the asker has retried or given up (ARP retries every
/// second), and the others may have moved the address meanwhile. The readers run at real-time
/// priority, so a busy machine delays them by far less.
pub const STALE_REQUEST: Duration = Duration::from_millis(250);

/// `SIOCGSTAMP` (`linux/sockios.h`; on 64-bit targets the same value as `SIOCGSTAMP_OLD`).
const SIOCGSTAMP: u64 = 0x8906;

/// When the kernel received the frame last read from `socket`'s packet socket (wall clock),
/// if it says. The first call turns the socket's timestamps on.
#[allow(unsafe_code)] // ioctl(2) has no safe wrapper in std or libc.
fn received_at(socket: &Socket) -> Option<SystemTime> {
    use std::os::fd::AsRawFd;
    let mut tv = libc::timeval {
        tv_sec: 0,
        tv_usec: 0,
    };
    // SAFETY: SIOCGSTAMP writes one `struct timeval` through the pointer, which points at a
    // live, properly aligned `timeval` on this stack; the descriptor is the port's own.
    let r = unsafe { libc::ioctl(socket.as_raw_fd(), SIOCGSTAMP as _, &mut tv) };
    if r != 0 {
        return None;
    }
    let secs = u64::try_from(tv.tv_sec).ok()?;
    let micros = u32::try_from(tv.tv_usec).ok()?;
    Some(std::time::UNIX_EPOCH + Duration::new(secs, micros.checked_mul(1000)?))
}

/// Whether the port's interface still exists with the index the port is bound to.
fn still_there(port: &Port) -> bool {
    datalink::interfaces()
        .iter()
        .any(|i| i.name == port.name && i.index == port.index)
}

/// One received frame: parse, check ownership on this interface, answer.
fn handle_frame(inner: &Inner, port: &Port, bytes: &[u8]) {
    let c = &inner.counters;
    if port.closed.load(Ordering::Relaxed) {
        return;
    }
    // The packet socket also hands us what we send ourselves.
    if bytes.get(6..12) == Some(&port.mac.0[..]) {
        Counters::bump(&c.own_frames);
        return;
    }
    Counters::bump(&c.frames);
    inner.note_announcement(bytes, port);
    let request = match frame::parse(bytes) {
        Ok(r) => r,
        Err(reason) => {
            c.drop(reason);
            return;
        }
    };
    let target = match request {
        Request::Arp(a) => {
            Counters::bump(&c.arp_requests);
            IpAddr::V4(a.target_ip)
        }
        Request::Ns(n) => {
            Counters::bump(&c.ns_requests);
            IpAddr::V6(n.target)
        }
    };
    let owned = inner
        .view
        .read()
        .map(|v| v.get(&port.name).is_some_and(|s| s.contains(&target)))
        .unwrap_or(false);
    if !owned || inner.in_handover(target).1 {
        Counters::bump(&c.not_owned);
        return;
    }
    let stale = received_at(&port.socket)
        .and_then(|at| SystemTime::now().duration_since(at).ok())
        .is_some_and(|age| age > STALE_REQUEST);
    if stale || inner.quiet(Instant::now()).is_some() {
        // Asked while this speaker stood still, or just after it woke: the asker has retried
        // or given up, and the others may have moved the address meanwhile.
        Counters::bump(&c.stale_requests);
        return;
    }
    match request {
        Request::Arp(a) => {
            if port.send(&frame::arp_reply(&a, port.mac), c) {
                Counters::bump(&c.arp_replies);
            }
        }
        Request::Ns(n) => {
            if port.send(&frame::neighbor_advertisement(&n, port.mac), c) {
                Counters::bump(&c.na_replies);
            }
        }
    }
}

/// What the announcer thread is told.
enum Command {
    /// The new owned view and the [`Port::id`] of each interface in it: newly listed pairs,
    /// and pairs whose port was replaced, start their schedule.
    View(Arc<View>, BTreeMap<String, u64>),
    /// Every owned pair starts its schedule again (membership changed: a node that was cut off
    /// may have answered for our addresses meanwhile, and neighbours may still point at it).
    Restart,
    /// Pairs added (with their port's id: their schedule starts) and removed.
    Delta {
        /// (address, port id, interface) newly owned.
        added: Vec<(IpAddr, u64, String)>,
        /// (address, interface) no longer owned.
        removed: Vec<(IpAddr, String)>,
    },
}

fn announce_loop(inner: &Inner, commands: &mpsc::Receiver<Command>) {
    let mut schedules = schedule::Schedules::default();
    loop {
        let quiet = inner.quiet(Instant::now());
        let next = schedules.next_at().map(|t| quiet.map_or(t, |q| t.max(q)));
        let wait = next.map_or(Duration::from_secs(3600), |t| {
            t.saturating_duration_since(Instant::now())
        });
        let command = commands.recv_timeout(wait);
        let now = Instant::now();
        let ports = lock(&inner.ports).clone();
        let quiet = inner.announcer_quiet(now, &ports);
        // What starts while quiet starts when the quiet ends.
        let start = schedule::starts_at(now, quiet);
        match command {
            Ok(Command::Restart) => schedules.restart_all(start),
            Ok(Command::View(view, port_ids)) => {
                let pairs: BTreeMap<(IpAddr, String), u64> = view
                    .iter()
                    .filter_map(|(name, ips)| port_ids.get(name).map(|id| (name, ips, *id)))
                    .flat_map(|(name, ips, id)| ips.iter().map(move |ip| ((*ip, name.clone()), id)))
                    .collect();
                schedules.retain(|k, a| pairs.get(k) == Some(&a.port));
                for (pair, port) in pairs {
                    if schedules.get(&pair).is_none() {
                        schedules.start(pair, port, start);
                    }
                }
            }
            Ok(Command::Delta { added, removed }) => {
                for pair in removed {
                    schedules.remove(&pair);
                }
                for (ip, port, name) in added {
                    schedules.start((ip, name), port, start);
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        if inner.stop.load(Ordering::Relaxed) {
            return;
        }
        if quiet.is_some() {
            continue;
        }
        // Only the pairs whose announcement is due: not every owned address.
        for due in schedules.take_due(now) {
            let (ip, name) = &due.pair;
            match due.step {
                schedule::Step::Wait => continue,
                schedule::Step::Send { .. } => {}
                schedule::Step::Skip { late, .. } => {
                    Counters::bump(&inner.counters.stale_announcements_skipped);
                    tracing::warn!(%ip, interface = %name, late = ?late,
                        "an announcement missed while this speaker stood still is skipped, not sent late: the others may have moved the address meanwhile");
                    continue;
                }
            }
            // An address being handed over is answered, never announced again.
            if inner.in_handover(*ip).0 {
                continue;
            }
            if let Some(port) = ports.get(name).filter(|p| p.id == due.port) {
                announce(inner, port, *ip);
            }
        }
    }
}

fn announce(inner: &Inner, port: &Port, ip: IpAddr) {
    let c = &inner.counters;
    match ip {
        IpAddr::V4(v4) => {
            for f in [
                frame::gratuitous_arp_request(port.mac, v4),
                frame::gratuitous_arp_reply(port.mac, v4),
            ] {
                if port.send(&f, c) {
                    Counters::bump(&c.gratuitous_arp);
                }
            }
        }
        IpAddr::V6(v6) => {
            if port.send(&frame::unsolicited_na(port.mac, v6), c) {
                Counters::bump(&c.unsolicited_na);
            }
        }
    }
}

/// Solicited-node group memberships, held on one UDP socket: joining with
/// `IPV6_ADD_MEMBERSHIP` makes the kernel program the interface's multicast filter, which is
/// what lets a non-promiscuous packet socket see solicitations sent to the group. `std` offers
/// the call, so no `unsafe` is needed.
struct Multicast {
    socket: Option<UdpSocket>,
    joined: BTreeSet<(Ipv6Addr, u32)>,
}

impl Multicast {
    fn new() -> Multicast {
        let socket = UdpSocket::bind("[::]:0")
            .inspect_err(|e| tracing::warn!(error = %e, "no IPv6 socket: solicited-node groups cannot be joined"))
            .ok();
        Multicast {
            socket,
            joined: BTreeSet::new(),
        }
    }

    /// Joins and leaves groups so that exactly `wanted` is joined; returns the failure count.
    fn apply(&mut self, wanted: &BTreeSet<(Ipv6Addr, u32)>) -> usize {
        let Some(socket) = &self.socket else {
            return wanted.len();
        };
        let mut failures = 0;
        for (group, index) in self.joined.difference(wanted) {
            if let Err(e) = socket.leave_multicast_v6(group, *index) {
                tracing::debug!(%group, index, error = %e, "leaving solicited-node group failed");
                failures += 1;
            }
        }
        let mut joined = BTreeSet::new();
        for (group, index) in wanted {
            if self.joined.contains(&(*group, *index)) {
                joined.insert((*group, *index));
                continue;
            }
            match socket.join_multicast_v6(group, *index) {
                Ok(()) => {
                    joined.insert((*group, *index));
                }
                Err(e) => {
                    tracing::warn!(%group, index, error = %e, "joining solicited-node group failed");
                    failures += 1;
                }
            }
        }
        self.joined = joined;
        failures
    }
}
