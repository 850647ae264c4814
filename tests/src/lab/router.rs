//! The lab's BGP router: BIRD 2 or FRR (zebra + bgpd) in the router namespace, peered with every
//! node (eBGP, router AS 64513, nodes AS 64512), installing what it learns in its kernel so the
//! client behind it is routed to the nodes. Shells out to the daemons and their CLIs.

use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::netns::topology::{NODE_NAMES, RouterAddrs, node_v4};
use crate::netns::{Namespace, Process};

use super::LabError;

/// The router's AS.
pub const ROUTER_ASN: u32 = 64513;
/// The nodes' AS.
pub const NODE_ASN: u32 = 64512;

/// Which routing daemon plays the router.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouterKind {
    /// BIRD 2 (`bird2`).
    Bird,
    /// FRR (`frr`): zebra and bgpd.
    Frr,
}

impl RouterKind {
    /// The programs it needs, with their Debian package.
    pub fn tools(self) -> &'static [(&'static str, &'static str)] {
        match self {
            RouterKind::Bird => &[("bird", "bird2"), ("birdc", "bird2")],
            RouterKind::Frr => &[
                ("/usr/lib/frr/zebra", "frr"),
                ("/usr/lib/frr/bgpd", "frr"),
                ("/usr/lib/frr/bfdd", "frr"),
                ("vtysh", "frr"),
            ],
        }
    }
}

impl FromStr for RouterKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "bird" => Ok(RouterKind::Bird),
            "frr" => Ok(RouterKind::Frr),
            other => Err(format!("`{other}` is not bird or frr")),
        }
    }
}

impl fmt::Display for RouterKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RouterKind::Bird => "bird",
            RouterKind::Frr => "frr",
        })
    }
}

/// One route the router holds: a prefix and the next hops it uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LearnedRoute {
    /// The prefix, e.g. `10.99.2.0/32`.
    pub prefix: String,
    /// Next hops (node addresses).
    pub next_hops: Vec<IpAddr>,
}

/// The running router daemons; killed when dropped (the namespace goes with the topology).
#[derive(Debug)]
pub struct Router {
    kind: RouterKind,
    ns: String,
    dir: PathBuf,
    _daemons: Vec<Process>,
}

