//! The kube-proxy stand-in's "pod": an HTTP server that answers every request with its node's
//! name, and the client side that asks it from a namespace. Blocking std::net; one thread per
//! connection.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use crate::netns::in_namespace;
use crate::netns::topology::{NODE_NAMES, node_v4, node_v6};

/// The port every lab Service uses.
pub const SERVICE_PORT: u16 = 80;

/// Serves forever on `[::]:port` (IPv4 too, as a dual-stack socket), answering every HTTP
/// request with `node` and a newline as the body (so `curl` works from a client namespace), and
/// the address the request came from in the `X-Client-Address` header (what a backend behind
/// kube-proxy sees: the client's own address with `externalTrafficPolicy: Local`, a node's with
/// `Cluster`). This is what `ferrolb-lab serve` runs inside a node namespace (the stand-in) or
/// a Pod namespace (with the real kube-proxy).
pub fn serve(node: &str, port: u16) -> std::io::Result<()> {
    let listener = TcpListener::bind(("::", port))?;
    let body = format!("{node}\n");
    for conn in listener.incoming() {
        let Ok(mut conn) = conn else { continue };
        let peer = conn
            .peer_addr()
            .map(|a| a.ip().to_canonical().to_string())
            .unwrap_or_default();
        let answer = format!(
            "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
             X-Client-Address: {peer}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        std::thread::spawn(move || {
            // Read the request head first: closing with unread bytes would reset the connection.
            let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
                match conn.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let _ = conn.write_all(answer.as_bytes());
        });
    }
    Ok(())
}

/// Why a request got no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoAnswer {
    /// The connection was not established in time (nobody answered ARP/NDP, or no route).
    #[error("connect timed out")]
    Timeout,
    /// The connection was refused (or failed otherwise) before it was established.
    #[error("connection refused: {0}")]
    Refused(String),
    /// The connection was established, then reset (or failed otherwise) before the answer.
    #[error("connection reset: {0}")]
    Reset(String),
    /// The client thread could not enter its namespace.
    #[error("{0}")]
    Namespace(String),
}

/// One HTTP answer: its status code, headers (names in lower case) and body (trimmed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The status code.
    pub status: u16,
    /// The headers, names in lower case, in order.
    pub headers: Vec<(String, String)>,
    /// The body, without surrounding white space.
    pub body: String,
}

