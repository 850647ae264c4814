//! Network-namespace labs for the BGP end-to-end tests: a speaker namespace and a router
//! namespace joined by a veth pair, a real routing daemon in the router namespace, and the
//! `bgp-probe` binary in the speaker namespace. Everything is removed on drop, also on failure.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub const SPEAKER_V4: &str = "10.99.0.1";
pub const ROUTER_V4: &str = "10.99.0.2";
pub const SPEAKER_V6: &str = "fd00:99::1";
pub const ROUTER_V6: &str = "fd00:99::2";

fn run(args: &[&str]) -> Output {
    Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

fn must(args: &[&str]) {
    let out = run(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Why the lab cannot run here, if it cannot.
pub fn missing(binaries: &[&str]) -> Option<String> {
    if !run(&["id", "-u"]).stdout.starts_with(b"0") {
        return Some("needs root for network namespaces".into());
    }
    for b in binaries.iter().chain(&["ip"]) {
        let found = std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).any(|d| d.join(b).is_file()))
            .unwrap_or(false)
            || Path::new(b).is_file();
        if !found {
            return Some(format!("`{b}` is not installed"));
        }
    }
    None
}

/// Two namespaces and a working directory, all removed on drop.
pub struct Lab {
    pub speaker_ns: String,
    pub router_ns: String,
    pub dir: PathBuf,
    children: Vec<Child>,
}

impl Lab {
    /// `name` must be unique among the tests that run at the same time.
    pub fn new(name: &str) -> Lab {
        let tag = format!("flb-bgp-{name}-{}", std::process::id());
        let lab = Lab {
            speaker_ns: format!("{tag}-s"),
            router_ns: format!("{tag}-r"),
            dir: std::env::temp_dir().join(&tag),
            children: Vec::new(),
        };
        let _ = std::fs::remove_dir_all(&lab.dir);
        std::fs::create_dir_all(&lab.dir).unwrap();
        let (s, r) = (lab.speaker_ns.as_str(), lab.router_ns.as_str());
        must(&["ip", "netns", "add", s]);
        must(&["ip", "netns", "add", r]);
        must(&[
            "ip", "-n", s, "link", "add", "va", "type", "veth", "peer", "name", "vb", "netns", r,
        ]);
        for (ns, dev, v4, v6) in [
            (s, "va", SPEAKER_V4, SPEAKER_V6),
            (r, "vb", ROUTER_V4, ROUTER_V6),
        ] {
            must(&["ip", "-n", ns, "link", "set", "lo", "up"]);
            must(&[
                "ip",
                "-n",
                ns,
                "addr",
                "add",
                &format!("{v4}/24"),
                "dev",
                dev,
            ]);
            must(&[
                "ip",
                "-n",
                ns,
                "addr",
                "add",
                &format!("{v6}/64"),
                "dev",
                dev,
                "nodad",
            ]);
            must(&["ip", "-n", ns, "link", "set", dev, "up"]);
        }
        lab
    }

    pub fn path(&self, file: &str) -> String {
        self.dir.join(file).to_string_lossy().into_owned()
    }

    /// Runs a command in the router namespace and returns its stdout.
    pub fn router_cmd(&self, args: &[&str]) -> String {
        let mut full = vec!["ip", "netns", "exec", &self.router_ns];
        full.extend_from_slice(args);
        let out = run(&full);
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    }

    /// Starts a long-running process in the router namespace; it is killed on drop.
    pub fn spawn_router(&mut self, args: &[&str], log: &str) {
        let log = std::fs::File::create(self.path(log)).unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", &self.router_ns])
            .args(args)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.children.push(child);
    }

    /// Starts FRR's zebra and bgpd in the router namespace with these configurations (bgpd
    /// without zebra's kernel routes when `bgpd_args` says `-S`, on the addresses it names with
    /// `-l`); returns the directory of their vty sockets, for `vtysh --vty_socket`.
    pub fn spawn_frr(&mut self, zebra_conf: &str, bgpd_conf: &str, bgpd_args: &[&str]) -> String {
        // zebra drops root for the `frr` user, so its files live in a directory that user owns.
        let dir = self.dir.join("frr");
        std::fs::create_dir_all(&dir).unwrap();
        let d = dir.to_string_lossy().into_owned();
        std::fs::write(dir.join("zebra.conf"), zebra_conf).unwrap();
        std::fs::write(dir.join("bgpd.conf"), bgpd_conf).unwrap();
        must(&["chown", "-R", "frr:frr", &d]);
        let zsock = format!("{d}/zserv.api");
        let daemon = |name: &str, extra: &[&str]| -> Vec<String> {
            let (conf, pid) = (format!("{d}/{name}.conf"), format!("{d}/{name}.pid"));
            let mut args = vec![format!("/usr/lib/frr/{name}")];
            args.extend(
                [
                    "-f",
                    &conf,
                    "-i",
                    &pid,
                    "-z",
                    &zsock,
                    "--vty_socket",
                    &d,
                    "-P",
                    "0",
                ]
                .map(str::to_owned),
            );
            args.extend(extra.iter().map(|a| a.to_string()));
            args
        };
        let zebra = daemon("zebra", &[]);
        self.spawn_router(
            &zebra.iter().map(String::as_str).collect::<Vec<_>>(),
            "zebra.log",
        );
        assert!(
            eventually(Duration::from_secs(10), || Path::new(&zsock).exists()),
            "zebra did not start: {}",
            std::fs::read_to_string(self.dir.join("zebra.log")).unwrap_or_default()
        );
        let bgpd = daemon("bgpd", bgpd_args);
        self.spawn_router(
            &bgpd.iter().map(String::as_str).collect::<Vec<_>>(),
            "bgpd.log",
        );
        d
    }

    /// Kills by pid file (for daemons that fork).
    pub fn kill_pidfile(&self, file: &str) {
        if let Ok(pid) = std::fs::read_to_string(self.path(file)) {
            let _ = run(&["kill", pid.trim()]);
        }
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        for pidfile in ["bird.pid", "bgpd.pid"] {
            if let Ok(pid) = std::fs::read_to_string(self.dir.join(pidfile)) {
                let _ = run(&["kill", "-9", pid.trim()]);
            }
        }
        let _ = run(&["ip", "netns", "del", &self.speaker_ns]);
        let _ = run(&["ip", "netns", "del", &self.router_ns]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The `bgp-probe` binary running in the speaker namespace.
pub struct Probe {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<serde_json::Value>,
    pub last: Option<serde_json::Value>,
}

impl Probe {
    pub fn start(lab: &Lab, peer: &serde_json::Value) -> Probe {
        Probe::spawn(lab, &ferrolb_tests::tool("bgp-probe"), &[peer.to_string()])
    }

    pub fn send(&mut self, command: serde_json::Value) {
        let stdin = self.stdin.as_mut().expect("probe running");
        writeln!(stdin, "{command}").unwrap();
        stdin.flush().unwrap();
    }

    /// Waits until the status satisfies `pred`; returns the matching status line.
    pub fn wait_for(
        &mut self,
        timeout: Duration,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> Option<serde_json::Value> {
        if let Some(l) = &self.last
            && pred(l)
        {
            return self.last.clone();
        }
        let deadline = Instant::now() + timeout;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(v) => {
                    self.last = Some(v.clone());
                    if pred(&v) {
                        return Some(v);
                    }
                }
                Err(_) => return None,
            }
        }
        None
    }

    pub fn wait_state(&mut self, state: &str, timeout: Duration) -> Option<serde_json::Value> {
        self.wait_for(timeout, |v| v["status"]["state"] == state)
    }

    /// Ends the session with a Cease and waits for the process.
    pub fn shutdown(mut self) {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the process without a NOTIFICATION, as a crash would.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `f` until it returns true or `timeout` passes.
pub fn eventually(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Prints why a test cannot run and returns true, when it cannot (see [`missing`]); fails
/// instead under `FERROLB_REQUIRE_BINARIES=1`, where a skip would hide a broken setup.
pub fn skip_unless_available(binaries: &[&str]) -> bool {
    match missing(binaries) {
        Some(why) => ferrolb_tests::skip::skip::<()>(why).is_none(),
        None => false,
    }
}

impl Lab {
    /// Drops every IPv4 and IPv6 packet in and out of the router namespace (`iptables` /
    /// `ip6tables` DROP on INPUT and OUTPUT), so the daemon hears silence while the link stays
    /// up on both sides. (This kernel has no `tc` drop action.)
    pub fn cut_router(&self) {
        self.router_filter("-I");
    }

    /// Undoes [`Lab::cut_router`].
    pub fn restore_router(&self) {
        self.router_filter("-D");
    }

    /// Starts BIRD in the router namespace with `conf`; its control socket is `bird.ctl` in the
    /// lab directory, its pid file `bird.pid` (killed on drop).
    pub fn spawn_bird(&mut self, conf: &str) {
        std::fs::write(self.path("bird.conf"), conf).unwrap();
        let (c, s, p) = (
            self.path("bird.conf"),
            self.path("bird.ctl"),
            self.path("bird.pid"),
        );
        self.spawn_router(&["bird", "-f", "-c", &c, "-s", &s, "-P", &p], "bird.log");
    }

    fn router_filter(&self, op: &str) {
        let script = ["iptables", "ip6tables"]
            .iter()
            .flat_map(|t| ["INPUT", "OUTPUT"].map(|chain| format!("{t} {op} {chain} -j DROP")))
            .collect::<Vec<_>>()
            .join(" && ");
        must(&["ip", "netns", "exec", &self.router_ns, "sh", "-c", &script]);
    }
}

impl Probe {
    /// Starts the binary `exe` with `args` in the speaker namespace; its stdout is read as JSON
    /// lines (see [`Probe::next_line`]).
    pub fn spawn(lab: &Lab, exe: &str, args: &[String]) -> Probe {
        let mut child = Command::new("ip")
            .args(["netns", "exec", &lab.speaker_ns, exe])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Ok(v) = serde_json::from_str(&line)
                    && tx.send(v).is_err()
                {
                    break;
                }
            }
        });
        Probe {
            stdin: child.stdin.take(),
            child,
            lines,
            last: None,
        }
    }

    /// The next line the probe prints, waiting at most `timeout`.
    pub fn next_line(&mut self, timeout: Duration) -> Option<serde_json::Value> {
        let v = self.lines.recv_timeout(timeout).ok()?;
        self.last = Some(v.clone());
        Some(v)
    }
}
