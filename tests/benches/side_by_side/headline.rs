//! The headline rows: the six figures FerroLB is judged on against MetalLB, in one table, from
//! one run. Four come from this bench's own parts (the controller's IPv6 pool, the lab's route
//! count and idle speaker); the speaker at cluster scale and the controller against the API
//! server's floor are benches of their own crates (`ferrolb-speaker`'s `scale`,
//! `ferrolb-controller`'s `throughput`), which this one runs as `cargo bench` children and reads
//! back from the `figure` lines they print:
//!
//! ```text
//! figure <bench> <system> <name>=<value> <name>=<value> ...
//! ```

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Figures read from the children, by `(bench, system, name)`.
#[derive(Debug, Default)]
pub struct Read(BTreeMap<(String, String, String), f64>);

impl Read {
    /// One figure, when the child printed it.
    pub fn get(&self, bench: &str, system: &str, name: &str) -> Option<f64> {
        self.0
            .get(&(bench.into(), system.into(), name.into()))
            .copied()
    }

    /// Takes the `figure` lines of `text`; other lines are left alone.
    pub fn parse(&mut self, text: &str) {
        for line in text.lines() {
            let mut words = line.split_whitespace();
            let (Some("figure"), Some(bench), Some(system)) =
                (words.next(), words.next(), words.next())
            else {
                continue;
            };
            for pair in words {
                if let Some((name, value)) = pair.split_once('=')
                    && let Ok(v) = value.parse::<f64>()
                {
                    self.0.insert((bench.into(), system.into(), name.into()), v);
                }
            }
        }
    }
}

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate sits in the workspace")
        .to_path_buf()
}

/// Builds the release `ferrolb-controller` and `ferrolb-speaker` this bench runs, so that its
/// figures are those of the commit it prints (`cargo bench -p ferrolb-tests` builds only this
/// crate and its libraries; a binary left from an older build would otherwise be measured).
pub fn build_release_binaries() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(workspace())
        .args([
            "build",
            "--release",
            "-p",
            "ferrolb-controller",
            "-p",
            "ferrolb-speaker",
        ])
        .status()
        .unwrap_or_else(|e| panic!("cargo build could not start: {e}"));
    assert!(status.success(), "cargo build --release failed: {status}");
}

/// Runs `cargo bench -p package --bench bench` with `env`, its stderr passed through and its
/// stdout both echoed to this bench's stderr and parsed into `read`. Cargo does not hold the
/// build directory's lock while a bench runs, so the child builds in the same `target/`.
pub fn run_child(package: &str, bench: &str, env: &[(&str, String)], read: &mut Read) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    eprintln!("side_by_side: cargo bench -p {package} --bench {bench} {env:?}");
    let mut child = Command::new(cargo)
        .current_dir(workspace())
        .args(["bench", "-p", package, "--bench", bench])
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cargo bench --bench {bench} could not start: {e}"));
    let mut text = String::new();
    for line in BufReader::new(child.stdout.take().expect("piped")).lines() {
        let Ok(line) = line else { break };
        eprintln!("  {bench} | {line}");
        text.push_str(&line);
        text.push('\n');
    }
    let status = child.wait().expect("the child bench ran");
    assert!(
        status.success(),
        "cargo bench --bench {bench} failed: {status}"
    );
    read.parse(&text);
}

/// One system's figures for the headline table; `None` where it did not run or has none.
#[derive(Debug, Default, Clone)]
pub struct Column {
    /// Controller CPU once settled after 10,000 Services, percent of a core.
    pub controller_settled_cpu: Option<f64>,
    /// Speaker CPU with nothing changing, percent of a core, and the Services it held.
    pub speaker_idle: Option<(f64, usize)>,
    /// One change to the wire, p50 and p99, ms.
    pub wire: Option<(f64, f64)>,
    /// Of that, the status PATCH's own round trip (the server's part), p50 and p99, ms.
    pub patch: Option<(f64, f64)>,
    /// Controller cold start at 10,000 Services, percent of the API server's floor (the median
    /// of the throughput bench's rounds).
    pub of_floor: Option<f64>,
    /// The lowest and highest of those rounds' percentages.
    pub of_floor_range: Option<(f64, f64)>,
    /// Speaker RSS at cluster scale, MiB.
    pub scale_rss: Option<f64>,
    /// Of that, anonymous and mapped from files (its executable), MiB.
    pub scale_rss_split: Option<(f64, f64)>,
    /// Speaker started to 1,000 routes at BIRD, every run.
    pub routes_1000: Vec<Duration>,
}

