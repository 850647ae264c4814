//! Speaker membership.
