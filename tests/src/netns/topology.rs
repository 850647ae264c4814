//! The lab's network: one layer-2 segment (a bridge in a switch namespace) joining three nodes,
//! a client and a router; a second client behind the router on its own subnet. Shells out to `ip`.
//!
//! ```text
//!                     switch: br0 10.99.0.254 fd00:99::254 (the API server listens here)
//!       ┌──────────────┬───────┴──────┬──────────────┬──────────────┐
//!    node-a .11     node-b .12     node-c .13     client .2     router .1 ── eth1 10.99.1.1
//!    lb0: Service addresses (kube-proxy stand-in; a dummy link, or an unplugged veth)                              │
//!                                                                     remote 10.99.1.2
//! ```
//!
//! IPv6 mirrors IPv4: `fd00:99::X/64` on the segment, `fd00:99:1::X/64` behind the router.
//! Interface names are fixed inside each namespace (`eth0`, `eth1`, `lb0`, `br0`, `p0`…), so the
//! namespace names alone carry the per-run prefix.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::{Namespace, Result};

/// The Kubernetes names of the nodes, in order.
pub const NODE_NAMES: [&str; 3] = ["node-a", "node-b", "node-c"];

/// The API server's address on the segment (the switch namespace's bridge).
pub const API_V4: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 254);
/// The API server's IPv6 address on the segment.
pub const API_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x99, 0, 0, 0, 0, 0, 0x254);
/// The client on the segment.
pub const CLIENT_V4: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 2);
/// The client on the segment, IPv6.
pub const CLIENT_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x99, 0, 0, 0, 0, 0, 2);
/// The client behind the router.
pub const REMOTE_V4: Ipv4Addr = Ipv4Addr::new(10, 99, 1, 2);
/// The client behind the router, IPv6.
pub const REMOTE_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x99, 1, 0, 0, 0, 0, 2);

/// The router's addresses.
#[derive(Debug, Clone, Copy)]
pub struct RouterAddrs;

impl RouterAddrs {
    /// On the segment (the nodes' BGP peer and default gateway).
    pub const SEGMENT_V4: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 1);
    /// On the segment, IPv6.
    pub const SEGMENT_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x99, 0, 0, 0, 0, 0, 1);
    /// Toward the remote client.
    pub const REMOTE_V4: Ipv4Addr = Ipv4Addr::new(10, 99, 1, 1);
    /// Toward the remote client, IPv6.
    pub const REMOTE_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x99, 1, 0, 0, 0, 0, 1);
}

/// Node `i`'s IPv4 address.
pub fn node_v4(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 99, 0, 11 + i as u8)
}

/// Node `i`'s IPv6 address.
pub fn node_v6(i: usize) -> Ipv6Addr {
    Ipv6Addr::new(0xfd00, 0x99, 0, 0, 0, 0, 0, 0x11 + i as u16)
}

/// The namespaces of one lab; dropping it kills every process inside them and deletes them.
#[derive(Debug)]
pub struct Topology {
    /// The prefix of every namespace name.
    pub prefix: String,
    /// The three nodes, in the order of [`NODE_NAMES`].
    pub nodes: Vec<Namespace>,
    /// The client on the segment.
    pub client: Namespace,
    /// The router.
    pub router: Namespace,
    /// The client behind the router.
    pub remote: Namespace,
    // Last: the bridge goes after every host that hangs on it.
    /// The switch (bridge) namespace, where the API server listens.
    pub switch: Namespace,
}

impl Topology {
    /// Builds the whole network with namespace names starting with `prefix`.
    pub fn create(prefix: &str) -> Result<Self> {
        let switch = Namespace::create(&format!("{prefix}-switch"))?;
        let mut nodes = Vec::new();
        for name in NODE_NAMES {
            nodes.push(Namespace::create(&format!("{prefix}-{name}"))?);
        }
        let topo = Self {
            prefix: prefix.into(),
            client: Namespace::create(&format!("{prefix}-client"))?,
            router: Namespace::create(&format!("{prefix}-router"))?,
            remote: Namespace::create(&format!("{prefix}-remote"))?,
            nodes,
            switch,
        };
        topo.build_switch()?;
        let mut port = 0;
        for (i, node) in topo.nodes.iter().enumerate() {
            topo.plug(port, node, node_v4(i).into(), node_v6(i).into())?;
            port += 1;
            topo.prepare_node(node)?;
        }
        topo.plug(port, &topo.client, CLIENT_V4.into(), CLIENT_V6.into())?;
        port += 1;
        topo.plug(
            port,
            &topo.router,
            RouterAddrs::SEGMENT_V4.into(),
            RouterAddrs::SEGMENT_V6.into(),
        )?;
        topo.build_router_side()?;
        for ns in topo.nodes.iter().chain([&topo.client]) {
            default_routes(
                ns,
                RouterAddrs::SEGMENT_V4.into(),
                RouterAddrs::SEGMENT_V6.into(),
            )?;
        }
        Ok(topo)
    }

