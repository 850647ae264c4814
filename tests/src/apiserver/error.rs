//! API errors and their `Status` bodies, shaped exactly as kube-apiserver writes them. Pure.

use serde_json::{Value, json};

/// One entry of `details.causes` in a `Status`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cause {
    /// `reason`, e.g. `FieldValueInvalid`.
    pub reason: String,
    /// `message`, e.g. `Invalid value: 99: ...`.
    pub message: String,
    /// `field`, e.g. `spec.size`; `None` is written as `<nil>` in messages and causes.
    pub field: Option<String>,
}

impl Cause {
    /// A cause at `field` (`None` for the whole object).
    pub fn new(reason: &str, message: impl Into<String>, field: Option<String>) -> Self {
        Self {
            reason: reason.to_string(),
            message: message.into(),
            field,
        }
    }

    fn field_text(&self) -> &str {
        self.field.as_deref().unwrap_or("<nil>")
    }
}

/// What a request failed with; [`ApiError::status`] renders the `Status` object.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 404 for a named object.
    #[error("{resource} \"{name}\" not found")]
    NotFound {
        /// `details.group`.
        group: String,
        /// `details.kind`: the plural resource.
        resource: String,
        /// Object name.
        name: String,
    },
    /// 404 with the generic "could not find the requested resource" body.
    #[error("the server could not find the requested resource")]
    UnknownResource,
    /// 404 as a `text/plain` body (unknown group, version or path).
    #[error("404 page not found")]
    PageNotFound,
    /// 409 AlreadyExists.
    #[error("{resource} \"{name}\" already exists")]
    AlreadyExists {
        /// `details.group`.
        group: String,
        /// `details.kind`: the plural resource.
        resource: String,
        /// Object name.
        name: String,
    },
    /// 409 Conflict with a name/kind in details (stale resourceVersion, failed preconditions).
    #[error("{message}")]
    Conflict {
        /// `details.group`.
        group: String,
        /// `details.kind` (plural resource for updates, Kind for delete preconditions).
        kind: String,
        /// Object name.
        name: String,
        /// Full message.
        message: String,
    },
    /// 409 Conflict from server-side apply: causes only.
    #[error("{message}")]
    ApplyConflict {
        /// Full message.
        message: String,
        /// One `FieldManagerConflict` per field.
        causes: Vec<Cause>,
    },
    /// 422 Invalid.
    #[error("{kind_group} \"{name}\" is invalid")]
    Invalid {
        /// `Kind.group` as printed in the message (`Service`, `Widget.fx.example.io`).
        kind_group: String,
        /// `details.group`.
        group: String,
        /// `details.kind`.
        kind: String,
        /// Object name.
        name: String,
        /// One per error.
        causes: Vec<Cause>,
    },
    /// 422 with a message and empty details (failed JSON-patch operations).
    #[error("{0}")]
    UnprocessableOpaque(String),
    /// 400 BadRequest.
    #[error("{0}")]
    BadRequest(String),
    /// 405.
    #[error("the server does not allow this method on the requested resource")]
    MethodNotAllowed,
    /// 406.
    #[error("{0}")]
    NotAcceptable(String),
    /// 410 Gone, reason Expired.
    #[error("{message}")]
    Expired {
        /// Full message.
        message: String,
        /// A fresh continue token, for expired continue tokens.
        continue_token: Option<String>,
    },
    /// 415.
    #[error("415: Unsupported Media Type")]
    UnsupportedMediaType,
    /// 415 naming the accepted media types.
    #[error("the body of the request was in an unknown format - accepted media types include: {0}")]
    UnknownBodyFormat(&'static str),
    /// 500 InternalError.
    #[error("{0}")]
    Internal(String),
    /// 429 or 500 injected by a fault.
    #[error("{message}")]
    Injected {
        /// HTTP code.
        code: u16,
        /// Seconds for `Retry-After` (429 only).
        retry_after: Option<u32>,
        /// Message.
        message: String,
    },
    /// 405-like rejection for a forbidden state transition written as 403.
    #[error("{0}")]
    Forbidden(String),
}

impl ApiError {
    /// The HTTP status code.
    pub fn code(&self) -> u16 {
        match self {
            ApiError::NotFound { .. } | ApiError::UnknownResource | ApiError::PageNotFound => 404,
            ApiError::AlreadyExists { .. }
            | ApiError::Conflict { .. }
            | ApiError::ApplyConflict { .. } => 409,
            ApiError::Invalid { .. } | ApiError::UnprocessableOpaque(_) => 422,
            ApiError::BadRequest(_) => 400,
            ApiError::MethodNotAllowed => 405,
            ApiError::NotAcceptable(_) => 406,
            ApiError::Expired { .. } => 410,
            ApiError::UnsupportedMediaType | ApiError::UnknownBodyFormat(_) => 415,
            ApiError::Internal(_) => 500,
            ApiError::Injected { code, .. } => *code,
            ApiError::Forbidden(_) => 403,
        }
    }

