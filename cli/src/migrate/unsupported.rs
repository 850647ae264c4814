//! The MetalLB fields FerroLB has no equivalent for, in one table. Pure.
//!
//! When FerroLB gains one of these fields, remove its row and map the field in
//! [`super::convert`]: a field that is neither mapped nor in this table is reported as unknown,
//! and the full fixture's test (no unknown field in MetalLB's complete schema) catches it.

use super::kinds::Kind;

/// A MetalLB field that FerroLB cannot express.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unsupported {
    /// The kind the field belongs to.
    pub kind: Kind,
    /// The field's path in the object (`spec.vrf`).
    pub path: &'static str,
    /// Why FerroLB has no equivalent, and what to do instead.
    pub reason: &'static str,
}

/// Every MetalLB v0.16 field without a FerroLB equivalent. The `BGPPeer` rows are fields of
/// MetalLB's `v1beta2` only: in a `v1beta1` object they are not in MetalLB's schema, so they are
/// reported as unknown fields there.
///
/// A field set to its MetalLB default (the zero value for every row here: `false`, `""`, `0`,
/// an empty list) asks for nothing FerroLB lacks, and is not reported.
pub const UNSUPPORTED: &[Unsupported] = &[Unsupported {
    kind: Kind::BGPAdvertisement,
    path: "spec.asPathPrepend",
    reason: "FerroLB's BGP speaker does not prepend its AS to the AS_PATH; lengthen the \
                 path on the router (a route-map) if traffic engineering needs it",
}];

/// The table's row for `path` in `kind`, if any.
pub fn lookup(kind: Kind, path: &str) -> Option<&'static Unsupported> {
    UNSUPPORTED
        .iter()
        .find(|row| row.kind == kind && row.path == path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_names_each_field_once() {
        let mut seen = std::collections::BTreeSet::new();
        for row in UNSUPPORTED {
            assert!(
                seen.insert((row.kind, row.path)),
                "{} {} twice",
                row.kind,
                row.path
            );
        }
    }
}
