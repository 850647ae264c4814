//! A kernel with what a test needs, when this machine's has not: the test re-runs itself in a
//! user-mode Linux guest (Debian's `user-mode-linux`, `/usr/bin/linux.uml`).
//!
//! The guest's root file system is this machine's own (`hostfs`), so the test binary, `ip`,
//! BIRD and the probe run there from the same paths. The guest mounts a fresh `/run` (its
//! `TMPDIR` is `/run/tmp`: sockets cannot live on hostfs, and `/tmp` may hold the checkout),
//! `/proc` and `/sys`, loads the modules the test names from the guest kernel's own module tree
//! (`/usr/lib/uml/modules/<release>`), and runs the one test with `FERROLB_GUEST=1`. Its output
//! and exit status come back through a directory under `CARGO_TARGET_TMPDIR`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The user-mode Linux kernel Debian's `user-mode-linux` package installs.
pub const UML_KERNEL: &str = "/usr/bin/linux.uml";
/// Set in the guest, so that a guest without the feature fails rather than starting another.
pub const GUEST_ENV: &str = "FERROLB_GUEST";

/// Whether this process runs in the guest.
pub fn in_guest() -> bool {
    std::env::var(GUEST_ENV).is_ok_and(|v| v == "1")
}

/// What one guest run of a test said.
pub struct GuestRun {
    /// The test binary's exit status in the guest (`None`: it never reported one).
    pub status: Option<i32>,
    /// Everything the test and the guest's init printed.
    pub output: String,
}

/// Runs the test `test` of this binary in a user-mode Linux guest, with `modules` (paths under
/// the guest kernel's `kernel/` directory, in load order) loaded first. Waits at most `timeout`.
pub fn run_test_in_guest(test: &str, modules: &[&str], timeout: Duration) -> GuestRun {
    let exe = std::env::current_exe().expect("current test binary");
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("guest-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("test.log");
    let status = dir.join("status");
    let init = dir.join("init");
    let passthrough: String = ["FERROLB_REQUIRE_BINARIES", "RUST_BACKTRACE", "RUST_LOG"]
        .iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| format!("export {k}='{v}'\n")))
        .collect();
    let script = format!(
        "#!/bin/sh\n\
         export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n\
         export {GUEST_ENV}=1 HOME=/root\n{passthrough}\
         mount -t proc proc /proc\n\
         mount -t sysfs sys /sys\n\
         mount -t tmpfs run /run\n\
         mkdir -p /run/netns /run/tmp\n\
         export TMPDIR=/run/tmp\n\
         ip link set lo up\n\
         m=/usr/lib/uml/modules/$(uname -r)/kernel\n\
         for k in {modules}; do insmod \"$m/$k\" || echo \"guest: could not load $k\"; done\n\
         cd '{cwd}'\n\
         '{exe}' --exact '{test}' --nocapture --test-threads 1 > '{log}' 2>&1\n\
         echo $? > '{status}'\n\
         sync\n\
         poweroff -f\n",
        modules = modules.join(" "),
        cwd = std::env::current_dir().unwrap().display(),
        exe = exe.display(),
        log = log.display(),
        status = status.display(),
    );
    std::fs::write(&init, script).unwrap();
    make_executable(&init);
    let mut guest = Command::new(UML_KERNEL)
        .args([
            "mem=1024M",
            "root=/dev/root",
            "rootfstype=hostfs",
            "rootflags=/",
            "rw",
            "con=null",
            "con0=null,fd:2",
            &format!("init={}", init.display()),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("console.log")).unwrap())
        .spawn()
        .expect("start the user-mode Linux guest");
    let started = Instant::now();
    let exited = loop {
        if guest.try_wait().expect("wait for the guest").is_some() {
            break true;
        }
        if started.elapsed() > timeout {
            let _ = guest.kill();
            let _ = guest.wait();
            break false;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    let mut output = read(&log);
    if !exited {
        output.push_str(&format!(
            "\nguest: still running after {timeout:?}, killed\n"
        ));
    }
    let console = read(&dir.join("console.log"));
    let tail: Vec<&str> = console.lines().rev().take(40).collect();
    output.push_str("\n--- guest console (last lines) ---\n");
    for line in tail.into_iter().rev() {
        output.push_str(line);
        output.push('\n');
    }
    let status = read(&status).trim().parse().ok();
    let _ = std::fs::remove_dir_all(&dir);
    GuestRun { status, output }
}

fn make_executable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}
