//! Opening a session's TCP connection: VRF device, source address, TTL and TCP-MD5 (RFC 2385);
//! finding an unnumbered peer on its interface (router advertisements). I/O.

use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr, SocketAddrV6};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use tokio::net::{TcpSocket, TcpStream, UdpSocket};
use tokio::sync::watch;

use super::config::PeerConfig;
use super::unnumbered::{
    ADVERTISE_INTERVAL, NeighbourError, Neighbours, encode_router_advertisement,
    parse_router_advertisement,
};

/// Longest TCP-MD5 key Linux accepts (TCP_MD5SIG_MAXKEYLEN).
pub const MAX_MD5_KEY_LEN: usize = 80;

/// Why a connection could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The socket could not be bound to the peer's VRF device (it may not exist yet).
    #[error(transparent)]
    Device(#[from] crate::netdev::BindError),
    /// Any other failure (refused, unreachable, timed out, ...).
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// Connects to the peer from the configured source address, with the session's TTL and, when a
/// password is set, TCP-MD5 signatures. With a VRF device, the socket is bound to it first, so
/// the route, the source address chosen by the kernel and so the next hop we announce (the
/// connection's local address) come from that VRF.
pub async fn connect(config: &PeerConfig) -> Result<TcpStream, ConnectError> {
    connect_to(
        config,
        SocketAddr::new(config.peer_address, config.peer_port),
    )
    .await
}

/// [`connect`] to `remote` instead of the configured address: an unnumbered peer's link-local
/// address, with the interface as its scope.
pub async fn connect_to(
    config: &PeerConfig,
    remote: SocketAddr,
) -> Result<TcpStream, ConnectError> {
    let socket = match remote {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    let sock = socket2::SockRef::from(&socket);
    if let Some(device) = config.vrf {
        crate::netdev::bind(&sock, device)?;
    }
    match remote {
        SocketAddr::V4(_) => sock.set_ttl_v4(u32::from(config.ttl()))?,
        SocketAddr::V6(_) => sock.set_unicast_hops_v6(u32::from(config.ttl()))?,
    }
    sock.set_tcp_nodelay(true)?;
    if let Some(password) = &config.password {
        set_tcp_md5sig(socket.as_raw_fd(), remote.ip(), password.as_bytes())?;
    }
    if let Some(source) = config.source_address {
        socket.bind(SocketAddr::new(source, 0))?;
    }
    Ok(socket.connect(remote).await?)
}

/// A global address of the other family on the interface that holds `local`: how a session
/// over IPv4 finds the node's IPv6 next hop, and the other way round. For a link-local `local`
/// (an unnumbered session), the interface's global IPv6 address, for the global half of the
/// RFC 2545 next hop; its IPv4 address when it has no global IPv6 one.
pub fn other_family_address(local: IpAddr) -> Option<IpAddr> {
    let iface = pnet::datalink::interfaces()
        .into_iter()
        .find(|i| i.ips.iter().any(|n| n.ip() == local))?;
    let global_v6 =
        |ip: &IpAddr| matches!(ip, IpAddr::V6(a) if !a.is_loopback() && !a.is_unicast_link_local());
    let v4 = |ip: &IpAddr| matches!(ip, IpAddr::V4(a) if !a.is_loopback() && !a.is_link_local());
    let ips = || iface.ips.iter().map(|n| n.ip());
    match local {
        IpAddr::V6(l) if l.is_unicast_link_local() => {
            ips().find(global_v6).or_else(|| ips().find(v4))
        }
        IpAddr::V4(_) => ips().find(global_v6),
        IpAddr::V6(_) => ips().find(v4),
    }
}

/// What the neighbour discovery of an unnumbered peer found: the router's link-local address
/// and the interface's index (its scope).
pub type Discovery = Result<(Ipv6Addr, u32), NeighbourError>;

/// How often the interface is looked up again (it may appear, go, or be made anew).
const INTERFACE_CHECK: Duration = Duration::from_secs(5);
/// Shortest time between two of our advertisements sent in answer to a new router's.
const ANSWER_GAP: Duration = Duration::from_secs(1);

/// The all-nodes multicast address, where unsolicited advertisements go (RFC 4861 §6.2.4).
const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);

/// Runs the neighbour discovery of an unnumbered peer on `interface` until `found` has no
/// receiver: sends our router advertisement every [`ADVERTISE_INTERVAL`] (and at once when a
/// new router is heard), listens for the routers' advertisements, and publishes who the
/// neighbour is (see [`crate::bgp::unnumbered`]).
pub async fn discover_neighbour(interface: String, found: watch::Sender<Discovery>) {
    let publish = |d: Discovery| {
        found.send_if_modified(|cur| {
            let changed = *cur != d;
            *cur = d;
            changed
        });
    };
    while !found.is_closed() {
        let Some(iface) = pnet::datalink::interfaces()
            .into_iter()
            .find(|i| i.name == interface)
        else {
            publish(Err(NeighbourError::NoInterface {
                interface: interface.clone(),
            }));
            tokio::time::sleep(INTERFACE_CHECK).await;
            continue;
        };
        let socket = match router_advertisement_socket(&iface.name, iface.index) {
            Ok(s) => s,
            Err(e) => {
                publish(Err(NeighbourError::Socket {
                    interface: interface.clone(),
                    reason: e.to_string(),
                }));
                tokio::time::sleep(INTERFACE_CHECK).await;
                continue;
            }
        };
        let ours = encode_router_advertisement(iface.mac.map(|m| m.octets()));
        let all_nodes = SocketAddr::V6(SocketAddrV6::new(ALL_NODES, 0, 0, iface.index));
        let mut neighbours = Neighbours::new(&interface);
        publish(
            neighbours
                .neighbour(std::time::Instant::now())
                .map(|a| (a, iface.index)),
        );
        let mut advertise = tokio::time::interval(ADVERTISE_INTERVAL);
        let mut check = tokio::time::interval(INTERFACE_CHECK);
        let mut last_answer: Option<tokio::time::Instant> = None;
        let mut buf = vec![0u8; 1500];
        loop {
            tokio::select! {
                _ = advertise.tick() => {
                    if let Err(e) = socket.send_to(&ours, all_nodes).await {
                        tracing::debug!(%interface, error = %e, "router advertisement not sent");
                    }
                }
                _ = check.tick() => {
                    let same = pnet::datalink::interfaces()
                        .iter()
                        .any(|i| i.name == interface && i.index == iface.index);
                    if !same || found.is_closed() {
                        break;
                    }
                }
                got = socket.recv_from(&mut buf) => {
                    let Ok((n, SocketAddr::V6(from))) = got else { continue };
                    let Some(ra) = parse_router_advertisement(&buf[..n]) else { continue };
                    let now = tokio::time::Instant::now();
                    let new = neighbours.heard(now.into_std(), *from.ip(), ra);
                    if new && last_answer.is_none_or(|t| now - t >= ANSWER_GAP) {
                        last_answer = Some(now);
                        let _ = socket.send_to(&ours, all_nodes).await;
                    }
                }
            }
            publish(
                neighbours
                    .neighbour(std::time::Instant::now())
                    .map(|a| (a, iface.index)),
            );
        }
    }
}

/// A raw ICMPv6 socket on one interface that sends with hop limit 255 (RFC 4861 §6.1.2) and
/// does not hear its own multicast. It is used through tokio's `UdpSocket`, whose
/// `send_to`/`recv_from` are plain datagram calls that suit a raw socket as well (the port of
/// the addresses is 0); the kernel fills in the ICMPv6 checksum.
fn router_advertisement_socket(name: &str, index: u32) -> io::Result<UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::IPV6, Type::RAW, Some(Protocol::ICMPV6))?;
    s.bind_device(Some(name.as_bytes()))?;
    s.set_multicast_hops_v6(255)?;
    s.set_unicast_hops_v6(255)?;
    s.set_multicast_if_v6(index)?;
    s.set_multicast_loop_v6(false)?;
    s.set_nonblocking(true)?;
    UdpSocket::from_std(std::net::UdpSocket::from(std::os::fd::OwnedFd::from(s)))
}

