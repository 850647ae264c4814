//! FerroLB's Grafana dashboard (`charts/ferrolb/dashboards/ferrolb.json`) as the tests read it,
//! and the metric names the binaries' code declares, spelt as they appear on `/metrics`.
//!
//! Shared by the chart suite (`tests/tests/chart/dashboard.rs`: the names against the code) and
//! `tests/tests/e2e_dashboard.rs` (the names against a live scrape of the lab's binaries).
#![allow(dead_code)] // each test crate uses a different part

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use regex::Regex;
use serde_json::Value;

/// The repository's root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// `charts/ferrolb/dashboards/ferrolb.json`.
pub fn dashboard_path() -> PathBuf {
    workspace().join("charts/ferrolb/dashboards/ferrolb.json")
}

/// The dashboard file, parsed.
pub fn read_dashboard() -> Value {
    let path = dashboard_path();
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// Every panel of `dashboard` that shows data (rows left out, the panels of collapsed rows
/// included), in the file's order.
pub fn panels(dashboard: &Value) -> Vec<&Value> {
    fn walk<'a>(list: &'a Value, out: &mut Vec<&'a Value>) {
        for panel in list.as_array().into_iter().flatten() {
            if panel["type"] == "row" {
                walk(&panel["panels"], out);
            } else {
                out.push(panel);
            }
        }
    }
    let mut out = Vec::new();
    walk(&dashboard["panels"], &mut out);
    out
}

/// The row panels of `dashboard`.
pub fn rows(dashboard: &Value) -> Vec<&Value> {
    dashboard["panels"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["type"] == "row")
        .collect()
}

/// One PromQL query of a panel.
#[derive(Clone, Debug)]
pub struct Query {
    /// The panel's `id`.
    pub panel_id: u64,
    /// The panel's title.
    pub panel: String,
    /// The target's `refId`.
    pub ref_id: String,
    /// The expression, with Grafana's variables as written.
    pub expr: String,
}

/// Every target expression of every panel (a target without `expr` is left out: the caller
/// checks that there is none).
pub fn queries(dashboard: &Value) -> Vec<Query> {
    panels(dashboard)
        .into_iter()
        .flat_map(|panel| {
            panel["targets"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(move |t| {
                    Some(Query {
                        panel_id: panel["id"].as_u64().unwrap_or_default(),
                        panel: panel["title"].as_str().unwrap_or_default().to_owned(),
                        ref_id: t["refId"].as_str().unwrap_or_default().to_owned(),
                        expr: t["expr"].as_str()?.to_owned(),
                    })
                })
        })
        .collect()
}

/// The queries of the dashboard's `query` variables (`label_values(...)`, not PromQL).
pub fn variable_queries(dashboard: &Value) -> Vec<String> {
    dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["type"] == "query")
        .filter_map(|v| match &v["query"] {
            Value::String(q) => Some(q.clone()),
            q => q["query"].as_str().map(str::to_owned),
        })
        .collect()
}

/// The `ferrolb_...` metric names written in `text`.
pub fn metric_names_in(text: &str) -> BTreeSet<String> {
    static NAME: OnceLock<Regex> = OnceLock::new();
    let name = NAME.get_or_init(|| Regex::new(r"ferrolb_[a-z0-9_]+").expect("a valid regex"));
    name.find_iter(text)
        .map(|m| m.as_str().to_owned())
        .collect()
}

/// Every metric name the dashboard reads: in its panels' queries and its variables' queries.
pub fn dashboard_metric_names(dashboard: &Value) -> BTreeSet<String> {
    queries(dashboard)
        .iter()
        .map(|q| q.expr.clone())
        .chain(variable_queries(dashboard))
        .flat_map(|text| metric_names_in(&text))
        .collect()
}

/// The sample names of a `/metrics` page: each line that is not a comment, up to its `{` or
/// its first space (the HTTP status line and headers, if present, give names that are not
/// metrics; callers look names up, they do not list them).
pub fn exposition_names(page: &str) -> BTreeSet<String> {
    page.lines()
        .map(str::trim_end)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .filter_map(|line| {
            let end = line.find(['{', ' '])?;
            Some(line[..end].to_owned())
        })
        .collect()
}

