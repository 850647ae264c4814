//! What a `ConfigurationState` says, from the problems a component found: `result`,
//! `errorSummary` and the `Valid` condition. Pure: no I/O; the time is passed in.
//!
//! # Guarantees
//! - The same problems, in any order and with duplicates, give the same status: problems are
//!   sorted by kind, then object name, then message.
//! - `errorSummary` is at most [`MAX_SUMMARY_LEN`] bytes and names at most
//!   [`MAX_SUMMARY_ENTRIES`] problems; the rest are counted ("; and 12 more"). One problem's
//!   text is cut at [`MAX_ENTRY_LEN`] bytes.
//! - A status whose result did not change keeps its condition's `lastTransitionTime`, so a
//!   writer that compares before writing writes only on change.

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::patch::StatusSchema;
use crate::v1beta1::{Component, ConfigurationResult, ConfigurationStateStatus};

/// The longest `errorSummary` written, in bytes.
pub const MAX_SUMMARY_LEN: usize = 2048;
/// The most problems named in `errorSummary`.
pub const MAX_SUMMARY_ENTRIES: usize = 20;
/// The longest text of one problem in `errorSummary`, in bytes.
pub const MAX_ENTRY_LEN: usize = 512;

/// The condition type of a `ConfigurationState`.
pub const CONDITION_VALID: &str = "Valid";
/// The condition reason when the configuration is valid.
pub const REASON_VALID: &str = "Valid";
/// The condition reason when it is not (MetalLB's reason for configuration errors).
pub const REASON_CONFIGURATION_ERROR: &str = "ConfigurationError";
/// The condition reason before the component has checked.
pub const REASON_NOT_CHECKED: &str = "NotChecked";

/// One thing that keeps (part of) the configuration from taking effect.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Problem {
    /// What kind of thing it concerns: a kind (`IPAddressPool`, `BGPPeer`) or, for a
    /// speaker, `Interface` or `Address`.
    pub kind: &'static str,
    /// Its name.
    pub name: String,
    /// What is wrong and what to do, as the object's own condition or the speaker's log says.
    pub message: String,
}

impl Problem {
    /// A problem of `kind` `name`.
    pub fn new(kind: &'static str, name: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            kind,
            name: name.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.kind, self.name, self.message)
    }
}

/// Whether the component has seen everything it checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Checked {
    /// Not yet: some kind has not been listed once. The result is `Unknown`.
    NotYet,
    /// Every kind has been listed: the problems given are all there are.
    Complete,
}

/// `result` and `errorSummary` for `problems`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    /// The result.
    pub result: ConfigurationResult,
    /// The sorted, bounded summary (empty unless `Invalid`).
    pub error_summary: String,
    /// How many distinct problems there are (named or counted in the summary).
    pub errors: usize,
}

/// Sums `problems` up.
pub fn summarize(checked: Checked, problems: impl IntoIterator<Item = Problem>) -> Summary {
    if checked == Checked::NotYet {
        return Summary {
            result: ConfigurationResult::Unknown,
            error_summary: String::new(),
            errors: 0,
        };
    }
    let mut problems: Vec<Problem> = problems.into_iter().collect();
    problems.sort();
    problems.dedup();
    if problems.is_empty() {
        return Summary {
            result: ConfigurationResult::Valid,
            error_summary: String::new(),
            errors: 0,
        };
    }
    // Room kept for the count of those left out: "; and 18446744073709551615 more".
    const TAIL_ROOM: usize = 32;
    let mut out = String::new();
    let mut named = 0;
    for p in &problems {
        let entry = cut(&p.to_string(), MAX_ENTRY_LEN);
        let sep = if named == 0 { 0 } else { 2 };
        let left_out = named + 1 < problems.len();
        let room = if left_out { TAIL_ROOM } else { 0 };
        if named == MAX_SUMMARY_ENTRIES
            || (named > 0 && out.len() + sep + entry.len() + room > MAX_SUMMARY_LEN)
        {
            break;
        }
        if sep > 0 {
            out.push_str("; ");
        }
        out.push_str(&entry);
        named += 1;
    }
    if named < problems.len() {
        out.push_str(&format!("; and {} more", problems.len() - named));
    }
    Summary {
        result: ConfigurationResult::Invalid,
        error_summary: out,
        errors: problems.len(),
    }
}

