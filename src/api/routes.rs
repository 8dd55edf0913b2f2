//! The route table: the one list of what the Worker answers. Dispatch, the 404/405
//! decision and the 405's allowed-methods list are all read from [`ROUTES`], so
//! adding a route is one line here (plus its handler).

use super::request::Method;
use crate::core::error::ApiError;

/// One of the dashboard's files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asset {
    Html,
    Script,
    Style,
    Icon,
}

/// Who answers a route, and so what it needs before it can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// `GET /health`: no auth, no settings, no store, so it answers even when the
    /// Worker is misconfigured, and stays the cheapest call for `loadtest probe`.
    Health,
    /// `POST /internal/run`: the dispatcher's call, authenticated by its signature
    /// over the item. Needs the runtime (it runs the job): answered by the edge.
    Run,
    /// `POST /internal/probe`: a `POST /probe` child's task (fetch a URL, burn
    /// CPU), authenticated by the dispatch signature over its body. Needs the
    /// runtime: answered by the edge (`edge::probe`).
    ProbeTask,
    /// The dashboard's page and files (`api::page`): no auth, no settings, no
    /// store. The page holds no data; it asks the admin routes with the token the
    /// operator types in.
    Page(Asset),
    /// `GET /openapi.json` (`api::openapi`): no auth, no settings, no store; the
    /// document holds no data.
    OpenApi,
    /// An admin route: admin token, then [`Admin::query`] and [`Admin::body`] are
    /// enforced and the handler runs (`api::serve`, on the Worker and the host).
    Admin(Admin),
}

/// What an admin route takes and which handler answers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admin {
    pub handler: Handler,
    pub query: Query,
    pub body: Body,
}

/// The admin handlers; `api::serve` maps each to its function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handler {
    PutSubjects,
    ListSubjects,
    GetSubject,
    DeleteSubject,
    CreateBatch,
    ListBatches,
    GetBatch,
    ListItems,
    /// Pause, resume, cancel a batch (`api::control`).
    PauseBatch,
    ResumeBatch,
    CancelBatch,
    /// Dead-letter replay of a batch's failed items, or of one item.
    RetryBatch,
    RetryItem,
    ListInvocations,
    Timeline,
    Metrics,
    PutSchedule,
    ListSchedules,
    GetSchedule,
    DeleteSchedule,
    /// Rate and concurrency limits per key (`api::limits`).
    PutLimit,
    ListLimits,
    GetLimit,
    DeleteLimit,
    LiftPause,
    /// Validated here; the SELF calls themselves need the runtime (`edge::probe`).
    Probe,
}

/// What a route does with the query string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Query {
    /// Any parameter is refused with 400 `invalid_query`, before the body is read.
    Refused,
    /// The handler parses its own parameters (listings: `limit`, `after`, `status`)
    /// and refuses unknown ones.
    Parsed,
}

/// What a route does with the request body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    /// Not read (whatever was sent).
    Unread,
    /// JSON: `Content-Type` must say so (415) and it is read under
    /// `MAX_BODY_BYTES` (413) only after the caller is admitted.
    Json,
}

/// One line of the table. `path` is literal segments and `{name}` parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    pub method: Method,
    pub path: &'static str,
    pub target: Target,
}

impl Route {
    const fn new(method: Method, path: &'static str, target: Target) -> Route {
        Route {
            method,
            path,
            target,
        }
    }

    const fn admin(
        method: Method,
        path: &'static str,
        handler: Handler,
        query: Query,
        body: Body,
    ) -> Route {
        Route::new(
            method,
            path,
            Target::Admin(Admin {
                handler,
                query,
                body,
            }),
        )
    }

    fn pattern(&self) -> impl Iterator<Item = &'static str> {
        self.path.split('/').filter(|s| !s.is_empty())
    }

    /// Whether `segments` is this route's path: same length, literals equal.
    pub fn matches(&self, segments: &[String]) -> bool {
        let mut pattern = self.pattern();
        segments
            .iter()
            .all(|seg| pattern.next().is_some_and(|p| is_param(p) || p == seg))
            && pattern.next().is_none()
    }

    /// The values of the `{…}` segments, in order (`segments` must match).
    pub fn params<'s>(&self, segments: &'s [String]) -> Vec<&'s str> {
        self.pattern()
            .zip(segments)
            .filter(|(p, _)| is_param(p))
            .map(|(_, s)| s.as_str())
            .collect()
    }
}

