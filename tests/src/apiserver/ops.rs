//! Object verbs (get, create, update, patch, delete) with kube-apiserver's metadata, precondition,
//! subresource, generation and finalizer rules. Runs under the state lock; no I/O.

use serde_json::{Value, json};

use super::error::{ApiError, ApiResult, Cause};
use super::kinds;
use super::patch::{self, PatchKind};
use super::resources::Flavor;
use super::ssa;
use super::state::{Ctx, State, new_uid, now_seconds, random_suffix};

/// A successful answer.
#[derive(Debug)]
pub struct Reply {
    /// HTTP status.
    pub code: u16,
    /// Body.
    pub body: Value,
    /// `Warning` headers.
    pub warnings: Vec<String>,
}

impl Reply {
    fn new(code: u16, body: Value) -> Self {
        Self {
            code,
            body,
            warnings: Vec::new(),
        }
    }
}

/// GET of one object.
pub fn get(st: &State, ctx: &Ctx) -> ApiResult<Reply> {
    let obj = st
        .store
        .get(&ctx.res.storage, &ctx.key())
        .ok_or_else(|| ctx.not_found())?;
    Ok(Reply::new(200, kinds::present(&ctx.res, obj.clone())))
}

fn bad_kind(ctx: &Ctx, body: &Value) -> Option<ApiError> {
    let kind = body.get("kind").and_then(Value::as_str).unwrap_or("");
    let api_version = body.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    if kind.is_empty() && api_version.is_empty() {
        return None;
    }
    if kind == ctx.res.kind && (api_version.is_empty() || api_version == ctx.res.api_version()) {
        return None;
    }
    let version = api_version.rsplit('/').next().unwrap_or("");
    Some(ApiError::BadRequest(format!(
        "{kind} in version \"{version}\" cannot be handled as a {}: converting ({version}.{kind}) to ({}.{}): unknown conversion",
        ctx.res.kind,
        if ctx.res.group.is_empty() {
            "core"
        } else {
            &ctx.res.group
        },
        ctx.res.kind
    )))
}

fn check_namespace(st: &State, ctx: &Ctx, body: &mut Value) -> ApiResult<()> {
    if !body.is_object() {
        return Err(ApiError::BadRequest(
            "the object provided is unrecognized: not an object".into(),
        ));
    }
    if !body.get("metadata").is_some_and(Value::is_object) {
        body["metadata"] = json!({});
    }
    if ctx.res.namespaced {
        let ns = ctx.namespace.clone().unwrap_or_default();
        match body.pointer("/metadata/namespace").and_then(Value::as_str) {
            Some(b) if !b.is_empty() && b != ns => {
                return Err(ApiError::BadRequest(
                    "the namespace of the provided object does not match the namespace sent on the request".into(),
                ));
            }
            _ => body["metadata"]["namespace"] = json!(ns),
        }
        if !st.namespace_exists(&ns) {
            return Err(ApiError::NotFound {
                group: String::new(),
                resource: "namespaces".into(),
                name: ns,
            });
        }
    } else if let Some(m) = body["metadata"].as_object_mut() {
        m.remove("namespace");
    }
    Ok(())
}

/// POST: create an object.
pub fn create(st: &mut State, ctx: &Ctx, body: Value) -> ApiResult<Reply> {
    create_inner(st, ctx, body, None)
}

