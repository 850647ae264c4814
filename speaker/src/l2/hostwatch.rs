//! Notices when the host's interfaces or addresses change, so that they are read again then and
//! only then: a netlink socket subscribed to the kernel's link and address notifications
//! (`RTMGRP_LINK`, `RTMGRP_IPV4_IFADDR`, `RTMGRP_IPV6_IFADDR`), read by one thread.
//!
//! Reading the interfaces asks the kernel for every address of every interface: on a node whose
//! kube-proxy puts each Service address on an interface (IPVS's `kube-ipvs0`, the lab's `lb0`),
//! 10,000 Services make that dump the speaker's largest idle cost when it is repeated every few
//! seconds (measured: 41 % of the idle speaker's cycles in `in_dev_dump_addr`). A notification
//! costs nothing while nothing changes, and tells of a change at once instead of up to a
//! refresh interval later.
//!
//! [`reports_change`] (which messages count) is pure; [`HostWatch`] is the I/O. When the socket's
//! buffer overflows (`ENOBUFS`: notifications were lost), that counts as a change: the caller
//! reads everything again. The caller still reads the host every [`SAFETY_INTERVAL`], in case
//! notifications go missing some other way.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use tokio::sync::watch;

/// How often the host is read even without a notification.
pub const SAFETY_INTERVAL: Duration = Duration::from_secs(60);

/// The shortest time between two reads while notifications keep coming (kube-proxy adding an
/// address per new Service, in a burst): a lone change is read at once, a storm of them at most
/// this often.
pub const MIN_SPACING: Duration = Duration::from_millis(500);

/// `RTM_NEWLINK`, `RTM_DELLINK`, `RTM_NEWADDR`, `RTM_DELADDR` (`linux/rtnetlink.h`).
const CHANGE_TYPES: [u16; 4] = [16, 17, 20, 21];
/// `NLMSG_ERROR` and `NLMSG_OVERRUN`: the kernel says messages were lost or refused.
const TROUBLE_TYPES: [u16; 2] = [2, 4];
/// Size of `struct nlmsghdr`.
const HEADER_LEN: usize = 16;

/// Whether a netlink datagram from the route family reports a change of a link or an address
/// (or trouble that may have hidden one). A datagram holds one or more messages, each a
/// 16-byte header whose first field is the message's length (aligned to 4 bytes); a truncated
/// or malformed datagram counts as a change, since what it said cannot be known.
pub fn reports_change(datagram: &[u8]) -> bool {
    let mut rest = datagram;
    while rest.len() >= HEADER_LEN {
        let len = u32::from_ne_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        let kind = u16::from_ne_bytes([rest[4], rest[5]]);
        if len < HEADER_LEN || len > rest.len() {
            return true;
        }
        if CHANGE_TYPES.contains(&kind) || TROUBLE_TYPES.contains(&kind) {
            return true;
        }
        let aligned = (len + 3) & !3;
        rest = rest.get(aligned..).unwrap_or_default();
    }
    !rest.is_empty()
}

/// The kernel's link and address notifications, as a count of changes.
pub struct HostWatch {
    changes: watch::Receiver<u64>,
}

impl HostWatch {
    /// Opens the socket and starts its reader, in the calling thread's network namespace.
    pub fn start() -> io::Result<HostWatch> {
        let fd = open()?;
        let (tx, rx) = watch::channel(0u64);
        std::thread::Builder::new()
            .name("host-watch".into())
            .spawn(move || read_loop(&fd, &tx))?;
        Ok(HostWatch { changes: rx })
    }

    /// A receiver whose value grows with each change seen (and each overflow).
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.clone()
    }
}

/// The netlink socket, bound to the link and address groups.
#[allow(unsafe_code)] // socket(2) and bind(2) of an AF_NETLINK socket: no safe wrapper in std.
fn open() -> io::Result<OwnedFd> {
    // SAFETY: plain system calls with constant arguments; the result is checked.
    let raw = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
    };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a descriptor just returned by socket(2), owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: sockaddr_nl is plain integers, for which all zeroes is valid.
    let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    addr.nl_groups =
        (libc::RTMGRP_LINK | libc::RTMGRP_IPV4_IFADDR | libc::RTMGRP_IPV6_IFADDR) as u32;
    // SAFETY: the pointer and length describe `addr`, a live sockaddr_nl on this stack.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            std::ptr::addr_of!(addr).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// Reads notifications until nobody listens any more.
#[allow(unsafe_code)] // recv(2) into a buffer of ours: no safe wrapper in std for this socket.
fn read_loop(fd: &OwnedFd, tx: &watch::Sender<u64>) {
    let mut buf = vec![0u8; 64 * 1024];
    let bump = || tx.send_modify(|n| *n += 1);
    while !tx.is_closed() {
        // SAFETY: the pointer and length describe `buf`, which outlives the call.
        let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                // Notifications were dropped: whatever they said, read everything again.
                Some(libc::ENOBUFS) => bump(),
                _ => {
                    tracing::warn!(error = %e, "the host's interface notifications failed; interfaces are read every minute from now on");
                    return;
                }
            }
            continue;
        }
        if reports_change(&buf[..n as usize]) {
            bump();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(kind: u16, payload: usize) -> Vec<u8> {
        let len = (HEADER_LEN + payload) as u32;
        let mut m = Vec::new();
        m.extend_from_slice(&len.to_ne_bytes());
        m.extend_from_slice(&kind.to_ne_bytes());
        m.extend_from_slice(&[0; 10]);
        m.extend(std::iter::repeat_n(0u8, payload));
        while m.len() % 4 != 0 {
            m.push(0);
        }
        m
    }

    #[test]
    fn a_new_or_deleted_link_or_address_is_a_change() {
        for kind in [16, 17, 20, 21] {
            assert!(reports_change(&message(kind, 20)), "{kind}");
        }
    }

    #[test]
    fn other_route_messages_are_not_a_change() {
        // RTM_NEWROUTE, RTM_NEWNEIGH, NLMSG_DONE.
        let mut d = message(24, 28);
        d.extend(message(28, 13));
        d.extend(message(3, 0));
        assert!(!reports_change(&d));
        assert!(!reports_change(&[]));
    }

    #[test]
    fn a_change_after_other_messages_in_one_datagram_is_seen() {
        let mut d = message(24, 5);
        d.extend(message(20, 40));
        assert!(reports_change(&d));
    }

    #[test]
    fn lost_or_refused_messages_and_garbage_count_as_a_change() {
        assert!(reports_change(&message(4, 0)), "overrun");
        assert!(reports_change(&message(2, 20)), "error");
        let mut short = message(24, 8);
        short[0] = 200; // longer than the datagram
        assert!(reports_change(&short));
        assert!(reports_change(&[1, 2, 3]));
        let mut tiny = message(24, 0);
        tiny[0] = 4; // shorter than a header
        assert!(reports_change(&tiny));
    }
}
