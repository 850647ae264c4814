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
    threads(pid).values().map(|t| t.cpu).sum()
}

/// What one thread of a process has used so far (`/proc/PID/task/TID/`), or over a window
/// ([`threads_between`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadUse {
    /// The thread's name (`comm`).
    pub name: String,
    /// Its time on a CPU.
    pub cpu: Duration,
    /// How many times it was put on a CPU (the third field of `schedstat`): its wake-ups, for
    /// a thread that sleeps between inputs, plus its returns after [`ThreadUse::preempted`].
    pub runs: u64,
    /// How many times another task took its CPU while it could still run
    /// (`nonvoluntary_ctxt_switches`): a thread that wakes a task on its own CPU (sends it a
    /// packet) is often preempted by it, and runs once more to finish.
    pub preempted: u64,
}

impl ThreadUse {
    /// Times it woke from a sleep: its runs less its returns after a preemption.
    pub fn wakeups(&self) -> u64 {
        self.runs.saturating_sub(self.preempted)
    }
}

/// Every thread of the process now, by thread id.
pub fn threads(pid: u32) -> std::collections::BTreeMap<u32, ThreadUse> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Default::default();
    };
    tasks
        .flatten()
        .filter_map(|t| {
            let tid = t.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(t.path().join("schedstat")).ok()?;
            let mut f = stat.split_whitespace().map(|v| v.parse::<u64>().ok());
            let cpu = f.next()??;
            let runs = f.nth(1)??;
            let name = std::fs::read_to_string(t.path().join("comm")).ok()?;
            let status = std::fs::read_to_string(t.path().join("status")).ok()?;
            let preempted = status
                .lines()
                .find_map(|l| l.strip_prefix("nonvoluntary_ctxt_switches:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            Some((
                tid,
                ThreadUse {
                    name: name.trim().to_string(),
                    cpu: Duration::from_nanos(cpu),
                    runs,
                    preempted,
                },
            ))
        })
        .collect()
}

/// What each thread alive at both readings used between them, by name (threads of one name
/// added up), busiest first.
pub fn threads_between(
    before: &std::collections::BTreeMap<u32, ThreadUse>,
    after: &std::collections::BTreeMap<u32, ThreadUse>,
) -> Vec<ThreadUse> {
    let mut by_name: std::collections::BTreeMap<&str, ThreadUse> = Default::default();
    for (tid, a) in after {
        let Some(b) = before.get(tid) else { continue };
        let e = by_name.entry(&a.name).or_insert_with(|| ThreadUse {
            name: a.name.clone(),
            cpu: Duration::ZERO,
            runs: 0,
            preempted: 0,
        });
        e.cpu += a.cpu.saturating_sub(b.cpu);
        e.runs += a.runs.saturating_sub(b.runs);
        e.preempted += a.preempted.saturating_sub(b.preempted);
    }
    let mut out: Vec<_> = by_name.into_values().collect();
    out.sort_by_key(|x| std::cmp::Reverse(x.cpu));
    out
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
