//! The request value the API works on: what routing, auth and handlers read from an
//! HTTP request, without the Workers runtime, so the host tests build it directly.

/// The methods the route table uses; anything else can only be answered 404 or 405.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Post,
    Put,
    Delete,
    Other,
}

impl Method {
    /// The order 405 answers list allowed methods in.
    pub const ALL: [Method; 4] = [Method::Get, Method::Post, Method::Put, Method::Delete];

    pub fn parse(name: &str) -> Method {
        Method::ALL
            .into_iter()
            .find(|m| m.as_str() == name)
            .unwrap_or(Method::Other)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Delete => "DELETE",
            Method::Other => "OTHER",
        }
    }
}

/// An HTTP request minus its body. The body is read later, and only by routes that
/// take one, once the caller is admitted (`api::BodySource`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: Method,
    /// Path segments, percent-decoded; empty ones are dropped (`//a/` is `["a"]`).
    pub segments: Vec<String>,
    /// Query pairs, form-decoded, in the order given.
    pub query: Vec<(String, String)>,
    /// The `Authorization` header.
    pub authorization: Option<String>,
    /// The `Content-Type` header.
    pub content_type: Option<String>,
    /// `host:port` of the URL this request was sent to: the Worker's own host, which
    /// no webhook may target (`core::target`). `None` when unknown.
    pub host: Option<String>,
}

impl Request {
    /// From the raw (still percent-encoded) path and query string of the URL, as
    /// `Url::path()` and `Url::query()` give them. Headers are added separately:
    /// the dispatch hot path (`POST /internal/run`) never reads them.
    pub fn new(method: Method, raw_path: &str, raw_query: &str) -> Request {
        Request {
            method,
            segments: raw_path
                .split('/')
                .filter(|s| !s.is_empty())
                .map(|s| {
                    percent_encoding::percent_decode_str(s)
                        .decode_utf8_lossy()
                        .into_owned()
                })
                .collect(),
            query: form_urlencoded::parse(raw_query.as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
            authorization: None,
            content_type: None,
            host: None,
        }
    }

    /// The path as routed, for messages: `/batches/b1/items`.
    pub fn path(&self) -> String {
        format!("/{}", self.segments.join("/"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_are_decoded_one_by_one_and_empty_ones_dropped() {
        let r = Request::new(Method::Get, "//batches/a%2Fb/items/", "");
        assert_eq!(r.segments, ["batches", "a/b", "items"]);
        let r = Request::new(Method::Get, "/subjects/%C3%A9t%C3%A9", "");
        assert_eq!(r.segments, ["subjects", "été"]);
        assert_eq!(
            Request::new(Method::Get, "/", "").segments,
            Vec::<String>::new()
        );
    }

    #[test]
    fn query_pairs_are_form_decoded_in_order() {
        let r = Request::new(Method::Get, "/x", "after=a+b&limit=5&after=%26");
        let pairs: Vec<(&str, &str)> = r
            .query
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(pairs, [("after", "a b"), ("limit", "5"), ("after", "&")]);
    }

    #[test]
    fn methods_parse_exactly() {
        assert_eq!(Method::parse("DELETE"), Method::Delete);
        assert_eq!(Method::parse("delete"), Method::Other);
        assert_eq!(Method::parse("HEAD"), Method::Other);
        for m in Method::ALL {
            assert_eq!(Method::parse(m.as_str()), m);
        }
    }
}
