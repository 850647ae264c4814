//! Where a bench's figures come from: printed above every table a bench produces, so that a
//! reader can tell which commit, build and machine gave them.

use std::path::Path;
use std::process::Command;

/// One line: the commit (with `+uncommitted changes` when the tree differs from it), the build
/// profile, the CPU model and its core count, and the kernel.
pub fn line() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root");
    let git = |args: &[&str]| {
        Command::new("git")
            .arg("-C")
            .arg(root)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let dirty =
        git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|k| k.trim().to_owned())
        .unwrap_or_default();
    format!(
        "commit {commit}{}, {} build, {cpu} ({cores} cores), kernel {kernel}",
        if dirty { "+uncommitted changes" } else { "" },
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    )
}

/// Prints [`line()`] as a bench's first output line.
pub fn print() {
    println!("figures from {}", line());
}
