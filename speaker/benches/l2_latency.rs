//! ARP / NDP answer latency on the wire, request to reply, from tcpdump timestamps in the
//! client namespace: the responder (`l2-probe`) against the Linux kernel on the same node.
//!
//! ```text
//! cargo bench -p ferrolb-speaker --bench l2_latency         # LATENCY_SAMPLES=300 by default
//! ```
//! Needs root, `ip`, `arping`, `ndisc6`, `tcpdump`. The kernel answers for 10.99.0.50 and
//! fd00:99::50 (assigned to the node), the responder for 10.99.0.100 and fd00:99::100, asked in
//! turns. It measures with the host idle, then with `LATENCY_LOAD` (2) busy loops per core
//! started in the node's namespace (0 skips that part). Needs `taskset` too.

#[path = "../tests/l2_lab/mod.rs"]
mod l2_lab;

use l2_lab::{Lab, run};
use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Request→reply delays in microseconds for `target`, from `tcpdump -tt -n` lines.
fn delays(dump: &str, target: &str) -> Vec<f64> {
    let mut pending: Option<f64> = None;
    let mut out = Vec::new();
    for line in dump.lines() {
        let Some((ts, rest)) = line.split_once(' ') else {
            continue;
        };
        let Ok(ts) = ts.parse::<f64>() else { continue };
        // Our own gratuitous requests ("who-has X tell X") are announcements, not questions.
        let ask = (rest.contains(&format!("who-has {target} "))
            && !rest.contains(&format!("tell {target},")))
            || rest.contains(&format!("who has {target},"));
        let answer = rest.contains(&format!("Reply {target} is-at"))
            || rest.contains(&format!("tgt is {target},"));
        if ask {
            pending = Some(ts);
        } else if answer && let Some(t0) = pending.take() {
            out.push((ts - t0) * 1e6);
        }
    }
    out
}

fn summary(name: &str, mut us: Vec<f64>) {
    if us.is_empty() {
        println!("{name}: no samples");
        return;
    }
    us.sort_by(|a, b| a.total_cmp(b));
    let pick = |q: f64| us[((us.len() - 1) as f64 * q).round() as usize];
    println!(
        "{name}: n={} median={:.1} us p90={:.1} us p99={:.1} us max={:.1} us",
        us.len(),
        pick(0.5),
        pick(0.9),
        pick(0.99),
        us[us.len() - 1]
    );
}

fn main() {
    ferrolb_tests::provenance::print();
    let samples: usize = std::env::var("LATENCY_SAMPLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    if run("sh", &["-c", "command -v tcpdump"]).stdout.is_empty() {
        eprintln!("skipped: tcpdump is not installed");
        return;
    }
    let Some(mut lab) = Lab::new(1) else { return };
    let node = lab.node(0).to_string();
    run(
        "ip",
        &["-n", &node, "addr", "add", "10.99.0.50/24", "dev", "eth0"],
    );
    run(
        "ip",
        &[
            "-n",
            &node,
            "addr",
            "add",
            "fd00:99::50/64",
            "dev",
            "eth0",
            "nodad",
        ],
    );
    lab.start_probe(0, &["10.99.0.100".into(), "fd00:99::100".into()], false);
    lab.wait_for_probes();
    let client = lab.client().to_string();
    let loads: usize = std::env::var("LATENCY_LOAD")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    for per_core in [0, loads] {
        // Busy loops started in the node's namespace (the namespaces share the host's cores).
        let mut busy: Vec<_> = (0..per_core * cores)
            .map(|k| {
                Command::new("ip")
                    .args(["netns", "exec", &node, "taskset", "-c"])
                    .arg((k % cores).to_string())
                    .args(["sh", "-c", "while :; do :; done"])
                    .spawn()
                    .expect("a busy loop starts")
            })
            .collect();
        let results = measure(&client, samples);
        for b in &mut busy {
            let _ = b.kill();
            let _ = b.wait();
        }
        if per_core == 0 {
            println!("host idle:");
        } else {
            println!("host loaded ({per_core} busy loops per core, {cores} cores):");
        }
        summary("ARP, Linux kernel      ", results["10.99.0.50"].clone());
        summary("ARP, FerroLB responder ", results["10.99.0.100"].clone());
        summary("NDP, Linux kernel      ", results["fd00:99::50"].clone());
        summary("NDP, FerroLB responder ", results["fd00:99::100"].clone());
        if loads == 0 {
            break;
        }
    }
}

/// Asks each target `samples` times from `client`, the kernel's and the responder's
/// addresses taking turns (so both see the same moments of the host), and returns each
/// target's request-to-reply delays.
fn measure(client: &str, samples: usize) -> HashMap<&'static str, Vec<f64>> {
    // To a file: a pipe nobody reads fills up and tcpdump then drops packets.
    let dump_path = std::env::temp_dir().join(format!("l2-latency-{}.txt", std::process::id()));
    let filter = "arp or icmp6";
    let mut dump = Command::new("ip")
        .args([
            "netns", "exec", client, "tcpdump", "-tt", "-n", "-l", "-i", "eth0", filter,
        ])
        .stdout(std::fs::File::create(&dump_path).expect("dump file"))
        .stderr(Stdio::null())
        .spawn()
        .expect("tcpdump");
    std::thread::sleep(Duration::from_millis(500));
    let ask = |args: &[&str]| {
        let mut all = vec!["netns", "exec", client];
        all.extend_from_slice(args);
        run("ip", &all);
    };
    // iputils arping takes whole seconds as interval: one process per sample instead.
    for _ in 0..samples {
        for target in ["10.99.0.50", "10.99.0.100"] {
            ask(&["arping", "-c", "1", "-w", "1", "-I", "eth0", target]);
        }
    }
    for _ in 0..samples {
        for target in ["fd00:99::50", "fd00:99::100"] {
            ask(&["ndisc6", "-n", "-r", "1", "-w", "200", target, "eth0"]);
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    let _ = dump.kill();
    let _ = dump.wait();
    let text = std::fs::read_to_string(&dump_path).unwrap_or_default();
    let _ = std::fs::remove_file(&dump_path);
    ["10.99.0.50", "10.99.0.100", "fd00:99::50", "fd00:99::100"]
        .into_iter()
        .map(|t| (t, delays(&text, t)))
        .collect()
}
