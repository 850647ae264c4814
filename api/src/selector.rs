//! Label selector matching, as kube-apiserver evaluates `metav1.LabelSelector`. Pure.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

/// Whether `labels` satisfy `selector`.
///
/// Follows Kubernetes semantics: an empty selector matches everything, `matchLabels` and every
/// `matchExpressions` requirement must all hold, `NotIn` and `DoesNotExist` also hold when the key
/// is absent. An expression with an unknown operator matches nothing, so a malformed selector
/// never widens what it selects.
pub fn matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    matches_with(selector, |k| labels.get(k).map(String::as_str))
}

/// [`matches()`] over labels kept in another form: `label` gives the value of a key, if any.
pub fn matches_with<'a>(selector: &LabelSelector, label: impl Fn(&str) -> Option<&'a str>) -> bool {
    let labels_ok = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| label(k) == Some(v.as_str()));
    labels_ok
        && selector
            .match_expressions
            .iter()
            .flatten()
            .all(|req| requirement_holds(req, label(&req.key)))
}

/// Whether `labels` satisfy any of `selectors`; an empty list matches everything.
///
/// This is how FerroLB reads list-valued selector fields such as `nodeSelectors`:
/// no selector means no restriction.
pub fn any_matches(selectors: &[LabelSelector], labels: &BTreeMap<String, String>) -> bool {
    selectors.is_empty() || selectors.iter().any(|s| matches(s, labels))
}

fn requirement_holds(req: &LabelSelectorRequirement, value: Option<&str>) -> bool {
    let values = req.values.as_deref().unwrap_or_default();
    match req.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| !values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn expr(key: &str, op: &str, values: &[&str]) -> LabelSelector {
        LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: key.into(),
                operator: op.into(),
                values: Some(values.iter().map(|v| v.to_string()).collect()),
            }]),
            ..Default::default()
        }
    }

    #[test]
    fn an_empty_selector_matches_every_object() {
        assert!(matches(&LabelSelector::default(), &labels(&[])));
    }

    #[test]
    fn match_labels_requires_every_pair() {
        let sel = LabelSelector {
            match_labels: Some(labels(&[("a", "1"), ("b", "2")])),
            ..Default::default()
        };
        assert!(matches(
            &sel,
            &labels(&[("a", "1"), ("b", "2"), ("c", "3")])
        ));
        assert!(!matches(&sel, &labels(&[("a", "1")])));
        assert!(!matches(&sel, &labels(&[("a", "1"), ("b", "3")])));
    }

    #[test]
    fn not_in_and_does_not_exist_match_objects_without_the_key() {
        assert!(matches(&expr("zone", "NotIn", &["a"]), &labels(&[])));
        assert!(!matches(
            &expr("zone", "NotIn", &["a"]),
            &labels(&[("zone", "a")])
        ));
        assert!(matches(&expr("zone", "DoesNotExist", &[]), &labels(&[])));
        assert!(!matches(
            &expr("zone", "DoesNotExist", &[]),
            &labels(&[("zone", "a")])
        ));
    }

    #[test]
    fn in_and_exists_need_the_key() {
        assert!(!matches(&expr("zone", "In", &["a"]), &labels(&[])));
        assert!(matches(
            &expr("zone", "In", &["a", "b"]),
            &labels(&[("zone", "b")])
        ));
        assert!(matches(
            &expr("zone", "Exists", &[]),
            &labels(&[("zone", "")])
        ));
    }

    #[test]
    fn an_unknown_operator_matches_nothing() {
        assert!(!matches(
            &expr("zone", "Near", &["a"]),
            &labels(&[("zone", "a")])
        ));
    }

    #[test]
    fn an_empty_selector_list_means_no_restriction() {
        assert!(any_matches(&[], &labels(&[])));
        assert!(!any_matches(&[expr("x", "Exists", &[])], &labels(&[])));
    }
}
