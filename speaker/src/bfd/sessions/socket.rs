//! The shell's sockets: the receiver bound to `local:3784` / `local:4784` that reports each
//! datagram's TTL, and the per-session send socket. I/O; the two system calls socket2 does not
//! wrap (`IP_RECVTTL`, `recvmsg` with control messages) are the only `unsafe`, each in one
//! small function, and what they return is parsed by pure functions.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};

use socket2::{Domain, Protocol, Socket, Type};
use std::net::UdpSocket;

use crate::netdev::DeviceName;

use super::{
    GTSM_TTL, MULTIHOP_PORT, SINGLE_HOP_PORT, SOURCE_PORT_TRIES, SOURCE_PORTS, StartError,
};

/// An IPv4-mapped IPv6 source as the IPv4 address it is.
pub(super) fn canonical(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(a) => a.to_ipv4_mapped().map_or(addr, IpAddr::V4),
        v4 => v4,
    }
}

fn socket_error(what: &'static str) -> impl FnOnce(io::Error) -> StartError {
    move |source| StartError::Socket { what, source }
}

fn new_udp(local: IpAddr, device: Option<DeviceName>) -> Result<Socket, StartError> {
    let domain = if local.is_ipv4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    };
    let socket =
        Socket::new(domain, Type::DGRAM, Some(Protocol::UDP)).map_err(socket_error("socket"))?;
    socket
        .set_nonblocking(true)
        .map_err(socket_error("non-blocking"))?;
    if local.is_ipv6() {
        socket
            .set_only_v6(true)
            .map_err(socket_error("IPV6_V6ONLY"))?;
    }
    if let Some(device) = device {
        crate::netdev::bind(&(&socket).into(), device)?;
    }
    Ok(socket)
}

/// The receiving socket: `local:3784` or `local:4784` (in `device`'s VRF when given),
/// reporting each datagram's TTL. With `peer`, it is connected to that source address and
/// receives only its datagrams: a session's own queue ([`peer_queue`]). The shared receiver is
/// bound with `SO_REUSEPORT` so that those queues can join it on the same port.
pub(super) fn receive_socket(
    local: IpAddr,
    multihop: bool,
    device: Option<DeviceName>,
    peer: Option<SocketAddr>,
) -> Result<UdpSocket, StartError> {
    let socket = new_udp(local, device)?;
    if local.is_ipv4() {
        set_recv_ttl_v4(socket.as_raw_fd()).map_err(socket_error("IP_RECVTTL"))?;
    } else {
        socket
            .set_recv_hoplimit_v6(true)
            .map_err(socket_error("IPV6_RECVHOPLIMIT"))?;
    }
    socket
        .set_reuse_port(true)
        .map_err(socket_error("SO_REUSEPORT"))?;
    let port = if multihop {
        MULTIHOP_PORT
    } else {
        SINGLE_HOP_PORT
    };
    let addr = SocketAddr::new(local, port);
    if peer.is_none() {
        // SO_REUSEPORT would let another process's receiver (of the same user) share the port
        // and take part of the packets: a plain bind first fails as before when the port is
        // anyone's already.
        new_udp(local, device)?
            .bind(&addr.into())
            .map_err(|source| StartError::Bind { addr, source })?;
    }
    socket
        .bind(&addr.into())
        .map_err(|source| StartError::Bind { addr, source })?;
    if let Some(peer) = peer {
        socket
            .connect(&peer.into())
            .map_err(socket_error("connect"))?;
    }
    Ok(socket.into())
}

/// A session's own queue: a socket on the receiver's address and port, connected to the
/// source address (address and port) its peer sends from. The kernel hands a datagram to the
/// connected socket whose addresses it matches before the shared receiver, so the peer's
/// packets never wait behind, or are dropped for, a flood of others at the shared port; RFC
/// 5881 §4 keeps a session's source port the same for all its packets.
pub(super) fn peer_queue(
    local: IpAddr,
    multihop: bool,
    device: Option<DeviceName>,
    peer: SocketAddr,
) -> Result<UdpSocket, StartError> {
    receive_socket(local, multihop, device, Some(peer))
}

/// A session's send socket: `local` and a free random port in 49152–65535, TTL 255, bound to
/// `device` when given. Non-blocking and not registered with tokio: a send never waits (a full
/// buffer drops the packet, as a lossy link would), and a registered socket woke the runtime
/// once more after every packet for its write readiness (`strace` on an idle speaker).
pub(super) fn send_socket(
    local: IpAddr,
    device: Option<DeviceName>,
) -> Result<std::net::UdpSocket, StartError> {
    let socket = new_udp(local, device)?;
    if local.is_ipv4() {
        socket
            .set_ttl_v4(u32::from(GTSM_TTL))
            .map_err(socket_error("IP_TTL"))?;
    } else {
        socket
            .set_unicast_hops_v6(u32::from(GTSM_TTL))
            .map_err(socket_error("IPV6_UNICAST_HOPS"))?;
    }
    let mut bound = false;
    for _ in 0..SOURCE_PORT_TRIES {
        let addr = SocketAddr::new(local, rand::random_range(SOURCE_PORTS));
        match socket.bind(&addr.into()) {
            Ok(()) => {
                bound = true;
                break;
            }
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => continue,
            Err(source) => return Err(StartError::Bind { addr, source }),
        }
    }
    if !bound {
        return Err(StartError::NoSourcePort { local });
    }
    // Non-blocking already (`new_udp`).
    Ok(socket.into())
}

