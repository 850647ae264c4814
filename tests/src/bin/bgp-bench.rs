//! `bgp-bench`: 100,000 /32 prefixes announced to a passive BIRD 2, by our speaker and by gobgpd,
//! one after the other in the same run; prints both times and the ratio.
//!
//! Each run gets fresh network namespaces (speaker and router joined by a veth pair) and a fresh
//! BIRD. The time is from Established to BIRD holding the last prefix, taken from BIRD's own
//! route timestamps, and checked against `birdc show route count` polled every 20 ms.
//! gobgpd is preloaded from an MRT TABLE_DUMP_V2 file with its neighbour administratively down,
//! so both speakers start from a full RIB at Established.
//!
//! Usage (root, bird2 and gobgpd installed):
//! `cargo build --release -p ferrolb-tests --bin bgp-bench && target/release/bgp-bench [count]`

use std::io::{BufRead, BufReader, Write};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};

const SPEAKER: &str = "10.99.0.1";
const ROUTER: &str = "10.99.0.2";
const BASE: Ipv4Addr = Ipv4Addr::new(10, 99, 128, 0);

fn sh(args: &[&str]) -> Result<String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .with_context(|| format!("running {args:?}"))?;
    ensure!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Namespaces, processes and files of one run; removed on drop.
struct Lab {
    spk: String,
    rtr: String,
    dir: PathBuf,
    children: Vec<Child>,
}

impl Lab {
    fn new(tag: &str) -> Result<Lab> {
        let name = format!("flb-bench-{tag}-{}", std::process::id());
        let lab = Lab {
            spk: format!("{name}-s"),
            rtr: format!("{name}-r"),
            dir: std::env::temp_dir().join(&name),
            children: vec![],
        };
        std::fs::create_dir_all(&lab.dir)?;
        let (s, r) = (lab.spk.as_str(), lab.rtr.as_str());
        sh(&["ip", "netns", "add", s])?;
        sh(&["ip", "netns", "add", r])?;
        sh(&[
            "ip", "-n", s, "link", "add", "va", "type", "veth", "peer", "name", "vb", "netns", r,
        ])?;
        for (ns, dev, addr) in [(s, "va", SPEAKER), (r, "vb", ROUTER)] {
            sh(&["ip", "-n", ns, "link", "set", "lo", "up"])?;
            sh(&[
                "ip",
                "-n",
                ns,
                "addr",
                "add",
                &format!("{addr}/24"),
                "dev",
                dev,
            ])?;
            sh(&["ip", "-n", ns, "link", "set", dev, "up"])?;
        }
        Ok(lab)
    }

    fn path(&self, f: &str) -> String {
        self.dir.join(f).to_string_lossy().into_owned()
    }

    fn spawn(&mut self, ns: &str, args: &[&str], log: &str) -> Result<()> {
        let log = std::fs::File::create(self.path(log))?;
        let child = Command::new("ip")
            .args(["netns", "exec", ns])
            .args(args)
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        self.children.push(child);
        Ok(())
    }

    fn start_bird(&mut self) -> Result<()> {
        let conf = format!(
            "router id {ROUTER};\nprotocol device {{}}\nprotocol bgp spk {{ local {ROUTER} as 64513; \
             neighbor {SPEAKER} as 64512; passive on;\n ipv4 {{ import all; export none; }}; }}\n"
        );
        std::fs::write(self.path("bird.conf"), conf)?;
        let (c, s, p) = (
            self.path("bird.conf"),
            self.path("bird.ctl"),
            self.path("bird.pid"),
        );
        let rtr = self.rtr.clone();
        self.spawn(
            &rtr,
            &["bird", "-f", "-c", &c, "-s", &s, "-P", &p],
            "bird.log",
        )?;
        let ctl = self.path("bird.ctl");
        wait(Duration::from_secs(10), || Path::new(&ctl).exists()).context("BIRD did not start")?;
        Ok(())
    }

    fn birdc(&self, args: &[&str]) -> Result<String> {
        let ctl = self.path("bird.ctl");
        let mut full = vec!["ip", "netns", "exec", &self.rtr, "birdc", "-s", &ctl];
        full.extend_from_slice(args);
        sh(&full)
    }

