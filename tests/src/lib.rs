//! FerroLB's test harness.
//!
//! # Layout
//!
//! - [`apiserver`]: a Kubernetes API server for tests and for the lab, faithful to kube-apiserver for
//!   the resources FerroLB uses.
//! - [`backend`]: the double or a real kube-apiserver behind one type (`FERROLB_APISERVER`).
//! - [`netns`]: network namespaces as hosts, and the lab's topology.
//! - [`realkube`]: a real etcd and kube-apiserver (built from Go modules) for the suites that must
//!   agree with real Kubernetes.
//! - [`lab`]: the lab (topology, API server, controller, speakers, router), shared by `ferrolb-lab` and
//!   the `e2e_*` tests.
//! - [`process`]: memory and CPU time of a process, from `/proc`.
//! - [`metallb`]: MetalLB's controller and speaker as processes, for the migration test and the
//!   side-by-side bench.
//! - [`provenance`]: the commit, build and machine a bench's figures come from.
//! - [`skip`]: the one skip every suite uses, a failure under `FERROLB_REQUIRE_BINARIES=1`.

pub mod apiserver;
pub mod backend;
pub mod lab;
pub mod metallb;
pub mod netns;
pub mod process;
pub mod provenance;
pub mod realkube;
pub mod skip;
