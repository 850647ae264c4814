//! Debian's Prometheus beside the lab, in the switch namespace: it scrapes the controller and
//! every speaker as the chart's ServiceMonitor does (one job per metrics Service, named as the
//! chart names them for release `ferrolb`, and a `node` label on each speaker's series),
//! evaluates the alert rules it is given, and answers its HTTP API on 127.0.0.1:9090 there.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use super::{Lab, LabError, Result};
use crate::netns::topology::{NODE_NAMES, node_v4};
use crate::netns::{self, Process};

/// Where it listens, in the switch namespace.
pub const LISTEN: ([u8; 4], u16) = ([127, 0, 0, 1], 9090);

/// The job of the controller's and the speakers' series: the chart's metrics Services for
/// release `ferrolb` (a ServiceMonitor's job is the Service's name).
pub const CONTROLLER_JOB: &str = "ferrolb-controller-metrics";
/// See [`CONTROLLER_JOB`].
pub const SPEAKER_JOB: &str = "ferrolb-speaker-metrics";

/// The Prometheus binary Debian's `prometheus` package installs.
pub const BINARY: &str = "/usr/bin/prometheus";

/// Why the chart's rules could not be rendered.
#[derive(Debug)]
pub enum RulesError {
    /// Helm's Python package (helm-python-sdk) is not installed.
    NoHelm(String),
    /// Helm refused the chart, or rendered no PrometheusRule.
    Refused(String),
}

/// The chart's PrometheusRule `spec` (its rule groups, as a Prometheus rules file holds them),
/// rendered by real Helm (`charts/tests/render.py`) with every alert's `for:` set to `for_`
/// (such as `5s`; the chart's defaults are minutes).
pub fn chart_rules(for_: &str) -> std::result::Result<Value, RulesError> {
    let values = json!({"enabled": true, "addressPoolUsageFor": for_, "bgpSessionDownFor": for_,
                        "addressNotAnnouncedFor": for_, "speakerDownFor": for_,
                        "addressPoolUsage": {"info": 75, "warning": 85, "critical": 95}});
    let out = std::process::Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../charts/tests/render.py"
        ))
        .args(["--namespace", super::INSTALL_NS])
        .arg("--set-json")
        .arg(format!("metrics.prometheusRule={values}"))
        .output()
        .map_err(|e| RulesError::NoHelm(format!("python3 does not run: {e}")))?;
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_owned();
    match out.status.code() {
        Some(0) => {}
        Some(3) => return Err(RulesError::NoHelm(stderr)),
        _ => return Err(RulesError::Refused(stderr)),
    }
    let yaml = String::from_utf8_lossy(&out.stdout).into_owned();
    serde_norway::Deserializer::from_str(&yaml)
        .filter_map(|d| serde::Deserialize::deserialize(d).ok())
        .find(|d: &Value| d["kind"] == "PrometheusRule")
        .map(|rule| rule["spec"].clone())
        .ok_or_else(|| RulesError::Refused("the chart rendered no PrometheusRule".into()))
}

/// A running Prometheus; stopped when dropped.
pub struct Prometheus {
    process: Process,
    ns: String,
    /// Its configuration, rules and data.
    pub dir: PathBuf,
}

/// One alert that is pending or firing, as `/api/v1/alerts` lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct ActiveAlert {
    /// `alertname`.
    pub name: String,
    /// `pending` or `firing`.
    pub state: String,
    /// Its labels.
    pub labels: serde_json::Map<String, Value>,
}

