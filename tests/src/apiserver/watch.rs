//! WATCH: initial events, replay from the watch cache, 410 Expired, selector transitions, bookmarks,
//! `timeoutSeconds`, and forced closes. One tokio task per watch feeds a channel the HTTP body reads.
//!
//! ```text
//!  writer (ops, under lock) ──► Table broadcast ──► watch task ──► mpsc ──► chunked HTTP body
//!                                                     ▲   ▲
//!                              close-watches signal ──┘   └── deadline / bookmark timers
//! ```

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::SinkExt;
use futures::channel::mpsc;
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use tokio::time::Instant;

use super::error::{ApiError, ApiResult, invalid_options};
use super::kinds;
use super::lists::Filter;
use super::resources::{Builtin, ResourceDef};
use super::state::{Ctx, State, parse_rv};
use super::store::{EventType, StoredEvent};

/// Watch parameters after validation.
#[derive(Debug)]
struct Params {
    since: Option<u64>,
    bookmarks: bool,
    initial_end_bookmark: bool,
    timeout: Duration,
}

fn params(ctx: &Ctx) -> ApiResult<Params> {
    let timeout = match ctx.q("timeoutSeconds") {
        Some(t) => Duration::from_secs(t.parse::<u64>().map_err(|_| {
            ApiError::BadRequest(format!("strconv.ParseInt: parsing {t:?}: invalid syntax"))
        })?),
        // kube-apiserver picks a random timeout between 30 and 60 minutes.
        None => Duration::from_secs(1800 + rand::random_range(0..1800)),
    };
    let bookmarks = ctx.q("allowWatchBookmarks") == Some("true");
    let send_initial = ctx.q("sendInitialEvents");
    if send_initial.is_some() && ctx.q("resourceVersionMatch") != Some("NotOlderThan") {
        return Err(invalid_options(
            "ListOptions",
            "resourceVersionMatch",
            "FieldValueForbidden",
            "Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
        ));
    }
    let rv = ctx.q("resourceVersion").unwrap_or("");
    let (since, initial) = match (send_initial, rv) {
        (Some("true"), _) => (None, true),
        (_, "") | (_, "0") => (None, true),
        (_, rv) => (Some(parse_rv(rv)?), false),
    };
    Ok(Params {
        since,
        bookmarks,
        initial_end_bookmark: initial && bookmarks,
        timeout,
    })
}

fn event_line(kind: &str, object: &Value) -> String {
    let mut s = json!({"type": kind, "object": object}).to_string();
    s.push('\n');
    s
}