    fn build_switch(&self) -> Result<()> {
        let sw = &self.switch;
        // Without snooping the bridge floods multicast (NDP solicitations) to every port, as a
        // plain switch does.
        sw.ip(&[
            "link",
            "add",
            "br0",
            "type",
            "bridge",
            "mcast_snooping",
            "0",
        ])?;
        sw.ip(&["link", "set", "br0", "up"])?;
        // With br_netfilter loaded (Docker hosts), bridged frames would go through iptables.
        for family in ["iptables", "ip6tables", "arptables"] {
            let _ = sw.sysctl(&format!("net.bridge.bridge-nf-call-{family}=0"));
        }
        sw.ip(&["addr", "add", &format!("{API_V4}/24"), "dev", "br0"])?;
        sw.ip(&[
            "addr",
            "add",
            &format!("{API_V6}/64"),
            "dev",
            "br0",
            "nodad",
        ])?;
        Ok(())
    }

    /// Connects `ns` to the bridge with a veth (`eth0` inside, `pN` on the bridge).
    fn plug(&self, port: usize, ns: &Namespace, v4: IpAddr, v6: IpAddr) -> Result<()> {
        let p = format!("p{port}");
        self.switch.ip(&[
            "link",
            "add",
            &p,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            ns.name(),
        ])?;
        self.switch
            .ip(&["link", "set", &p, "master", "br0", "up"])?;
        address(ns, "eth0", v4, 24)?;
        address(ns, "eth0", v6, 64)?;
        ns.ip(&["link", "set", "eth0", "up"])?;
        Ok(())
    }

    /// A node answers ARP only for addresses on the interface the request came in on, and
    /// announces with the outgoing interface's address; the Service addresses sit on the dummy
    /// `lb0`, so only the speaker answers ARP/NDP for them (as with kube-proxy's IPVS dummy).
    fn prepare_node(&self, node: &Namespace) -> Result<()> {
        for scope in ["all", "eth0"] {
            node.sysctl(&format!("net.ipv4.conf.{scope}.arp_ignore=1"))?;
            node.sysctl(&format!("net.ipv4.conf.{scope}.arp_announce=2"))?;
        }
        // A `dummy` link where the kernel has the module; otherwise a veth whose peer goes
        // nowhere, which holds addresses just the same.
        if node.ip(&["link", "add", "lb0", "type", "dummy"]).is_err() {
            node.ip(&["link", "add", "lb0", "type", "veth", "peer", "name", "lb0p"])?;
            node.ip(&["link", "set", "lb0p", "up"])?;
        }
        node.ip(&["link", "set", "lb0", "up"])?;
        Ok(())
    }

    fn build_router_side(&self) -> Result<()> {
        let (r, c) = (&self.router, &self.remote);
        r.ip(&[
            "link",
            "add",
            "eth1",
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            c.name(),
        ])?;
        address(r, "eth1", RouterAddrs::REMOTE_V4.into(), 24)?;
        address(r, "eth1", RouterAddrs::REMOTE_V6.into(), 64)?;
        address(c, "eth0", REMOTE_V4.into(), 24)?;
        address(c, "eth0", REMOTE_V6.into(), 64)?;
        r.ip(&["link", "set", "eth1", "up"])?;
        c.ip(&["link", "set", "eth0", "up"])?;
        r.sysctl("net.ipv4.ip_forward=1")?;
        r.sysctl("net.ipv6.conf.all.forwarding=1")?;
        default_routes(
            c,
            RouterAddrs::REMOTE_V4.into(),
            RouterAddrs::REMOTE_V6.into(),
        )
    }

    /// Node `i`'s namespace.
    pub fn node(&self, i: usize) -> &Namespace {
        &self.nodes[i]
    }

    /// The index of the node called `name` (see [`NODE_NAMES`]).
    pub fn node_index(name: &str) -> Option<usize> {
        NODE_NAMES.iter().position(|n| *n == name)
    }

    /// Puts `addrs` on node `i`'s `lb0` (a /32 or /128 each, IPv6 without DAD) and removes the
    /// addresses not listed, so the node accepts traffic for exactly those Service addresses.
    /// One `ip -batch` for the whole difference, so 10,000 addresses cost one process.
    pub fn set_service_addresses(&self, i: usize, addrs: &[IpAddr]) -> Result<()> {
        let node = &self.nodes[i];
        let current: HashSet<IpAddr> = node_addresses(node, "lb0")?.into_iter().collect();
        let wanted: HashSet<IpAddr> = addrs.iter().copied().collect();
        let len = |ip: &IpAddr| if ip.is_ipv4() { 32 } else { 128 };
        let mut batch = String::new();
        for ip in wanted.difference(&current) {
            let nodad = if ip.is_ipv6() { " nodad" } else { "" };
            batch += &format!("addr add {ip}/{} dev lb0{nodad}\n", len(ip));
        }
        for ip in current.difference(&wanted) {
            batch += &format!("addr del {ip}/{} dev lb0\n", len(ip));
        }
        if batch.is_empty() {
            return Ok(());
        }
        node.ip_batch(&batch)
    }

