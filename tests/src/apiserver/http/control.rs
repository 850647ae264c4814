//! `/_fault/...` endpoints: the fault handle over HTTP, for the binary and for scripts.
//!
//! | request | effect |
//! | --- | --- |
//! | `POST /_fault/close-watches` | end every open watch |
//! | `POST /_fault/fail?resource=services&count=3&code=500` | fail the next 3 requests on services with 500 |
//! | `POST /_fault/fail?resource=leases&count=1&code=429&retryAfter=2` | 429 with `Retry-After: 2` |
//! | `POST /_fault/fail?resource=services&verb=watch&count=1` | fail only the next watch |
//! | `POST /_fault/latency?ms=200` | add 200 ms before every answer (`ms=0` removes it) |
//! | `POST /_fault/latency?resource=endpointslices&ms=4000` | only requests whose path names endpointslices |
//! | `POST /_fault/expire-watch-cache` | next watch from an older resourceVersion gets 410 |
//! | `POST /_fault/restart` | drop every connection and listen again, keeping the stored objects |
//! | `POST /_fault/clear` | remove pending failures and latency |
//! | `GET /_fault/requests` | the request log as JSON |

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Response, header};
use serde_json::{Value, json};

use super::server::{failure_from_query, faults};
use crate::apiserver::faults::{Shared, Verb};

fn ok(body: Value) -> Response<Body> {
    Response::builder()
        .status(200)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .expect("valid response")
}

fn bad(msg: &str) -> Response<Body> {
    Response::builder()
        .status(400)
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(Body::from(format!("{msg}\n")))
        .expect("valid response")
}

/// Serves one `/_fault/<rest>` request.
pub async fn fault_endpoint(
    shared: &Arc<Shared>,
    method: &str,
    rest: &str,
    q: &HashMap<String, String>,
) -> Response<Body> {
    let f = faults(shared);
    match (method, rest) {
        ("POST", "close-watches") => {
            f.close_watches();
            ok(json!({"closed": true}))
        }
        ("POST", "fail") => {
            let Some(resource) = q.get("resource") else {
                return bad("resource is required");
            };
            let count = q.get("count").and_then(|c| c.parse().ok()).unwrap_or(1);
            match q.get("verb").map(|v| Verb::parse(v)) {
                Some(Some(verb)) => f.fail_next_verb(resource, verb, count, failure_from_query(q)),
                Some(None) => return bad("unknown verb"),
                None => f.fail_next(resource, count, failure_from_query(q)),
            }
            ok(json!({"resource": resource, "count": count}))
        }
        ("POST", "latency") => {
            let ms: u64 = q.get("ms").and_then(|c| c.parse().ok()).unwrap_or(0);
            match q.get("resource") {
                Some(resource) => f.set_resource_latency(resource, Duration::from_millis(ms)),
                None => f.set_latency(Duration::from_millis(ms)),
            }
            ok(json!({"latencyMs": ms, "resource": q.get("resource")}))
        }
        ("POST", "expire-watch-cache") => {
            f.expire_watch_cache();
            ok(json!({"expired": true}))
        }
        ("POST", "clear") => {
            f.clear();
            ok(json!({"cleared": true}))
        }
        ("POST", "restart") => {
            let tx = shared.restart.clone();
            // Answer first: the restart cuts this very connection.
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                let (done, _wait) = tokio::sync::oneshot::channel();
                let _ = tx.send(done);
            });
            ok(json!({"restarting": true}))
        }
        ("GET", "requests") => {
            let log = shared.log.lock().expect("log lock");
            let items: Vec<Value> = log
                .iter()
                .map(|r| {
                    json!({
                        "method": r.method, "path": r.path, "query": r.query,
                        "verb": r.verb.map(|v| v.as_str()), "group": r.group, "resource": r.resource,
                        "subresource": r.subresource, "namespace": r.namespace, "name": r.name,
                        "userAgent": r.user_agent, "status": r.status,
                    })
                })
                .collect();
            ok(Value::Array(items))
        }
        _ => bad("unknown fault endpoint"),
    }
}