impl Router {
    /// Writes the configuration into `dir` and starts the daemons in `ns`.
    pub fn start(kind: RouterKind, ns: &Namespace, dir: &Path) -> Result<Self, LabError> {
        let io = |context: &str, source| LabError::Io {
            context: context.into(),
            source,
        };
        let mut daemons = Vec::new();
        match kind {
            RouterKind::Bird => {
                let conf = dir.join("bird.conf");
                std::fs::write(&conf, bird_config()).map_err(|e| io("writing bird.conf", e))?;
                let ctl = dir.join("bird.ctl");
                daemons.push(ns.spawn(
                    &[
                        "bird".as_ref(),
                        "-f".as_ref(),
                        "-c".as_ref(),
                        conf.as_os_str(),
                        "-s".as_ref(),
                        ctl.as_os_str(),
                        "-P".as_ref(),
                        dir.join("bird.pid").as_os_str(),
                    ],
                    &dir.join("bird.log"),
                )?);
            }
            RouterKind::Frr => {
                // zebra drops root for the `frr` user (and insists on its vty group), so its
                // files live in a directory that user owns; bgpd runs as root (`-S`).
                let dir = &dir.join("frr");
                std::fs::create_dir_all(dir).map_err(|e| io("creating the frr directory", e))?;
                let zconf = dir.join("zebra.conf");
                std::fs::write(&zconf, "hostname lab-router\n")
                    .map_err(|e| io("writing zebra.conf", e))?;
                let bconf = dir.join("bgpd.conf");
                std::fs::write(&bconf, frr_config()).map_err(|e| io("writing bgpd.conf", e))?;
                let fconf = dir.join("bfdd.conf");
                std::fs::write(&fconf, FRR_BFD_CONFIG).map_err(|e| io("writing bfdd.conf", e))?;
                crate::netns::must(&["chown", "-R", "frr:frr", &dir.display().to_string()])?;
                let zsock = dir.join("zserv.api");
                let common = |conf: &Path, pid: &str| -> Vec<std::ffi::OsString> {
                    vec![
                        "-f".into(),
                        conf.into(),
                        "-i".into(),
                        dir.join(pid).into(),
                        "-z".into(),
                        zsock.clone().into(),
                        "--vty_socket".into(),
                        dir.into(),
                        "-P".into(),
                        "0".into(),
                    ]
                };
                let mut zebra: Vec<std::ffi::OsString> = vec!["/usr/lib/frr/zebra".into()];
                zebra.extend(common(&zconf, "zebra.pid"));
                daemons.push(ns.spawn(&zebra, &dir.join("zebra.log"))?);
                wait_for_file(&zsock, 5000);
                // bfdd serves bgpd's `neighbor ... bfd` through zebra.
                let mut bfdd: Vec<std::ffi::OsString> = vec!["/usr/lib/frr/bfdd".into()];
                bfdd.extend(common(&fconf, "bfdd.pid"));
                bfdd.extend(["--bfdctl".into(), dir.join("bfdd.sock").into()]);
                daemons.push(ns.spawn(&bfdd, &dir.join("bfdd.log"))?);
                let mut bgpd: Vec<std::ffi::OsString> = vec!["/usr/lib/frr/bgpd".into()];
                bgpd.extend(common(&bconf, "bgpd.pid"));
                bgpd.extend([
                    "-S".into(),
                    "-l".into(),
                    RouterAddrs::SEGMENT_V4.to_string().into(),
                    "-l".into(),
                    RouterAddrs::SEGMENT_V6.to_string().into(),
                ]);
                daemons.push(ns.spawn(&bgpd, &dir.join("bgpd.log"))?);
            }
        }
        Ok(Self {
            kind,
            ns: ns.name().into(),
            dir: match kind {
                RouterKind::Bird => dir.into(),
                RouterKind::Frr => dir.join("frr"),
            },
            _daemons: daemons,
        })
    }

    /// Which daemon this is.
    pub fn kind(&self) -> RouterKind {
        self.kind
    }

    /// The command that prints the router's routes, as a user would type it.
    pub fn show_routes_command(&self) -> String {
        match self.kind {
            RouterKind::Bird => format!(
                "ip netns exec {} birdc -s {} show route",
                self.ns,
                self.dir.join("bird.ctl").display()
            ),
            RouterKind::Frr => format!(
                "ip netns exec {} vtysh --vty_socket {} -c 'show ip bgp' -c 'show bgp ipv6'",
                self.ns,
                self.dir.display()
            ),
        }
    }

    /// The routing daemon's own listing of the BGP routes it learned.
    pub fn show_routes(&self) -> String {
        let out = match self.kind {
            RouterKind::Bird => self.birdc(&["show", "route"]),
            RouterKind::Frr => self.vtysh(&["show ip bgp", "show bgp ipv6 unicast"]),
        };
        out.lines()
            .filter(|l| !l.starts_with("BIRD ") && !l.trim().is_empty())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The routes the router's kernel uses for addresses outside its connected subnets, that
    /// is, the BGP routes it installed (with ECMP next hops merged).
    pub fn kernel_routes(&self) -> Vec<LearnedRoute> {
        let mut routes = Vec::new();
        for family in ["-4", "-6"] {
            let Ok(out) = crate::netns::must(&[
                "ip",
                "-n",
                &self.ns,
                "-o",
                family,
                "route",
                "show",
                "proto",
                self.proto(),
            ]) else {
                continue;
            };
            routes.extend(parse_kernel_routes(&out));
        }
        routes
    }

    fn proto(&self) -> &'static str {
        match self.kind {
            RouterKind::Bird => "bird",
            RouterKind::Frr => "bgp",
        }
    }