/// Builds a Linux `struct tcp_md5sig` (linux/tcp.h): a 128-byte `sockaddr_storage` with the
/// peer's address, flags, prefix length, key length, interface index and an 80-byte key.
fn md5sig_bytes(peer: IpAddr, key: &[u8]) -> io::Result<[u8; 216]> {
    if key.len() > MAX_MD5_KEY_LEN {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "TCP-MD5 password is {} bytes; Linux accepts at most 80",
                key.len()
            ),
        ));
    }
    let mut b = [0u8; 216];
    match peer {
        IpAddr::V4(a) => {
            b[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
            b[4..8].copy_from_slice(&a.octets());
        }
        IpAddr::V6(a) => {
            b[..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
            b[8..24].copy_from_slice(&a.octets());
        }
    }
    b[130..132].copy_from_slice(&(key.len() as u16).to_ne_bytes());
    b[136..136 + key.len()].copy_from_slice(key);
    Ok(b)
}

/// Installs a TCP-MD5 key for `peer` on a socket that has not connected yet.
#[allow(unsafe_code)] // setsockopt(TCP_MD5SIG) has no safe wrapper in std, tokio or socket2.
fn set_tcp_md5sig(fd: RawFd, peer: IpAddr, key: &[u8]) -> io::Result<()> {
    let value = md5sig_bytes(peer, key)?;
    // SAFETY: `value` is an initialised buffer of exactly the length passed, alive for the whole
    // call; the kernel only reads it. `fd` is an open socket owned by the caller.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_MD5SIG,
            value.as_ptr().cast(),
            value.len() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_md5_struct_carries_family_address_and_key_where_linux_reads_them() {
        let b = md5sig_bytes("10.99.0.2".parse().unwrap(), b"secret").unwrap();
        assert_eq!(u16::from_ne_bytes([b[0], b[1]]), libc::AF_INET as u16);
        assert_eq!(&b[4..8], &[10, 99, 0, 2]);
        assert_eq!(u16::from_ne_bytes([b[130], b[131]]), 6);
        assert_eq!(&b[136..142], b"secret");
    }

    #[test]
    fn an_md5_key_longer_than_80_bytes_is_refused() {
        assert!(md5sig_bytes("10.99.0.2".parse().unwrap(), &[b'x'; 81]).is_err());
    }

    #[tokio::test]
    async fn the_kernel_accepts_our_md5_struct() {
        let s = TcpSocket::new_v4().unwrap();
        set_tcp_md5sig(s.as_raw_fd(), "10.99.0.2".parse().unwrap(), b"secret").unwrap();
        let s6 = TcpSocket::new_v6().unwrap();
        set_tcp_md5sig(s6.as_raw_fd(), "fd00:99::2".parse().unwrap(), b"secret").unwrap();
    }

    #[tokio::test]
    async fn a_session_with_a_vrf_connects_through_that_device() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut cfg = PeerConfig::new("t", 64512, 64513, "127.0.0.1".parse().unwrap());
        cfg.peer_port = listener.local_addr().unwrap().port();
        cfg.vrf = Some(crate::netdev::DeviceName::new("lo").unwrap());
        let stream = connect(&cfg).await.unwrap();
        let device = socket2::SockRef::from(&stream).device().unwrap();
        assert_eq!(device.as_deref(), Some(&b"lo"[..]));
    }

    #[tokio::test]
    async fn a_session_whose_vrf_does_not_exist_fails_with_that_device_named() {
        let mut cfg = PeerConfig::new("t", 64512, 64513, "127.0.0.1".parse().unwrap());
        let missing = crate::netdev::DeviceName::new("flb-none0").unwrap();
        cfg.vrf = Some(missing);
        match connect(&cfg).await {
            Err(ConnectError::Device(crate::netdev::BindError::Missing(d))) => {
                assert_eq!(d, missing)
            }
            other => panic!("expected the missing VRF, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn single_hop_ebgp_connects_with_ttl_1_and_multihop_with_255() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        for (multihop, ttl) in [(false, 1), (true, 255)] {
            let mut cfg = PeerConfig::new("t", 64512, 64513, "127.0.0.1".parse().unwrap());
            cfg.peer_port = port;
            cfg.ebgp_multihop = multihop;
            let stream = connect(&cfg).await.unwrap();
            assert_eq!(socket2::SockRef::from(&stream).ttl_v4().unwrap(), ttl);
        }
    }
}
