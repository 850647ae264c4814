//! The HTTP layer: routing, the request handler and the fault-control endpoints.

pub mod control;
pub mod routes;
pub mod server;