    /// How many nodes have a BGP session in state Established with the router.
    pub fn established(&self) -> usize {
        match self.kind {
            RouterKind::Bird => self
                .birdc(&["show", "protocols"])
                .lines()
                .filter(|l| l.starts_with("node_") && l.contains("Established"))
                .count(),
            RouterKind::Frr => {
                let out = self.vtysh(&["show bgp summary json"]);
                NODE_NAMES
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| {
                        let needle = format!("\"{}\":{{", node_v4(*i));
                        out.find(&needle).is_some_and(|at| {
                            out[at..]
                                .split('}')
                                .next()
                                .is_some_and(|b| b.contains("\"state\":\"Established\""))
                        })
                    })
                    .count()
            }
        }
    }

    /// Whether the router's BFD session with node `i` (its IPv4 address) is up: only then does
    /// a node that stops answering BFD lose its BGP session within the BFD detection time
    /// rather than the hold time.
    pub fn bfd_up(&self, i: usize) -> bool {
        let node = node_v4(i).to_string();
        match self.kind {
            RouterKind::Bird => self.birdc(&["show", "bfd", "sessions"]).lines().any(|l| {
                let mut cols = l.split_whitespace();
                cols.next() == Some(node.as_str()) && cols.any(|c| c == "Up")
            }),
            RouterKind::Frr => {
                let out = self.vtysh(&["show bfd peers json"]);
                let needle = format!("\"peer\":\"{node}\"");
                out.find(&needle).is_some_and(|at| {
                    out[at..]
                        .split('}')
                        .next()
                        .is_some_and(|b| b.contains("\"status\":\"up\""))
                })
            }
        }
    }

    fn birdc(&self, args: &[&str]) -> String {
        let ctl = self.dir.join("bird.ctl");
        let mut full: Vec<&std::ffi::OsStr> = vec![
            "ip".as_ref(),
            "netns".as_ref(),
            "exec".as_ref(),
            self.ns.as_ref(),
            "birdc".as_ref(),
            "-s".as_ref(),
            ctl.as_os_str(),
        ];
        full.extend(args.iter().map(std::ffi::OsStr::new));
        crate::netns::run(&full)
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }

    fn vtysh(&self, commands: &[&str]) -> String {
        let dir = self.dir.display().to_string();
        let mut full = vec![
            "ip",
            "netns",
            "exec",
            &self.ns,
            "vtysh",
            "--vty_socket",
            &dir,
        ];
        for c in commands {
            full.push("-c");
            full.push(c);
        }
        crate::netns::run(&full)
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }
}

fn wait_for_file(path: &Path, ms: u64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(ms);
    while !path.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Parses `ip -o route show` lines: `PREFIX via NH dev eth0 ...` or multipath
/// `PREFIX proto bird ... nexthop via NH dev eth0 weight 1 nexthop via ...`.
pub fn parse_kernel_routes(text: &str) -> Vec<LearnedRoute> {
    text.lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace().peekable();
            let prefix = words.next()?.to_string();
            let mut next_hops = Vec::new();
            while let Some(w) = words.next() {
                if w == "via" {
                    let mut nh = words.next()?;
                    if nh == "inet6" || nh == "inet" {
                        nh = words.next()?;
                    }
                    if let Ok(ip) = nh.parse() {
                        next_hops.push(ip);
                    }
                }
            }
            let prefix = if prefix.contains('/') {
                prefix
            } else if prefix.contains(':') {
                format!("{prefix}/128")
            } else {
                format!("{prefix}/32")
            };
            next_hops.sort();
            Some(LearnedRoute { prefix, next_hops })
        })
        .filter(|r| r.prefix != "default")
        .collect()
}