fn is_param(pattern_segment: &str) -> bool {
    pattern_segment.starts_with('{') && pattern_segment.ends_with('}')
}

use Body::{Json, Unread};
use Handler::*;
use Method::{Delete as DELETE, Get as GET, Post as POST, Put as PUT};
use Query::{Parsed, Refused};

/// Every route. Routes of one method never overlap (a test checks it), so their
/// order does not matter; `/internal/run` comes early as the dispatch hot path.
#[rustfmt::skip]
pub static ROUTES: &[Route] = &[
    Route::new(  GET,    "/health",             Target::Health),
    Route::new(  POST,   "/internal/run",       Target::Run),
    Route::new(  POST,   "/internal/probe",     Target::ProbeTask),
    Route::new(  GET,    "/",                   Target::Page(Asset::Html)),
    Route::new(  GET,    "/dashboard",          Target::Page(Asset::Html)),
    Route::new(  GET,    "/dashboard/app.js",   Target::Page(Asset::Script)),
    Route::new(  GET,    "/dashboard/app.css",  Target::Page(Asset::Style)),
    Route::new(  GET,    "/dashboard/icon.svg", Target::Page(Asset::Icon)),
    Route::new(  GET,    "/openapi.json",       Target::OpenApi),
    //           method  path                   handler          query    body
    Route::admin(PUT,    "/subjects",           PutSubjects,     Refused, Json),
    Route::admin(GET,    "/subjects",           ListSubjects,    Parsed,  Unread),
    Route::admin(GET,    "/subjects/{id}",      GetSubject,      Refused, Unread),
    Route::admin(DELETE, "/subjects/{id}",      DeleteSubject,   Refused, Unread),
    Route::admin(POST,   "/batches",            CreateBatch,     Refused, Json),
    Route::admin(GET,    "/batches",            ListBatches,     Parsed,  Unread),
    Route::admin(GET,    "/batches/{id}",       GetBatch,        Refused, Unread),
    Route::admin(GET,    "/batches/{id}/items", ListItems,       Parsed,  Unread),
    Route::admin(GET,    "/batches/{id}/timeline", Timeline,     Parsed,  Unread),
    Route::admin(POST,   "/batches/{id}/pause", PauseBatch,      Refused, Unread),
    Route::admin(POST,   "/batches/{id}/resume", ResumeBatch,    Refused, Unread),
    Route::admin(POST,   "/batches/{id}/cancel", CancelBatch,    Refused, Unread),
    Route::admin(POST,   "/batches/{id}/retry", RetryBatch,      Refused, Json),
    Route::admin(POST,   "/items/{id}/retry",   RetryItem,       Refused, Unread),
    Route::admin(GET,    "/invocations",        ListInvocations, Parsed,  Unread),
    Route::admin(GET,    "/metrics",            Metrics,         Refused, Unread),
    Route::admin(PUT,    "/schedules/{id}",     PutSchedule,     Refused, Json),
    Route::admin(GET,    "/schedules",          ListSchedules,   Parsed,  Unread),
    Route::admin(GET,    "/schedules/{id}",     GetSchedule,     Refused, Unread),
    Route::admin(DELETE, "/schedules/{id}",     DeleteSchedule,  Refused, Unread),
    Route::admin(PUT,    "/limits/{key}",       PutLimit,        Refused, Json),
    Route::admin(GET,    "/limits",             ListLimits,      Parsed,  Unread),
    Route::admin(GET,    "/limits/{key}",       GetLimit,        Refused, Unread),
    Route::admin(DELETE, "/limits/{key}",       DeleteLimit,     Refused, Unread),
    Route::admin(DELETE, "/limits/{key}/pause", LiftPause,       Refused, Unread),
    Route::admin(POST,   "/probe",              Probe,           Refused, Json),
];

