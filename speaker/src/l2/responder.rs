//! The ARP/NDP responder shell: packet sockets, threads and timers around the pure [`frame`],
//! [`schedule`] and [`iface`] cores. I/O: pnet datalink channels and one UDP socket.
//!
//! ```text
//!  set_owned(map) ──┬──► owned view (RwLock<Arc<View>>) ◄── read per frame ── rx thread ─┐
//!                   │                                         (one per interface)        │
//!                   ├──► solicited-node joins (UDP socket)                               ▼
//!                   └──► announcer thread ── schedule::due ──► GARP / unsolicited NA ──► tx
//! ```
//!
//! # Guarantees
//! - A request is answered only when its target is in the owned view *for the interface it came
//!   in on*, with that interface's MAC; [`Responder::set_owned`] swaps the view before it
//!   returns, so a lost address is not answered from then on.
//! - Every newly owned (address, interface) pair is announced on [`schedule::ANNOUNCE_OFFSETS`].
//! - Malformed frames are counted per [`frame::DropReason`] and never parsed past their length.
//!
//! - Each packet socket carries [`RESPONDER_FILTER`]: the kernel passes only received ARP and
//!   Neighbor Solicitations, not the node's other traffic nor the frames it sends.
//!
//! # Caveats
//! - Methods are synchronous and do not block on I/O (opening a new interface aside), so they may
//!   be called from async code.

use super::counters::{CounterSnapshot, Counters};
use super::error::L2Error;
use super::filter::RESPONDER_FILTER;
use super::frame::{self, MacAddr, Request, solicited_node};
use super::iface;
use super::schedule;
use pnet::datalink::{self, Channel, DataLinkReceiver, DataLinkSender};
use socket2::{Domain, Protocol, SockFilter, Socket, Type};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::io;
use std::net::{IpAddr, Ipv6Addr, UdpSocket};
use std::os::fd::{IntoRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often a blocked read wakes up to notice shutdown.
const READ_TIMEOUT: Duration = Duration::from_millis(200);

/// Owned addresses per interface name.
type View = HashMap<String, HashSet<IpAddr>>;

/// One open interface.
struct Port {
    name: String,
    index: u32,
    mac: MacAddr,
    tx: Mutex<Box<dyn DataLinkSender>>,
}

impl Port {
    fn send(&self, frame: &[u8], counters: &Counters) -> bool {
        let sent = match self.tx.lock() {
            Ok(mut tx) => tx.send_to(frame, None),
            Err(_) => None,
        };
        match sent {
            Some(Ok(())) => true,
            _ => {
                Counters::bump(&counters.send_errors);
                false
            }
        }
    }
}

struct Inner {
    view: RwLock<Arc<View>>,
    ports: Mutex<BTreeMap<String, Arc<Port>>>,
    counters: Counters,
    stop: AtomicBool,
}

/// A handle on the responder. Dropping it stops every thread.
pub struct Responder {
    inner: Arc<Inner>,
    announcer_tx: Option<mpsc::Sender<Command>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    multicast: Mutex<Multicast>,
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
        }
    }

    /// Declares the full set of owned addresses and the interfaces to answer on. Interfaces not
    /// yet open are opened; addresses no longer listed stop being answered before this returns;
    /// newly listed (address, interface) pairs are announced at once and then on schedule.
    ///
    /// An interface that cannot be opened is left out (its addresses are served on the other
    /// interfaces) and the first such error is returned after everything else was applied.
    pub fn set_owned(&self, owned: &BTreeMap<IpAddr, Vec<String>>) -> Result<(), L2Error> {
        let mut first_error = None;
        let mut view = View::new();
        for (ip, names) in owned {
            for name in names {
                match self.port(name) {
                    Ok(_) => {
                        view.entry(name.clone()).or_default().insert(*ip);
                    }
                    Err(e) => {
                        tracing::warn!(%ip, interface = %name, error = %e, "cannot answer on interface");
                        first_error.get_or_insert(e);
                    }
                }
            }
        }
        let view = Arc::new(view);
        if let Ok(mut v) = self.inner.view.write() {
            *v = view.clone();
        }
        self.update_multicast(&view);
        if let Some(tx) = &self.announcer_tx {
            let _ = tx.send(Command::View(view));
        }
        first_error.map_or(Ok(()), Err)
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
        let ports = self.inner.ports.lock().ok()?;
        ports.get(interface).map(|p| p.mac)
    }

    /// The open port for `name`, opening it (and starting its reader) on first use.
    fn port(&self, name: &str) -> Result<Arc<Port>, L2Error> {
        // A reader that panicked cannot leave the map half-updated: keep using it.
        let mut ports = self
            .inner
            .ports
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(p) = ports.get(name) {
            return Ok(p.clone());
        }
        let (port, rx) = open_port(name)?;
        let port = Arc::new(port);
        ports.insert(name.to_owned(), port.clone());
        let inner = self.inner.clone();
        let reader = port.clone();
        let handle = std::thread::Builder::new()
            .name(format!("l2-rx-{name}"))
            .spawn(move || receive_loop(&inner, &reader, rx))
            .map_err(|source| L2Error::Channel {
                name: name.to_owned(),
                source,
            })?;
        if let Ok(mut t) = self.threads.lock() {
            t.push(handle);
        }
        Ok(port)
    }

    /// Joins the solicited-node group of every owned IPv6 address on its interfaces and leaves
    /// the groups no longer needed, so the interface accepts solicitations sent to them.
    fn update_multicast(&self, view: &View) {
        let ports = match self.inner.ports.lock() {
            Ok(p) => p.clone(),
            Err(_) => return,
        };
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
        if let Ok(mut m) = self.multicast.lock() {
            let failures = m.apply(&wanted);
            for _ in 0..failures {
                Counters::bump(&self.inner.counters.multicast_errors);
            }
        }
    }
}