/// A BOOKMARK object: only the resourceVersion, plus the empty structs kube-apiserver always writes.
fn bookmark(res: &ResourceDef, rv: u64, initial_end: bool) -> Value {
    let mut o = json!({"kind": res.kind, "apiVersion": res.api_version(), "metadata": {"resourceVersion": rv.to_string()}});
    if initial_end {
        o["metadata"]["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    match res.builtin() {
        Some(Builtin::Service) => {
            o["spec"] = json!({});
            o["status"] = json!({"loadBalancer": {}});
        }
        Some(Builtin::Pod) => {
            o["spec"] = json!({"containers": null});
            o["status"] = json!({});
        }
        Some(Builtin::Node | Builtin::Namespace) => {
            o["spec"] = json!({});
            o["status"] = json!({});
        }
        Some(Builtin::Lease) => o["spec"] = json!({}),
        _ => {}
    }
    o
}

/// What a stored event looks like to a watcher with `filter`, if it sees it at all.
fn translate(res: &ResourceDef, filter: &Filter, e: &StoredEvent) -> Option<(&'static str, Value)> {
    let now = kinds::present(res, e.object.clone());
    let now_ok = filter.matches(&e.key, &now);
    let before_ok = e
        .prev
        .as_ref()
        .is_some_and(|p| filter.matches(&e.key, &kinds::present(res, p.clone())));
    match e.kind {
        EventType::Added => now_ok.then_some(("ADDED", now)),
        EventType::Deleted => before_ok.then_some(("DELETED", now)),
        EventType::Modified => match (before_ok, now_ok) {
            (true, true) => Some(("MODIFIED", now)),
            (false, true) => Some(("ADDED", now)),
            (true, false) => {
                let mut old = kinds::present(res, e.prev.clone().unwrap_or_default());
                old["metadata"]["resourceVersion"] = json!(e.rv.to_string());
                Some(("DELETED", old))
            }
            (false, false) => None,
        },
    }
}

/// The body of a watch: a channel of JSON lines, fed by a task spawned here.
pub fn start(
    state: &Arc<Mutex<State>>,
    ctx: &Ctx,
    mut closer: tokio::sync::watch::Receiver<u64>,
) -> ApiResult<mpsc::Receiver<String>> {
    let p = params(ctx)?;
    let filter = Filter::from_ctx(ctx)?;
    let res = ctx.res.clone();
    let mut first: Vec<String> = Vec::new();
    let (mut rx, mut last_rv) = {
        let mut st = state.lock().expect("state lock");
        let rx = st.store.subscribe(&res.storage);
        let current = st.store.revision();
        let start_rv = match p.since {
            None => {
                for (k, v) in st.store.objects(&res.storage) {
                    let shown = kinds::present(&res, v.clone());
                    if filter.matches(k, &shown) {
                        first.push(event_line("ADDED", &shown));
                    }
                }
                if p.initial_end_bookmark {
                    first.push(event_line("BOOKMARK", &bookmark(&res, current, true)));
                }
                current
            }
            Some(since) => match st.store.events_since(&res.storage, since) {
                Ok(events) => {
                    for e in &events {
                        if let Some((t, o)) = translate(&res, &filter, e) {
                            first.push(event_line(t, &o));
                        }
                    }
                    events.last().map(|e| e.rv).unwrap_or(since).max(since)
                }
                Err(too_old) => {
                    let status = ApiError::Expired {
                        message: format!("too old resource version: {since} ({})", too_old.oldest),
                        continue_token: None,
                    }
                    .status();
                    let (mut tx, out) = mpsc::channel(1);
                    tokio::spawn(async move {
                        let _ = tx.send(event_line("ERROR", &status)).await;
                    });
                    return Ok(out);
                }
            },
        };
        (rx, start_rv)
    };
    let (mut tx, out) = mpsc::channel::<String>(256);
    tokio::spawn(async move {
        for line in first {
            if tx.send(line).await.is_err() {
                return;
            }
        }
        let deadline = Instant::now() + p.timeout;
        // A bookmark shortly before the timeout, then every minute.
        let mut next_bookmark = if p.timeout > Duration::from_secs(4) {
            deadline - Duration::from_secs(2)
        } else {
            Instant::now() + p.timeout / 2
        };
        next_bookmark = next_bookmark.min(Instant::now() + Duration::from_secs(60));
        closer.mark_unchanged();
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => return,
                _ = closer.changed() => return,
                _ = tokio::time::sleep_until(next_bookmark), if p.bookmarks => {
                    if tx.send(event_line("BOOKMARK", &bookmark(&res, last_rv, false))).await.is_err() {
                        return;
                    }
                    next_bookmark = Instant::now() + Duration::from_secs(60);
                    if next_bookmark > deadline { next_bookmark = deadline + Duration::from_secs(1); }
                }
                got = rx.recv() => match got {
                    Ok(e) => {
                        if e.rv <= last_rv {
                            continue;
                        }
                        last_rv = e.rv;
                        if let Some((t, o)) = translate(&res, &filter, &e)
                            && tx.send(event_line(t, &o)).await.is_err()
                        {
                            return;
                        }
                    }
                    // A watcher that falls behind is closed, as kube-apiserver closes slow watchers;
                    // the client resumes from the last revision it saw.
                    Err(RecvError::Lagged(_)) | Err(RecvError::Closed) => return,
                },
            }
        }
    });
    Ok(out)
}