/// Create; `applied` is the apply configuration when the create comes from server-side apply.
fn create_inner(
    st: &mut State,
    ctx: &Ctx,
    mut body: Value,
    applied: Option<&Value>,
) -> ApiResult<Reply> {
    if let Some(e) = bad_kind(ctx, &body) {
        return Err(e);
    }
    check_namespace(st, ctx, &mut body)?;
    if body
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .is_some_and(|s| !s.is_empty())
    {
        return Err(ApiError::Internal(
            "resourceVersion should not be set on objects to be created".into(),
        ));
    }
    let name = body
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let name = if name.is_empty() {
        match body
            .pointer("/metadata/generateName")
            .and_then(Value::as_str)
        {
            Some(g) if !g.is_empty() => format!("{g}{}", random_suffix()),
            _ => {
                return Err(invalid(
                    ctx,
                    "",
                    vec![Cause::new(
                        "FieldValueRequired",
                        "Required value: name or generateName is required",
                        Some("metadata.name".into()),
                    )],
                ));
            }
        }
    } else {
        name
    };
    body["metadata"]["name"] = json!(name);
    body["kind"] = json!(ctx.res.kind);
    body["apiVersion"] = json!(ctx.res.api_version());
    let meta = body["metadata"]
        .as_object_mut()
        .expect("metadata is an object");
    for k in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
        "managedFields",
        "selfLink",
    ] {
        meta.remove(k);
    }
    let mut ctx = ctx.clone();
    ctx.name = Some(name.clone());
    let key = ctx.key();
    if st.store.get(&ctx.res.storage, &key).is_some() {
        return Err(ApiError::AlreadyExists {
            group: ctx.res.group.clone(),
            resource: ctx.res.plural.clone(),
            name,
        });
    }
    drop_empty_metadata(&mut body);
    let mut warnings = match ctx.res.builtin() {
        Some(b) => super::typed::decode(b, &ctx.res.kind, ctx.q("fieldValidation"), &mut body)?,
        None => Vec::new(),
    };
    let sent = body.clone();
    warnings.extend(kinds::on_create(st, &ctx, &mut body)?);
    let meta = body["metadata"]
        .as_object_mut()
        .expect("metadata is an object");
    meta.insert("uid".into(), json!(new_uid()));
    meta.insert("creationTimestamp".into(), json!(now_seconds()));
    if ctx.res.generation {
        meta.insert("generation".into(), json!(1));
    }
    match applied {
        Some(a) => ssa::set_apply_owner(&mut body, a, &ctx),
        None => record_update(&ctx, None, &mut body, &sent),
    }
    let stored = if ctx.dry_run() {
        body
    } else {
        commit(st, &ctx, body)
    };
    Ok(Reply {
        code: 201,
        body: kinds::present(&ctx.res, stored),
        warnings,
    })
}

fn commit(st: &mut State, ctx: &Ctx, obj: Value) -> Value {
    let stored = st.store.put(&ctx.res.storage, ctx.key(), obj);
    kinds::after_commit(st, ctx, &stored);
    stored
}

/// An Invalid error about the object named by `ctx`.
pub fn invalid(ctx: &Ctx, name: &str, causes: Vec<Cause>) -> ApiError {
    ApiError::Invalid {
        kind_group: ctx.res.kind_group(),
        group: ctx.res.group.clone(),
        kind: ctx.res.kind.clone(),
        name: if name.is_empty() {
            ctx.name.clone().unwrap_or_default()
        } else {
            name.to_string()
        },
        causes,
    }
}

fn stale(ctx: &Ctx) -> ApiError {
    let resource = if ctx.res.group.is_empty() {
        ctx.res.plural.clone()
    } else {
        format!("{}.{}", ctx.res.plural, ctx.res.group)
    };
    let name = ctx.name.clone().unwrap_or_default();
    ApiError::Conflict {
        group: ctx.res.group.clone(),
        kind: ctx.res.plural.clone(),
        message: format!(
            "Operation cannot be fulfilled on {resource} \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
        ),
        name,
    }
}

fn rv_of(v: &Value) -> Option<&str> {
    v.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// PUT: replace an object (or its status).
pub fn update(st: &mut State, ctx: &Ctx, mut body: Value) -> ApiResult<Reply> {
    if let Some(e) = bad_kind(ctx, &body) {
        return Err(e);
    }
    let url_name = ctx.name.clone().unwrap_or_default();
    match body.pointer("/metadata/name").and_then(Value::as_str) {
        Some(n) if n != url_name => {
            return Err(ApiError::BadRequest(format!(
                "the name of the object ({n}) does not match the name on the URL ({url_name})"
            )));
        }
        _ => {}
    }
    check_namespace(st, ctx, &mut body)?;
    body["metadata"]["name"] = json!(url_name);
    let old = st
        .store
        .get(&ctx.res.storage, &ctx.key())
        .map(|o| kinds::view(&ctx.res, o))
        .ok_or_else(|| ctx.not_found())?;
    match rv_of(&body) {
        None if ctx.res.requires_rv_on_update() => {
            let resource = if ctx.res.group.is_empty() {
                ctx.res.plural.clone()
            } else {
                format!("{}.{}", ctx.res.plural, ctx.res.group)
            };
            return Err(ApiError::Invalid {
                kind_group: resource,
                group: ctx.res.group.clone(),
                kind: ctx.res.plural.clone(),
                name: url_name,
                causes: vec![Cause::new(
                    "FieldValueInvalid",
                    "Invalid value: 0: must be specified for an update",
                    Some("metadata.resourceVersion".into()),
                )],
            });
        }
        Some(rv) if Some(rv) != rv_of(&old) => return Err(stale(ctx)),
        _ => {}
    }
    write_update(st, ctx, &old, body, false)
}

/// PATCH with any of the four content types.
pub fn patch(st: &mut State, ctx: &Ctx, kind: PatchKind, body: &[u8]) -> ApiResult<Reply> {
    if kind == PatchKind::Apply {
        return apply(st, ctx, body);
    }
    if kind == PatchKind::Strategic && ctx.res.is_custom() {
        return Err(ApiError::UnknownBodyFormat(
            "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
        ));
    }
    let patch_doc: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::BadRequest(format!("error decoding patch: {}", go_json_error(&e)))
    })?;
    let old = st
        .store
        .get(&ctx.res.storage, &ctx.key())
        .map(|o| kinds::view(&ctx.res, o))
        .ok_or_else(|| ctx.not_found())?;
    let patched = match kind {
        PatchKind::Merge => patch::merge_patch(&old, &patch_doc),
        PatchKind::Json => patch::json_patch(&old, &patch_doc)?,
        PatchKind::Strategic => patch::strategic_merge(&old, &patch_doc)?,
        PatchKind::Apply => unreachable!("handled above"),
    };
    if rv_of(&patched) != rv_of(&old) {
        return Err(stale(ctx));
    }
    write_update(st, ctx, &old, patched, false)
}

