//! A kernel with what a test needs, when this machine's has not: the test re-runs itself in a
//! QEMU guest booting Debian's own packaged kernel (the kit `scripts/guest-kernel` builds in
//! `target/guest-kernel`).
//!
//! The guest's root file system is this machine's own, shared by QEMU over virtio-9p, so the test
//! binary, `ip`, BIRD and the probe run there from the same paths. The kit's initramfs loads the
//! modules (virtio, 9p, VRF, veth), mounts that share and hands over to an init this module
//! writes: it mounts a fresh `/run` (the guest's `TMPDIR` is `/run/tmp`: `/tmp` may hold the
//! checkout), `/proc`, `/sys` and `/dev`, runs the one test with `FERROLB_GUEST=1`, and powers
//! off. Its output and exit status come back through a directory under `CARGO_TARGET_TMPDIR`.
//!
//! Nothing depends on the CPU: the guest sees QEMU's generic `qemu64` model under KVM and QEMU's
//! own emulation (TCG) where `/dev/kvm` is missing, cannot be opened, or its guest does not reach
//! the initramfs within [`KVM_BOOT_WATCHDOG`] (seen on a machine whose nested KVM hangs in the
//! kernel's decompressor). `FERROLB_GUEST_ACCEL=tcg` or `=kvm` forces one.
#![allow(dead_code)]

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The QEMU binary Debian's `qemu-system-x86` package installs.
pub const QEMU: &str = "qemu-system-x86_64";
/// Set in the guest, so that a guest without the feature fails rather than starting another.
pub const GUEST_ENV: &str = "FERROLB_GUEST";
/// Where the kit is, when not in the workspace's `target/guest-kernel`.
pub const KIT_ENV: &str = "FERROLB_GUEST_KERNEL_DIR";
/// `kvm`, `tcg` or `auto` (the default): how QEMU runs the guest.
pub const ACCEL_ENV: &str = "FERROLB_GUEST_ACCEL";
/// How long a KVM guest has to reach its initramfs before the run falls back to TCG. A working
/// KVM gets there in about a second; TCG in two to three.
pub const KVM_BOOT_WATCHDOG: Duration = Duration::from_secs(10);
/// What the kernel prints when it starts the initramfs's `/init`.
const REACHED_INIT: &str = "Run /init as init process";

/// Whether this process runs in the guest.
pub fn in_guest() -> bool {
    std::env::var(GUEST_ENV).is_ok_and(|v| v == "1")
}

/// The kernel and initramfs `scripts/guest-kernel` builds.
pub struct Kit {
    /// Debian's kernel image.
    pub kernel: PathBuf,
    /// The initramfs that mounts the host's root over 9p.
    pub initrd: PathBuf,
    /// The kernel's release, as `uname -r` prints it in the guest.
    pub release: String,
}

impl Kit {
    /// The kit's directory: `$FERROLB_GUEST_KERNEL_DIR`, or the workspace's `target/guest-kernel`.
    pub fn dir() -> PathBuf {
        ferrolb_tests::built_dir(KIT_ENV, "guest-kernel")
    }

    /// The kit, or why there is none.
    pub fn find() -> Result<Kit, String> {
        let dir = Self::dir();
        let release = std::fs::read_to_string(dir.join("release")).map_err(|e| {
            format!(
                "no guest kernel in {} ({e}): run scripts/guest-kernel",
                dir.display()
            )
        })?;
        let kit = Kit {
            kernel: dir.join("vmlinuz"),
            initrd: dir.join("initrd.gz"),
            release: release.trim().to_owned(),
        };
        for f in [&kit.kernel, &kit.initrd] {
            if !f.is_file() {
                return Err(format!(
                    "{} is missing: run scripts/guest-kernel",
                    f.display()
                ));
            }
        }
        Ok(kit)
    }
}

/// How QEMU ran a guest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accel {
    /// Hardware virtualisation through `/dev/kvm`.
    Kvm,
    /// QEMU's own emulation.
    Tcg,
}

impl fmt::Display for Accel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Accel::Kvm => "a QEMU guest with KVM",
            Accel::Tcg => "a QEMU guest without KVM (TCG)",
        })
    }
}

