//! What `/proc` says of a process the benches started: its memory and the CPU time it used.

use std::time::Duration;

/// A `kB` field of `/proc/PID/status` (`VmRSS:`, `VmHWM:` …) in KiB; 0 when unreadable.
pub fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// CPU time of the process so far, to the nanosecond: the sum of `/proc/PID/task/*/schedstat`
/// (time on a CPU, per thread). Threads that exited are not counted, so [`cpu_time`] is used
/// where a window may lose threads; over a window where none exits, the difference of two
/// readings is exact where [`cpu_time`] rounds to 10 ms ticks (one tick in 30 s is 0.033 %).
pub fn cpu_time_ns(pid: u32) -> Duration {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Duration::ZERO;
    };
    let ns: u64 = tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    Duration::from_nanos(ns)
}

/// A process's CPU use over a window, measured both ways.
#[derive(Clone, Copy, Debug)]
pub struct CpuWindow {
    pid: u32,
    started: std::time::Instant,
    ticks: Duration,
    ns: Duration,
}

impl CpuWindow {
    /// Starts a window now.
    pub fn start(pid: u32) -> CpuWindow {
        CpuWindow {
            pid,
            started: std::time::Instant::now(),
            ticks: cpu_time(pid),
            ns: cpu_time_ns(pid),
        }
    }

    /// The share of one core used since [`CpuWindow::start`], in percent, from the nanosecond
    /// counters; and the same from clock ticks, which also count threads that exited.
    pub fn percent(&self) -> (f64, f64) {
        let wall = self.started.elapsed().as_secs_f64();
        let ns = cpu_time_ns(self.pid).saturating_sub(self.ns).as_secs_f64();
        let ticks = cpu_time(self.pid).saturating_sub(self.ticks).as_secs_f64();
        (ns / wall * 100.0, ticks / wall * 100.0)
    }

    /// One clock tick over the window so far, in percent: the resolution of the tick figure.
    pub fn tick_resolution_percent(&self) -> f64 {
        0.01 / self.started.elapsed().as_secs_f64() * 100.0
    }
}

/// User plus system CPU time of the process so far (`/proc/PID/stat`, at 100 ticks a second).
pub fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i).and_then(|f| f.parse::<u64>().ok()))
        .sum();
    Duration::from_millis(ticks * 10)
}