    /// Takes node `i`'s port on the bridge down (`up == false`) or back up: the node drops off
    /// the segment as if its cable were pulled, and keeps its addresses and routes.
    pub fn set_node_link(&self, i: usize, up: bool) -> Result<()> {
        let port = format!("p{i}");
        let state = if up { "up" } else { "down" };
        self.switch.ip(&["link", "set", &port, state]).map(drop)
    }

    /// The MAC of node `i`'s `eth0`.
    pub fn node_mac(&self, i: usize) -> Result<String> {
        self.nodes[i].mac("eth0")
    }

    /// Which node owns `mac` on the segment, if any.
    pub fn node_with_mac(&self, mac: &str) -> Option<usize> {
        (0..self.nodes.len()).find(|i| self.node_mac(*i).is_ok_and(|m| m == mac.to_lowercase()))
    }

    /// The MACs that answered the client's ARP request (IPv4, `arping`) or neighbor
    /// solicitation (IPv6, `ndisc6`) for `ip`, lower case. Empty when nobody answered. Stops at
    /// the second reply: enough to see that more than one node answers, not how many (see
    /// [`Topology::arp_answers_within`]).
    pub fn who_answers(&self, ip: IpAddr) -> Result<Vec<String>> {
        let target = ip.to_string();
        let out = match ip {
            IpAddr::V4(_) => self
                .client
                .exec(&["arping", "-c", "2", "-w", "2", "-I", "eth0", &target])?,
            IpAddr::V6(_) => self.client.exec(&[
                "ndisc6", "-n", "-m", "-r", "2", "-w", "500", &target, "eth0",
            ])?,
        };
        Ok(answering_macs(&out.stdout))
    }

    /// Every MAC that answers the client's ARP requests for the IPv4 address `ip` within
    /// `seconds`, lower case, sorted: how many nodes answer, when several do.
    pub fn arp_answers_within(&self, ip: IpAddr, seconds: u32) -> Result<Vec<String>> {
        let out = self.client.exec(&[
            "arping",
            "-c",
            "100",
            "-w",
            &seconds.to_string(),
            "-I",
            "eth0",
            &ip.to_string(),
        ])?;
        Ok(answering_macs(&out.stdout))
    }
}

/// The MACs in `arping` or `ndisc6` output, lower case, sorted, each once.
fn answering_macs(stdout: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(stdout).to_lowercase();
    let mut macs: Vec<String> = text
        .lines()
        .filter_map(|l| {
            if let Some(rest) = l.strip_prefix("unicast reply from ") {
                let open = rest.find('[')?;
                let close = rest.find(']')?;
                Some(rest[open + 1..close].to_string())
            } else {
                l.trim()
                    .strip_prefix("target link-layer address: ")
                    .map(|m| m.trim().to_string())
            }
        })
        .collect();
    macs.sort();
    macs.dedup();
    macs
}

fn address(ns: &Namespace, dev: &str, ip: IpAddr, len: u8) -> Result<()> {
    let cidr = format!("{ip}/{len}");
    if ip.is_ipv6() {
        ns.ip(&["addr", "add", &cidr, "dev", dev, "nodad"])
            .map(drop)
    } else {
        ns.ip(&["addr", "add", &cidr, "dev", dev]).map(drop)
    }
}

fn default_routes(ns: &Namespace, v4: IpAddr, v6: IpAddr) -> Result<()> {
    ns.ip(&["route", "add", "default", "via", &v4.to_string()])?;
    ns.ip(&["-6", "route", "add", "default", "via", &v6.to_string()])?;
    Ok(())
}

/// The global addresses on `dev` in `ns`.
pub fn node_addresses(ns: &Namespace, dev: &str) -> Result<Vec<IpAddr>> {
    let out = ns.ip(&["-o", "addr", "show", "dev", dev, "scope", "global"])?;
    Ok(out
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            w.find(|x| *x == "inet" || *x == "inet6")?;
            w.next()?.split('/').next()?.parse().ok()
        })
        .collect())
}

/// Removes leftover namespaces of `prefix` without needing a [`Topology`] value.
pub fn remove(prefix: &str) -> Vec<String> {
    super::cleanup_prefix(&format!("{prefix}-"))
}