/// What one guest run of a test said.
pub struct GuestRun {
    /// How the guest ran.
    pub accel: Accel,
    /// Why KVM was not used, where `/dev/kvm` exists but the run fell back to TCG.
    pub kvm_fallback: Option<String>,
    /// From QEMU's start to its exit (the last try only).
    pub took: Duration,
    /// The test binary's exit status in the guest (`None`: it never reported one).
    pub status: Option<i32>,
    /// Why the run failed, in one line (the kernel's panic line, the guest's own error, QEMU's
    /// error, a time-out, or the test's failure); `None` when the test passed.
    pub failure: Option<String>,
    /// Everything the test printed, then the guest console's last lines.
    pub output: String,
}

impl GuestRun {
    /// One line: which way the test ran and how long the guest took.
    pub fn summary(&self) -> String {
        let fallback = self
            .kvm_fallback
            .as_deref()
            .map(|why| format!("; KVM not used: {why}"))
            .unwrap_or_default();
        format!(
            "in {}, which took {:.1} s{fallback}",
            self.accel,
            self.took.as_secs_f64()
        )
    }
}

/// Runs the test `test` of this binary in a QEMU guest booting the kit's kernel. Waits at most
/// `timeout` for the guest (once more when KVM gave up before the initramfs).
pub fn run_test_in_guest(kit: &Kit, test: &str, timeout: Duration) -> GuestRun {
    let forced = std::env::var(ACCEL_ENV).unwrap_or_default();
    let kvm = match forced.as_str() {
        "tcg" => Err(format!("{ACCEL_ENV}=tcg")),
        "kvm" => Ok(()),
        _ => kvm_opens(),
    };
    let mut kvm_fallback = None;
    match kvm {
        Ok(()) => {
            let run = run_once(kit, test, None, timeout, Accel::Kvm);
            match run {
                Attempt::Done(r) => return r,
                Attempt::KvmNoBoot(why) if forced != "kvm" => kvm_fallback = Some(why),
                Attempt::KvmNoBoot(why) => {
                    return GuestRun {
                        accel: Accel::Kvm,
                        kvm_fallback: None,
                        took: KVM_BOOT_WATCHDOG,
                        status: None,
                        failure: Some(why.clone()),
                        output: why,
                    };
                }
            }
        }
        Err(why) => {
            if Path::new("/dev/kvm").exists() {
                kvm_fallback = Some(why);
            }
        }
    }
    match run_once(kit, test, None, timeout, Accel::Tcg) {
        Attempt::Done(mut r) => {
            r.kvm_fallback = kvm_fallback;
            r
        }
        Attempt::KvmNoBoot(_) => unreachable!("only a KVM run has a boot watchdog"),
    }
}

/// Whether `/dev/kvm` opens for reading and writing.
fn kvm_opens() -> Result<(), String> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .map(drop)
        .map_err(|e| format!("/dev/kvm: {e}"))
}

enum Attempt {
    Done(GuestRun),
    /// The KVM guest did not reach its initramfs in time, or QEMU could not start it.
    KvmNoBoot(String),
}

/// The guest's files: the init it runs, and what it writes back.
struct GuestDir {
    dir: PathBuf,
}

