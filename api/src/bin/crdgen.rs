//! Writes FerroLB's CRD manifests into the Helm chart (`charts/ferrolb/crds/`).
//!
//! `crdgen` writes the files; `crdgen --print` prints them to stdout instead, as one
//! multi-document YAML stream.

use std::fs;

use ferrolb_api::crd::{chart_crd_dir, render};

fn main() -> std::io::Result<()> {
    let files = render();
    if std::env::args().any(|a| a == "--print") {
        for f in &files {
            println!("---\n{}", f.yaml);
        }
        return Ok(());
    }
    let dir = chart_crd_dir();
    fs::create_dir_all(&dir)?;
    for f in &files {
        fs::write(dir.join(&f.file_name), &f.yaml)?;
        eprintln!("wrote {}", dir.join(&f.file_name).display());
    }
    Ok(())
}