/// Prints the headline table: MetalLB, FerroLB, the ratio, FerroLB's target and whether met.
pub fn print(metallb_name: &str, m: &Column, f: &Column) {
    println!();
    println!("headline rows (FerroLB's targets)");
    println!("| row | {metallb_name} | FerroLB | MetalLB / FerroLB | target | met |");
    println!("| --- | --- | --- | --- | --- | --- |");
    let pct = |v: Option<f64>, digits: usize| v.map_or("-".into(), |v| format!("{v:.digits$} %"));
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
        _ => "-".into(),
    };
    let met = |ok: Option<bool>| match ok {
        Some(true) => "met",
        Some(false) => "missed",
        None => "-",
    };
    let row = |what: &str, a: String, b: String, r: String, target: &str, ok: Option<bool>| {
        println!("| {what} | {a} | {b} | {r} | {target} | {} |", met(ok));
    };
    row(
        "controller CPU once settled, 10,000 Services (35-65 s after the last address)",
        pct(m.controller_settled_cpu, 3),
        pct(f.controller_settled_cpu, 3),
        ratio(m.controller_settled_cpu, f.controller_settled_cpu),
        "<= 0.1 %",
        f.controller_settled_cpu.map(|v| v <= 0.1),
    );
    let idle = |c: &Column| {
        c.speaker_idle
            .map_or("-".into(), |(v, n)| format!("{v:.2} % ({n} Services)"))
    };
    row(
        "speaker CPU with nothing changing (80 ms probes, BFD 300 ms x 3)",
        idle(m),
        idle(f),
        ratio(m.speaker_idle.map(|x| x.0), f.speaker_idle.map(|x| x.0)),
        "<= 0.25 %",
        f.speaker_idle.map(|(v, _)| v <= 0.25),
    );
    let wire = |c: &Column| {
        c.wire
            .map_or("-".into(), |(p50, p99)| format!("{p50:.1} / {p99:.1} ms"))
    };
    row(
        "one change to the wire, p50 / p99 (10,000 Services)",
        wire(m),
        wire(f),
        ratio(m.wire.map(|x| x.0), f.wire.map(|x| x.0)),
        "<= 5 / <= 20 ms",
        f.wire.map(|(p50, p99)| p50 <= 5.0 && p99 <= 20.0),
    );
    let of_floor = |c: &Column| match (c.of_floor, c.of_floor_range) {
        (Some(v), Some((lo, hi))) => format!("{v:.0} % (rounds {lo:.0}-{hi:.0} %)"),
        (v, _) => pct(v, 0),
    };
    row(
        "controller cold start, Services/s against the API server's status-patch floor, 10,000",
        of_floor(m),
        of_floor(f),
        "-".into(),
        ">= 90 %",
        f.of_floor.map(|v| v >= 90.0),
    );
    let mib = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.1} MiB"));
    row(
        "speaker RSS, 10,000 LoadBalancer + 50,000 other Services, 1,000 Nodes",
        mib(m.scale_rss),
        mib(f.scale_rss),
        ratio(m.scale_rss, f.scale_rss),
        "<= 56 MiB",
        f.scale_rss.map(|v| v <= 56.0),
    );
    let routes = |c: &Column| {
        if c.routes_1000.is_empty() {
            return "-".to_string();
        }
        let ms: Vec<String> = c
            .routes_1000
            .iter()
            .map(|d| d.as_millis().to_string())
            .collect();
        format!("{} ms", ms.join(", "))
    };
    let slowest = |c: &Column| c.routes_1000.iter().max().map(|d| d.as_secs_f64());
    row(
        "speaker started -> 1,000 routes at BIRD, every run",
        routes(m),
        routes(f),
        ratio(slowest(m), slowest(f)),
        "<= 0.3 s in every run",
        slowest(f).map(|v| v <= 0.3),
    );
    let patch = |c: &Column| {
        c.patch
            .map_or("-".into(), |(p50, p99)| format!("{p50:.1} / {p99:.1} ms"))
    };
    println!();
    println!(
        "of the change to the wire, the status PATCH's own round trip (the API server's part), \
         p50 / p99: {metallb_name}'s run {}, FerroLB's run {}",
        patch(m),
        patch(f)
    );
    let split = |c: &Column| {
        c.scale_rss_split.map_or("-".into(), |(anon, file)| {
            format!("{anon:.1} MiB anonymous, {file:.1} MiB mapped from files")
        })
    };
    println!(
        "of the speaker's RSS at cluster scale: {metallb_name}'s {}, FerroLB's {}",
        split(m),
        split(f)
    );
}
