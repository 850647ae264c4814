//! Maps a request path and method to what it addresses (discovery document or resource request) and
//! its Kubernetes verb. Pure.

use crate::apiserver::error::{ApiError, ApiResult};
use crate::apiserver::faults::Verb;
use crate::apiserver::resources::ResourceDef;
use crate::apiserver::state::Registry;

/// What a path addresses.
#[derive(Clone, Debug)]
pub enum Route {
    /// `/version`.
    Version,
    /// `/healthz`, `/readyz`, `/livez`.
    Health,
    /// `/api`.
    CoreVersions,
    /// `/apis`.
    Groups,
    /// `/openapi/v3`.
    OpenApiIndex,
    /// `/openapi/v3/api/v1`, `/openapi/v3/apis/GROUP/VERSION`.
    OpenApi {
        /// Group.
        group: String,
        /// Version.
        version: String,
    },
    /// `/apis/GROUP`.
    Group(String),
    /// `/api/v1` or `/apis/GROUP/VERSION`.
    ResourceList {
        /// Group.
        group: String,
        /// Version.
        version: String,
    },
    /// A resource request.
    Resource(Box<ResourceRoute>),
}

/// A request on a resource.
#[derive(Clone, Debug)]
pub struct ResourceRoute {
    /// The resource.
    pub res: ResourceDef,
    /// Namespace from the path.
    pub namespace: Option<String>,
    /// Object name.
    pub name: Option<String>,
    /// Subresource.
    pub subresource: Option<String>,
}

impl ResourceRoute {
    /// The verb for `method` (`watch` tells GET-collection apart).
    pub fn verb(&self, method: &str, watch: bool) -> ApiResult<Verb> {
        let named = self.name.is_some();
        match (method, named, self.subresource.is_some()) {
            ("GET", _, _) if watch => Ok(Verb::Watch),
            ("GET", true, _) => Ok(Verb::Get),
            ("GET", false, _) => Ok(Verb::List),
            ("POST", false, false) => Ok(Verb::Create),
            ("PUT", true, _) => Ok(Verb::Update),
            ("PATCH", true, _) => Ok(Verb::Patch),
            ("DELETE", true, false) => Ok(Verb::Delete),
            ("DELETE", false, false) if self.res.plural != "namespaces" => {
                Ok(Verb::DeleteCollection)
            }
            _ => Err(ApiError::MethodNotAllowed),
        }
    }
}

/// Parses `path`.
pub fn parse(registry: &Registry, path: &str) -> ApiResult<Route> {
    let segs: Vec<&str> = path.trim_end_matches('/').split('/').skip(1).collect();
    match segs.as_slice() {
        ["version"] => return Ok(Route::Version),
        ["healthz" | "readyz" | "livez", ..] => return Ok(Route::Health),
        ["api"] => return Ok(Route::CoreVersions),
        ["openapi", "v3"] => return Ok(Route::OpenApiIndex),
        ["openapi", "v3", "api", "v1"] => {
            return Ok(Route::OpenApi {
                group: String::new(),
                version: "v1".into(),
            });
        }
        ["openapi", "v3", "apis", g, v] if registry.serves_group_version(g, v) => {
            return Ok(Route::OpenApi {
                group: g.to_string(),
                version: v.to_string(),
            });
        }
        ["apis"] => return Ok(Route::Groups),
        ["apis", g] if registry.serves_group(g) => return Ok(Route::Group(g.to_string())),
        ["api", "v1"] => {
            return Ok(Route::ResourceList {
                group: String::new(),
                version: "v1".into(),
            });
        }
        ["apis", g, v] if registry.serves_group_version(g, v) => {
            return Ok(Route::ResourceList {
                group: g.to_string(),
                version: v.to_string(),
            });
        }
        _ => {}
    }
    let (group, version, rest): (&str, &str, &[&str]) = match segs.as_slice() {
        ["api", "v1", rest @ ..] => ("", "v1", rest),
        ["apis", g, v, rest @ ..] if registry.serves_group_version(g, v) => (g, v, rest),
        _ => return Err(ApiError::PageNotFound),
    };
    let find = |plural: &str| {
        registry
            .find(group, version, plural)
            .cloned()
            .ok_or(ApiError::UnknownResource)
    };
    let route = |res: ResourceDef,
                 namespace: Option<&str>,
                 name: Option<&str>,
                 sub: Option<&str>|
     -> ApiResult<Route> {
        if res.namespaced != namespace.is_some() && !(res.namespaced && name.is_none()) {
            return Err(ApiError::UnknownResource);
        }
        if let Some(s) = sub
            && !(s == "status" && res.status_subresource
                || s == "finalize" && res.plural == "namespaces")
        {
            return Err(ApiError::UnknownResource);
        }
        Ok(Route::Resource(Box::new(ResourceRoute {
            res,
            namespace: namespace.map(str::to_string),
            name: name.map(str::to_string),
            subresource: sub.map(str::to_string),
        })))
    };
    match rest {
        ["namespaces", ns, sub @ ("status" | "finalize")] if group.is_empty() => {
            route(find("namespaces")?, None, Some(ns), Some(sub))
        }
        ["namespaces", ns, plural] => route(find(plural)?, Some(ns), None, None),
        ["namespaces", ns, plural, name] => route(find(plural)?, Some(ns), Some(name), None),
        ["namespaces", ns, plural, name, sub] => {
            route(find(plural)?, Some(ns), Some(name), Some(sub))
        }
        [plural] => route(find(plural)?, None, None, None),
        [plural, name] => route(find(plural)?, None, Some(name), None),
        [plural, name, sub] => route(find(plural)?, None, Some(name), Some(sub)),
        _ => Err(ApiError::UnknownResource),
    }
}
