//! Network namespaces as test hosts: creation with cleanup on drop, commands and threads run
//! inside a namespace, child processes killed on drop, names unique per run. Shells out to `ip`.
//!
//! # Layout
//!
//! - this module: [`Namespace`], [`Process`], [`enter`], [`in_namespace`], [`runtime_in`], command
//!   helpers, prerequisites ([`require_root`], [`require_tools`]) and [`cleanup_prefix`].
//! - [`topology`]: the lab's segment (a bridge in a switch namespace), three nodes, a client,
//!   a router and a client behind the router.
//!
//! Threads enter a namespace with `setns(2)`; a socket stays in the namespace it was created in,
//! so a listener bound by such a thread keeps serving there whichever thread accepts.

pub mod topology;

use std::ffi::OsStr;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

pub use topology::{RouterAddrs, Topology};

/// Errors of the namespace helpers.
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    /// A command could not be started at all.
    #[error("cannot run `{command}`: {source}")]
    Spawn {
        /// The command line.
        command: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A command ran and failed.
    #[error("`{command}` failed: {stderr}")]
    Failed {
        /// The command line.
        command: String,
        /// What it printed on stderr.
        stderr: String,
    },
    /// A thread could not enter a namespace.
    #[error("cannot enter network namespace `{name}`: {source}")]
    Enter {
        /// The namespace.
        name: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Not running as root.
    #[error("network namespaces need root: run this as root (for example with sudo)")]
    NotRoot,
    /// A required program is not installed.
    #[error(
        "`{tool}` is not installed; install the Debian package `{package}` (apt-get install -y {package})"
    )]
    MissingTool {
        /// The program.
        tool: String,
        /// The Debian package that provides it.
        package: String,
    },
    /// Some other I/O failure (log files, runtime threads).
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// Result of the namespace helpers.
pub type Result<T, E = NetnsError> = std::result::Result<T, E>;