fn go_json_error(e: &serde_json::Error) -> String {
    if e.is_eof() {
        "unexpected end of JSON input".into()
    } else if e.is_data() {
        "json: cannot unmarshal object into Go value of type []handlers.jsonPatchOp".into()
    } else {
        e.to_string()
    }
}

/// Server-side apply (PATCH application/apply-patch+yaml).
fn apply(st: &mut State, ctx: &Ctx, body: &[u8]) -> ApiResult<Reply> {
    if ctx.q("fieldManager").is_none_or(str::is_empty) {
        return Err(ApiError::Invalid {
            kind_group: "PatchOptions.meta.k8s.io".into(),
            group: "meta.k8s.io".into(),
            kind: "PatchOptions".into(),
            name: String::new(),
            causes: vec![Cause::new(
                "FieldValueRequired",
                "Required value: is required for apply patch",
                Some("fieldManager".into()),
            )],
        });
    }
    let text = std::str::from_utf8(body).map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let applied: Value = serde_norway::from_str(text)
        .map_err(|e| ApiError::BadRequest(format!("error decoding YAML: {e}")))?;
    let kind = applied.get("kind").and_then(Value::as_str).unwrap_or("");
    let api_version = applied
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    if kind != ctx.res.kind || api_version != ctx.res.api_version() {
        let group = api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
        let version = api_version.rsplit('/').next().unwrap_or("");
        return Err(ApiError::BadRequest(format!(
            "invalid object type: {group}/{version}, Kind={kind}"
        )));
    }
    let force = ctx.q("force") == Some("true");
    match st
        .store
        .get(&ctx.res.storage, &ctx.key())
        .map(|o| kinds::view(&ctx.res, o))
    {
        None => {
            if ctx.is_status() {
                return Err(ctx.not_found());
            }
            let mut fresh = applied.clone();
            if !fresh.get("metadata").is_some_and(Value::is_object) {
                fresh["metadata"] = json!({});
            }
            fresh["metadata"]["name"] = json!(ctx.name.clone().unwrap_or_default());
            create_inner(st, ctx, fresh, Some(&applied))
        }
        Some(old) => {
            // A resourceVersion in the apply configuration is a precondition.
            if let Some(rv) = rv_of(&applied)
                && Some(rv) != rv_of(&old)
            {
                return Err(stale(ctx));
            }
            let merged = ssa::apply(&old, &applied, ctx, force)?;
            write_update(st, ctx, &old, merged, true)
        }
    }
}

