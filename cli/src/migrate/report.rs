//! What the migration found, decided and did, one [`Entry`] per finding, as data that the shell
//! prints (one line each) and writes as JSON. Pure.

use std::fmt;

use ferrolb_api::validate::ConfigError;
use serde::{Serialize, Serializer};

use super::kinds::{Kind, ObjectRef};

/// One finding about one input document or object.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// Where the object came from (`pools.yaml#2`, `cluster metallb-system`).
    pub source: String,
    /// The MetalLB object, when the entry is about one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object: Option<ObjectRef>,
    /// What was found.
    #[serde(flatten)]
    pub finding: Finding,
}

impl Entry {
    /// Whether this entry is a MetalLB field that was not converted (an unsupported or unknown
    /// field): these make `--strict` fail.
    pub fn is_field_without_equivalent(&self) -> bool {
        matches!(
            self.finding,
            Finding::UnsupportedField { .. } | Finding::UnknownField { .. }
        )
    }

    /// Whether this entry means that something that should have happened did not (an object
    /// not written, an apply refused, a Secret not copied): these make the command fail.
    pub fn is_error(&self) -> bool {
        matches!(
            self.finding,
            Finding::NotWritten { .. }
                | Finding::Duplicate {
                    same_content: false,
                    ..
                }
                | Finding::ApplyRefused { .. }
                | Finding::SecretNotCopied { .. }
        )
    }

    /// Whether this entry is an object that was read but not converted.
    pub fn is_skipped_object(&self) -> bool {
        matches!(
            self.finding,
            Finding::NotWritten { .. } | Finding::Duplicate { .. } | Finding::Ignored { .. }
        )
    }

    /// The entry's category, as the first word of its report line.
    pub fn label(&self) -> &'static str {
        match self.finding {
            Finding::UnsupportedField { .. } => "unsupported",
            Finding::UnknownField { .. } => "unknown",
            Finding::ActionNeeded { .. } => "action needed",
            Finding::Note { .. } => "note",
            Finding::NotReady { .. } => "warning",
            Finding::NotWritten { .. } => "error",
            Finding::Duplicate {
                same_content: true, ..
            } => "note",
            Finding::Duplicate { .. } => "error",
            Finding::Ignored { .. } | Finding::KindNotServed { .. } => "skipped",
            Finding::Applied { .. } => "applied",
            Finding::ApplyRefused { .. } | Finding::SecretNotCopied { .. } => "error",
            Finding::SecretCopied { .. } | Finding::SecretAlreadyThere { .. } => "secret",
        }
    }
}

impl fmt::Display for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.label())?;
        if let Some(object) = &self.object {
            write!(f, "{object}: ")?;
        }
        if let Some(path) = self.finding.path() {
            write!(f, "{path}: ")?;
        }
        write!(f, "{} [{}]", self.finding, self.source)
    }
}

/// What was found about a document or object.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(
    tag = "finding",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum Finding {
    /// A MetalLB field, set to something other than its default, that FerroLB has no
    /// equivalent for (a row of [`super::unsupported::UNSUPPORTED`]). The rest of the object
    /// is converted.
    UnsupportedField {
        /// The field (`spec.vrf`).
        path: String,
        /// Why, and what to do instead.
        reason: &'static str,
    },
    /// A field that is not in MetalLB's schema for this kind and version: not converted.
    UnknownField {
        /// The field.
        path: String,
    },
    /// Converted, and the operator has something to do before FerroLB can use it.
    ActionNeeded {
        /// What to do.
        action: Action,
    },
    /// Converted with a decision worth knowing.
    Note {
        /// The field the decision is about.
        path: String,
        /// The decision.
        note: Note,
    },
    /// Converted and written, but FerroLB will mark the object `Ready=False` unless the rest
    /// of its configuration changes (a rule across objects, from [`ferrolb_api::validate`]).
    NotReady {
        /// FerroLB's own error.
        #[serde(serialize_with = "display")]
        error: ConfigError,
    },
    /// The MetalLB object would make an invalid FerroLB object: nothing is written for it.
    NotWritten {
        /// Every reason found.
        #[serde(serialize_with = "display_all")]
        problems: Vec<Problem>,
    },
    /// A second object of the same kind and name; only the first is written.
    Duplicate {
        /// Where the first one came from.
        first_source: String,
        /// Whether both convert to the same FerroLB object.
        same_content: bool,
    },
    /// A document that is not a MetalLB configuration object.
    Ignored {
        /// Its `apiVersion`.
        api_version: String,
        /// Its `kind`.
        kind: String,
        /// Its name, when it has one.
        #[serde(skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        /// Why it is ignored.
        reason: IgnoreReason,
    },
    /// The cluster does not serve this MetalLB kind and version (its CRD is not installed).
    KindNotServed {
        /// The kind.
        kind: Kind,
        /// The version asked for.
        version: String,
    },
    /// The FerroLB object was applied.
    Applied {
        /// The FerroLB object, as `kubectl` names it (`ipaddresspool.ferrolb.io/NAME`).
        resource: String,
    },
    /// The API server refused the FerroLB object (a conflict with another field manager, a
    /// rule, permissions).
    ApplyRefused {
        /// The FerroLB object, as `kubectl` names it.
        resource: String,
        /// The API server's answer.
        error: String,
    },
    /// The peer's password Secret was copied into FerroLB's namespace.
    SecretCopied {
        /// The Secret's name.
        name: String,
        /// Where it was read.
        from_namespace: String,
        /// Where it was created.
        to_namespace: String,
    },
    /// A Secret of that name already exists in FerroLB's namespace: it was left as it is.
    SecretAlreadyThere {
        /// The Secret's name.
        name: String,
        /// FerroLB's namespace.
        namespace: String,
    },
    /// The peer's password Secret could not be copied.
    SecretNotCopied {
        /// The Secret's name.
        name: String,
        /// Where it was looked for.
        from_namespace: String,
        /// Why not.
        error: String,
    },
}

