//! The blocking wait of the speaker's own I/O threads (gossip, BFD): one poll(2) on their
//! sockets and an eventfd, with the time to the next timer as the timeout.
//!
//! Why not tokio on those threads: an idle gossip member wakes about 60 times a second for
//! probes, acks and their deadlines, and on a tokio runtime each of those wake-ups cost five or
//! six system calls (`strace -c -p` on the gossip thread of a lab speaker): `epoll_wait` again
//! for the socket's write readiness after every `sendto`, an `eventfd` write and another
//! `epoll_wait` each time a new timer was earlier than the one the driver slept for, and a
//! `recvfrom` that returns `EAGAIN` after every datagram. A BFD session on tokio also woke
//! twice for each packet it sent: tokio's timer wheel keeps a deadline more than 64 ms away in
//! 64 ms slots and wakes at the slot to move it to the 1 ms wheel. Here a datagram costs a
//! `poll` and a `recvfrom` (and the `sendto` of its answer), a timer a `poll`.
//!
//! Level-triggered: a socket is read once per wake-up, and the next `poll` returns at once
//! while more datagrams wait.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// Wakes a waiting I/O thread from other threads: an eventfd (a counter the kernel keeps).
pub(crate) struct Nudge(File);

impl Nudge {
    /// A new eventfd, non-blocking.
    #[allow(unsafe_code)] // eventfd(2): no wrapper in std.
    pub(crate) fn new() -> io::Result<Nudge> {
        // SAFETY: a plain system call with constant arguments; the result is checked.
        let raw = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` was just returned by eventfd(2) and belongs to nothing else.
        Ok(Nudge(File::from(unsafe { OwnedFd::from_raw_fd(raw) })))
    }

    /// Wakes the thread waiting in [`wait`] or [`poll`] (or makes its next wait return at once).
    pub(crate) fn nudge(&self) {
        // Adding to the counter cannot fail short of an overflow of 2^64 - 1 nudges.
        let _ = (&self.0).write(&1u64.to_ne_bytes());
    }

    /// Takes the nudges seen so far (the counter back to zero).
    pub(crate) fn clear(&self) {
        let mut count = [0u8; 8];
        let _ = (&self.0).read(&mut count);
    }
}

/// What ended a [`wait`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Ready {
    /// The socket has a datagram (or an error) to read.
    pub datagram: bool,
    /// Another thread called [`Nudge::nudge`].
    pub nudged: bool,
}

/// Waits until `socket` is readable, `nudge` is nudged, or `timeout` (rounded up to whole
/// milliseconds; `None`: no timeout) has passed; a signal ends it early with nothing ready.
/// Takes the nudges it reports.
pub(crate) fn wait(
    socket: &impl AsFd,
    nudge: &Nudge,
    timeout: Option<Duration>,
) -> io::Result<Ready> {
    let mut fds = [
        readable(socket.as_fd().as_raw_fd()),
        readable(nudge.0.as_raw_fd()),
    ];
    poll(&mut fds, timeout)?;
    let ready = Ready {
        datagram: fds[0].revents != 0,
        nudged: fds[1].revents != 0,
    };
    if ready.nudged {
        nudge.clear();
    }
    Ok(ready)
}

/// A `pollfd` waiting for `fd` to be readable (a negative `fd` is skipped by poll(2)).
pub(crate) fn readable(fd: RawFd) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}

impl Nudge {
    /// A `pollfd` for [`poll`] that is ready once the nudge was nudged; after it was, call
    /// [`Nudge::clear`].
    pub(crate) fn pollfd(&self) -> libc::pollfd {
        readable(self.0.as_raw_fd())
    }
}

/// poll(2) on `fds` for at most `timeout` (rounded up to whole milliseconds; `None`: no
/// timeout); each entry's `revents` says what is ready. A signal ends it early with nothing
/// ready.
#[allow(unsafe_code)] // poll(2): no wrapper in std.
pub(crate) fn poll(fds: &mut [libc::pollfd], timeout: Option<Duration>) -> io::Result<()> {
    for fd in fds.iter_mut() {
        fd.revents = 0;
    }
    let ms = timeout.map_or(-1, |t| {
        let ms = t.as_nanos().div_ceil(1_000_000);
        i32::try_from(ms).unwrap_or(i32::MAX)
    });
    // SAFETY: the pointer and count describe `fds`, which outlives the call.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    if n < 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
        for fd in fds.iter_mut() {
            fd.revents = 0;
        }
    }
    Ok(())
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