impl Answer {
    /// The value of header `name` (lower case), if present.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

fn get_here(addr: SocketAddr, path: &str, timeout: Duration) -> Result<Answer, NoAnswer> {
    let mut stream = TcpStream::connect_timeout(&addr, timeout).map_err(|e| match e.kind() {
        std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => NoAnswer::Timeout,
        std::io::ErrorKind::ConnectionReset => NoAnswer::Reset(e.to_string()),
        _ => NoAnswer::Refused(e.to_string()),
    })?;
    let _ = stream.set_read_timeout(Some(timeout));
    let reset = |e: std::io::Error| NoAnswer::Reset(e.to_string());
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .map_err(reset)?;
    let mut text = String::new();
    stream.read_to_string(&mut text).map_err(reset)?;
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or(("", text.as_str()));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Ok(Answer {
        status,
        headers,
        body: body.trim().to_string(),
    })
}

fn ask_here(addr: SocketAddr, timeout: Duration) -> Result<String, NoAnswer> {
    get_here(addr, "/", timeout).map(|a| entered_through(&a))
}

/// The node a request entered the cluster through, from its answer: the node the layer-2
/// owner or a BGP route sent it to. With the stand-in (which answers on the entry node) and
/// with `externalTrafficPolicy: Local` (kube-proxy keeps the client's address and serves it
/// from a Pod on the entry node) that is the answering node, the body. With the real
/// kube-proxy and `Cluster`, any Pod may answer, and the node it masqueraded the request from
/// is the entry node ([`masqueraded_by`]).
pub fn entered_through(a: &Answer) -> String {
    masqueraded_by(a).unwrap_or_else(|| a.body.clone())
}

/// The node whose kube-proxy masqueraded the request, from the source address the backend saw:
/// that node's address on the segment (toward a Pod on another node), or its side of the Pod's
/// link (toward a Pod of its own, which then answered: the Pod namespaces' shared gateway, or
/// the node's CNI bridge in its Pod subnet with real nodes). `None` when the backend saw
/// another address (the client's own, kept).
pub fn masqueraded_by(a: &Answer) -> Option<String> {
    let from: IpAddr = a.header("x-client-address")?.parse().ok()?;
    if from == IpAddr::V4(super::kubeproxy::POD_GATEWAY_V4)
        || matches!(from, IpAddr::V6(v6) if v6.is_unicast_link_local())
    {
        return Some(a.body.clone());
    }
    let in_pod_subnet = |i: usize| {
        [super::nodes::POD_CIDRS_V4[i], super::nodes::POD_CIDRS_V6[i]]
            .iter()
            .filter_map(|c| c.parse::<ipnet::IpNet>().ok())
            .any(|net| net.contains(&from))
    };
    (0..NODE_NAMES.len())
        .find(|i| {
            from == IpAddr::V4(node_v4(*i)) || from == IpAddr::V6(node_v6(*i)) || in_pod_subnet(*i)
        })
        .map(|i| NODE_NAMES[i].to_string())
}

/// Sends `GET path` from namespace `ns` to `addr` and returns the whole answer (status,
/// headers, body): kube-proxy's health checks, or which client address a backend saw.
pub fn get(ns: &str, addr: SocketAddr, path: &str, timeout: Duration) -> Result<Answer, NoAnswer> {
    let path = path.to_string();
    in_namespace(ns, move || get_here(addr, &path, timeout))
        .map_err(|e| NoAnswer::Namespace(e.to_string()))?
}

/// Opens a TCP connection from namespace `ns` to `addr` and returns the node the request
/// entered the cluster through ([`entered_through`]: the node that answered, with the
/// stand-in).
pub fn ask(ns: &str, addr: SocketAddr, timeout: Duration) -> Result<String, NoAnswer> {
    in_namespace(ns, move || ask_here(addr, timeout))
        .map_err(|e| NoAnswer::Namespace(e.to_string()))?
}

/// What [`ask_until`] observed.
#[derive(Debug, Clone)]
pub struct Watched {
    /// Time from `start` to the first answer that satisfied the predicate.
    pub elapsed: Duration,
    /// That answer.
    pub answer: String,
    /// Requests made, and how many of them got no answer.
    pub attempts: usize,
    /// Requests that got no answer.
    pub failures: usize,
}

/// Asks `addr` from `ns` every `interval` (each attempt with a connect timeout of `interval`)
/// until an answer satisfies `done`, or `limit` after `start` passes (then `None`). Times are
/// measured from `start`: the caller passes the instant of the fault it measures.
pub fn ask_until(
    ns: &str,
    addr: SocketAddr,
    start: Instant,
    interval: Duration,
    limit: Duration,
    done: impl Fn(&str) -> bool + Send + 'static,
) -> Option<Watched> {
    in_namespace(ns, move || {
        let (mut attempts, mut failures) = (0, 0);
        while start.elapsed() < limit {
            let tried = Instant::now();
            attempts += 1;
            match ask_here(addr, interval) {
                Ok(answer) if done(&answer) => {
                    return Some(Watched {
                        elapsed: start.elapsed(),
                        answer,
                        attempts,
                        failures,
                    });
                }
                Ok(_) => {}
                Err(_) => failures += 1,
            }
            if let Some(rest) = interval.checked_sub(tried.elapsed()) {
                std::thread::sleep(rest.min(Duration::from_millis(10)));
            }
        }
        None
    })
    .ok()
    .flatten()
}

/// What [`ask_every`] saw: each request's start (from the first) and what it got.
#[derive(Debug, Clone, Default)]
pub struct Requests {
    /// `(start, answer or why none)`, in order.
    pub results: Vec<(Duration, Result<String, NoAnswer>)>,
}

impl Requests {
    /// The requests that got no answer.
    pub fn lost(&self) -> Vec<&(Duration, Result<String, NoAnswer>)> {
        self.results.iter().filter(|(_, r)| r.is_err()).collect()
    }
}

/// Asks `addr` from `ns` every `interval` (a new connection each time, given up after
/// `timeout`) until `stop` is set; returns every request's outcome.
pub fn ask_every(
    ns: &str,
    addr: SocketAddr,
    interval: Duration,
    timeout: Duration,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Result<Requests, NoAnswer> {
    in_namespace(ns, move || {
        let first = Instant::now();
        let mut out = Requests::default();
        let mut next = first;
        while !stop.load(std::sync::atomic::Ordering::SeqCst) {
            let started = first.elapsed();
            out.results.push((started, ask_here(addr, timeout)));
            next += interval;
            if let Some(rest) = next.checked_duration_since(Instant::now()) {
                std::thread::sleep(rest);
            }
        }
        out
    })
    .map_err(|e| NoAnswer::Namespace(e.to_string()))
}
