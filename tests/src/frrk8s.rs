//! frr-k8s (the BGP backend MetalLB v0.16 uses by default) with Debian's FRR, run per lab node
//! for the side-by-side bench's "MetalLB in frr-k8s mode" system. `scripts/frrk8s` builds the
//! daemon from the Go module proxy into `target/frrk8s/`, with its CRDs and its reloader script;
//! FRR is Debian's `frr` and `frr-pythontools` (for `frr-reload.py`). Nothing of frr-k8s is
//! committed.
//!
//! On a Kubernetes node the frr-k8s Pod has four containers sharing `/etc/frr`, `/var/run/frr`
//! and `/etc/frr_reloader`: FRR (zebra, bgpd, bfdd), the reloader, the metrics exporter and the
//! daemon. Here each of those processes runs in the node's network namespace with the node's
//! own directories bound onto those three paths, in a mount namespace of its own (`ip netns
//! exec` gives every process one), so three nodes share one machine without sharing FRR. The
//! metrics exporter is not run: nothing reads it.
//!
//! ```text
//!   node ns: zebra, bgpd, bfdd (FRR; vtysh reaches them through /var/run/frr)
//!            frr-reloader.sh (SIGHUP: frr-reload.py applies /etc/frr_reloader/frr.conf)
//!            frr-k8s-controller (FRRConfiguration -> /etc/frr_reloader/frr.conf, SIGHUP)
//! ```

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::netns::{Namespace, NetnsError, Process};

/// `FERROLB_FRRK8S_DIR` overrides where the daemon is looked for.
pub const DIR_ENV: &str = "FERROLB_FRRK8S_DIR";

/// The paths a frr-k8s Pod's containers share, bound per node onto the node's directories.
pub const SHARED_PATHS: [&str; 3] = ["/etc/frr", "/var/run/frr", "/etc/frr_reloader"];

/// The programs the per-node FRR needs, with their Debian packages.
pub const TOOLS: &[(&str, &str)] = &[
    ("/usr/lib/frr/zebra", "frr"),
    ("/usr/lib/frr/bgpd", "frr"),
    ("/usr/lib/frr/bfdd", "frr"),
    ("vtysh", "frr"),
    ("/usr/lib/frr/frr-reload.py", "frr-pythontools"),
    ("mount", "mount"),
];

/// The directory of the daemon: `$FERROLB_FRRK8S_DIR`, or the workspace's `target/frrk8s`.
pub fn dir() -> PathBuf {
    crate::built_dir(DIR_ENV, "frrk8s")
}

/// frr-k8s's CRDs (`target/frrk8s/crds`, copied from the module by `scripts/frrk8s`).
pub fn crd_dir() -> PathBuf {
    dir().join("crds")
}

/// Whether `scripts/frrk8s` has built the daemon, copied the CRDs and the reloader; the missing
/// part otherwise.
pub fn missing() -> Option<PathBuf> {
    crate::first_missing(&dir(), &["frr-k8s-controller", "crds", "frr-reloader.sh"])
}

/// The frr-k8s version `scripts/frrk8s` built (its `VERSION` file).
pub fn version() -> String {
    crate::built_version(&dir())
}

/// Binds the three node directories (the arguments after the script's name) onto
/// [`SHARED_PATHS`] and runs the rest of the arguments in their place. The mount namespace is
/// the process's own (`ip netns exec` unshares one and makes `/` a slave), so nothing leaks to
/// the host or to the other nodes.
const WITH_NODE_PATHS: &str = "set -e; \
    mount --bind \"$1\" /etc/frr; mount --bind \"$2\" /var/run/frr; \
    mount --bind \"$3\" /etc/frr_reloader; shift 3; exec \"$@\"";

/// One node's frr-k8s Pod: FRR's daemons, the reloader and frr-k8s, each killed (SIGKILL) when
/// dropped, frr-k8s first.
pub struct NodeFrr {
    processes: Vec<Process>,
}

