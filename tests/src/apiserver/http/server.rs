//! The HTTP shell: accepts connections (which a restart can cut), applies faults and latency, logs
//! every request, and turns handler results into kube-apiserver-shaped responses.
//!
//! ```text
//!  TcpListener ──► KillableListener ──► axum fallback `handle` ──► routes::parse
//!                        ▲                    │  faults / latency / request log
//!   restart: kill_connections                 ├─► discovery, ops, lists (under the state lock)
//!                                             └─► watch::start ──► streaming body
//! ```

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Response, StatusCode, header};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

use super::routes::{self, Route};
use crate::apiserver::discovery::{self, DiscoveryFormat};
use crate::apiserver::error::{ApiError, ApiResult};
use crate::apiserver::faults::{Failure, Faults, RequestRecord, Shared, Verb};
use crate::apiserver::lists;
use crate::apiserver::ops::{self, Reply};
use crate::apiserver::patch::PatchKind;
use crate::apiserver::state::Ctx;
use crate::apiserver::table;
use crate::apiserver::watch;

/// A TCP stream that fails as soon as the server is restarted.
pub struct KillableIo {
    io: TcpStream,
    killed: Pin<Box<dyn Future<Output = ()> + Send>>,
    dead: bool,
}

impl KillableIo {
    fn check(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        if !self.dead && self.killed.as_mut().poll(cx).is_ready() {
            self.dead = true;
        }
        if self.dead {
            Err(io::ErrorKind::ConnectionReset.into())
        } else {
            Ok(())
        }
    }
}