impl Prometheus {
    /// Starts Prometheus scraping `lab` every `interval` (rules evaluated as often), with the
    /// rule groups `rules` (a PrometheusRule's `spec`), its files in `dir`; returns once it
    /// answers.
    pub fn start(lab: &Lab, interval: Duration, rules: &Value, dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir.join("data")).map_err(io("creating the Prometheus dir"))?;
        let secs = format!("{}ms", interval.as_millis());
        let speakers: Vec<Value> = NODE_NAMES
            .iter()
            .enumerate()
            .map(|(i, node)| {
                json!({"targets": [format!("{}:7473", node_v4(i))], "labels": {"node": node}})
            })
            .collect();
        let config = json!({
            "global": {"scrape_interval": secs, "evaluation_interval": secs,
                       "scrape_timeout": secs},
            "rule_files": ["rules.json"],
            "scrape_configs": [
                {"job_name": CONTROLLER_JOB,
                 "static_configs": [{"targets": ["127.0.0.1:7472"]}]},
                {"job_name": SPEAKER_JOB, "static_configs": speakers},
            ],
        });
        std::fs::write(dir.join("prometheus.json"), config.to_string())
            .map_err(io("writing prometheus.json"))?;
        std::fs::write(dir.join("rules.json"), rules.to_string())
            .map_err(io("writing rules.json"))?;
        let listen = SocketAddr::from(LISTEN).to_string();
        let args = [
            BINARY.to_string(),
            format!("--config.file={}", dir.join("prometheus.json").display()),
            format!("--storage.tsdb.path={}", dir.join("data").display()),
            format!("--web.listen-address={listen}"),
            "--log.level=warn".into(),
        ];
        let process = lab.topo.switch.spawn(&args, &dir.join("prometheus.log"))?;
        let p = Prometheus {
            process,
            ns: lab.topo.switch.name().to_owned(),
            dir: dir.to_owned(),
        };
        let started = std::time::Instant::now();
        while p.get("/-/ready").is_none() {
            if started.elapsed() > Duration::from_secs(30) {
                return Err(LabError::Timeout {
                    what: format!("Prometheus to answer; its log:\n{}", p.process.output()),
                    after: started.elapsed(),
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(p)
    }

    /// `GET path` (with its query) from its HTTP API: the body, or `None` when it does not
    /// answer 200.
    pub fn get(&self, path: &str) -> Option<String> {
        use std::io::{Read, Write};
        let request = format!("GET {path} HTTP/1.0\r\nHost: prometheus\r\n\r\n");
        netns::in_namespace(&self.ns, move || {
            let addr = SocketAddr::from(LISTEN);
            let mut s =
                std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
            s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
            s.write_all(request.as_bytes()).ok()?;
            let mut response = String::new();
            s.read_to_string(&mut response).ok()?;
            let (head, body) = response.split_once("\r\n\r\n")?;
            head.starts_with("HTTP/1.0 200")
                .then(|| body.to_owned())
                .or_else(|| head.starts_with("HTTP/1.1 200").then(|| body.to_owned()))
        })
        .ok()
        .flatten()
    }

    /// The alerts pending or firing now.
    pub fn alerts(&self) -> Option<Vec<ActiveAlert>> {
        let body: Value = serde_json::from_str(&self.get("/api/v1/alerts")?).ok()?;
        Some(
            body["data"]["alerts"]
                .as_array()?
                .iter()
                .map(|a| {
                    let labels = a["labels"].as_object().cloned().unwrap_or_default();
                    ActiveAlert {
                        name: labels["alertname"].as_str().unwrap_or_default().to_owned(),
                        state: a["state"].as_str().unwrap_or_default().to_owned(),
                        labels,
                    }
                })
                .collect(),
        )
    }

    /// The value of instant query `query`'s first sample, when it has one.
    pub fn query(&self, query: &str) -> Option<f64> {
        let encoded: String = query
            .bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect();
        let body: Value =
            serde_json::from_str(&self.get(&format!("/api/v1/query?query={encoded}"))?).ok()?;
        body["data"]["result"][0]["value"][1].as_str()?.parse().ok()
    }

    /// What it logged.
    pub fn log(&self) -> String {
        self.process.output()
    }
}

fn io(what: &'static str) -> impl Fn(std::io::Error) -> LabError {
    move |source| LabError::Io {
        context: what.into(),
        source,
    }
}