impl Finding {
    /// The field the finding is about, when it is about one.
    pub fn path(&self) -> Option<&str> {
        match self {
            Finding::UnsupportedField { path, .. }
            | Finding::UnknownField { path }
            | Finding::Note { path, .. } => Some(path),
            _ => None,
        }
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Finding::UnsupportedField { reason, .. } => {
                write!(f, "no FerroLB equivalent, not converted: {reason}")
            }
            Finding::UnknownField { .. } => f.write_str(
                "unknown field, not converted (not in MetalLB v0.16's schema for this kind and version)",
            ),
            Finding::ActionNeeded { action } => write!(f, "{action}"),
            Finding::Note { note, .. } => write!(f, "{note}"),
            Finding::NotReady { error } => write!(
                f,
                "written, but FerroLB will report it Ready=False with this configuration: {error}"
            ),
            Finding::NotWritten { problems } => {
                f.write_str("not written: it would not be a valid FerroLB object: ")?;
                for (i, p) in problems.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    write!(f, "{p}")?;
                }
                Ok(())
            }
            Finding::Duplicate {
                first_source,
                same_content: true,
            } => write!(
                f,
                "appears again with the same content (first in {first_source}); written once"
            ),
            Finding::Duplicate { first_source, .. } => write!(
                f,
                "another object of this kind and name, with different content, came first (in \
                 {first_source}); this one is not written: remove one of them"
            ),
            Finding::Ignored {
                api_version,
                kind,
                name,
                reason,
            } => {
                write!(f, "{kind}")?;
                if let Some(name) = name {
                    write!(f, "/{name}")?;
                }
                write!(f, " ({api_version}): {reason}")
            }
            Finding::KindNotServed { kind, version } => write!(
                f,
                "the cluster does not serve {kind} at metallb.io/{version} (CRD not installed); none read"
            ),
            Finding::Applied { resource } => write!(f, "{resource} applied"),
            Finding::ApplyRefused { resource, error } => write!(
                f,
                "{resource} not applied: {error} (a conflict means another field manager owns \
                 a field: resolve it, or re-apply the YAML with kubectl --force-conflicts)"
            ),
            Finding::SecretCopied {
                name,
                from_namespace,
                to_namespace,
            } => write!(
                f,
                "Secret `{name}` copied from `{from_namespace}` to `{to_namespace}` (type and data)"
            ),
            Finding::SecretAlreadyThere { name, namespace } => write!(
                f,
                "Secret `{name}` already exists in `{namespace}`: left as it is, not copied; \
                 check that it holds the password under the key `password`"
            ),
            Finding::SecretNotCopied {
                name,
                from_namespace,
                error,
            } => write!(
                f,
                "Secret `{name}` could not be copied from `{from_namespace}`: {error}; the peer \
                 stays down until it exists in FerroLB's namespace"
            ),
        }
    }
}

/// Something the operator must do for a converted object to work.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(
    tag = "action",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum Action {
    /// FerroLB reads a peer's `passwordSecret` from its own namespace only.
    CopySecret {
        /// The Secret's name.
        name: String,
        /// Where MetalLB read it.
        from_namespace: String,
        /// Where FerroLB reads it.
        to_namespace: String,
    },
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::CopySecret {
                name,
                from_namespace,
                to_namespace,
            } => write!(
                f,
                "FerroLB reads passwordSecret `{name}` from its own namespace: the Secret must \
                 exist in `{to_namespace}` with the key `password` (MetalLB read it from \
                 `{from_namespace}`); copy it, or run `ferrolb migrate --from-cluster --apply`, \
                 which copies it"
            ),
        }
    }
}