fn bird_config() -> String {
    let mut c = format!(
        "# FerroLB lab router: learns the Service routes from every node, installs them.\n\
         # After a session error BIRD refuses the peer for `error wait time` (60 s by default);\n\
         # a node plugged back in should be peered again at once.\n\
         router id {rid};\n\
         log stderr all;\n\
         timeformat log iso long ms;\n\
         protocol device {{ }}\n\
         protocol kernel k4 {{ ipv4 {{ export all; }}; merge paths on; }}\n\
         protocol kernel k6 {{ ipv6 {{ export all; }}; merge paths on; }}\n\
         # BFD as the lab's BFDProfile `lab-bfd` asks: 300 ms x 3.\n\
         protocol bfd {{ interface \"*\" {{ interval 300 ms; multiplier 3; }}; }}\n\
         # RFC 8326: a route a leaving node marks GRACEFUL_SHUTDOWN is the least preferred.\n\
         filter node_in {{ if (65535, 0) ~ bgp_community then bgp_local_pref = 0; accept; }}\n\
         template bgp node {{\n  local {rid} as {ROUTER_ASN};\n  passive on;\n  \
         error wait time 1, 5;\n  bfd on;\n  debug {{ states, events }};\n  \
         ipv4 {{ import filter node_in; export none; add paths rx; }};\n  \
         ipv6 {{ import filter node_in; export none; add paths rx; }};\n}}\n",
        rid = RouterAddrs::SEGMENT_V4,
    );
    for (i, name) in NODE_NAMES.iter().enumerate() {
        c.push_str(&format!(
            "protocol bgp {} from node {{ neighbor {} as {NODE_ASN}; }}\n",
            name.replace('-', "_"),
            node_v4(i)
        ));
    }
    c
}

/// bfdd's profile for the nodes: 300 ms x 3, as the lab's BFDProfile `lab-bfd` asks.
const FRR_BFD_CONFIG: &str = "hostname lab-router\nbfd\n profile lab\n  receive-interval 300\n  \
                              transmit-interval 300\n  detect-multiplier 3\n exit\nexit\n";

fn frr_config() -> String {
    let mut c = format!(
        "! FerroLB lab router: learns the Service routes from every node, installs them.\n\
         frr defaults traditional\nhostname lab-router\n\
         router bgp {ROUTER_ASN}\n bgp router-id {rid}\n no bgp ebgp-requires-policy\n \
         no bgp default ipv4-unicast\n bgp bestpath as-path multipath-relax\n",
        rid = RouterAddrs::SEGMENT_V4,
    );
    for i in 0..NODE_NAMES.len() {
        let n = node_v4(i);
        c.push_str(&format!(
            " neighbor {n} remote-as {NODE_ASN}\n neighbor {n} passive\n \
             neighbor {n} bfd profile lab\n"
        ));
    }
    for afi in ["ipv4", "ipv6"] {
        c.push_str(&format!(
            " address-family {afi} unicast\n  maximum-paths 8\n"
        ));
        for i in 0..NODE_NAMES.len() {
            c.push_str(&format!("  neighbor {} activate\n", node_v4(i)));
        }
        c.push_str(" exit-address-family\n");
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_routes_parse_single_and_multipath_next_hops() {
        let text = "10.99.2.0 via 10.99.0.12 dev eth0 proto bird metric 32\n\
                    10.99.2.1 proto bird metric 32 nexthop via 10.99.0.11 dev eth0 weight 1 nexthop via 10.99.0.13 dev eth0 weight 1\n\
                    fd00:99:2:: via fd00:99::13 dev eth0 proto bird metric 32 pref medium\n";
        let routes = parse_kernel_routes(text);
        assert_eq!(routes.len(), 3);
        assert_eq!(routes[0].prefix, "10.99.2.0/32");
        assert_eq!(routes[1].next_hops.len(), 2);
        assert_eq!(routes[2].prefix, "fd00:99:2::/128");
        assert_eq!(
            routes[2].next_hops,
            vec!["fd00:99::13".parse::<IpAddr>().unwrap()]
        );
    }

    #[test]
    fn bird_config_peers_with_every_node() {
        let c = bird_config();
        for i in 0..3 {
            assert!(c.contains(&format!("neighbor {} as 64512", node_v4(i))));
        }
    }
}