/// Turns on IP_RECVTTL, which socket2 does not wrap.
#[allow(unsafe_code)] // setsockopt(IP_RECVTTL) has no safe wrapper in std, tokio or socket2.
fn set_recv_ttl_v4(fd: RawFd) -> io::Result<()> {
    let on: libc::c_int = 1;
    // SAFETY: `on` is an initialised c_int that lives for the whole call, and the length passed
    // is its size; the kernel only reads it. `fd` is an open socket owned by the caller.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_IP,
            libc::IP_RECVTTL,
            (&raw const on).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// One datagram as `recvmsg` gave it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Received {
    pub(super) len: usize,
    pub(super) source: SocketAddr,
    pub(super) ttl: Option<u8>,
}

/// `recvmsg(2)` without waiting: the payload into `buf`, the source and the TTL / hop limit.
#[allow(unsafe_code)] // recvmsg(2) with control messages: socket2's version hands back uninitialised bytes.
pub(super) fn recv_with_ttl(fd: RawFd, buf: &mut [u8]) -> io::Result<Received> {
    let mut name = [0u8; 128];
    let mut control = [0u8; 128];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: `msghdr` is plain data for which all zeroes (null pointers, zero lengths) is valid.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = name.as_mut_ptr().cast();
    msg.msg_namelen = name.len() as libc::socklen_t;
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = control.len() as _;
    // SAFETY: every pointer in `msg` points to a live local buffer (or `buf`) of exactly the
    // length given next to it; the kernel writes at most that many bytes into each and nothing
    // else. `fd` is an open socket owned by the caller.
    let n = unsafe { libc::recvmsg(fd, &raw mut msg, libc::MSG_DONTWAIT) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let name_len = (msg.msg_namelen as usize).min(name.len());
    let control_len = (msg.msg_controllen as usize).min(control.len());
    let source = socket_addr_from_raw(&name[..name_len])
        .ok_or_else(|| io::Error::other("recvmsg returned no IP source address"))?;
    Ok(Received {
        len: (n as usize).min(buf.len()),
        source,
        ttl: ttl_from_control(&control[..control_len]),
    })
}

/// A `sockaddr_in` / `sockaddr_in6` as the kernel writes it. Pure.
pub(super) fn socket_addr_from_raw(raw: &[u8]) -> Option<SocketAddr> {
    let family = u16::from_ne_bytes(raw.get(..2)?.try_into().ok()?);
    let port = u16::from_be_bytes(raw.get(2..4)?.try_into().ok()?);
    match i32::from(family) {
        libc::AF_INET => {
            let ip: [u8; 4] = raw.get(4..8)?.try_into().ok()?;
            Some(SocketAddr::new(IpAddr::from(ip), port))
        }
        libc::AF_INET6 => {
            let ip: [u8; 16] = raw.get(8..24)?.try_into().ok()?;
            let scope = raw
                .get(24..28)
                .and_then(|b| b.try_into().ok())
                .map_or(0, u32::from_ne_bytes);
            Some(SocketAddr::V6(std::net::SocketAddrV6::new(
                ip.into(),
                port,
                0,
                scope,
            )))
        }
        _ => None,
    }
}

/// The TTL (`IP_TTL`) or hop limit (`IPV6_HOPLIMIT`) among the control messages `recvmsg`
/// wrote, laid out as the Linux kernel writes them: a `struct cmsghdr { size_t len; int level;
/// int type; }`, the data, then padding to a multiple of `size_t`. Pure; refuses anything that
/// does not fit.
pub(super) fn ttl_from_control(control: &[u8]) -> Option<u8> {
    const WORD: usize = size_of::<usize>();
    let align = |n: usize| n.div_ceil(WORD) * WORD;
    let header = align(WORD + 8);
    let int_at = |at: usize| {
        control
            .get(at..at + 4)
            .and_then(|b| b.try_into().ok())
            .map(i32::from_ne_bytes)
    };
    let mut at = 0;
    while at + header <= control.len() {
        let len = usize::from_ne_bytes(control.get(at..at + WORD)?.try_into().ok()?);
        if len < header || at + len > control.len() {
            return None;
        }
        let (level, kind) = (int_at(at + WORD)?, int_at(at + WORD + 4)?);
        let is_ttl = (level == libc::IPPROTO_IP && kind == libc::IP_TTL)
            || (level == libc::IPPROTO_IPV6 && kind == libc::IPV6_HOPLIMIT);
        if is_ttl && len >= header + 4 {
            return u8::try_from(int_at(at + header)?).ok();
        }
        at += align(len);
    }
    None
}