/// What kind of metric a name was registered as.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// Exposed as `<name>_total`.
    Counter,
    /// Exposed as `<name>`.
    Gauge,
    /// Exposed as `<name>_bucket`, `<name>_sum` and `<name>_count`.
    Histogram,
}

impl Kind {
    fn from_type(text: &str) -> Option<Self> {
        static KIND: OnceLock<Regex> = OnceLock::new();
        let kind = KIND.get_or_init(|| {
            Regex::new(r"\b(?:Const)?(Counter|Gauge|Histogram)\b").expect("a valid regex")
        });
        let kinds: BTreeSet<Self> = kind
            .captures_iter(text)
            .map(|c| match &c[1] {
                "Counter" => Self::Counter,
                "Gauge" => Self::Gauge,
                _ => Self::Histogram,
            })
            .collect();
        (kinds.len() == 1).then(|| *kinds.first().expect("one kind"))
    }

    /// The names a metric registered as `name` has on `/metrics`.
    pub fn exposed(self, name: &str) -> Vec<String> {
        match self {
            Self::Counter => vec![format!("{name}_total")],
            Self::Gauge => vec![name.to_owned()],
            Self::Histogram => ["bucket", "sum", "count"]
                .iter()
                .map(|s| format!("{name}_{s}"))
                .collect(),
        }
    }
}

/// One metric the code declares.
#[derive(Clone, Debug)]
pub struct Declared {
    /// How it is registered.
    pub kind: Kind,
    /// The files that register it (relative to the repository), e.g. both binaries'
    /// `events_dropped`.
    pub sources: BTreeSet<String>,
}

/// The directories whose code registers the binaries' metrics.
const METRIC_SOURCES: &[&str] = &["controller/src", "speaker/src", "telemetry/src"];
/// Where both binaries' registry is created and given its prefix
/// (`ferrolb_telemetry::serve_process`).
const REGISTRY_SOURCE: &str = "telemetry/src/lib.rs";

/// Every metric name the binaries declare, as it appears on `/metrics` (the registry's prefix,
/// `_total` on counters, `_bucket`/`_sum`/`_count` on histograms), read as text from the code:
/// each `register("name", "help", self.field.clone())` with the type of `field`, and each
/// collector's `encode_descriptor("name", ..., metric.metric_type())` with the type of `metric`.
/// Panics on a registration it cannot read, so that a new way of registering is taught here
/// rather than missed.
pub fn declared_metric_names() -> BTreeMap<String, Declared> {
    let root = workspace();
    let prefix = registry_prefix(&root);
    let mut declared: BTreeMap<String, Declared> = BTreeMap::new();
    for dir in METRIC_SOURCES {
        for file in rust_files(&root.join(dir)) {
            let text = std::fs::read_to_string(&file)
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
            let relative = file
                .strip_prefix(&root)
                .unwrap_or(&file)
                .display()
                .to_string();
            for (name, kind) in registrations(&text, &relative) {
                for exposed in kind.exposed(&format!("{prefix}_{name}")) {
                    let entry = declared.entry(exposed).or_insert_with(|| Declared {
                        kind,
                        sources: BTreeSet::new(),
                    });
                    assert_eq!(
                        entry.kind, kind,
                        "{name} is registered as two kinds ({relative})"
                    );
                    entry.sources.insert(relative.clone());
                }
            }
        }
    }
    assert!(
        !declared.is_empty(),
        "no metric registration found under {METRIC_SOURCES:?}"
    );
    declared
}