/// The common tail of PUT and PATCH: subresource rules, validation, generation, ownership, commit.
fn write_update(
    st: &mut State,
    ctx: &Ctx,
    old: &Value,
    mut new: Value,
    applied: bool,
) -> ApiResult<Reply> {
    // Fields the client cannot change.
    for k in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
        "resourceVersion",
        "name",
        "namespace",
    ] {
        match old["metadata"].get(k) {
            Some(v) => new["metadata"][k] = v.clone(),
            None => {
                if let Some(m) = new["metadata"].as_object_mut() {
                    m.remove(k);
                }
            }
        }
    }
    new["kind"] = json!(ctx.res.kind);
    new["apiVersion"] = json!(ctx.res.api_version());
    if ctx.res.status_subresource {
        if ctx.is_status() && matches!(ctx.res.flavor, Flavor::Builtin(_)) {
            // kube-apiserver's status strategies for built-in kinds (Service, Node, Pod) reset
            // only `spec`: labels and annotations in a status write are applied. A Pod's owner
            // references are kept as they were too.
            match old.get("spec") {
                Some(spec) => new["spec"] = spec.clone(),
                None => {
                    if let Some(o) = new.as_object_mut() {
                        o.remove("spec");
                    }
                }
            }
            if ctx.res.kind == "Pod" {
                match old["metadata"].get("ownerReferences") {
                    Some(v) => new["metadata"]["ownerReferences"] = v.clone(),
                    None => {
                        if let Some(m) = new["metadata"].as_object_mut() {
                            m.remove("ownerReferences");
                        }
                    }
                }
            }
        } else if ctx.is_status() {
            // Custom resources' status strategy keeps everything but `status` (and managedFields).
            let status = new.get("status").cloned();
            let managed = new["metadata"].get("managedFields").cloned();
            new = old.clone();
            match status {
                Some(s) => new["status"] = s,
                None => {
                    if let Some(o) = new.as_object_mut() {
                        o.remove("status");
                    }
                }
            }
            if let Some(m) = managed {
                new["metadata"]["managedFields"] = m;
            }
        } else {
            match old.get("status") {
                Some(s) => new["status"] = s.clone(),
                None => {
                    if let Some(o) = new.as_object_mut() {
                        o.remove("status");
                    }
                }
            }
        }
    }
    if old.pointer("/metadata/deletionTimestamp").is_some() {
        let old_f = finalizers(old);
        let added: Vec<String> = finalizers(&new)
            .into_iter()
            .filter(|f| !old_f.contains(f))
            .collect();
        if !added.is_empty() {
            let list = added
                .iter()
                .map(|f| format!("{f:?}"))
                .collect::<Vec<_>>()
                .join(", ");
            let msg = format!(
                "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{{{list}}}"
            );
            let cause = Cause::new(
                "FieldValueForbidden",
                msg,
                Some("metadata.finalizers".into()),
            );
            return Err(invalid(ctx, "", vec![cause.clone(), cause]));
        }
    }
    drop_empty_metadata(&mut new);
    let mut warnings = match ctx.res.builtin() {
        Some(b) => super::typed::decode(b, &ctx.res.kind, ctx.q("fieldValidation"), &mut new)?,
        None => Vec::new(),
    };
    let sent = new.clone();
    warnings.extend(kinds::on_update(st, ctx, old, &mut new)?);
    if ctx.res.generation && spec_changed(old, &new) {
        let g = old
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(1);
        new["metadata"]["generation"] = json!(g + 1);
    }
    if !applied {
        record_update(ctx, Some(old), &mut new, &sent);
    }
    if same_ignoring_managed_times(old, &new) {
        return Ok(Reply {
            code: 200,
            body: kinds::present(&ctx.res, old.clone()),
            warnings,
        });
    }
    if ctx.dry_run() {
        return Ok(Reply {
            code: 200,
            body: kinds::present(&ctx.res, new),
            warnings,
        });
    }
    if new.pointer("/metadata/deletionTimestamp").is_some() && finalizers(&new).is_empty() {
        // The update turns into the delete; the answer keeps the previous revision.
        if let Some(removed) = st.store.remove(&ctx.res.storage, &ctx.key()) {
            kinds::after_delete(st, ctx, &removed);
        }
        return Ok(Reply {
            code: 200,
            body: kinds::present(&ctx.res, new),
            warnings,
        });
    }
    let stored = commit(st, ctx, new);
    Ok(Reply {
        code: 200,
        body: kinds::present(&ctx.res, stored),
        warnings,
    })
}

/// Field ownership of a non-apply write, computed on the object as the client's API shows it
/// (events.k8s.io Events are stored in their core shape).
fn record_update(ctx: &Ctx, old_view: Option<&Value>, new: &mut Value, sent: &Value) {
    if ctx.res.builtin() == Some(super::resources::Builtin::Event) {
        let mut view = kinds::present(&ctx.res, new.clone());
        ssa::record_update(old_view, &mut view, ctx, sent);
        match view["metadata"].get("managedFields") {
            Some(m) => new["metadata"]["managedFields"] = m.clone(),
            None => {
                if let Some(m) = new["metadata"].as_object_mut() {
                    m.remove("managedFields");
                }
            }
        }
    } else {
        ssa::record_update(old_view, new, ctx, sent);
    }
}

