//! Reads the flags a binary defines from its clap `#[arg(long ...)]` fields, so the chart is
//! checked against the code and not only against a table.

use std::collections::BTreeSet;
use std::path::Path;

/// The `--flags` and environment variables a binary's clap struct defines.
#[derive(Debug, Default)]
pub(crate) struct Defined {
    pub(crate) flags: BTreeSet<String>,
    pub(crate) env: BTreeSet<String>,
}

/// Parses the `#[arg(...)]` attributes of `source` (a `main.rs`); `None` when the file is absent.
pub(crate) fn defined_in(source: &Path) -> Option<Defined> {
    let text = std::fs::read_to_string(source).ok()?;
    let mut defined = Defined::default();
    let mut attribute = String::new();
    let mut in_attribute = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with("#[arg(") {
            attribute.clear();
            in_attribute = true;
        }
        if in_attribute {
            attribute.push_str(line);
            attribute.push(' ');
            if line.ends_with(")]") {
                in_attribute = false;
            }
            continue;
        }
        if attribute.is_empty() || line.starts_with("///") || line.starts_with("#[") {
            continue;
        }
        // The field the attribute belongs to: `name: Type,`.
        let field = line.split(':').next().unwrap_or_default();
        let field = field.trim_start_matches("pub ").trim();
        if let Some(env) = quoted_after(&attribute, "env = ") {
            defined.env.insert(env);
        }
        if attribute.contains("long") {
            let long =
                quoted_after(&attribute, "long = ").unwrap_or_else(|| field.replace('_', "-"));
            defined.flags.insert(format!("--{long}"));
        }
        attribute.clear();
    }
    Some(defined)
}

fn quoted_after(text: &str, marker: &str) -> Option<String> {
    let rest = &text[text.find(marker)? + marker.len()..];
    let rest = rest.strip_prefix('"')?;
    Some(rest[..rest.find('"')?].to_owned())
}