/// The route answering `method` on `segments`. Matched before any auth, so an
/// unknown path is 404 and a known path with another method is 405 (listing the
/// methods the table has for it) for every caller.
pub fn find(method: Method, segments: &[String]) -> Result<&'static Route, ApiError> {
    if let Some(route) = ROUTES
        .iter()
        .find(|r| r.method == method && r.matches(segments))
    {
        return Ok(route);
    }
    let allowed: Vec<&str> = Method::ALL
        .into_iter()
        .filter(|m| ROUTES.iter().any(|r| r.method == *m && r.matches(segments)))
        .map(Method::as_str)
        .collect();
    if allowed.is_empty() {
        Err(ApiError::NotFound(format!("route /{}", segments.join("/"))))
    } else {
        Err(ApiError::MethodNotAllowed {
            allowed: allowed.join(", "),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segs(path: &str) -> Vec<String> {
        super::super::request::Request::new(Method::Get, path, "").segments
    }

    /// A concrete path for a pattern, each parameter replaced by `value`.
    fn example(route: &Route, value: &str) -> Vec<String> {
        route
            .pattern()
            .map(|p| if is_param(p) { value } else { p }.to_string())
            .collect()
    }

    #[test]
    fn every_route_is_found_by_its_own_method_and_path() {
        for route in ROUTES {
            let found = find(route.method, &example(route, "x")).unwrap();
            assert_eq!(found, route, "{} {}", route.method.as_str(), route.path);
        }
    }

    #[test]
    fn patterns_are_well_formed() {
        for route in ROUTES {
            assert!(route.path.starts_with('/'), "{}", route.path);
            for p in route.pattern() {
                let braces = p.contains('{') || p.contains('}');
                assert!(
                    !braces || is_param(p),
                    "bad segment {p:?} in {}",
                    route.path
                );
            }
        }
    }

    #[test]
    fn no_two_routes_of_one_method_can_match_the_same_path() {
        let overlap = |a: &Route, b: &Route| {
            let (a, b): (Vec<_>, Vec<_>) = (a.pattern().collect(), b.pattern().collect());
            a.len() == b.len()
                && a.iter()
                    .zip(&b)
                    .all(|(x, y)| x == y || is_param(x) || is_param(y))
        };
        for (i, a) in ROUTES.iter().enumerate() {
            for b in &ROUTES[i + 1..] {
                assert!(
                    a.method != b.method || !overlap(a, b),
                    "{} {} overlaps {}",
                    a.method.as_str(),
                    a.path,
                    b.path
                );
            }
        }
    }

    #[test]
    fn wrong_method_lists_what_the_table_allows_in_a_fixed_order() {
        let allowed = |method, path| match find(method, &segs(path)) {
            Err(ApiError::MethodNotAllowed { allowed }) => allowed,
            other => panic!("{path}: {other:?}"),
        };
        assert_eq!(allowed(DELETE, "/subjects"), "GET, PUT");
        assert_eq!(allowed(DELETE, "/batches"), "GET, POST");
        assert_eq!(allowed(POST, "/health"), "GET");
        assert_eq!(allowed(GET, "/internal/run"), "POST");
        assert_eq!(allowed(GET, "/internal/probe"), "POST");
        assert_eq!(allowed(Method::Other, "/subjects/a"), "GET, DELETE");
        assert_eq!(allowed(POST, "/schedules/a"), "GET, PUT, DELETE");
        assert_eq!(allowed(PUT, "/schedules"), "GET");
        assert_eq!(allowed(PUT, "/batches/b/items"), "GET");
        assert_eq!(allowed(GET, "/batches/b/cancel"), "POST");
        assert_eq!(allowed(DELETE, "/items/1/retry"), "POST");
        assert_eq!(allowed(POST, "/limits/github"), "GET, PUT, DELETE");
        assert_eq!(allowed(DELETE, "/limits"), "GET");
    }

    #[test]
    fn unknown_paths_are_not_found_whatever_the_method() {
        for path in [
            "/nowhere",
            "/dashboard/x",
            "/batches/b/items/x",
            "/subjects/a/b",
            "/healthz",
        ] {
            for method in Method::ALL {
                let e = find(method, &segs(path)).unwrap_err();
                assert_eq!(e.code(), "not_found", "{path}");
            }
        }
    }

    #[test]
    fn parameters_are_the_decoded_segments_in_order() {
        let s = segs("/batches/a%2Fb/items");
        let route = find(GET, &s).unwrap();
        assert_eq!(route.path, "/batches/{id}/items");
        assert_eq!(route.params(&s), ["a/b"]);
        assert!(find(GET, &segs("/subjects"))
            .unwrap()
            .params(&segs("/subjects"))
            .is_empty());
    }
}