/// Go's `omitempty`: empty labels, annotations, finalizers and ownerReferences are not kept.
fn drop_empty_metadata(v: &mut Value) {
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in ["labels", "annotations", "finalizers", "ownerReferences"] {
            let empty = match m.get(k) {
                Some(Value::Array(a)) => a.is_empty(),
                Some(Value::Object(o)) => o.is_empty(),
                Some(Value::Null) => true,
                _ => false,
            };
            if empty {
                m.remove(k);
            }
        }
    }
}

fn finalizers(v: &Value) -> Vec<String> {
    v.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether anything outside `metadata` and `status` differs.
fn spec_changed(old: &Value, new: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(o) = v.as_object_mut() {
            o.remove("metadata");
            o.remove("status");
        }
        v
    };
    strip(old) != strip(new)
}

fn same_ignoring_managed_times(a: &Value, b: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(mf) = v
            .pointer_mut("/metadata/managedFields")
            .and_then(Value::as_array_mut)
        {
            for e in mf {
                if let Some(o) = e.as_object_mut() {
                    o.remove("time");
                }
            }
        }
        v
    };
    strip(a) == strip(b)
}

/// DELETE of one object, with preconditions and finalizers.
pub fn delete(st: &mut State, ctx: &Ctx, options: &Value) -> ApiResult<Reply> {
    let old = st
        .store
        .get(&ctx.res.storage, &ctx.key())
        .map(|o| kinds::view(&ctx.res, o))
        .ok_or_else(|| ctx.not_found())?;
    let name = ctx.name.clone().unwrap_or_default();
    let uid = old
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let conflict = |message: String| ApiError::Conflict {
        group: ctx.res.group.clone(),
        kind: ctx.res.kind.clone(),
        name: name.clone(),
        message,
    };
    if let Some(want) = options
        .pointer("/preconditions/uid")
        .and_then(Value::as_str)
        && want != uid
    {
        return Err(conflict(format!(
            "Operation cannot be fulfilled on {} \"{name}\": the UID in the precondition ({want}) does not match the UID in record ({uid}). The object might have been deleted and then recreated",
            ctx.res.kind
        )));
    }
    if let Some(want) = options
        .pointer("/preconditions/resourceVersion")
        .and_then(Value::as_str)
    {
        let have = rv_of(&old).unwrap_or("");
        if want != have {
            return Err(conflict(format!(
                "Operation cannot be fulfilled on {} \"{name}\": the ResourceVersion in the precondition ({want}) does not match the ResourceVersion in record ({have}). The object might have been modified",
                ctx.res.kind
            )));
        }
    }
    let has_finalizers = !finalizers(&old).is_empty();
    if has_finalizers {
        if old.pointer("/metadata/deletionTimestamp").is_some() {
            return Ok(Reply::new(200, kinds::present(&ctx.res, old)));
        }
        let mut new = old.clone();
        new["metadata"]["deletionTimestamp"] = json!(now_seconds());
        new["metadata"]["deletionGracePeriodSeconds"] = json!(0);
        if ctx.res.generation {
            let g = old
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            new["metadata"]["generation"] = json!(g + 1);
        }
        if ctx.dry_run() {
            return Ok(Reply::new(200, kinds::present(&ctx.res, new)));
        }
        let stored = commit(st, ctx, new);
        return Ok(Reply::new(200, kinds::present(&ctx.res, stored)));
    }
    if ctx.dry_run() {
        return Ok(Reply::new(200, kinds::present(&ctx.res, old)));
    }
    if ctx.res.builtin() == Some(super::resources::Builtin::Namespace) {
        // The namespace controller's work, done at once: Terminating, contents removed, then gone.
        let mut terminating = old.clone();
        terminating["metadata"]["deletionTimestamp"] = json!(now_seconds());
        terminating["status"] = json!({"phase": "Terminating"});
        let answer = st.store.put(&ctx.res.storage, ctx.key(), terminating);
        if let Some(removed) = st.store.remove(&ctx.res.storage, &ctx.key()) {
            kinds::after_delete(st, ctx, &removed);
        }
        return Ok(Reply::new(200, kinds::present(&ctx.res, answer)));
    }
    let removed = st.store.remove(&ctx.res.storage, &ctx.key()).unwrap_or(old);
    kinds::after_delete(st, ctx, &removed);
    if ctx.res.delete_returns_object() {
        Ok(Reply::new(200, kinds::present(&ctx.res, removed)))
    } else {
        let mut details = json!({"name": name, "kind": ctx.res.plural, "uid": uid});
        if !ctx.res.group.is_empty() {
            details["group"] = json!(ctx.res.group);
        }
        Ok(Reply::new(
            200,
            json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details,
            }),
        ))
    }
}