    /// `reason` of the Status (empty for the generic 500 that carries none).
    pub fn reason(&self) -> &'static str {
        match self {
            ApiError::NotFound { .. } | ApiError::UnknownResource | ApiError::PageNotFound => {
                "NotFound"
            }
            ApiError::AlreadyExists { .. } => "AlreadyExists",
            ApiError::Conflict { .. } | ApiError::ApplyConflict { .. } => "Conflict",
            ApiError::Invalid { .. } | ApiError::UnprocessableOpaque(_) => "Invalid",
            ApiError::BadRequest(_) => "BadRequest",
            ApiError::MethodNotAllowed => "MethodNotAllowed",
            ApiError::NotAcceptable(_) => "NotAcceptable",
            ApiError::Expired { .. } => "Expired",
            ApiError::UnsupportedMediaType | ApiError::UnknownBodyFormat(_) => {
                "UnsupportedMediaType"
            }
            ApiError::Internal(_) => "",
            ApiError::Injected { code: 429, .. } => "TooManyRequests",
            ApiError::Injected { .. } => "InternalError",
            ApiError::Forbidden(_) => "Forbidden",
        }
    }

    /// Whether the answer is the plain-text `404 page not found`.
    pub fn is_plain_text(&self) -> bool {
        matches!(self, ApiError::PageNotFound)
    }

    /// The full message, as written in `Status.message`.
    pub fn message(&self) -> String {
        match self {
            ApiError::Invalid {
                kind_group,
                name,
                causes,
                ..
            } => {
                let parts: Vec<String> = causes
                    .iter()
                    .map(|c| format!("{}: {}", c.field_text(), c.message))
                    .collect();
                let body = if parts.len() == 1 {
                    parts[0].clone()
                } else {
                    format!("[{}]", parts.join(", "))
                };
                format!("{kind_group} \"{name}\" is invalid: {body}")
            }
            other => other.to_string(),
        }
    }

    /// The `Status` object for this error.
    pub fn status(&self) -> Value {
        let details = match self {
            ApiError::NotFound {
                group,
                resource,
                name,
            }
            | ApiError::AlreadyExists {
                group,
                resource,
                name,
            } => Some(details(name, group, resource, &[])),
            ApiError::Conflict {
                group, kind, name, ..
            } => Some(details(name, group, kind, &[])),
            ApiError::ApplyConflict { causes, .. } => Some(details("", "", "", causes)),
            ApiError::Invalid {
                group,
                kind,
                name,
                causes,
                ..
            } => Some(details(name, group, kind, causes)),
            ApiError::UnknownResource
            | ApiError::MethodNotAllowed
            | ApiError::UnsupportedMediaType
            | ApiError::UnprocessableOpaque(_) => Some(json!({})),
            ApiError::Injected {
                retry_after: Some(s),
                ..
            } => Some(json!({"retryAfterSeconds": s})),
            _ => None,
        };
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message(),
            "code": self.code(),
        });
        if !self.reason().is_empty() {
            status["reason"] = json!(self.reason());
        }
        if let ApiError::Expired {
            continue_token: Some(token),
            ..
        } = self
        {
            status["metadata"] = json!({"continue": token});
        }
        if let Some(d) = details {
            status["details"] = d;
        }
        status
    }
}

fn details(name: &str, group: &str, kind: &str, causes: &[Cause]) -> Value {
    let mut d = serde_json::Map::new();
    if !name.is_empty() {
        d.insert("name".into(), json!(name));
    }
    if !group.is_empty() {
        d.insert("group".into(), json!(group));
    }
    if !kind.is_empty() {
        d.insert("kind".into(), json!(kind));
    }
    if !causes.is_empty() {
        let causes: Vec<Value> = causes
            .iter()
            .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field_text()}))
            .collect();
        d.insert("causes".into(), Value::Array(causes));
    }
    Value::Object(d)
}

/// A 422 on an options object (`ListOptions.meta.k8s.io "" is invalid: ...`).
pub fn invalid_options(kind: &str, field: &str, reason: &str, message: &str) -> ApiError {
    ApiError::Invalid {
        kind_group: format!("{kind}.meta.k8s.io"),
        group: "meta.k8s.io".into(),
        kind: kind.into(),
        name: String::new(),
        causes: vec![Cause::new(reason, message, Some(field.to_string()))],
    }
}

/// Shorthand for results in this module tree.
pub type ApiResult<T> = Result<T, ApiError>;
