//! LIST: selectors, snapshots at a resourceVersion, `limit`/`continue` paging. No I/O.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};

use super::error::{ApiError, ApiResult, invalid_options};
use super::kinds;
use super::selectors::{FieldSelector, LabelSelector};
use super::state::{Ctx, State, parse_rv};
use super::store::ObjKey;

/// Label and field selectors of a request.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// `labelSelector`.
    pub labels: LabelSelector,
    /// `fieldSelector`.
    pub fields: FieldSelector,
    /// Namespace from the path.
    pub namespace: Option<String>,
}

impl Filter {
    /// From the request's query.
    pub fn from_ctx(ctx: &Ctx) -> ApiResult<Self> {
        Ok(Self {
            labels: LabelSelector::parse(ctx.q("labelSelector").unwrap_or(""))?,
            fields: FieldSelector::parse(ctx.q("fieldSelector").unwrap_or(""), &ctx.res)?,
            namespace: ctx.namespace.clone(),
        })
    }

    /// Whether a stored object (in the resource's API shape) passes.
    pub fn matches(&self, key: &ObjKey, presented: &Value) -> bool {
        self.namespace
            .as_deref()
            .is_none_or(|ns| key.namespace == ns)
            && self.labels.matches(presented)
            && self.fields.matches(presented)
    }

    /// Whether any selector is set.
    pub fn has_selector(&self) -> bool {
        !self.labels.is_empty() || !self.fields.is_empty()
    }
}

fn token(rv: i64, start: &str) -> String {
    URL_SAFE_NO_PAD.encode(json!({"v": "meta.k8s.io/v1", "rv": rv, "start": start}).to_string())
}

fn start_key(ctx: &Ctx, key: &ObjKey) -> String {
    if ctx.namespace.is_some() || key.namespace.is_empty() {
        format!("/{}\u{0}", key.name)
    } else {
        format!("/{}/{}\u{0}", key.namespace, key.name)
    }
}

fn key_string(ctx: &Ctx, key: &ObjKey) -> String {
    if ctx.namespace.is_some() || key.namespace.is_empty() {
        format!("/{}", key.name)
    } else {
        format!("/{}/{}", key.namespace, key.name)
    }
}

/// Checks the list options that kube-apiserver validates before anything else.
pub fn check_options(ctx: &Ctx) -> ApiResult<()> {
    if ctx.q("resourceVersionMatch").is_some()
        && ctx.q("resourceVersion").is_none_or(str::is_empty)
        && ctx.q("sendInitialEvents").is_none()
    {
        return Err(invalid_options(
            "ListOptions",
            "resourceVersionMatch",
            "FieldValueForbidden",
            "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
        ));
    }
    if let Some(l) = ctx.q("limit")
        && l.parse::<i64>().is_err()
    {
        return Err(ApiError::BadRequest(format!(
            "strconv.ParseInt: parsing {l:?}: invalid syntax"
        )));
    }
    Ok(())
}

/// LIST.
pub fn list(st: &mut State, ctx: &Ctx) -> ApiResult<Value> {
    check_options(ctx)?;
    let filter = Filter::from_ctx(ctx)?;
    let rv_param = ctx.q("resourceVersion").unwrap_or("");
    let mut limit = ctx
        .q("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0);
    let (snapshot_rv, start, objects) = if let Some(c) = ctx.q("continue").filter(|c| !c.is_empty())
    {
        let raw = URL_SAFE_NO_PAD
            .decode(c.trim_end_matches('='))
            .map_err(|_| ApiError::BadRequest("invalid continue token: continue key is not valid: invalid character '\\u0081' looking for beginning of value".into()))?;
        let t: Value = serde_json::from_slice(&raw).map_err(|e| {
            ApiError::BadRequest(format!(
                "invalid continue token: continue key is not valid: {e}"
            ))
        })?;
        let rv = t["rv"].as_u64().unwrap_or(0);
        let start = t["start"].as_str().unwrap_or("").to_string();
        match st.store.snapshot_at(&ctx.res.storage, rv) {
            Ok(objs) => (rv, Some(start), objs),
            Err(_) => {
                return Err(ApiError::Expired {
                    message: "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.".into(),
                    continue_token: Some(token(-1, start.trim_start_matches('/'))),
                });
            }
        }
    } else if ctx.q("resourceVersionMatch") == Some("Exact") {
        let rv = parse_rv(rv_param)?;
        let objs = st
            .store
            .snapshot_at(&ctx.res.storage, rv)
            .map_err(|_| ApiError::Expired {
                message: "The resourceVersion for the provided list is too old.".into(),
                continue_token: None,
            })?;
        (rv, None, objs)
    } else {
        if rv_param == "0" {
            limit = None;
        } else if !rv_param.is_empty() {
            parse_rv(rv_param)?;
        }
        let rv = st.store.revision();
        (
            rv,
            None,
            st.store
                .objects(&ctx.res.storage)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        )
    };
    let mut items = Vec::new();
    let mut more = false;
    let mut remaining = 0usize;
    for (k, v) in &objects {
        if let Some(s) = &start
            && key_string(ctx, k).as_str() < s.as_str()
        {
            continue;
        }
        let shown = kinds::present(&ctx.res, v.clone());
        if !filter.matches(k, &shown) {
            continue;
        }
        if limit.is_some_and(|l| items.len() >= l) {
            more = true;
            remaining += 1;
            continue;
        }
        items.push((k.clone(), shown));
    }
    let mut meta = json!({"resourceVersion": snapshot_rv.to_string()});
    if let Some(last) = items.last().filter(|_| more) {
        meta["continue"] = json!(token(snapshot_rv as i64, &start_key(ctx, &last.0)));
        if !filter.has_selector() {
            meta["remainingItemCount"] = json!(remaining);
        }
    }
    let items: Vec<Value> = items
        .into_iter()
        .map(|(_, mut v)| {
            if !ctx.res.is_custom()
                && let Some(o) = v.as_object_mut()
            {
                o.remove("kind");
                o.remove("apiVersion");
            }
            v
        })
        .collect();
    Ok(
        json!({"kind": format!("{}List", ctx.res.kind), "apiVersion": ctx.res.api_version(), "metadata": meta, "items": items}),
    )
}

/// DELETE on a collection: deletes every matching object and returns them as a list.
pub fn delete_collection(st: &mut State, ctx: &Ctx) -> ApiResult<Value> {
    let filter = Filter::from_ctx(ctx)?;
    let keys: Vec<ObjKey> = st
        .store
        .objects(&ctx.res.storage)
        .filter(|(k, v)| filter.matches(k, &kinds::present(&ctx.res, (*v).clone())))
        .map(|(k, _)| k.clone())
        .collect();
    let mut items = Vec::new();
    for k in keys {
        let mut one = ctx.clone();
        one.namespace = if ctx.res.namespaced {
            Some(k.namespace.clone())
        } else {
            None
        };
        one.name = Some(k.name.clone());
        let reply = super::ops::delete(st, &one, &Value::Null)?;
        if reply.body.get("kind").and_then(Value::as_str) != Some("Status") {
            let mut v = reply.body;
            if let Some(o) = v.as_object_mut() {
                o.remove("kind");
                o.remove("apiVersion");
            }
            items.push(v);
        }
    }
    Ok(
        json!({"kind": format!("{}List", ctx.res.kind), "apiVersion": ctx.res.api_version(),
              "metadata": {"resourceVersion": st.store.revision().to_string()}, "items": items}),
    )
}
