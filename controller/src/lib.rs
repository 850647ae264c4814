//! FerroLB controller: the pure IP allocator and its Kubernetes shell.

pub mod allocator;