impl Default for Responder {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        self.inner.stop.store(true, Ordering::SeqCst);
        self.announcer_tx = None;
        if let Ok(mut threads) = self.threads.lock() {
            for t in threads.drain(..) {
                let _ = t.join();
            }
        }
    }
}

fn open_port(name: &str) -> Result<(Port, Box<dyn DataLinkReceiver>), L2Error> {
    let iface = datalink::interfaces()
        .into_iter()
        .find(|i| i.name == name)
        .ok_or_else(|| L2Error::InterfaceNotFound { name: name.into() })?;
    let info = iface::from_pnet(&iface);
    let mac = info
        .mac
        .filter(|m| *m != MacAddr::default())
        .ok_or_else(|| L2Error::NoMac { name: name.into() })?;
    let socket_fd = filtered_packet_socket().map_err(|source| L2Error::Channel {
        name: name.into(),
        source,
    })?;
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
                name: name.into(),
                index: info.index,
                mac,
                tx: Mutex::new(tx),
            },
            rx,
        )),
        Ok(_) => Err(L2Error::NotEthernet { name: name.into() }),
        Err(source) => Err(L2Error::Channel {
            name: name.into(),
            source,
        }),
    }
}

/// Receive buffer of each packet socket: room for a burst of a few thousand requests.
const RECEIVE_BUFFER: usize = 4 << 20;

/// A packet socket carrying [`RESPONDER_FILTER`], for pnet to bind to the interface (pnet takes
/// ownership of the descriptor). Created with protocol 0, it receives nothing until that bind,
/// so no frame of another interface is queued before it.
fn filtered_packet_socket() -> io::Result<RawFd> {
    let socket = Socket::new(Domain::PACKET, Type::RAW, Some(Protocol::from(0)))?;
    let program: Vec<SockFilter> = RESPONDER_FILTER
        .iter()
        .map(|(code, jt, jf, k)| SockFilter::new(*code, *jt, *jf, *k))
        .collect();
    socket.attach_filter(&program)?;
    // Best effort: the kernel caps it at net.core.rmem_max.
    let _ = socket.set_recv_buffer_size(RECEIVE_BUFFER);
    Ok(socket.into_raw_fd())
}

fn receive_loop(inner: &Inner, port: &Port, mut rx: Box<dyn DataLinkReceiver>) {
    while !inner.stop.load(Ordering::Relaxed) {
        match rx.next() {
            Ok(frame) => handle_frame(inner, port, frame),
            Err(e)
                if e.kind() == io::ErrorKind::TimedOut || e.kind() == io::ErrorKind::WouldBlock => {
            }
            Err(e) => {
                Counters::bump(&inner.counters.read_errors);
                tracing::debug!(interface = %port.name, error = %e, "packet read failed");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

/// One received frame: parse, check ownership on this interface, answer.
fn handle_frame(inner: &Inner, port: &Port, bytes: &[u8]) {
    let c = &inner.counters;
    // The packet socket also hands us what we send ourselves.
    if bytes.get(6..12) == Some(&port.mac.0[..]) {
        Counters::bump(&c.own_frames);
        return;
    }
    Counters::bump(&c.frames);
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
    if !owned {
        Counters::bump(&c.not_owned);
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

/// Progress of the announcements of one (address, interface) pair.
struct Announcing {
    taken_at: Instant,
    sent: usize,
}

/// What the announcer thread is told.
enum Command {
    /// The new owned view: newly listed pairs start their schedule.
    View(Arc<View>),
    /// Every owned pair starts its schedule again (membership changed: a node that was cut off
    /// may have answered for our addresses meanwhile, and neighbours may still point at it).
    Restart,
}

fn announce_loop(inner: &Inner, commands: &mpsc::Receiver<Command>) {
    let mut state: BTreeMap<(IpAddr, String), Announcing> = BTreeMap::new();
    loop {
        let next = state
            .values()
            .filter_map(|a| schedule::next_at(a.taken_at, a.sent))
            .min();
        let wait = next.map_or(Duration::from_secs(3600), |t| {
            t.saturating_duration_since(Instant::now())
        });
        match commands.recv_timeout(wait) {
            Ok(Command::Restart) => {
                let now = Instant::now();
                for a in state.values_mut() {
                    *a = Announcing {
                        taken_at: now,
                        sent: 0,
                    };
                }
            }
            Ok(Command::View(view)) => {
                let now = Instant::now();
                let pairs: BTreeSet<(IpAddr, String)> = view
                    .iter()
                    .flat_map(|(name, ips)| ips.iter().map(move |ip| (*ip, name.clone())))
                    .collect();
                state.retain(|k, _| pairs.contains(k));
                for p in pairs {
                    state.entry(p).or_insert(Announcing {
                        taken_at: now,
                        sent: 0,
                    });
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        if inner.stop.load(Ordering::Relaxed) {
            return;
        }
        let now = Instant::now();
        let ports = match inner.ports.lock() {
            Ok(p) => p.clone(),
            Err(_) => return,
        };
        for ((ip, name), a) in state.iter_mut() {
            let due = schedule::due(a.taken_at, now);
            if due <= a.sent {
                continue;
            }
            // Several due at once only after a stall: one announcement covers them.
            a.sent = due;
            if let Some(port) = ports.get(name) {
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