/// `s` cut to at most `max` bytes on a character boundary, ending with `…` when cut.
fn cut(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max - '…'.len_utf8();
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// The whole status of a `ConfigurationState` of `component` (on `node`, for a speaker): the
/// summary of `problems` and its `Valid` condition, which keeps `old`'s transition time when
/// its status did not change (`now` otherwise).
pub fn status(
    component: Component,
    node: Option<&str>,
    checked: Checked,
    problems: impl IntoIterator<Item = Problem>,
    old: Option<&ConfigurationStateStatus>,
    now: Time,
) -> ConfigurationStateStatus {
    let summary = summarize(checked, problems);
    let (status, reason, message) = match summary.result {
        ConfigurationResult::Valid => (
            "True",
            REASON_VALID,
            "every configuration object checked can take effect".to_string(),
        ),
        ConfigurationResult::Invalid => (
            "False",
            REASON_CONFIGURATION_ERROR,
            match summary.errors {
                1 => "1 configuration error; see errorSummary".to_string(),
                n => format!("{n} configuration errors; see errorSummary"),
            },
        ),
        ConfigurationResult::Unknown => (
            "Unknown",
            REASON_NOT_CHECKED,
            "not every kind has been listed yet".to_string(),
        ),
    };
    let previous = old
        .into_iter()
        .flat_map(|o| &o.conditions)
        .find(|c| c.type_ == CONDITION_VALID);
    let last_transition_time = match previous {
        Some(p) if p.status == status => p.last_transition_time.clone(),
        _ => now,
    };
    ConfigurationStateStatus {
        component: Some(component),
        node: node.map(str::to_owned),
        result: summary.result,
        error_summary: summary.error_summary,
        conditions: vec![Condition {
            type_: CONDITION_VALID.into(),
            status: status.into(),
            reason: reason.into(),
            message,
            observed_generation: None,
            last_transition_time,
        }],
    }
}

/// The body of a JSON merge patch of `/status` that makes the object say `status`: fields
/// `status` leaves out are sent as `null`, so an old `errorSummary` or `node` is removed (a
/// merge patch keeps what it does not mention).
pub fn status_patch(status: &ConfigurationStateStatus) -> serde_json::Value {
    static SCHEMA: StatusSchema = StatusSchema::of::<ConfigurationStateStatus>();
    SCHEMA.replacing(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(kind: &'static str, name: &str, message: &str) -> Problem {
        Problem::new(kind, name, message)
    }

    fn at(secs: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(1_800_000_000 + secs).unwrap())
    }

    #[test]
    fn no_problem_after_a_complete_list_is_valid_with_an_empty_summary() {
        let s = summarize(Checked::Complete, []);
        assert_eq!(s.result, ConfigurationResult::Valid);
        assert_eq!(s.error_summary, "");
        assert_eq!(s.errors, 0);
    }

    #[test]
    fn before_the_first_complete_list_the_result_is_unknown_whatever_was_found() {
        let s = summarize(Checked::NotYet, [p("IPAddressPool", "a", "bad")]);
        assert_eq!(s.result, ConfigurationResult::Unknown);
        assert_eq!(s.error_summary, "");
        let st = status(
            Component::Controller,
            None,
            Checked::NotYet,
            [],
            None,
            at(0),
        );
        let c = &st.conditions[0];
        assert_eq!(
            (c.type_.as_str(), c.status.as_str(), c.reason.as_str()),
            ("Valid", "Unknown", "NotChecked")
        );
    }

    #[test]
    fn several_problems_are_invalid_and_named_by_kind_then_object() {
        let s = summarize(
            Checked::Complete,
            [
                p("IPAddressPool", "other", "overlaps pool `default`"),
                p(
                    "BGPPeer",
                    "tor",
                    "refers to Secret `md5`, which does not exist",
                ),
                p("IPAddressPool", "blue", "entry `x` is invalid"),
            ],
        );
        assert_eq!(s.result, ConfigurationResult::Invalid);
        assert_eq!(s.errors, 3);
        assert_eq!(
            s.error_summary,
            "BGPPeer tor: refers to Secret `md5`, which does not exist; \
             IPAddressPool blue: entry `x` is invalid; \
             IPAddressPool other: overlaps pool `default`"
        );
    }

    #[test]
    fn the_order_problems_come_in_and_duplicates_do_not_change_the_summary() {
        let a = p("L2Advertisement", "l2", "names pool `x`");
        let b = p("BGPAdvertisement", "bgp", "names peer `y`");
        let c = p("BGPAdvertisement", "bgp", "names pool `x`");
        let one = summarize(Checked::Complete, [a.clone(), b.clone(), c.clone()]);
        let other = summarize(Checked::Complete, [c.clone(), a.clone(), b, c, a]);
        assert_eq!(one, other);
        assert_eq!(one.errors, 3);
        assert!(
            one.error_summary.starts_with(
                "BGPAdvertisement bgp: names peer `y`; BGPAdvertisement bgp: names pool `x`"
            ),
            "{}",
            one.error_summary
        );
    }

    #[test]
    fn many_problems_are_cut_short_with_a_count_of_those_left_out() {
        let problems: Vec<Problem> = (0..100)
            .map(|i| {
                p(
                    "IPAddressPool",
                    &format!("pool-{i:03}"),
                    "overlaps pool `base`",
                )
            })
            .collect();
        let s = summarize(Checked::Complete, problems);
        assert_eq!(s.errors, 100);
        assert!(s.error_summary.len() <= MAX_SUMMARY_LEN);
        let named = s.error_summary.matches("IPAddressPool ").count();
        assert_eq!(named, MAX_SUMMARY_ENTRIES);
        assert!(
            s.error_summary
                .ends_with(&format!("; and {} more", 100 - MAX_SUMMARY_ENTRIES)),
            "{}",
            s.error_summary
        );
        assert!(s.error_summary.starts_with("IPAddressPool pool-000: "));
    }

    #[test]
    fn long_problems_fill_at_most_the_length_limit_and_the_rest_is_counted() {
        let long = "x".repeat(2 * MAX_ENTRY_LEN);
        let problems: Vec<Problem> = (0..10)
            .map(|i| p("BGPPeer", &format!("peer-{i}"), &long))
            .collect();
        let s = summarize(Checked::Complete, problems);
        assert!(
            s.error_summary.len() <= MAX_SUMMARY_LEN,
            "{}",
            s.error_summary.len()
        );
        let named = s.error_summary.matches("BGPPeer ").count();
        assert!((1..10).contains(&named), "{named}");
        assert!(s.error_summary.contains('…'), "each entry is cut");
        assert!(
            s.error_summary
                .ends_with(&format!("; and {} more", 10 - named))
        );
    }

    #[test]
    fn an_entry_is_cut_on_a_character_boundary() {
        let s = summarize(
            Checked::Complete,
            [p("Interface", "eth0", &"é".repeat(MAX_ENTRY_LEN))],
        );
        assert!(s.error_summary.len() <= MAX_ENTRY_LEN);
        assert!(s.error_summary.ends_with('…'));
    }

    #[test]
    fn the_condition_keeps_its_transition_time_while_the_result_holds() {
        let bad = || [p("IPAddressPool", "b", "overlaps pool `a`")];
        let first = status(
            Component::Controller,
            None,
            Checked::Complete,
            bad(),
            None,
            at(0),
        );
        let again = status(
            Component::Controller,
            None,
            Checked::Complete,
            bad(),
            Some(&first),
            at(60),
        );
        assert_eq!(first, again, "nothing changed: nothing to write");
        assert_eq!(again.conditions[0].status, "False");
        assert_eq!(again.conditions[0].reason, "ConfigurationError");
        let fixed = status(
            Component::Controller,
            None,
            Checked::Complete,
            [],
            Some(&again),
            at(90),
        );
        assert_eq!(fixed.result, ConfigurationResult::Valid);
        assert_eq!(fixed.conditions[0].status, "True");
        assert_eq!(fixed.conditions[0].last_transition_time, at(90));
    }

    #[test]
    fn a_patch_to_valid_removes_the_old_error_summary() {
        let st = status(
            Component::Controller,
            None,
            Checked::Complete,
            [],
            None,
            at(0),
        );
        let patch = status_patch(&st);
        assert_eq!(patch["status"]["result"], "Valid");
        assert!(patch["status"]["errorSummary"].is_null());
        assert!(
            patch["status"]
                .as_object()
                .unwrap()
                .contains_key("errorSummary")
        );
        assert_eq!(patch["status"]["component"], "controller");
    }

    #[test]
    fn a_speaker_status_names_its_component_and_node() {
        let st = status(
            Component::Speaker,
            Some("node-a"),
            Checked::Complete,
            [],
            None,
            at(0),
        );
        assert_eq!(st.component, Some(Component::Speaker));
        assert_eq!(st.node.as_deref(), Some("node-a"));
        let json = serde_json::to_value(&st).unwrap();
        assert_eq!(json["component"], "speaker");
        assert_eq!(json["result"], "Valid");
        assert!(json.get("errorSummary").is_none());
    }
}