    fn bird_route_count(&self) -> Result<u64> {
        let out = self.birdc(&["show", "route", "count"])?;
        Ok(out
            .lines()
            .find_map(|l| l.split_whitespace().next()?.parse().ok())
            .unwrap_or(0))
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = sh(&["ip", "netns", "del", &self.spk]);
        let _ = sh(&["ip", "netns", "del", &self.rtr]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn wait(timeout: Duration, mut f: impl FnMut() -> bool) -> Result<()> {
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        if f() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bail!("timed out after {timeout:?}")
}

/// `HH:MM:SS.mmm` as milliseconds since midnight.
fn bird_time_ms(t: &str) -> Option<f64> {
    let mut it = t.split(':');
    let h: f64 = it.next()?.parse().ok()?;
    let m: f64 = it.next()?.parse().ok()?;
    let s: f64 = it.next()?.parse().ok()?;
    Some(((h * 60.0 + m) * 60.0 + s) * 1000.0)
}

/// From BIRD's timestamps: milliseconds from Established to the newest route.
fn bird_elapsed_ms(lab: &Lab) -> Result<f64> {
    let protocols = lab.birdc(&["show", "protocols", "spk"])?;
    let since = protocols
        .lines()
        .find(|l| l.starts_with("spk "))
        .and_then(|l| l.split_whitespace().nth(4))
        .and_then(bird_time_ms)
        .context("no Established time in `show protocols`")?;
    let routes = lab.birdc(&["show", "route"])?;
    let last = routes
        .lines()
        .filter_map(|l| {
            let start = l.find("[spk ")? + 5;
            let end = start + l[start..].find(']')?;
            bird_time_ms(l[start..end].split_whitespace().next()?)
        })
        .fold(f64::MIN, f64::max);
    Ok(last - since)
}

fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

struct Figures {
    bird_ms: f64,
    polled_ms: f64,
    cpu_s: Option<f64>,
}

fn run_ours(count: u32) -> Result<Figures> {
    let mut lab = Lab::new("ours")?;
    let probe = std::env::current_exe()?.with_file_name("bgp-probe");
    let peer = serde_json::json!({
        "id": "bird", "my_asn": 64512, "peer_asn": 64513, "peer_address": ROUTER, "peer_port": 179,
        "source_address": SPEAKER, "router_id": null, "hold_time": {"secs": 90, "nanos": 0},
        "keepalive_time": null, "connect_retry": {"secs": 0, "nanos": 200_000_000},
        "ebgp_multihop": false, "password": null, "graceful_restart": false,
        "next_hop_v4": null, "next_hop_v6": null,
    });
    let mut child = Command::new("ip")
        .args(["netns", "exec", &lab.spk])
        .arg(&probe)
        .arg(peer.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {probe:?}"))?;
    let mut stdin = child.stdin.take().context("stdin")?;
    writeln!(
        stdin,
        "{}",
        serde_json::json!({"hosts": {"peer": "bird", "base": BASE, "count": count}})
    )?;
    stdin.flush()?;
    // Let the probe build its desired set before the router exists.
    std::thread::sleep(Duration::from_millis(1500));
    let pid = child.id();
    let cpu_before = cpu_seconds(pid);
    lab.start_bird()?;
    let mut lines = BufReader::new(child.stdout.take().context("stdout")?).lines();
    let established_at = loop {
        let line = lines.next().context("probe exited")??;
        let v: serde_json::Value = serde_json::from_str(&line)?;
        if v["status"]["state"] == "Established" {
            break Instant::now();
        }
    };
    wait(Duration::from_secs(60), || {
        lab.bird_route_count().unwrap_or(0) >= u64::from(count)
    })?;
    let polled_ms = established_at.elapsed().as_secs_f64() * 1000.0;
    let cpu_s = cpu_before.zip(cpu_seconds(pid)).map(|(a, b)| b - a);
    let bird_ms = bird_elapsed_ms(&lab)?;
    drop(stdin);
    let _ = child.wait();
    Ok(Figures {
        bird_ms,
        polled_ms,
        cpu_s,
    })
}

/// An MRT TABLE_DUMP_V2 file (RFC 6396) with `count` /32s from BASE, for `gobgp mrt inject`.
/// The inject client loses the last entries of a stream, so the file ends with a padding of
/// repeated entries (re-adding a path gobgpd already holds changes nothing).
fn write_mrt(path: &str, count: u32) -> Result<()> {
    fn record(out: &mut Vec<u8>, subtype: u16, body: &[u8]) {
        out.extend_from_slice(&0u32.to_be_bytes());
        out.extend_from_slice(&13u16.to_be_bytes());
        out.extend_from_slice(&subtype.to_be_bytes());
        out.extend_from_slice(&(body.len() as u32).to_be_bytes());
        out.extend_from_slice(body);
    }
    let speaker: Ipv4Addr = SPEAKER.parse()?;
    let mut out = Vec::with_capacity(count as usize * 40);
    // collector id, view name length 0, one peer: type AS4+IPv4, id, address, AS.
    let mut index = speaker.octets().to_vec();
    index.extend_from_slice(&[0, 0, 0, 1, 0x02]);
    index.extend_from_slice(&speaker.octets());
    index.extend_from_slice(&speaker.octets());
    index.extend_from_slice(&64512u32.to_be_bytes());
    record(&mut out, 1, &index);
    // ORIGIN IGP, empty AS_PATH, NEXT_HOP.
    let mut attrs = vec![0x40, 1, 1, 0, 0x40, 2, 0, 0x40, 3, 4];
    attrs.extend_from_slice(&speaker.octets());
    let base = u32::from(BASE);
    let padding = count.min(8192);
    for (seq, i) in (0..count).chain(0..padding).enumerate() {
        let mut rib = (seq as u32).to_be_bytes().to_vec();
        rib.push(32);
        rib.extend_from_slice(&(base + i).to_be_bytes());
        rib.extend_from_slice(&1u16.to_be_bytes());
        rib.extend_from_slice(&0u16.to_be_bytes());
        rib.extend_from_slice(&0u32.to_be_bytes());
        rib.extend_from_slice(&(attrs.len() as u16).to_be_bytes());
        rib.extend_from_slice(&attrs);
        record(&mut out, 2, &rib);
    }
    std::fs::write(path, out)?;
    Ok(())
}

fn run_gobgp(count: u32) -> Result<Figures> {
    let mut lab = Lab::new("gobgp")?;
    let conf = format!(
        "[global.config]\n  as = 64512\n  router-id = \"{SPEAKER}\"\n  local-address-list = [\"{SPEAKER}\"]\n  port = -1\n\
         [[neighbors]]\n  [neighbors.config]\n    neighbor-address = \"{ROUTER}\"\n    peer-as = 64513\n    admin-down = true\n\
         [neighbors.transport.config]\n    local-address = \"{SPEAKER}\"\n\
         [[neighbors.afi-safis]]\n  [neighbors.afi-safis.config]\n    afi-safi-name = \"ipv4-unicast\"\n"
    );
    std::fs::write(lab.path("gobgpd.toml"), conf)?;
    let c = lab.path("gobgpd.toml");
    let spk = lab.spk.clone();
    lab.spawn(&spk, &["gobgpd", "-f", &c, "--pprof-disable"], "gobgpd.log")?;
    let gobgp = |args: &[&str]| {
        let mut full = vec!["ip", "netns", "exec", spk.as_str(), "gobgp"];
        full.extend_from_slice(args);
        sh(&full)
    };
    wait(Duration::from_secs(10), || gobgp(&["global"]).is_ok())?;
    let mrt = lab.path("hosts.mrt");
    write_mrt(&mrt, count)?;
    let rib_count = || -> u64 {
        gobgp(&["global", "rib", "summary"])
            .ok()
            .and_then(|s| {
                s.split(|c: char| !c.is_ascii_digit())
                    .filter_map(|n| n.parse().ok())
                    .max()
            })
            .unwrap_or(0)
    };
    // The inject client may drop the end of the stream; inject again until all are in.
    for _ in 0..5 {
        gobgp(&["mrt", "inject", "global", &mrt])?;
        if rib_count() >= u64::from(count) {
            break;
        }
    }
    ensure!(
        rib_count() >= u64::from(count),
        "gobgpd holds {} of {count} prefixes after injecting",
        rib_count()
    );
    let pid = lab.children[0].id();
    lab.start_bird()?;
    let cpu_before = cpu_seconds(pid);
    gobgp(&["neighbor", ROUTER, "enable"])?;
    wait(Duration::from_secs(30), || {
        lab.birdc(&["show", "protocols", "spk"])
            .map(|s| s.contains("Established"))
            .unwrap_or(false)
    })?;
    let established_at = Instant::now();
    wait(Duration::from_secs(60), || {
        lab.bird_route_count().unwrap_or(0) >= u64::from(count)
    })?;
    let polled_ms = established_at.elapsed().as_secs_f64() * 1000.0;
    let cpu_s = cpu_before.zip(cpu_seconds(pid)).map(|(a, b)| b - a);
    let bird_ms = bird_elapsed_ms(&lab)?;
    Ok(Figures {
        bird_ms,
        polled_ms,
        cpu_s,
    })
}

fn main() -> Result<()> {
    let count: u32 = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(100_000);
    let ours = run_ours(count).context("FerroLB run")?;
    let gobgp = run_gobgp(count).context("gobgpd run")?;
    let cpu = |c: Option<f64>| c.map(|c| format!("{c:.2} s")).unwrap_or("n/a".into());
    println!(
        "{count} /32 prefixes to BIRD, Established -> last route (BIRD timestamps; 20 ms poll):"
    );
    println!(
        "  ferrolb  {:8.1} ms   (poll {:8.1} ms, speaker CPU {})",
        ours.bird_ms,
        ours.polled_ms,
        cpu(ours.cpu_s)
    );
    println!(
        "  gobgpd   {:8.1} ms   (poll {:8.1} ms, speaker CPU {})",
        gobgp.bird_ms,
        gobgp.polled_ms,
        cpu(gobgp.cpu_s)
    );
    println!(
        "  ratio ferrolb/gobgpd = {:.2} (BIRD timestamps), {:.2} (poll)",
        ours.bird_ms / gobgp.bird_ms,
        ours.polled_ms / gobgp.polled_ms
    );
    Ok(())
}
