//! The operator endpoints answer as probes and Prometheus expect.

use std::sync::Arc;

use ferrolb_telemetry::{Readiness, serve};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = String::new();
    s.read_to_string(&mut buf).await.unwrap();
    let code = buf[9..12].parse().unwrap();
    (code, buf)
}

/// Serves `registry` on a free port; the server stops when the returned sender is dropped.
async fn serve_metrics(
    registry: Registry,
) -> (std::net::SocketAddr, tokio::sync::watch::Sender<bool>) {
    let (tx, rx) = tokio::sync::watch::channel(false);
    let (addr, _task) = serve(
        "127.0.0.1:0".parse().unwrap(),
        Arc::new(registry),
        Readiness::default(),
        rx,
    )
    .await
    .unwrap();
    (addr, tx)
}

#[tokio::test]
async fn readyz_follows_the_readiness_flag_while_healthz_always_answers() {
    let ready = Readiness::default();
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let (addr, _task) = serve(
        "127.0.0.1:0".parse().unwrap(),
        Arc::new(Registry::default()),
        ready.clone(),
        rx,
    )
    .await
    .unwrap();
    assert_eq!(get(addr, "/healthz").await.0, 200);
    assert_eq!(get(addr, "/readyz").await.0, 503);
    ready.set(true);
    assert_eq!(get(addr, "/readyz").await.0, 200);
}

#[tokio::test]
async fn metrics_expose_registered_counters_in_prometheus_text_format() {
    let mut registry = Registry::with_prefix("ferrolb");
    let c = Counter::<u64>::default();
    registry.register("widgets", "Widgets seen", c.clone());
    c.inc_by(3);
    let (addr, _shutdown) = serve_metrics(registry).await;
    let (code, body) = get(addr, "/metrics").await;
    assert_eq!(code, 200);
    assert!(body.contains("ferrolb_widgets_total 3"), "{body}");
}

#[tokio::test]
async fn the_server_stops_when_shutdown_fires() {
    let (tx, rx) = tokio::sync::watch::channel(false);
    let (_addr, task) = serve(
        "127.0.0.1:0".parse().unwrap(),
        Arc::new(Registry::default()),
        Readiness::default(),
        rx,
    )
    .await
    .unwrap();
    tx.send(true).unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn metrics_count_the_runtimes_alive_tasks() {
    let mut registry = Registry::with_prefix("ferrolb");
    ferrolb_telemetry::register_runtime_metrics(&mut registry);
    let (addr, _shutdown) = serve_metrics(registry).await;
    let tasks = |body: &str| -> i64 {
        body.lines()
            .find_map(|l| l.strip_prefix("ferrolb_runtime_tasks "))
            .unwrap_or_else(|| panic!("no ferrolb_runtime_tasks in {body}"))
            .parse()
            .unwrap()
    };
    // A scrape's own connection task may outlive its answer for a moment: read until the
    // count is `want`.
    let settles_at = |want: i64| async move {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let now = tasks(&get(addr, "/metrics").await.1);
            if now == want || tokio::time::Instant::now() > deadline {
                return now;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    };
    // Before: the same count twice in a row.
    let mut before = tasks(&get(addr, "/metrics").await.1);
    loop {
        let again = tasks(&get(addr, "/metrics").await.1);
        if again == before {
            break;
        }
        before = again;
    }
    // Ten tasks that stay alive until told to end.
    let (stop, _) = tokio::sync::broadcast::channel::<()>(1);
    let waiting: Vec<_> = (0..10)
        .map(|_| {
            let mut rx = stop.subscribe();
            tokio::spawn(async move {
                let _ = rx.recv().await;
            })
        })
        .collect();
    assert_eq!(
        settles_at(before + 10).await,
        before + 10,
        "before: {before}"
    );
    drop(stop);
    for t in waiting {
        t.await.unwrap();
    }
    assert_eq!(settles_at(before).await, before);
}

#[test]
fn a_watch_retries_after_250_ms_doubling_to_at_most_4_s_and_starts_over_after_an_event() {
    use kube::runtime::utils::Backoff;
    let mut b = ferrolb_telemetry::WatchBackoff::default();
    let waits: Vec<u128> = b.by_ref().take(7).map(|d| d.as_millis()).collect();
    for (wait, full) in waits
        .iter()
        .zip([250u128, 500, 1000, 2000, 4000, 4000, 4000])
    {
        assert!(*wait <= full && *wait >= full * 3 / 4, "{waits:?}");
    }
    b.reset();
    assert!(b.next().unwrap().as_millis() <= 250);
}