impl NodeFrr {
    /// Starts FRR (zebra, then bfdd and bgpd), the reloader and the frr-k8s daemon in `ns` for
    /// node `node`, with its directories under `dir` (emptied first) and its logs in `dir` too.
    /// frr-k8s reads `kubeconfig` and the FRRConfiguration objects of `namespace`.
    pub fn start(
        ns: &Namespace,
        node: &str,
        dir: &Path,
        kubeconfig: &Path,
        namespace: &str,
    ) -> Result<Self, NetnsError> {
        let io = |context: String| {
            move |source| NetnsError::Io {
                context: context.clone(),
                source,
            }
        };
        let _ = std::fs::remove_dir_all(dir);
        let dirs: Vec<PathBuf> = ["etc-frr", "run-frr", "frr-reloader"]
            .iter()
            .map(|d| dir.join(d))
            .collect();
        for d in &dirs {
            std::fs::create_dir_all(d).map_err(io(format!("creating {}", d.display())))?;
        }
        // The mount points: /var/run/frr comes with Debian's frr; /etc/frr_reloader is frr-k8s's
        // own (an empty directory, as a container image has it).
        for p in SHARED_PATHS {
            std::fs::create_dir_all(p).map_err(io(format!("creating the mount point {p}")))?;
        }
        // The files the frr-k8s image starts with: an integrated configuration (frr-reload.py
        // refuses to run without one) that frr-k8s's first rendering replaces.
        std::fs::write(
            dirs[0].join("vtysh.conf"),
            "service integrated-vtysh-config\n",
        )
        .map_err(io("writing vtysh.conf".into()))?;
        std::fs::write(
            dirs[0].join("frr.conf"),
            format!("frr defaults traditional\nhostname {node}\nlog stdout informational\n!\n"),
        )
        .map_err(io("writing frr.conf".into()))?;
        // zebra, bgpd and bfdd drop root for the `frr` user and write their sockets, pid files
        // and logs in these directories.
        crate::netns::must(&[
            "chown",
            "-R",
            "frr:frr",
            &dirs[0].display().to_string(),
            &dirs[1].display().to_string(),
        ])?;
        let spawn = |args: &[&str], log: &str| -> Result<Process, NetnsError> {
            let mut full: Vec<String> = vec!["sh".into(), "-c".into(), WITH_NODE_PATHS.into()];
            full.push("sh".into());
            full.extend(dirs.iter().map(|d| d.display().to_string()));
            full.extend(args.iter().map(|a| a.to_string()));
            ns.spawn(&full, &dir.join(log))
        };
        let conf = "/etc/frr/frr.conf";
        let mut processes = Vec::new();
        // As frr-k8s's image starts them (its `daemons` file): vty on 127.0.0.1 only, a large
        // netlink buffer for zebra.
        processes.push(spawn(
            &[
                "/usr/lib/frr/zebra",
                "-f",
                conf,
                "-A",
                "127.0.0.1",
                "-s",
                "90000000",
            ],
            "zebra.log",
        )?);
        wait_for_file(&dirs[1].join("zserv.api"));
        for daemon in ["bfdd", "bgpd"] {
            let bin = format!("/usr/lib/frr/{daemon}");
            processes.push(spawn(
                &[&bin, "-f", conf, "-A", "127.0.0.1"],
                &format!("{daemon}.log"),
            )?);
        }
        let reloader = self::dir().join("frr-reloader.sh");
        processes.push(spawn(
            &["bash", &reloader.display().to_string()],
            "reloader.log",
        )?);
        wait_for_file(&dirs[2].join("reloader.pid"));
        let daemon = self::dir().join("frr-k8s-controller");
        processes.push(spawn(
            &[
                &daemon.display().to_string(),
                &format!("--kubeconfig={}", kubeconfig.display()),
                &format!("--node-name={node}"),
                &format!("--namespace={namespace}"),
                &format!("--pod-name=frr-k8s-{node}"),
                "--metrics-bind-address=127.0.0.1:7572",
                "--log-level=info",
            ],
            "frr-k8s.log",
        )?);
        Ok(Self { processes })
    }

    /// The process id of the frr-k8s daemon.
    pub fn daemon_pid(&self) -> Option<u32> {
        self.processes.last().map(Process::pid)
    }

    /// Whether one of its processes has exited (frr-k8s exits when it cannot reach the API
    /// server at its start, as MetalLB's speaker does).
    pub fn exited(&mut self) -> bool {
        self.processes.iter_mut().any(|p| !p.alive())
    }

    /// Kills every process (SIGKILL), frr-k8s first, as a Pod deleted with no grace.
    pub fn kill(&mut self) {
        while let Some(mut p) = self.processes.pop() {
            p.kill();
        }
    }
}

impl Drop for NodeFrr {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Waits up to 10 s for `path` to appear (a daemon's socket or pid file: what the next
/// process needs); a daemon that never makes it shows in its log and the lab's timeouts.
fn wait_for_file(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !path.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
}