fn line_of<S: AsRef<OsStr>>(args: &[S]) -> String {
    args.iter()
        .map(|a| a.as_ref().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs `args[0]` with the rest as arguments and returns its output, whatever its status.
pub fn run<S: AsRef<OsStr>>(args: &[S]) -> Result<Output> {
    Command::new(&args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .map_err(|source| NetnsError::Spawn {
            command: line_of(args),
            source,
        })
}

/// Runs a command and fails unless it exits with status 0; returns its stdout.
pub fn must<S: AsRef<OsStr>>(args: &[S]) -> Result<String> {
    let out = run(args)?;
    if !out.status.success() {
        return Err(NetnsError::Failed {
            command: line_of(args),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A unique prefix for one run: `base`, the process id and a counter, so parallel tests in one
/// process and parallel processes never collide.
pub fn unique_prefix(base: &str) -> String {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    format!(
        "{base}{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::SeqCst)
    )
}

/// Fails with [`NetnsError::NotRoot`] unless the effective user is root (read from
/// `/proc/self/status`, so it needs no program on `PATH`).
pub fn require_root() -> Result<()> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let euid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1));
    if euid == Some("0") {
        Ok(())
    } else {
        Err(NetnsError::NotRoot)
    }
}

/// Whether `tool` (a name looked up in `PATH`, or an absolute path) exists.
pub fn have_tool(tool: &str) -> bool {
    if tool.contains('/') {
        return Path::new(tool).is_file();
    }
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
        .unwrap_or(false)
        || ["/usr/sbin", "/sbin"]
            .iter()
            .any(|d| Path::new(d).join(tool).is_file())
}

/// Fails with the first missing `(tool, Debian package)`.
pub fn require_tools(tools: &[(&str, &str)]) -> Result<()> {
    for (tool, package) in tools {
        if !have_tool(tool) {
            return Err(NetnsError::MissingTool {
                tool: (*tool).into(),
                package: (*package).into(),
            });
        }
    }
    Ok(())
}

/// Names of the existing network namespaces.
pub fn list_namespaces() -> Vec<String> {
    let Ok(out) = must(&["ip", "netns", "list"]) else {
        return Vec::new();
    };
    out.lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// Kills every process inside the namespaces whose name starts with `prefix`, then deletes those
/// namespaces. Used by the lab's `--down` and before a run, so a run after a crash starts clean.
/// Returns the names removed.
pub fn cleanup_prefix(prefix: &str) -> Vec<String> {
    let doomed: Vec<String> = list_namespaces()
        .into_iter()
        .filter(|n| n.starts_with(prefix))
        .collect();
    for ns in &doomed {
        kill_all_in(ns);
    }
    for ns in &doomed {
        let _ = run(&["ip", "netns", "del", ns]);
    }
    doomed
}

/// Sends SIGKILL to every process whose network namespace is `ns`.
pub fn kill_all_in(ns: &str) {
    if let Ok(pids) = must(&["ip", "netns", "pids", ns]) {
        for pid in pids.split_whitespace() {
            let _ = run(&["kill", "-9", pid]);
        }
    }
}

/// A network namespace, deleted (with every process still inside it) when dropped.
#[derive(Debug)]
pub struct Namespace {
    name: String,
}

impl Namespace {
    /// Creates the namespace `name` (deleting a stale one of that name first) with `lo` up.
    pub fn create(name: &str) -> Result<Self> {
        if list_namespaces().iter().any(|n| n == name) {
            kill_all_in(name);
            let _ = run(&["ip", "netns", "del", name]);
        }
        must(&["ip", "netns", "add", name])?;
        let ns = Self { name: name.into() };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `ip -n NAME args...`.
    pub fn ip(&self, args: &[&str]) -> Result<String> {
        let mut full = vec!["ip", "-n", &self.name];
        full.extend_from_slice(args);
        must(&full)
    }

    /// Runs `ip -n NAME -batch -` with `commands` (one `ip` command per line, without the
    /// leading `ip`) on its standard input: thousands of changes for the cost of one process.
    /// Fails on the first command that fails, naming it.
    pub fn ip_batch(&self, commands: &str) -> Result<()> {
        use std::io::Write;
        let command = format!("ip -n {} -batch -", self.name);
        let spawn_error = |source| NetnsError::Spawn {
            command: command.clone(),
            source,
        };
        let mut child = Command::new("ip")
            .args(["-n", &self.name, "-batch", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(spawn_error)?;
        let written = child
            .stdin
            .take()
            .expect("stdin is piped")
            .write_all(commands.as_bytes());
        let out = child.wait_with_output().map_err(spawn_error)?;
        written.map_err(spawn_error)?;
        if !out.status.success() {
            return Err(NetnsError::Failed {
                command,
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(())
    }

    /// Runs a command inside the namespace and returns its output, whatever its status.
    pub fn exec<S: AsRef<OsStr>>(&self, args: &[S]) -> Result<Output> {
        let mut full: Vec<&OsStr> = vec!["ip".as_ref(), "netns".as_ref(), "exec".as_ref()];
        full.push(self.name.as_ref());
        full.extend(args.iter().map(AsRef::as_ref));
        run(&full)
    }

    /// Runs a command inside the namespace and fails unless it succeeds; returns its stdout.
    pub fn exec_ok<S: AsRef<OsStr>>(&self, args: &[S]) -> Result<String> {
        let mut full: Vec<&OsStr> = vec!["ip".as_ref(), "netns".as_ref(), "exec".as_ref()];
        full.push(self.name.as_ref());
        full.extend(args.iter().map(AsRef::as_ref));
        must(&full)
    }

    /// Sets a sysctl inside the namespace (`net.ipv4.conf.all.arp_ignore=1`), by writing
    /// `/proc/sys/...` from a thread inside it (the network sysctls are per namespace).
    pub fn sysctl(&self, setting: &str) -> Result<()> {
        let (key, value) = setting.split_once('=').unwrap_or((setting, ""));
        let path = PathBuf::from("/proc/sys").join(key.replace('.', "/"));
        let value = value.to_string();
        in_namespace(&self.name, move || std::fs::write(&path, value))?.map_err(|source| {
            NetnsError::Io {
                context: format!("setting {setting} in {}", self.name),
                source,
            }
        })
    }

    /// Starts a long-running program inside the namespace with stdout and stderr going to `log`.
    /// `ip netns exec` replaces itself with the program, so the child's pid is the program's.
    pub fn spawn<S: AsRef<OsStr>>(&self, args: &[S], log: &Path) -> Result<Process> {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.name]).args(args);
        spawn_logged(
            command,
            format!("ip netns exec {} {}", self.name, line_of(args)),
            log,
        )
    }

    /// [`Namespace::spawn`], keeping the host's mounts: `ip netns exec` gives its program a
    /// mount namespace of its own with a fresh `/sys`, which hides `/sys/fs/cgroup`; kubelet and
    /// containerd (and the runc they start) need the cgroup mounts, so they enter only the
    /// network namespace (`nsenter --net`, which also replaces itself with the program).
    pub fn spawn_with_host_mounts<S: AsRef<OsStr>>(
        &self,
        args: &[S],
        log: &Path,
    ) -> Result<Process> {
        let net = format!("--net={}", self.path().display());
        let mut command = Command::new("nsenter");
        command.args([net.as_str(), "--"]).args(args);
        spawn_logged(command, format!("nsenter {net} -- {}", line_of(args)), log)
    }

    /// The MAC address of `dev` in this namespace, lower case.
    pub fn mac(&self, dev: &str) -> Result<String> {
        let out = self.ip(&["link", "show", dev])?;
        let mut words = out.split_whitespace();
        while let Some(w) = words.next() {
            if w == "link/ether" {
                return Ok(words.next().unwrap_or_default().to_lowercase());
            }
        }
        Err(NetnsError::Failed {
            command: format!("ip -n {} link show {dev}", self.name),
            stderr: "no link/ether address".into(),
        })
    }

    /// The path under `/run/netns` that [`enter`] opens.
    pub fn path(&self) -> PathBuf {
        Path::new("/run/netns").join(&self.name)
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        kill_all_in(&self.name);
        let _ = run(&["ip", "netns", "del", &self.name]);
    }
}

/// Starts `command` with stdout and stderr going to `log` (`described` names it in errors).
fn spawn_logged(mut command: Command, described: String, log: &Path) -> Result<Process> {
    let file = File::create(log).map_err(|source| NetnsError::Io {
        context: format!("creating {}", log.display()),
        source,
    })?;
    let err = file.try_clone().map_err(|source| NetnsError::Io {
        context: format!("opening {}", log.display()),
        source,
    })?;
    let child = command
        .stdin(Stdio::null())
        .stdout(file)
        .stderr(err)
        .spawn()
        .map_err(|source| NetnsError::Spawn {
            command: described,
            source,
        })?;
    Ok(Process {
        child,
        log: log.to_path_buf(),
    })
}

/// A child process, killed with SIGKILL (and reaped) when dropped.
#[derive(Debug)]
pub struct Process {
    child: Child,
    log: PathBuf,
}

impl Process {
    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills it at once (SIGKILL), as a crash would, and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Stops it as Kubernetes stops a container: SIGTERM, then SIGKILL if it is still running
    /// after `grace`. Returns whether it exited by itself within `grace`.
    pub fn terminate(&mut self, grace: std::time::Duration) -> bool {
        let pid = self.child.id().to_string();
        if run(&["kill", "-TERM", &pid]).is_err() {
            self.kill();
            return false;
        }
        let deadline = std::time::Instant::now() + grace;
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        self.kill();
        false
    }

    /// Whether it is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// What it printed so far.
    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Its log file.
    pub fn log(&self) -> &Path {
        &self.log
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Moves the calling thread into the network namespace at `path` (`/run/netns/NAME`).
///
/// Only this thread moves; threads it creates afterwards start in the namespace too.
pub fn enter(path: &Path) -> Result<()> {
    let name = path.display().to_string();
    let file = File::open(path).map_err(|source| NetnsError::Enter {
        name: name.clone(),
        source,
    })?;
    enter_file(&file, name)
}

/// Moves the calling thread into the network namespace `file` was opened on (`name` is for the
/// error). An open file keeps its namespace alive, so this works after the name is deleted.
#[allow(unsafe_code)]
fn enter_file(file: &File, name: String) -> Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: setns(2) takes a file descriptor we own for the duration of the call and a
    // namespace type constant; it touches no memory of ours. It only changes this thread's
    // network namespace, which the caller asked for.
    let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc != 0 {
        return Err(NetnsError::Enter {
            name,
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// Runs `f` on a new thread inside the namespace `ns` (a name under `/run/netns`) and returns its
/// result; a panic in `f` is re-raised here.
pub fn in_namespace<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T> {
    let path = Path::new("/run/netns").join(ns);
    let handle = std::thread::spawn(move || enter(&path).map(|()| f()));
    match handle.join() {
        Ok(r) => r,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// A multi-thread tokio runtime whose every thread (workers and blocking pool) lives in the
/// namespace `ns`. Futures must be spawned on it (`rt.block_on(rt.spawn(fut))`) for their
/// sockets to be created there: `block_on` polls its own future on the calling thread.
pub fn runtime_in(ns: &str) -> Result<tokio::runtime::Runtime> {
    let path = Path::new("/run/netns").join(ns);
    // Opened once here: a bad name is an error, not a panic on a worker thread, and a thread the
    // blocking pool starts late (while a test tears down, after the name was deleted) still
    // enters the namespace through this file.
    let file = std::sync::Arc::new(File::open(&path).map_err(|source| NetnsError::Enter {
        name: ns.into(),
        source,
    })?);
    let name = path.display().to_string();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .on_thread_start(move || {
            if let Err(e) = enter_file(&file, name.clone()) {
                panic!("runtime thread could not enter its namespace: {e}");
            }
        })
        .build()
        .map_err(|source| NetnsError::Io {
            context: "building a tokio runtime".into(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_tool_is_reported_with_its_debian_package() {
        let err =
            require_tools(&[("sh", "dash"), ("ferrolb-no-such-tool", "ferrolb-pkg")]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "`ferrolb-no-such-tool` is not installed; install the Debian package `ferrolb-pkg` \
             (apt-get install -y ferrolb-pkg)"
        );
    }

    #[test]
    fn unique_prefixes_differ_within_one_process() {
        assert_ne!(unique_prefix("t"), unique_prefix("t"));
    }

    #[test]
    fn a_runtime_thread_started_after_its_namespace_was_deleted_still_enters_it() {
        use std::os::unix::fs::MetadataExt;
        if let Err(e) = require_root() {
            return crate::skip::skip(e).unwrap_or_default();
        }
        let name = format!("{}-rt", unique_prefix("fnt"));
        let ns = Namespace::create(&name).expect("a namespace");
        let inode = std::fs::metadata(ns.path()).expect("its file").ino();
        let rt = runtime_in(&name).expect("a runtime in it");
        // The name goes first, as when a test tears down while its runtime still lives.
        must(&["ip", "netns", "del", &name]).expect("the name deleted");
        // A blocking task starts a thread of the blocking pool now, after the name is gone.
        // A thread that cannot start never runs the task: waited for, not forever.
        let task =
            rt.spawn_blocking(|| std::fs::metadata("/proc/thread-self/ns/net").map(|m| m.ino()));
        let seen = rt
            .block_on(async {
                tokio::time::timeout(std::time::Duration::from_secs(10), task).await
            })
            .expect("no thread of the runtime started within 10 s")
            .expect("the blocking task ran")
            .expect("its namespace");
        assert_eq!(
            seen, inode,
            "the late thread is not in the runtime's namespace"
        );
        drop(rt);
        drop(ns);
    }
}
