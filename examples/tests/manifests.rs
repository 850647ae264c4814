//! Every example a user copies is valid; every invalid fixture fails with the message it declares.

use ferrolb_examples::{Manifest, check, expected_message, load, yaml_files};

#[test]
fn every_example_manifest_parses_into_the_api_types_and_passes_validation() {
    let files = yaml_files("manifests");
    assert!(
        files.len() >= 6,
        "expected the documented examples, found {files:?}"
    );
    for file in files {
        let objects = load(&file).unwrap_or_else(|e| panic!("{e}"));
        assert!(!objects.is_empty(), "{} holds no object", file.display());
        let messages = check(&file).unwrap();
        assert!(messages.is_empty(), "{}: {messages:?}", file.display());
    }
}

#[test]
fn every_example_starts_with_a_comment_saying_what_it_does() {
    for file in yaml_files("manifests") {
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(
            text.starts_with("# "),
            "{} has no leading comment",
            file.display()
        );
    }
}

#[test]
fn the_dual_stack_example_asks_for_both_families() {
    let file = ferrolb_examples::examples_dir().join("manifests/dual-stack.yaml");
    let svc = load(&file).unwrap().into_iter().find_map(|m| match m {
        Manifest::Service(s) => Some(s),
        _ => None,
    });
    let spec = svc.unwrap().spec.unwrap();
    assert_eq!(spec.ip_family_policy.as_deref(), Some("RequireDualStack"));
}

#[test]
fn every_invalid_fixture_fails_with_the_message_it_declares() {
    let files = yaml_files("invalid");
    assert!(files.len() >= 6);
    for file in files {
        let expected = expected_message(&file)
            .unwrap_or_else(|| panic!("{} lacks an `# expect:` line", file.display()));
        let messages = check(&file).unwrap();
        assert!(
            messages.iter().any(|m| m == &expected),
            "{}: expected {expected:?}, got {messages:?}",
            file.display()
        );
    }
}