/// A conversion decision the operator should know about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(
    tag = "note",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum Note {
    /// `holdTime` was unset and `keepaliveTime` set: MetalLB used three times the keepalive.
    HoldTimeFromKeepalive {
        /// The hold time written.
        hold_time: String,
    },
    /// Neither timer was set: FerroLB's default hold time is written.
    HoldTimeDefault {
        /// The hold time written.
        hold_time: String,
    },
    /// A `v1beta1` peer's `0s` timer: v1beta1 cannot tell it from unset.
    V1beta1ZeroTimerIsUnset,
    /// A `v1beta2` peer's `holdTime: 0s`, kept: no keepalives.
    ZeroHoldTimeKept,
    /// A duration in Go's syntax that FerroLB's CRD does not accept, rewritten.
    DurationRewritten {
        /// As MetalLB had it.
        from: String,
        /// As written for FerroLB.
        to: String,
    },
    /// MetalLB ignores `passwordSecret.namespace` (it reads Secrets from its own namespace).
    SecretNamespaceIgnored {
        /// The namespace the field named.
        namespace: String,
        /// The namespace MetalLB actually read the Secret from.
        used: String,
    },
    /// `localPref: 0` is MetalLB's "unset".
    LocalPrefZeroIsUnset,
    /// A negative pool priority, which MetalLB treats as no priority.
    NegativePriorityIsUnset {
        /// The value.
        priority: i64,
    },
    /// A `Community` alias whose name FerroLB reads as a well-known community.
    AliasShadowedByWellKnown {
        /// The alias.
        alias: String,
    },
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Note::HoldTimeFromKeepalive { hold_time } => write!(
                f,
                "holdTime was not set: written as {hold_time}, three times keepaliveTime, as MetalLB derived it"
            ),
            Note::HoldTimeDefault { hold_time } => write!(
                f,
                "holdTime was not set: written as {hold_time}, FerroLB's default and MetalLB's in \
                 native mode (in FRR mode MetalLB left it to FRR's own default); set it if the \
                 router expects another"
            ),
            Note::V1beta1ZeroTimerIsUnset => f.write_str(
                "`0s` in a v1beta1 BGPPeer is Go's zero value, which v1beta1 cannot tell from \
                 unset (MetalLB writes it for every v1beta1 peer without timers): read as unset",
            ),
            Note::ZeroHoldTimeKept => f.write_str(
                "0s (no keepalives, no hold timer) is kept; MetalLB's conversion also stores 0s \
                 for a peer created as v1beta1 without timers, so if this peer was written that \
                 way, set holdTime (FerroLB's default is 90s)",
            ),
            Note::DurationRewritten { from, to } => write!(
                f,
                "duration `{from}` is in Go's syntax, which FerroLB's CRD does not take: written as `{to}`"
            ),
            Note::SecretNamespaceIgnored { namespace, used } => write!(
                f,
                "names namespace `{namespace}`, which MetalLB ignores (it read the Secret from \
                 `{used}`); the Secret is taken from `{used}`"
            ),
            Note::LocalPrefZeroIsUnset => {
                f.write_str("0 is MetalLB's \"not set\" (the field is omitted when 0): left unset")
            }
            Note::NegativePriorityIsUnset { priority } => write!(
                f,
                "MetalLB gives a pool with priority {priority} no priority (only values above 0 \
                 count); FerroLB refuses negative priorities: left unset"
            ),
            Note::AliasShadowedByWellKnown { alias } => write!(
                f,
                "FerroLB reads `{alias}` in an advertisement as the well-known community of that \
                 name, not as this alias (whose value differs); rename the alias"
            ),
        }
    }
}

/// Why a document is not converted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum IgnoreReason {
    /// Not a MetalLB configuration kind (another group, a status kind, a Service).
    NotMetallbConfiguration,
    /// A MetalLB configuration kind at a version MetalLB v0.16 does not serve.
    UnknownVersion,
    /// Not an object at all (a scalar or a list at the top of a document).
    NotAnObject,
}

impl fmt::Display for IgnoreReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IgnoreReason::NotMetallbConfiguration => "not a MetalLB configuration kind, ignored",
            IgnoreReason::UnknownVersion => {
                "a version MetalLB v0.16 does not serve for this kind, ignored"
            }
            IgnoreReason::NotAnObject => "not a Kubernetes object, ignored",
        })
    }
}

