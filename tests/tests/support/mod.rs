//! Shared setup of the API server conformance tests.

#![allow(dead_code)]

use std::path::PathBuf;

use ferrolb_tests::apiserver::{ApiServerConfig, TestCluster};

/// `tests/fixtures` of this crate.
pub fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

/// A cluster serving the test CRDs (Gadget, and Widget from the recorded fixtures).
pub async fn cluster() -> TestCluster {
    TestCluster::start(config()).await
}

/// The double's configuration used by the suite.
pub fn config() -> ApiServerConfig {
    ApiServerConfig::default().with_crd_dir(fixtures().join("crds"))
}
