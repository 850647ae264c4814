//! The CRDs committed in the chart are exactly what `crdgen` prints.

use ferrolb_api::crd::{chart_crd_dir, render};

#[test]
fn committed_crds_match_what_crdgen_generates() {
    let dir = chart_crd_dir();
    let mut expected: Vec<String> = Vec::new();
    for file in render() {
        expected.push(file.file_name.clone());
        let committed = std::fs::read_to_string(dir.join(&file.file_name)).unwrap_or_default();
        assert!(
            committed == file.yaml,
            "{} is out of date: run `cargo run -p ferrolb-api --bin crdgen` and commit the result",
            file.file_name
        );
    }
    let mut present: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    present.sort();
    expected.sort();
    assert_eq!(present, expected, "stale CRD files in {}", dir.display());
}