/// Why a MetalLB object cannot become a valid FerroLB object.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Problem {
    /// The object has no `metadata.name`.
    #[error("metadata.name is missing; give the object a name")]
    MissingName,
    /// A field holds a value of the wrong JSON type.
    #[error(
        "{path}: expected {expected}; fix the value (in YAML, quote strings that look like numbers)"
    )]
    WrongType {
        /// The field.
        path: String,
        /// What it should hold.
        expected: &'static str,
    },
    /// A required field is missing or empty.
    #[error("{path} is required: {why}")]
    Required {
        /// The field.
        path: String,
        /// Why, and what to set.
        why: &'static str,
    },
    /// A number outside what FerroLB's CRD accepts.
    #[error("{path}: {value} is outside FerroLB's range {min}..={max}")]
    OutOfRange {
        /// The field.
        path: String,
        /// The value.
        value: String,
        /// FerroLB's minimum.
        min: String,
        /// FerroLB's maximum.
        max: String,
    },
    /// A string or list whose length FerroLB's CRD refuses.
    #[error("{path}: length {len} is outside FerroLB's {min}..={max}")]
    Length {
        /// The field.
        path: String,
        /// The length.
        len: usize,
        /// FerroLB's minimum.
        min: String,
        /// FerroLB's maximum.
        max: String,
    },
    /// A value FerroLB's CRD or rules refuse.
    #[error("{path}: `{value}`: {message}")]
    Refused {
        /// The field.
        path: String,
        /// The value.
        value: String,
        /// FerroLB's message.
        message: String,
    },
    /// A rule of FerroLB's CRD that spans fields.
    #[error("{message}")]
    Rule {
        /// FerroLB's message.
        message: String,
    },
    /// A per-object rule of [`ferrolb_api::validate`].
    #[error("{0}")]
    Config(ConfigError),
}

fn display<T: fmt::Display, S: Serializer>(value: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(value)
}

fn display_all<T: fmt::Display, S: Serializer>(values: &[T], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(values.iter().map(|v| v.to_string()))
}

/// The counts of the final summary line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// FerroLB objects written.
    pub converted: usize,
    /// MetalLB fields not converted (unsupported and unknown).
    pub fields_without_equivalent: usize,
    /// Documents or objects read but not written.
    pub skipped: usize,
}

impl Summary {
    /// Counts `entries` for `converted` written objects.
    pub fn of(converted: usize, entries: &[Entry]) -> Self {
        Summary {
            converted,
            fields_without_equivalent: entries
                .iter()
                .filter(|e| e.is_field_without_equivalent())
                .count(),
            skipped: entries.iter().filter(|e| e.is_skipped_object()).count(),
        }
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} objects converted, {} fields without an equivalent, {} objects skipped",
            self.converted, self.fields_without_equivalent, self.skipped
        )
    }
}

/// Drops the action-needed entries that the shell has since taken care of (a password Secret
/// copied, or found already in place).
pub fn drop_done_actions(report: &mut Vec<Entry>) {
    let done: Vec<(String, String)> = report
        .iter()
        .filter_map(|e| match &e.finding {
            Finding::SecretCopied {
                name, to_namespace, ..
            } => Some((name.clone(), to_namespace.clone())),
            Finding::SecretAlreadyThere { name, namespace } => {
                Some((name.clone(), namespace.clone()))
            }
            _ => None,
        })
        .collect();
    report.retain(|e| match &e.finding {
        Finding::ActionNeeded {
            action: Action::CopySecret {
                name, to_namespace, ..
            },
        } => !done.contains(&(name.clone(), to_namespace.clone())),
        _ => true,
    });
}

/// Exit status: the command succeeded.
pub const EXIT_OK: u8 = 0;
/// Exit status: something that should have happened did not (an object not written, an apply
/// refused, a Secret not copied, unreadable input).
pub const EXIT_ERROR: u8 = 1;
/// Exit status with `--strict`: some MetalLB fields were not converted.
pub const EXIT_STRICT: u8 = 3;

/// The command's exit status for `report`: an error wins over `--strict`'s findings.
pub fn exit_status(report: &[Entry], strict: bool) -> u8 {
    if report.iter().any(Entry::is_error) {
        EXIT_ERROR
    } else if strict && report.iter().any(Entry::is_field_without_equivalent) {
        EXIT_STRICT
    } else {
        EXIT_OK
    }
}

/// The report as JSON: each entry with its human-readable `message`, the summary and the exit
/// status.
pub fn to_json(report: &[Entry], summary: Summary, exit_status: u8) -> serde_json::Value {
    let entries: Vec<serde_json::Value> = report
        .iter()
        .map(|e| {
            let mut v = serde_json::to_value(e).expect("report entries serialize");
            if let Some(map) = v.as_object_mut() {
                map.insert("message".into(), e.finding.to_string().into());
                map.insert("category".into(), e.label().into());
            }
            v
        })
        .collect();
    serde_json::json!({
        "entries": entries,
        "summary": summary,
        "exitStatus": exit_status,
    })
}