impl AsyncRead for KillableIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Err(e) = self.check(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for KillableIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if let Err(e) = self.check(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// Accepts connections and ties each to the kill signal current at accept time.
pub struct KillableListener {
    pub(crate) inner: TcpListener,
    pub(crate) kill: tokio::sync::watch::Receiver<u64>,
}

impl axum::serve::Listener for KillableListener {
    type Io = KillableIo;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.inner.accept().await {
                Ok((io, addr)) => {
                    let _ = io.set_nodelay(true);
                    let mut rx = self.kill.clone();
                    rx.mark_unchanged();
                    let killed = Box::pin(async move {
                        let _ = rx.changed().await;
                    });
                    return (
                        KillableIo {
                            io,
                            killed,
                            dead: false,
                        },
                        addr,
                    );
                }
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(5)).await,
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => match u8::from_str_radix(&s[i + 1..i + 3], 16) {
                Ok(v) => {
                    out.push(v);
                    i += 2;
                }
                Err(_) => out.push(b'%'),
            },
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn parse_query(q: &str) -> HashMap<String, String> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

fn json_response(code: u16, body: &Value, warnings: &[String]) -> Response<Body> {
    let mut r = Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CACHE_CONTROL, "no-cache, private");
    for w in warnings {
        r = r.header("Warning", w.as_str());
    }
    r.body(Body::from(body.to_string()))
        .expect("valid response")
}

fn error_response(e: &ApiError) -> Response<Body> {
    if e.is_plain_text() {
        return Response::builder()
            .status(404)
            .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
            .header(header::CACHE_CONTROL, "no-cache, private")
            .body(Body::from("404 page not found\n"))
            .expect("valid response");
    }
    let mut r = json_response(e.code(), &e.status(), &[]);
    if let ApiError::Injected {
        retry_after: Some(s),
        ..
    } = e
    {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(*s));
    }
    r
}

fn header_str(h: &HeaderMap, name: header::HeaderName) -> &str {
    h.get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
}

/// The single request handler.
pub async fn handle(State(shared): State<Arc<Shared>>, req: Request) -> Response<Body> {
    let method = req.method().as_str().to_string();
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    let headers = req.headers().clone();
    let body = axum::body::to_bytes(req.into_body(), 64 << 20)
        .await
        .unwrap_or_default();
    if let Some(rest) = path.strip_prefix("/_fault/") {
        return super::control::fault_endpoint(&shared, &method, rest, &parse_query(&query)).await;
    }
    let mut record = RequestRecord {
        method: method.clone(),
        path: path.clone(),
        query: query.clone(),
        verb: None,
        group: String::new(),
        resource: None,
        subresource: None,
        namespace: None,
        name: None,
        user_agent: header_str(&headers, header::USER_AGENT).to_string(),
        status: 0,
    };
    let latency = shared.faults.lock().expect("faults lock").latency_of(&path);
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    let q = parse_query(&query);
    let response = serve(&shared, &method, &path, &q, &headers, body, &mut record);
    record.status = response.status().as_u16();
    shared.log.lock().expect("log lock").push(record);
    response
}

fn serve(
    shared: &Arc<Shared>,
    method: &str,
    path: &str,
    q: &HashMap<String, String>,
    headers: &HeaderMap,
    body: Bytes,
    record: &mut RequestRecord,
) -> Response<Body> {
    let route = {
        let st = shared.state.lock().expect("state lock");
        routes::parse(&st.registry, path)
    };
    let route = match route {
        Ok(r) => r,
        Err(e) => return error_response(&e),
    };
    let accept = header_str(headers, header::ACCEPT);
    match route {
        Route::Resource(rr) => {
            record.group = rr.res.group.clone();
            record.resource = Some(rr.res.plural.clone());
            record.subresource = rr.subresource.clone();
            record.namespace = rr.namespace.clone();
            record.name = rr.name.clone();
            let watch = matches!(q.get("watch").map(String::as_str), Some("true" | "1"));
            let verb = match rr.verb(method, watch) {
                Ok(v) => v,
                Err(e) => return error_response(&e),
            };
            record.verb = Some(verb);
            if let Some(f) = shared.take_failure(&rr.res.plural, verb).or_else(|| {
                shared.object_failure(
                    &rr.res.plural,
                    rr.namespace.as_deref(),
                    rr.name.as_deref(),
                    verb,
                )
            }) {
                return error_response(&f.to_error(&rr.res.plural));
            }
            let manager = q.get("fieldManager").cloned().unwrap_or_else(|| {
                header_str(headers, header::USER_AGENT)
                    .split('/')
                    .next()
                    .unwrap_or("")
                    .to_string()
            });
            let ctx = Ctx {
                res: rr.res.clone(),
                namespace: rr.namespace.clone(),
                name: rr.name.clone(),
                subresource: rr.subresource.clone(),
                query: q.clone(),
                manager,
            };
            match resource(shared, &ctx, verb, headers, &body, accept) {
                Ok(r) => r,
                Err(e) => error_response(&e),
            }
        }
        other => {
            record.verb = (method == "GET").then_some(Verb::Get);
            if method != "GET" {
                return error_response(&ApiError::MethodNotAllowed);
            }
            discovery_response(shared, other, headers)
        }
    }
}

fn discovery_response(shared: &Arc<Shared>, route: Route, headers: &HeaderMap) -> Response<Body> {
    let st = shared.state.lock().expect("state lock");
    let defs = st.registry.all();
    let accept = header_str(headers, header::ACCEPT);
    let doc = match route {
        Route::Version => discovery::version(),
        Route::Health => {
            return Response::builder()
                .status(200)
                .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
                .body(Body::from("ok"))
                .expect("valid response");
        }
        Route::CoreVersions | Route::Groups => {
            let core = matches!(route, Route::CoreVersions);
            match discovery::format_from_accept(accept) {
                DiscoveryFormat::Unacceptable => {
                    return error_response(&ApiError::NotAcceptable("only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf".into()));
                }
                DiscoveryFormat::AggregatedV2 => {
                    let doc = discovery::aggregated(defs, core);
                    let tag = discovery::etag(&doc);
                    let builder = Response::builder()
                        .header(header::ETAG, tag.as_str())
                        .header(header::VARY, "Accept")
                        .header(header::CACHE_CONTROL, "public");
                    if header_str(headers, header::IF_NONE_MATCH) == tag {
                        return builder
                            .status(304)
                            .body(Body::empty())
                            .expect("valid response");
                    }
                    return builder
                        .status(200)
                        .header(
                            header::CONTENT_TYPE,
                            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
                        )
                        .body(Body::from(doc.to_string()))
                        .expect("valid response");
                }
                DiscoveryFormat::Legacy => {
                    if core {
                        discovery::api_versions(header_str(headers, header::HOST))
                    } else {
                        discovery::group_list(defs)
                    }
                }
            }
        }
        Route::Group(g) => match discovery::group(defs, &g) {
            Some(d) => d,
            None => return error_response(&ApiError::PageNotFound),
        },
        Route::ResourceList { group, version } => discovery::resource_list(defs, &group, &version),
        Route::OpenApiIndex => crate::apiserver::openapi::index(defs),
        Route::OpenApi { group, version } => {
            crate::apiserver::openapi::document(defs, &group, &version)
        }
        Route::Resource(_) => unreachable!("resource routes are served elsewhere"),
    };
    json_response(200, &doc, &[])
}

fn parse_body(ctx: &Ctx, headers: &HeaderMap, body: &[u8]) -> ApiResult<Value> {
    let ct = header_str(headers, header::CONTENT_TYPE)
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_string();
    match ct.as_str() {
        "application/json" | "" => serde_json::from_slice(body).map_err(|e| {
            let snippet: String = String::from_utf8_lossy(body).chars().take(30).collect();
            let why = if e.is_eof() { "unexpected end of JSON input".to_string() } else { e.to_string() };
            ApiError::BadRequest(format!(
                "the object provided is unrecognized (must be of type {}): couldn't get version/kind; json parse error: {why} ({snippet} ...)",
                ctx.res.kind
            ))
        }),
        "application/yaml" => serde_norway::from_slice(body).map_err(|e| ApiError::BadRequest(format!("the object provided is unrecognized (must be of type {}): {e}", ctx.res.kind))),
        "application/vnd.kubernetes.protobuf" => crate::apiserver::protobuf::decode(body).map_err(|e| match e {
            crate::apiserver::protobuf::ProtobufError::UnsupportedKind(_) => ApiError::UnknownBodyFormat("application/json, application/yaml"),
            crate::apiserver::protobuf::ProtobufError::Malformed => {
                ApiError::BadRequest(format!("the object provided is unrecognized (must be of type {}): invalid protobuf body", ctx.res.kind))
            }
        }),
        _ => Err(ApiError::UnknownBodyFormat("application/json, application/yaml, application/vnd.kubernetes.protobuf")),
    }
}

fn reply(r: Reply) -> Response<Body> {
    json_response(r.code, &r.body, &r.warnings)
}

fn resource(
    shared: &Arc<Shared>,
    ctx: &Ctx,
    verb: Verb,
    headers: &HeaderMap,
    body: &[u8],
    accept: &str,
) -> ApiResult<Response<Body>> {
    if verb == Verb::Watch {
        let mut ctx = ctx.clone();
        if let Some(name) = ctx.name.take() {
            let fs = ctx.query.entry("fieldSelector".into()).or_default();
            *fs = if fs.is_empty() {
                format!("metadata.name={name}")
            } else {
                format!("{fs},metadata.name={name}")
            };
        }
        let rx = watch::start(&shared.state, &ctx, shared.close_watches.subscribe())?;
        let meta_only = accept.contains("as=PartialObjectMetadata");
        let as_table = accept.contains("as=Table");
        let res = ctx.res.clone();
        let mut first = true;
        let stream = rx.map(move |line| {
            let line = if meta_only {
                metadata_only_line(&line)
            } else if as_table {
                let out = table_line(&res, &line, first);
                first = false;
                out
            } else {
                line
            };
            Ok::<_, Infallible>(Bytes::from(line))
        });
        return Ok(Response::builder()
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::CACHE_CONTROL, "no-cache, private")
            .body(Body::from_stream(stream))
            .expect("valid response"));
    }
    let mut st = shared.state.lock().expect("state lock");
    let wants_table = accept.contains("as=Table");
    if accept.contains("as=PartialObjectMetadata") && matches!(verb, Verb::Get | Verb::List) {
        let body = if verb == Verb::Get {
            metadata_only(ops::get(&st, ctx)?.body)
        } else {
            metadata_only_list(lists::list(&mut st, ctx)?)
        };
        return Ok(json_response(200, &body, &[]));
    }
    match verb {
        Verb::Get => {
            let r = ops::get(&st, ctx)?;
            Ok(if wants_table {
                json_response(
                    200,
                    &table::table(&ctx.res, std::slice::from_ref(&r.body), json!({})),
                    &[],
                )
            } else {
                reply(r)
            })
        }
        Verb::List => {
            let list = lists::list(&mut st, ctx)?;
            if wants_table {
                let items = list["items"].as_array().cloned().unwrap_or_default();
                return Ok(json_response(
                    200,
                    &table::table(&ctx.res, &items, list["metadata"].clone()),
                    &[],
                ));
            }
            Ok(json_response(200, &list, &[]))
        }
        Verb::Create => {
            let v = parse_body(ctx, headers, body)?;
            Ok(reply(ops::create(&mut st, ctx, v)?))
        }
        Verb::Update => {
            let v = parse_body(ctx, headers, body)?;
            Ok(reply(ops::update(&mut st, ctx, v)?))
        }
        Verb::Patch => {
            let kind = PatchKind::from_content_type(header_str(headers, header::CONTENT_TYPE))
                .ok_or(ApiError::UnsupportedMediaType)?;
            Ok(reply(ops::patch(&mut st, ctx, kind, body)?))
        }
        Verb::Delete => {
            let options: Value = if body.is_empty() {
                Value::Null
            } else {
                serde_json::from_slice(body).unwrap_or(Value::Null)
            };
            Ok(reply(ops::delete(&mut st, ctx, &options)?))
        }
        Verb::DeleteCollection => Ok(json_response(
            200,
            &lists::delete_collection(&mut st, ctx)?,
            &[],
        )),
        Verb::Watch => unreachable!("handled above"),
    }
}