/// The prefix both binaries give their registry (`Registry::with_prefix("ferrolb")` in
/// [`REGISTRY_SOURCE`]); the binaries must create no registry of their own.
fn registry_prefix(root: &Path) -> String {
    let with_prefix =
        Regex::new(r#"Registry::with_prefix\(\s*"([a-z0-9_]+)"\s*\)"#).expect("a valid regex");
    for main in ["controller/src/main.rs", "speaker/src/main.rs"] {
        let text = std::fs::read_to_string(root.join(main))
            .unwrap_or_else(|e| panic!("cannot read {main}: {e}"));
        assert!(
            !text.contains("Registry::"),
            "{main} creates a registry of its own: the prefix is read from {REGISTRY_SOURCE}"
        );
    }
    let text = std::fs::read_to_string(root.join(REGISTRY_SOURCE))
        .unwrap_or_else(|e| panic!("cannot read {REGISTRY_SOURCE}: {e}"));
    let prefixes: BTreeSet<String> = with_prefix
        .captures_iter(&text)
        .map(|c| c[1].to_owned())
        .collect();
    assert_eq!(
        prefixes.len(),
        1,
        "{REGISTRY_SOURCE} gives registries {} prefixes: {prefixes:?}",
        prefixes.len()
    );
    prefixes.into_iter().next().expect("one prefix")
}

/// The `.rs` files under `dir`, test modules (`tests.rs`, `tests/`) left out.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if path.is_dir() {
                if name != "tests" {
                    stack.push(path);
                }
            } else if name.ends_with(".rs") && name != "tests.rs" {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The `(name, kind)` of every metric `text` registers.
fn registrations(text: &str, file: &str) -> Vec<(String, Kind)> {
    static REGISTER: OnceLock<[Regex; 4]> = OnceLock::new();
    let [any_register, register, any_descriptor, descriptor] = REGISTER.get_or_init(|| {
        let string = r#""(?:[^"\\]|\\.)*""#;
        [
            Regex::new(r#"\.register\(\s*""#).expect("a valid regex"),
            Regex::new(&format!(
                r#"\.register\(\s*"([a-z0-9_]+)"\s*,\s*{string}\s*,\s*self\.([a-z0-9_]+)\.clone\(\)\s*,?\s*\)"#
            ))
            .expect("a valid regex"),
            Regex::new(r#"encode_descriptor\(\s*""#).expect("a valid regex"),
            Regex::new(&format!(
                r#"encode_descriptor\(\s*"([a-z0-9_]+)"\s*,\s*{string}\s*,\s*[^,]+,\s*(?:([a-z0-9_]+)\.metric_type\(\)|MetricType::([A-Za-z]+))\s*,?\s*\)"#
            ))
            .expect("a valid regex"),
        ]
    });
    for unsupported in [
        "sub_registry",
        "register_with_unit",
        "register_collector_with",
    ] {
        assert!(
            !text.contains(unsupported),
            "{file} uses {unsupported}: teach declared_metric_names() how it names metrics"
        );
    }
    let mut found = Vec::new();
    for c in register.captures_iter(text) {
        let field = &c[2];
        let field_type = Regex::new(&format!(r"pub\s+{field}\s*:\s*(.+?),\s*\n"))
            .expect("a valid regex")
            .captures(text)
            .unwrap_or_else(|| panic!("{file}: no `pub {field}: ...` for the metric {}", &c[1]));
        let kind = Kind::from_type(&field_type[1]).unwrap_or_else(|| {
            panic!(
                "{file}: the type of {field} ({}) is not one Counter, Gauge or Histogram",
                &field_type[1]
            )
        });
        found.push((c[1].to_owned(), kind));
    }
    assert_eq!(
        found.len(),
        any_register.find_iter(text).count(),
        "{file} registers a metric in a form declared_metric_names() cannot read \
         (it reads `register(\"name\", \"help\", self.field.clone())`)"
    );
    let collected_before = found.len();
    for c in descriptor.captures_iter(text) {
        let kind = if let Some(var) = c.get(2) {
            let binding = Regex::new(&format!(r"let\s+{}\s*=\s*([A-Za-z:]+)", var.as_str()))
                .expect("a valid regex")
                .captures(text)
                .unwrap_or_else(|| panic!("{file}: no `let {} = ...`", var.as_str()));
            Kind::from_type(&binding[1])
        } else {
            Kind::from_type(&c[3])
        };
        let kind = kind.unwrap_or_else(|| panic!("{file}: cannot tell the kind of {}", &c[1]));
        found.push((c[1].to_owned(), kind));
    }
    assert_eq!(
        found.len() - collected_before,
        any_descriptor.find_iter(text).count(),
        "{file} encodes a descriptor in a form declared_metric_names() cannot read \
         (it reads `encode_descriptor(\"name\", \"help\", unit, metric.metric_type())`)"
    );
    found
}
