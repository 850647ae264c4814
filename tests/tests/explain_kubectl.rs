//! `kubectl ferrolb`: installed as `kubectl-ferrolb` on the PATH, the command is a kubectl
//! plugin. Run after kubectl is built (`scripts/realkube kubectl`), on the test double and on
//! the real kube-apiserver.

mod explain_support;

use explain_support::*;
use serde_json::json;
use std::process::Command;

/// Installed as `kubectl-ferrolb`, the command is a kubectl plugin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_ferrolb_explain_runs_the_same_command_as_a_kubectl_plugin() {
    let kubectl = ferrolb_tests::realkube::bin_dir().join("kubectl");
    if !kubectl.is_file() {
        ferrolb_tests::skip::skip::<()>(format!(
            "{} is not built: run scripts/realkube",
            kubectl.display()
        ));
        return;
    }
    let env = Env::start().await;
    pool(&env.client, "blue", &["10.99.45.0/28"], json!({})).await;
    service(&env.client, "default", "web", json!({})).await;
    explained(&env, "default", "web", "an address", |e| {
        (!e.addresses.is_empty()).then_some(())
    })
    .await;
    let path = format!(
        "{}:{}",
        binary("kubectl-ferrolb").parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new(&kubectl)
        .args(["ferrolb", "explain", "-n", "default", "web"])
        .env("KUBECONFIG", &env.kubeconfig)
        .env("PATH", path)
        .output()
        .expect("kubectl runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.starts_with("Service default/web\n"), "{text}");
    assert!(
        text.contains("  Pool: blue (chosen automatically"),
        "{text}"
    );
    drop(env);
}