/// An object as `PartialObjectMetadata` (what metadata-only clients ask for through `Accept`).
fn metadata_only(obj: Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]})
}

fn metadata_only_list(list: Value) -> Value {
    let items: Vec<Value> = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|i| metadata_only(i.clone()))
        .collect();
    json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": list["metadata"], "items": items})
}

/// A watch event for `kubectl get -w`: the object becomes a one-row Table (column definitions in the
/// first event only, as kube-apiserver sends them).
fn table_line(res: &crate::apiserver::resources::ResourceDef, line: &str, first: bool) -> String {
    match serde_json::from_str::<Value>(line) {
        Ok(mut ev) if ev["type"] != "ERROR" && ev["type"] != "BOOKMARK" => {
            let mut t = table::table(
                res,
                std::slice::from_ref(&ev["object"]),
                json!({"resourceVersion": ev["object"]["metadata"]["resourceVersion"]}),
            );
            if !first {
                t["columnDefinitions"] = json!([]);
            }
            ev["object"] = t;
            format!("{ev}\n")
        }
        _ => line.to_string(),
    }
}

fn metadata_only_line(line: &str) -> String {
    match serde_json::from_str::<Value>(line) {
        Ok(mut ev) if ev["type"] != "ERROR" => {
            ev["object"] = metadata_only(ev["object"].take());
            format!("{ev}\n")
        }
        _ => line.to_string(),
    }
}

/// Parses a failure description from the fault endpoint: `code=500` or `code=429&retryAfter=N`.
pub(crate) fn failure_from_query(q: &HashMap<String, String>) -> Failure {
    match q.get("code").map(String::as_str) {
        Some("429") => Failure::TooManyRequests {
            retry_after_secs: q
                .get("retryAfter")
                .and_then(|s| s.parse().ok())
                .unwrap_or(1),
        },
        _ => Failure::ServerError,
    }
}

/// A [`Faults`] handle over `shared`.
pub(crate) fn faults(shared: &Arc<Shared>) -> Faults {
    Faults {
        shared: shared.clone(),
    }
}
