//! The provider's one route table, pure: a request's method and path become a `Route`, for the
//! project's own API (`/healthz`, `/metrics`, `/v1/…`, answered `{"error": …}`) and deer-flow's
//! provisioner API (`/health`, `/api/…`, answered in FastAPI's `{"detail": …}` shapes) alike.
//! A path both families could claim does not exist: `/health` and `/api…` are the provisioner
//! API's, everything else the project's. A known path with the wrong method is `NotAllowed`
//! (405 with `Allow`), an unknown one `NotFound`.

use hyper::Method;

/// What a request asks for. Borrowed parts (a lease, a sandbox ID) are the path's own segments,
/// checked by the handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route<'a> {
    /// `GET /healthz`: the provider's own health.
    Healthz,
    /// `GET /metrics`: the Prometheus text exposition.
    Metrics,
    /// `GET /v1/sandboxes`.
    List,
    /// `POST /v1/acquire`.
    Acquire,
    /// `POST /v1/leases/{lease}/release`.
    Release(&'a str),
    /// `POST /v1/leases/{lease}/renew`.
    Renew(&'a str),
    /// `POST /v1/sandboxes/{id}/destroy`.
    Destroy(&'a str),
    /// `GET /health` (deer-flow's).
    Health,
    /// `GET /api/capabilities`.
    Capabilities,
    /// `POST /api/sandboxes`.
    ApiCreate,
    /// `GET /api/sandboxes`.
    ApiList,
    /// `GET /api/sandboxes/{id}`.
    ApiGet(&'a str),
    /// `DELETE /api/sandboxes/{id}`.
    ApiDelete(&'a str),
    /// A known path asked with another method: 405 naming the methods it answers.
    NotAllowed { api: bool, allow: &'static str },
    /// No such path.
    NotFound { api: bool },
}

impl Route<'_> {
    /// Whether the route answers without the API key on a listener that has one: deer-flow's
    /// `/health` only. Every other route, and any added later, needs the key unless listed here.
    pub fn is_open(&self) -> bool {
        matches!(self, Route::Health)
    }

    /// Whether the answer is the provisioner API's (FastAPI's shapes, its metric).
    pub fn is_api(&self) -> bool {
        match self {
            Route::Health
            | Route::Capabilities
            | Route::ApiCreate
            | Route::ApiList
            | Route::ApiGet(_)
            | Route::ApiDelete(_) => true,
            Route::NotAllowed { api, .. } | Route::NotFound { api } => *api,
            Route::Healthz
            | Route::Metrics
            | Route::List
            | Route::Acquire
            | Route::Release(_)
            | Route::Renew(_)
            | Route::Destroy(_) => false,
        }
    }
}

/// Whether `path` belongs to the provisioner API's family.
fn api_path(path: &str) -> bool {
    path == "/health" || path == "/api" || path.starts_with("/api/")
}

/// The route of `method` on `path` (the request target's path, without its query).
pub fn parse<'a>(method: &Method, path: &'a str) -> Route<'a> {
    let api = api_path(path);
    let segments: Vec<&'a str> = path.trim_matches('/').split('/').collect();
    let get = method == Method::GET;
    let post = method == Method::POST;
    let delete = method == Method::DELETE;
    let (route, allow) = match segments.as_slice() {
        ["healthz"] => (get.then_some(Route::Healthz), "GET"),
        ["metrics"] => (get.then_some(Route::Metrics), "GET"),
        ["v1", "sandboxes"] => (get.then_some(Route::List), "GET"),
        ["v1", "acquire"] => (post.then_some(Route::Acquire), "POST"),
        ["v1", "leases", lease, "release"] => (post.then_some(Route::Release(lease)), "POST"),
        ["v1", "leases", lease, "renew"] => (post.then_some(Route::Renew(lease)), "POST"),
        ["v1", "sandboxes", id, "destroy"] => (post.then_some(Route::Destroy(id)), "POST"),
        ["health"] => (get.then_some(Route::Health), "GET"),
        ["api", "capabilities"] => (get.then_some(Route::Capabilities), "GET"),
        ["api", "sandboxes"] => (
            match () {
                () if get => Some(Route::ApiList),
                () if post => Some(Route::ApiCreate),
                () => None,
            },
            "GET, POST",
        ),
        ["api", "sandboxes", id] => (
            match () {
                () if get => Some(Route::ApiGet(id)),
                () if delete => Some(Route::ApiDelete(id)),
                () => None,
            },
            "GET, DELETE",
        ),
        _ => return Route::NotFound { api },
    };
    route.unwrap_or(Route::NotAllowed { api, allow })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_table() {
        let (get, post, delete, put) = (Method::GET, Method::POST, Method::DELETE, Method::PUT);
        let cases = [
            (&get, "/healthz", Route::Healthz),
            (&get, "/metrics", Route::Metrics),
            (&get, "/v1/sandboxes", Route::List),
            (&get, "/v1/sandboxes/", Route::List),
            (&post, "/v1/acquire", Route::Acquire),
            (&post, "/v1/leases/l1/release", Route::Release("l1")),
            (&post, "/v1/leases/l1/renew", Route::Renew("l1")),
            (&post, "/v1/sandboxes/s/destroy", Route::Destroy("s")),
            (&get, "/health", Route::Health),
            (&get, "/api/capabilities", Route::Capabilities),
            (&post, "/api/sandboxes", Route::ApiCreate),
            (&get, "/api/sandboxes", Route::ApiList),
            (&get, "/api/sandboxes/s", Route::ApiGet("s")),
            (&delete, "/api/sandboxes/s", Route::ApiDelete("s")),
            (
                &post,
                "/v1/sandboxes",
                Route::NotAllowed {
                    api: false,
                    allow: "GET",
                },
            ),
            (
                &get,
                "/v1/acquire",
                Route::NotAllowed {
                    api: false,
                    allow: "POST",
                },
            ),
            (
                &post,
                "/health",
                Route::NotAllowed {
                    api: true,
                    allow: "GET",
                },
            ),
            (
                &put,
                "/api/sandboxes",
                Route::NotAllowed {
                    api: true,
                    allow: "GET, POST",
                },
            ),
            (
                &post,
                "/api/sandboxes/s",
                Route::NotAllowed {
                    api: true,
                    allow: "GET, DELETE",
                },
            ),
            (&get, "/api", Route::NotFound { api: true }),
            (&get, "/api/x", Route::NotFound { api: true }),
            (&get, "/api/sandboxes/a/b", Route::NotFound { api: true }),
            (&get, "/apix", Route::NotFound { api: false }),
            (&get, "/v1/other", Route::NotFound { api: false }),
            (&get, "/", Route::NotFound { api: false }),
        ];
        for (method, path, want) in cases {
            let got = parse(method, path);
            assert_eq!(got, want, "{method} {path}");
            assert_eq!(got.is_api(), want.is_api(), "{method} {path}");
        }
        // Only deer-flow's health check is open; unknown paths are keyed too.
        let open: Vec<&str> = [
            "/healthz",
            "/metrics",
            "/v1/sandboxes",
            "/health",
            "/api/sandboxes",
            "/x",
        ]
        .into_iter()
        .filter(|p| parse(&get, p).is_open())
        .collect();
        assert_eq!(open, vec!["/health"]);
        assert!(
            !parse(&post, "/health").is_open(),
            "a 405 needs the key too"
        );
        // The family follows the path, whichever method asks.
        assert!(parse(&get, "/health").is_api() && parse(&put, "/api/x").is_api());
        assert!(!parse(&get, "/healthz").is_api() && !parse(&get, "/v1/sandboxes").is_api());
    }
}
