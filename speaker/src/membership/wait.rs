//! The gossip thread's only blocking call: one poll(2) on its UDP socket and an eventfd, with
//! the time to the next timer as the timeout.
//!
//! Why not tokio on that thread: an idle member's thread wakes about 60 times a second for
//! probes, acks and their deadlines, and on a tokio runtime each of those wake-ups cost five or
//! six system calls (`strace -c -p` on the gossip thread of a lab speaker): `epoll_wait` again
//! for the socket's write readiness after every `sendto`, an `eventfd` write and another
//! `epoll_wait` each time a new timer was earlier than the one the driver slept for, and a
//! `recvfrom` that returns `EAGAIN` after every datagram. Here a datagram costs a `poll` and a
//! `recvfrom` (and the `sendto` of its answer), a timer a `poll`.
//!
//! Level-triggered: the socket is read once per wake-up, and the next `poll` returns at once
//! while more datagrams wait.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// Wakes the gossip thread from other threads: an eventfd (a counter the kernel keeps).
pub(super) struct Nudge(File);

impl Nudge {
    /// A new eventfd, non-blocking.
    #[allow(unsafe_code)] // eventfd(2): no wrapper in std.
    pub(super) fn new() -> io::Result<Nudge> {
        // SAFETY: a plain system call with constant arguments; the result is checked.
        let raw = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` was just returned by eventfd(2) and belongs to nothing else.
        Ok(Nudge(File::from(unsafe { OwnedFd::from_raw_fd(raw) })))
    }

    /// Wakes the thread waiting in [`wait`] (or makes its next wait return at once).
    pub(super) fn nudge(&self) {
        // Adding to the counter cannot fail short of an overflow of 2^64 - 1 nudges.
        let _ = (&self.0).write(&1u64.to_ne_bytes());
    }

    /// Takes the nudges seen so far (the counter back to zero).
    fn clear(&self) {
        let mut count = [0u8; 8];
        let _ = (&self.0).read(&mut count);
    }
}

/// What ended a [`wait`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Ready {
    /// The socket has a datagram (or an error) to read.
    pub datagram: bool,
    /// Another thread called [`Nudge::nudge`].
    pub nudged: bool,
}

/// Waits until `socket` is readable, `nudge` is nudged, or `timeout` (rounded up to whole
/// milliseconds; `None`: no timeout) has passed; a signal ends it early with nothing ready.
/// Takes the nudges it reports.
#[allow(unsafe_code)] // poll(2): no wrapper in std.
pub(super) fn wait(
    socket: &impl AsFd,
    nudge: &Nudge,
    timeout: Option<Duration>,
) -> io::Result<Ready> {
    let mut fds = [
        libc::pollfd {
            fd: socket.as_fd().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: nudge.0.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    let ms = timeout.map_or(-1, |t| {
        let ms = t.as_nanos().div_ceil(1_000_000);
        i32::try_from(ms).unwrap_or(i32::MAX)
    });
    // SAFETY: the pointer and count describe `fds`, which outlives the call.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok(Ready::default())
        } else {
            Err(e)
        };
    }
    let ready = Ready {
        datagram: fds[0].revents != 0,
        nudged: fds[1].revents != 0,
    };
    if ready.nudged {
        nudge.clear();
    }
    Ok(ready)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::time::Instant;

    #[test]
    fn a_wait_ends_with_a_datagram_a_nudge_from_another_thread_or_its_timeout() {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        socket.set_nonblocking(true).unwrap();
        let nudge = std::sync::Arc::new(Nudge::new().unwrap());

        let started = Instant::now();
        let ready = wait(&socket, &nudge, Some(Duration::from_millis(30))).unwrap();
        assert_eq!(ready, Ready::default());
        assert!(started.elapsed() >= Duration::from_millis(30));

        let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
        sender.send_to(b"x", socket.local_addr().unwrap()).unwrap();
        let ready = wait(&socket, &nudge, None).unwrap();
        assert!(ready.datagram && !ready.nudged);
        // Level-triggered: unread, it is still there.
        assert!(
            wait(&socket, &nudge, Some(Duration::ZERO))
                .unwrap()
                .datagram
        );
        let mut buf = [0u8; 8];
        assert_eq!(socket.recv_from(&mut buf).unwrap().0, 1);

        let other = std::sync::Arc::clone(&nudge);
        let thread = std::thread::spawn(move || other.nudge());
        let ready = wait(&socket, &nudge, Some(Duration::from_secs(10))).unwrap();
        assert!(ready.nudged && !ready.datagram);
        thread.join().unwrap();
        // The nudge was taken: the next wait times out.
        let ready = wait(&socket, &nudge, Some(Duration::from_millis(1))).unwrap();
        assert_eq!(ready, Ready::default());
    }
}