impl GuestDir {
    fn new(test: &str) -> GuestDir {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("guest-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        GuestDir { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name)).unwrap_or_default()
    }

    /// The init the kit's initramfs hands over to: runs `test` of this binary, writes its output
    /// and exit status here, and powers the guest off.
    fn write_init(&self, test: &str) -> PathBuf {
        let exe = std::env::current_exe().expect("current test binary");
        let passthrough: String = ["FERROLB_REQUIRE_BINARIES", "RUST_BACKTRACE", "RUST_LOG"]
            .iter()
            .filter_map(|k| std::env::var(k).ok().map(|v| format!("export {k}='{v}'\n")))
            .collect();
        let script = format!(
            "#!/bin/sh\n\
             export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n\
             export {GUEST_ENV}=1 HOME=/root\n{passthrough}\
             fail() {{ echo \"guest: $*\" > /dev/console; sync; echo o > /proc/sysrq-trigger; sleep 30; }}\n\
             mount -t proc proc /proc || fail 'could not mount /proc'\n\
             mount -t sysfs sys /sys || fail 'could not mount /sys'\n\
             mount -t devtmpfs dev /dev || fail 'could not mount /dev'\n\
             mount -t tmpfs run /run || fail 'could not mount /run'\n\
             mkdir -p /run/netns /run/tmp\n\
             export TMPDIR=/run/tmp\n\
             ip link set lo up\n\
             cd '{cwd}' || fail 'no directory {cwd} on the shared root'\n\
             '{exe}' --exact '{test}' --nocapture --test-threads 1 > '{log}' 2>&1\n\
             echo $? > '{status}'\n\
             sync\n\
             echo o > /proc/sysrq-trigger\n\
             sleep 30\n",
            cwd = std::env::current_dir().unwrap().display(),
            exe = exe.display(),
            log = self.path("test.log").display(),
            status = self.path("status").display(),
        );
        let init = self.path("init");
        std::fs::write(&init, script).unwrap();
        make_executable(&init);
        init
    }
}

impl Drop for GuestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Boots the kit with `init` (a path on this machine's root) instead of a test's init, under
/// TCG: how a guest that cannot start its init fails.
pub fn boot_with_init(kit: &Kit, init: &Path, timeout: Duration) -> GuestRun {
    match run_once(kit, "boot", Some(init), timeout, Accel::Tcg) {
        Attempt::Done(r) => r,
        Attempt::KvmNoBoot(_) => unreachable!("only a KVM run has a boot watchdog"),
    }
}

fn run_once(
    kit: &Kit,
    test: &str,
    init: Option<&Path>,
    timeout: Duration,
    accel: Accel,
) -> Attempt {
    let files = GuestDir::new(test);
    let init = match init {
        Some(i) => i.to_owned(),
        None => files.write_init(test),
    };
    let console = files.path("console.log");
    let (accel_arg, cpu) = match accel {
        Accel::Kvm => ("kvm", "qemu64"),
        Accel::Tcg => ("tcg", "max"),
    };
    let started = Instant::now();
    let guest = Command::new(QEMU)
        .args([
            "-nodefaults",
            "-no-user-config",
            "-display",
            "none",
            "-no-reboot",
        ])
        .args(["-accel", accel_arg, "-cpu", cpu, "-smp", "2", "-m", "1024"])
        .arg("-kernel")
        .arg(&kit.kernel)
        .arg("-initrd")
        .arg(&kit.initrd)
        .arg("-append")
        .arg(format!(
            "console=ttyS0 panic=-1 ferrolb.init={}",
            init.display()
        ))
        .args([
            "-fsdev",
            "local,id=hostroot,path=/,security_model=none,multidevs=remap",
            "-device",
            "virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot",
            "-net",
            "none",
        ])
        .arg("-serial")
        .arg(format!("file:{}", console.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(files.path("qemu.log")).unwrap())
        .spawn();
    let mut guest = match guest {
        Ok(g) => g,
        Err(e) => {
            let why = format!("could not start {QEMU}: {e}");
            return Attempt::Done(GuestRun {
                accel,
                kvm_fallback: None,
                took: Duration::ZERO,
                status: None,
                failure: Some(why.clone()),
                output: why,
            });
        }
    };
    let mut timed_out = false;
    loop {
        if guest.try_wait().expect("wait for the guest").is_some() {
            break;
        }
        let elapsed = started.elapsed();
        if accel == Accel::Kvm
            && elapsed > KVM_BOOT_WATCHDOG
            && !files.read("console.log").contains(REACHED_INIT)
        {
            stop(&mut guest);
            return Attempt::KvmNoBoot(format!(
                "its guest did not reach the initramfs within {KVM_BOOT_WATCHDOG:?} \
                 (console's last line: {:?})",
                last_line(&files.read("console.log"))
            ));
        }
        if elapsed > timeout {
            stop(&mut guest);
            timed_out = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let took = started.elapsed();
    let console = files.read("console.log");
    let qemu = files.read("qemu.log");
    let log = files.read("test.log");
    let status = files.read("status").trim().parse().ok();
    if accel == Accel::Kvm && !console.contains(REACHED_INIT) && status.is_none() {
        // QEMU itself gave up under KVM (an MSR it could not set, say).
        let why = first_qemu_error(&qemu).unwrap_or_else(|| "QEMU exited at once".into());
        return Attempt::KvmNoBoot(why);
    }
    let failure = why_failed(&console, &qemu, &log, status, timed_out.then_some(timeout));
    let mut output = log;
    output.push_str("\n--- guest console (last lines) ---\n");
    for line in tail(&console, 40) {
        output.push_str(line);
        output.push('\n');
    }
    if !qemu.trim().is_empty() {
        output.push_str("--- QEMU ---\n");
        output.push_str(&qemu);
    }
    Attempt::Done(GuestRun {
        accel,
        kvm_fallback: None,
        took,
        status,
        failure,
        output,
    })
}

/// `line` up to a kernel message written into it. The kernel prints on the console directly,
/// while a process's line waits in the tty's buffer: the power-off that follows the guest's
/// own error can land before that line's newline (`...on the host's root[    4.725453] sysrq:
/// Power Off`).
fn before_kernel_message(line: &str) -> &str {
    let stamp_at = line.match_indices('[').map(|(i, _)| i).find(|&i| {
        let rest = line[i + 1..].trim_start();
        let Some((secs, _)) = rest.split_once(']') else {
            return false;
        };
        secs.split_once('.').is_some_and(|(a, b)| {
            !a.is_empty()
                && !b.is_empty()
                && a.bytes().all(|c| c.is_ascii_digit())
                && b.bytes().all(|c| c.is_ascii_digit())
        })
    });
    stamp_at.map_or(line, |i| line[..i].trim_end())
}

fn stop(guest: &mut Child) {
    let _ = guest.kill();
    let _ = guest.wait();
}

/// Why a guest run failed, in one line, most telling first: a kernel panic, the guest's own
/// error (`guest: ...`), QEMU's error, a time-out, a missing exit status, the test's failure.
pub fn why_failed(
    console: &str,
    qemu: &str,
    log: &str,
    status: Option<i32>,
    timed_out: Option<Duration>,
) -> Option<String> {
    if status == Some(0) {
        return None;
    }
    let strip = |l: &str| {
        // The kernel's `[    5.296762] ` time stamp.
        match l
            .trim_start()
            .strip_prefix('[')
            .and_then(|r| r.split_once("] "))
        {
            Some((_, rest)) => rest.trim().to_owned(),
            None => l.trim().to_owned(),
        }
    };
    let panic = console.lines().find(|l| l.contains("Kernel panic"));
    if let Some(l) = panic {
        return Some(format!("the guest's kernel died: {}", strip(l)));
    }
    if let Some(l) = console.lines().find(|l| strip(l).starts_with("guest: ")) {
        return Some(before_kernel_message(&strip(l)).to_owned());
    }
    if let Some(e) = first_qemu_error(qemu) {
        return Some(e);
    }
    if let Some(t) = timed_out {
        return Some(format!(
            "guest: still running after {t:?}, killed (console's last line: {:?})",
            last_line(console)
        ));
    }
    match status {
        None => Some(format!(
            "guest: the test reported no exit status (console's last line: {:?})",
            last_line(console)
        )),
        Some(code) => {
            let why = log
                .lines()
                .find(|l| l.contains("panicked at"))
                .map(|l| {
                    let next = log.lines().skip_while(|x| *x != l).nth(1).unwrap_or("");
                    format!("{} {}", l.trim(), next.trim())
                })
                .unwrap_or_default();
            Some(format!("the test failed in the guest (exit {code}): {why}"))
        }
    }
}

fn first_qemu_error(qemu: &str) -> Option<String> {
    qemu.lines()
        .find(|l| l.contains("error") || l.contains("Assertion") || l.contains("failed"))
        .map(|l| l.trim().to_owned())
}

fn last_line(text: &str) -> &str {
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
}

fn tail(text: &str, n: usize) -> Vec<&str> {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].to_vec()
}

fn make_executable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}
