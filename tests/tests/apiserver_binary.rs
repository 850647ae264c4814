//! The `ferrolb-apiserver` binary: kubeconfig, `/_fault` endpoints over HTTP, and `--state` across a
//! process restart.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use ferrolb_tests::apiserver::ApiServerConfig;
use ferrolb_tests::apiserver::cluster::TestCluster;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

struct Server {
    child: Child,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn(dir: &Path) -> Server {
    let kubeconfig = dir.join("kubeconfig");
    let _ = std::fs::remove_file(&kubeconfig);
    let child = Command::new(env!("CARGO_BIN_EXE_ferrolb-apiserver"))
        .args(["--listen", "127.0.0.1:0", "--kubeconfig"])
        .arg(&kubeconfig)
        .arg("--state")
        .arg(dir.join("state.json"))
        .arg("--crds")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/crds"))
        .stdout(Stdio::null())
        .spawn()
        .expect("the binary starts");
    Server { child }
}

async fn connect(dir: &Path) -> (kube::Client, String) {
    let path = dir.join("kubeconfig");
    for _ in 0..200 {
        if let Ok(text) = std::fs::read_to_string(&path)
            && !text.is_empty()
        {
            let kc = kube::config::Kubeconfig::from_yaml(&text).expect("kubeconfig parses");
            let server = kc.clusters[0]
                .cluster
                .as_ref()
                .unwrap()
                .server
                .clone()
                .unwrap();
            let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .unwrap();
            return (kube::Client::try_from(cfg).unwrap(), server);
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("no kubeconfig written");
}

async fn http(method: &str, url: &str) -> (u16, Value) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_once('/').unwrap();
    let mut s = tokio::net::TcpStream::connect(host).await.unwrap();
    let req = format!(
        "{method} /{path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    let status = out[9..12].parse().unwrap();
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    // The body may be chunked; the JSON document is the line that parses.
    let json = body
        .lines()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or(Value::Null);
    (status, json)
}

#[tokio::test]
async fn binary_serves_faults_over_http_and_keeps_state_across_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let server = spawn(&dir);
    let (client, url) = connect(&dir).await;
    let api: Api<Service> = Api::namespaced(client, "default");
    let svc: Service = serde_json::from_value(
        json!({"metadata": {"name": "kept"}, "spec": {"ports": [{"port": 80}]}}),
    )
    .unwrap();
    let created = api.create(&PostParams::default(), &svc).await.unwrap();

    let (code, _) = http(
        "POST",
        &format!("{url}/_fault/fail?resource=services&count=1&code=500"),
    )
    .await;
    assert_eq!(code, 200);
    let (code, body) = http(
        "GET",
        &format!("{url}/api/v1/namespaces/default/services/kept"),
    )
    .await;
    assert_eq!(
        (code, body["reason"].as_str()),
        (500, Some("InternalError"))
    );
    let (code, log) = http("GET", &format!("{url}/_fault/requests")).await;
    assert_eq!(code, 200);
    let last = log.as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        (
            last["verb"].as_str(),
            last["resource"].as_str(),
            last["status"].as_u64()
        ),
        (Some("get"), Some("services"), Some(500))
    );

    // SIGTERM saves the state; a new process serves the same objects.
    let status = Command::new("kill")
        .args(["-TERM", &server.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let mut server = server;
    let _ = server.child.wait();
    let _again = spawn(&dir);
    let (client, _) = connect(&dir).await;
    let api: Api<Service> = Api::namespaced(client, "default");
    let kept = api.get("kept").await.unwrap();
    assert_eq!(kept.metadata.uid, created.metadata.uid);
    assert_eq!(
        kept.spec.unwrap().cluster_ip,
        created.spec.unwrap().cluster_ip
    );
}

/// Runs kubectl (the one `scripts/realkube` builds from the same Kubernetes as the real
/// kube-apiserver) against `kubeconfig`; `None` (after saying why) when it is not built, a
/// failure under `FERROLB_REQUIRE_BINARIES=1`.
fn kubectl(kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> Option<(bool, String)> {
    use std::io::Write;
    let binary = ferrolb_tests::realkube::bin_dir().join("kubectl");
    if !binary.is_file() {
        return ferrolb_tests::skip::skip(format!(
            "{} is not built: run scripts/realkube",
            binary.display()
        ));
    }
    let mut cmd = Command::new(&binary);
    cmd.arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => panic!("cannot run {}: {e}", binary.display()),
    };
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    Some((
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    ))
}

/// On the in-repo test API server, or on the real cluster `FERROLB_TEST_KUBECONFIG` names
/// (`scripts/test` runs it against its real kube-apiserver too), in a namespace of its own.
#[tokio::test]
async fn kubectl_applies_gets_and_sees_validation_errors() {
    let mut cluster = TestCluster::start(
        ApiServerConfig::default()
            .with_crd_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/crds")),
    )
    .await;
    let tmp = tempfile::tempdir().unwrap();
    let kc = cluster.kubeconfig(tmp.path()).unwrap();
    let ns = cluster.namespace("kubectl").await;
    let ns = ns.as_str();
    let run = move |args: &[&str], stdin: Option<&'static str>| {
        let kc = kc.clone();
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            kubectl(&kc, &args, stdin)
        })
    };
    let svc = "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n  type: LoadBalancer\n  ports:\n  - port: 80\n";
    let Some((ok, out)) = run(&["-n", ns, "apply", "-f", "-"], Some(svc))
        .await
        .unwrap()
    else {
        return;
    };
    assert!(ok, "{out}");
    assert!(out.contains("service/web created"), "{out}");
    let (ok, out) = run(&["-n", ns, "get", "svc", "web"], None)
        .await
        .unwrap()
        .unwrap();
    assert!(
        ok && out.contains("LoadBalancer") && out.contains("<pending>"),
        "{out}"
    );
    let gadget = "apiVersion: test.ferrolb.io/v1\nkind: Gadget\nmetadata:\n  name: g\nspec:\n  pool: p\n  low: 9\n  high: 1\n";
    let (ok, out) = run(&["-n", ns, "apply", "-f", "-"], Some(gadget))
        .await
        .unwrap()
        .unwrap();
    assert!(!ok && out.contains("low must not exceed high"), "{out}");
    let (ok, out) = run(&["-n", ns, "get", "gadgets"], None)
        .await
        .unwrap()
        .unwrap();
    assert!(ok && out.contains("No resources found"), "{out}");
    // kubectl create sends protobuf for built-in kinds.
    let (ok, out) = run(
        &[
            "-n",
            ns,
            "create",
            "secret",
            "generic",
            "bgp",
            "--from-literal=password=s3cret",
        ],
        None,
    )
    .await
    .unwrap()
    .unwrap();
    assert!(ok && out.contains("secret/bgp created"), "{out}");
    let (ok, out) = run(
        &[
            "-n",
            ns,
            "get",
            "secret",
            "bgp",
            "-o",
            "jsonpath={.data.password}",
        ],
        None,
    )
    .await
    .unwrap()
    .unwrap();
    assert!(ok && out == "czNjcmV0", "{out}");
}
