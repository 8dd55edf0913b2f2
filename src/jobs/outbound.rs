//! The outbound seam: everything a job does outside itself (an HTTP request with
//! an abort signal, a sleep, the clock) goes through [`Outbound`]. The Worker fills
//! it with the runtime (`edge::outbound`); host tests fill it in memory
//! ([`super::memory::MemoryOutbound`]: a virtual clock, scripted answers, every
//! request recorded), so each kind's run path is tested without the runtime.
//! [`Correlated`] wraps either so that every request of a run names the
//! invocation that dispatched its item (`Fanout-Invocation`).
//!
//! An answer's body is read with a bound, by one rule both seams follow
//! ([`BodyRead`], [`BodyReader`]): a receiver answering with an endless body
//! must not fill the isolate that runs the item (inline, or a kind that runs
//! in the drain, holds every other item's lease in that isolate).

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use futures::future::LocalBoxFuture;

use super::bindings::Bindings;

/// An HTTP request as a job sends it. Redirects are never followed: a 3xx comes
/// back as it is (following one would send the request, and its signature,
/// wherever `Location` points).
/// Built with [`Request::new`] and its builders ([`Request::get`],
/// [`Request::header`], [`Request::read_body_up_to`]…), never a struct literal.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Request {
    pub method: String,
    /// A checked URL (`core::target`), as text.
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Option<String>,
    /// Read the answer's body, whatever its status, up to `max_body_bytes`: all
    /// of it, or the fetch fails (a body over the bound is an error, never a
    /// cut body). Off, a success's body is not read (reading costs the runtime
    /// CPU) and a failure's only its first [`FAILURE_TEXT_BYTES`] (its text goes
    /// into the reason). See [`Request::body_read`].
    pub read_body: bool,
    /// The most bytes of a body read with `read_body` ([`DEFAULT_MAX_BODY_BYTES`]
    /// unless set; [`Request::read_body_up_to`]).
    pub max_body_bytes: usize,
}

/// Bytes of a failure's text read when the request did not ask for the body:
/// enough for the reason's 200 bytes (`webhook::MAX_ANSWER_TEXT_BYTES`) after
/// leading blanks. The rest of the body is cancelled unread.
pub const FAILURE_TEXT_BYTES: usize = 4 * 1024;

/// [`Request::max_body_bytes`] unless a kind asks for more: a JSON answer of an
/// API, not a download.
pub const DEFAULT_MAX_BODY_BYTES: usize = 64 * 1024;

impl Request {
    /// A request with no headers and no body, its answer's body not read (see
    /// [`Request::read_body`]).
    pub fn new(method: &str, url: &str) -> Request {
        Request {
            method: method.into(),
            url: url.into(),
            headers: Vec::new(),
            body: None,
            read_body: false,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
        }
    }

    /// A `GET` that reads the answer's body (up to [`DEFAULT_MAX_BODY_BYTES`]):
    /// what a GET is for.
    pub fn get(url: &str) -> Request {
        Request::new("GET", url).read_body()
    }

    /// A `DELETE`, its answer's body not read.
    pub fn delete(url: &str) -> Request {
        Request::new("DELETE", url)
    }

    /// A `POST` of a JSON body, its answer's body not read.
    pub fn post_json(url: &str, body: String) -> Request {
        Request::new("POST", url).json_body(body)
    }

    /// A `PUT` of a JSON body, its answer's body not read.
    pub fn put_json(url: &str, body: String) -> Request {
        Request::new("PUT", url).json_body(body)
    }

    /// The same request with `body` as its JSON body (`Content-Type:
    /// application/json`).
    pub fn json_body(self, body: String) -> Request {
        self.body_with_type("application/json", body)
    }

    /// The same request with `body`, sent as `content_type`.
    pub fn body_with_type(mut self, content_type: &str, body: String) -> Request {
        self.headers
            .retain(|(n, _)| !n.eq_ignore_ascii_case("Content-Type"));
        self.headers
            .push(("Content-Type".into(), content_type.into()));
        self.body = Some(body);
        self
    }

    /// The same request asking for the answer's body, at most
    /// [`Request::max_body_bytes`] of it (a longer body fails the fetch).
    pub fn read_body(mut self) -> Request {
        self.read_body = true;
        self
    }

    /// The same request asking for the answer's body, at most `max_bytes` of it
    /// (a longer body fails the fetch).
    pub fn read_body_up_to(mut self, max_bytes: usize) -> Request {
        self.read_body = true;
        self.max_body_bytes = max_bytes;
        self
    }

    /// How much of an answer with `status` is read: with `read_body`, the whole
    /// body up to `max_body_bytes` (more is an error); without, nothing of a
    /// success and the first [`FAILURE_TEXT_BYTES`] of anything else.
    pub fn body_read(&self, status: u16) -> BodyRead {
        if self.read_body {
            BodyRead::Whole(self.max_body_bytes)
        } else if (200..300).contains(&status) {
            BodyRead::Skip
        } else {
            BodyRead::Cut(FAILURE_TEXT_BYTES)
        }
    }

    /// The same request with one more header.
    pub fn header(mut self, name: &str, value: &str) -> Request {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// A header's value (names compare case-insensitively).
    pub fn header_value(&self, name: &str) -> Option<&str> {
        find_header(&self.headers, name)
    }
}

/// An HTTP answer. `body` is what was read of the answer's body
/// ([`Request::body_read`]): all of it when the request asked for it
/// ([`Request::read_body`]; then `whole`), else the start of a failure's (for
/// its reason) or nothing. [`Response::text`] and [`Response::json`] read a
/// whole body, and fail on one that was not read.
/// Built with [`Response::new`] or [`Response::with_body`], then
/// [`Response::header`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Whether `body` is the whole body (the request asked for it).
    pub whole: bool,
}

impl Response {
    /// An answer with `status`, no headers and no body read.
    pub fn new(status: u16) -> Response {
        Response {
            status,
            ..Response::default()
        }
    }

    /// An answer with `status` and this whole body.
    pub fn with_body(status: u16, body: impl Into<Vec<u8>>) -> Response {
        Response {
            status,
            headers: Vec::new(),
            body: body.into(),
            whole: true,
        }
    }

    /// The same answer with one more header.
    pub fn header(mut self, name: &str, value: &str) -> Response {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// The same answer with this much of its body read: `whole` says whether it
    /// is all of it (as [`Request::body_read`] decided).
    pub fn read(mut self, body: impl Into<Vec<u8>>, whole: bool) -> Response {
        self.body = body.into();
        self.whole = whole;
        self
    }

    /// The whole body as text. An error when the request did not ask for the
    /// body (`HTTP 200: the answer's body was not read (Request::read_body)`) or
    /// it is not UTF-8: never an empty or mangled text to hash or parse.
    pub fn text(&self) -> Result<&str, String> {
        if !self.whole {
            return Err(format!(
                "HTTP {}: the answer's body was not read (Request::read_body)",
                self.status
            ));
        }
        std::str::from_utf8(&self.body).map_err(|e| {
            format!(
                "HTTP {}: the answer's body is not UTF-8 (at byte {})",
                self.status,
                e.valid_up_to()
            )
        })
    }

    /// The whole body parsed as JSON: [`Response::text`]'s errors, or the
    /// parser's.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, String> {
        serde_json::from_str(self.text()?).map_err(|e| {
            format!(
                "HTTP {}: the answer's body is not the JSON expected: {e}",
                self.status
            )
        })
    }

    /// What was read of the body as text, invalid bytes replaced: a failure's
    /// start for a reason (empty when nothing was read).
    pub fn text_read(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(&self.body)
    }

    pub fn header_value(&self, name: &str) -> Option<&str> {
        find_header(&self.headers, name)
    }
}

/// How much of an answer's body a seam reads ([`Request::body_read`]); what is
/// not read is cancelled, never drained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyRead {
    /// Nothing (a success whose body nobody asked for).
    Skip,
    /// The first `n` bytes, the rest dropped: a failure's text for its reason.
    Cut(usize),
    /// All of it when it has at most `n` bytes; a longer body is an error.
    Whole(usize),
}

/// An answer's body as it arrives, read by a [`BodyRead`]: a seam hands it
/// chunks while it [`wants`](BodyReader::wants) more, then cancels the rest of
/// the body and [`finish`](BodyReader::finish)es. It never holds more than the
/// bound (plus one byte, to tell a body over a `Whole` bound).
#[derive(Debug)]
pub struct BodyReader {
    read: BodyRead,
    status: u16,
    bytes: Vec<u8>,
}

impl BodyReader {
    pub fn new(read: BodyRead, status: u16) -> BodyReader {
        BodyReader {
            read,
            status,
            bytes: Vec::new(),
        }
    }

    /// Bytes it still takes; 0 once it has enough (the seam cancels the rest).
    pub fn wants(&self) -> usize {
        let limit = match self.read {
            BodyRead::Skip => 0,
            BodyRead::Cut(n) => n,
            BodyRead::Whole(n) => n.saturating_add(1),
        };
        limit.saturating_sub(self.bytes.len())
    }

    /// Take what it wants of `chunk`.
    pub fn push(&mut self, chunk: &[u8]) {
        let take = chunk.len().min(self.wants());
        self.bytes.extend_from_slice(&chunk[..take]);
    }

    /// The answer, with `headers` and the bytes read (a UTF-8 character cut by
    /// a `Cut` bound dropped; `whole` for a `Whole` read), or, for a body over a
    /// `Whole` bound, the fetch's error.
    pub fn finish(self, headers: Vec<(String, String)>) -> Result<Response, String> {
        let mut bytes = self.bytes;
        match self.read {
            BodyRead::Whole(n) if bytes.len() > n => {
                return Err(format!(
                    "HTTP {}: answer body over {n} bytes (Request::max_body_bytes)",
                    self.status
                ))
            }
            BodyRead::Cut(n) if bytes.len() == n => {
                // Only an unfinished sequence at the very end, not invalid bytes.
                if let Err(e) = std::str::from_utf8(&bytes) {
                    if e.error_len().is_none() {
                        bytes.truncate(e.valid_up_to());
                    }
                }
            }
            _ => {}
        }
        Ok(Response {
            status: self.status,
            headers,
            body: bytes,
            whole: matches!(self.read, BodyRead::Whole(_)),
        })
    }
}

fn find_header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// The side effects a job may have. `fetch` fails with a message when no answer
/// came (network error, aborted by `signal`); dropping its future also stops it.
pub trait Outbound {
    fn fetch<'a>(
        &'a self,
        request: Request,
        signal: &'a Signal,
    ) -> LocalBoxFuture<'a, Result<Response, String>>;

    /// Send `request` to the Worker bound as `binding` (a service binding, not a
    /// network fetch: the URL's host means nothing, its path and query reach the
    /// bound Worker). Fails as `fetch` does, or with [`ServiceError::Unbound`] when
    /// this runtime has no such binding. Default: no bindings at all.
    fn fetch_service<'a>(
        &'a self,
        binding: &'a str,
        request: Request,
        signal: &'a Signal,
    ) -> LocalBoxFuture<'a, Result<Response, ServiceError>> {
        let _ = (request, signal);
        Box::pin(async move { Err(ServiceError::Unbound(binding.to_string())) })
    }

    /// Resolves after `ms` milliseconds.
    fn sleep(&self, ms: i64) -> LocalBoxFuture<'static, ()>;

    /// The real time in milliseconds since the epoch (signature timestamps: the
    /// receiver checks them against its own clock).
    fn now_ms(&self) -> i64;

    /// The Worker's variables, secrets and KV namespaces ([`Bindings`]).
    /// Default: none.
    fn bindings(&self) -> Option<&dyn Bindings> {
        None
    }
}

/// The header naming the invocation that dispatched an item (its id as `GET
/// /invocations` and every log line of that invocation show it). Not signed, and
/// no secret: the receiver may use it to correlate, never to trust.
pub const INVOCATION_HEADER: &str = "Fanout-Invocation";

/// The outbound seam of one run for one invocation: every request sent through
/// it carries `Fanout-Invocation: <id>` (replacing any a kind set itself), so
/// every kind's calls are correlated without the kind doing anything.
pub struct Correlated<'a> {
    inner: &'a dyn Outbound,
    invocation: &'a str,
}

impl<'a> Correlated<'a> {
    pub fn new(inner: &'a dyn Outbound, invocation: &'a str) -> Correlated<'a> {
        Correlated { inner, invocation }
    }

    /// `request` with this invocation's id as its only `Fanout-Invocation`.
    fn named(&self, mut request: Request) -> Request {
        request
            .headers
            .retain(|(n, _)| !n.eq_ignore_ascii_case(INVOCATION_HEADER));
        request
            .headers
            .push((INVOCATION_HEADER.into(), self.invocation.into()));
        request
    }
}

impl Outbound for Correlated<'_> {
    fn fetch<'a>(
        &'a self,
        request: Request,
        signal: &'a Signal,
    ) -> LocalBoxFuture<'a, Result<Response, String>> {
        self.inner.fetch(self.named(request), signal)
    }

    fn fetch_service<'a>(
        &'a self,
        binding: &'a str,
        request: Request,
        signal: &'a Signal,
    ) -> LocalBoxFuture<'a, Result<Response, ServiceError>> {
        self.inner
            .fetch_service(binding, self.named(request), signal)
    }

    fn sleep(&self, ms: i64) -> LocalBoxFuture<'static, ()> {
        self.inner.sleep(ms)
    }

    fn now_ms(&self) -> i64 {
        self.inner.now_ms()
    }

    fn bindings(&self) -> Option<&dyn Bindings> {
        self.inner.bindings()
    }
}

/// Why a call through a service binding got no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServiceError {
    /// The runtime has no binding of this name (a permanent condition).
    Unbound(String),
    /// The call threw (the bound Worker's exception, a refused call) or was aborted.
    Failed(String),
}

/// An abort signal, without the runtime: once aborted, it stays aborted, every
/// [`Signal::aborted`] future resolves and every child signal is aborted too.
#[derive(Clone, Default)]
pub struct Signal(Rc<RefCell<SignalState>>);

#[derive(Default)]
struct SignalState {
    aborted: bool,
    wakers: Vec<Waker>,
    children: Vec<Signal>,
}

impl Signal {
    pub fn new() -> Signal {
        Signal::default()
    }

    pub fn abort(&self) {
        let (wakers, children) = {
            let mut s = self.0.borrow_mut();
            if s.aborted {
                return;
            }
            s.aborted = true;
            (
                std::mem::take(&mut s.wakers),
                std::mem::take(&mut s.children),
            )
        };
        wakers.into_iter().for_each(Waker::wake);
        children.iter().for_each(Signal::abort);
    }

    pub fn is_aborted(&self) -> bool {
        self.0.borrow().aborted
    }

    /// A signal aborted with this one (and on its own).
    pub fn child(&self) -> Signal {
        let child = Signal::new();
        if self.is_aborted() {
            child.abort();
        } else {
            self.0.borrow_mut().children.push(child.clone());
        }
        child
    }

    /// Resolves once the signal is aborted.
    pub fn aborted(&self) -> Aborted {
        Aborted(self.clone())
    }
}

impl std::fmt::Debug for Signal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Signal {{ aborted: {} }}", self.is_aborted())
    }
}

/// The future of [`Signal::aborted`].
pub struct Aborted(Signal);

impl Future for Aborted {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut s = (self.0).0.borrow_mut();
        if s.aborted {
            Poll::Ready(())
        } else {
            if !s.wakers.iter().any(|w| w.will_wake(cx.waker())) {
                s.wakers.push(cx.waker().clone());
            }
            Poll::Pending
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    #[test]
    fn an_abort_reaches_waiters_and_children_once() {
        let parent = Signal::new();
        let child = parent.child();
        let mut waiting = parent.aborted();
        assert!((&mut waiting).now_or_never().is_none());
        parent.abort();
        assert!(waiting.now_or_never().is_some());
        assert!(child.is_aborted() && parent.is_aborted());
        // A child aborted alone leaves its parent be; one made late starts aborted.
        let p2 = Signal::new();
        p2.child().abort();
        assert!(!p2.is_aborted());
        assert!(parent.child().is_aborted());
    }

    /// What a reader keeps of `body` fed in chunks of `chunk` bytes, and how many
    /// bytes it was handed before it wanted no more.
    fn read_in_chunks(
        read: BodyRead,
        status: u16,
        body: &[u8],
        chunk: usize,
    ) -> (Result<String, String>, usize) {
        let mut reader = BodyReader::new(read, status);
        let mut handed = 0;
        for c in body.chunks(chunk) {
            if reader.wants() == 0 {
                break;
            }
            reader.push(c);
            handed += c.len();
        }
        let read = reader
            .finish(Vec::new())
            .map(|r| r.text_read().into_owned());
        (read, handed)
    }

    #[test]
    fn a_success_is_read_only_when_the_request_asks_for_its_body() {
        let plain = Request::post_json("https://example.com/", "{}".into());
        assert_eq!(plain.body_read(204), BodyRead::Skip);
        assert_eq!(plain.body_read(404), BodyRead::Cut(FAILURE_TEXT_BYTES));
        assert_eq!(plain.body_read(503), BodyRead::Cut(FAILURE_TEXT_BYTES));
        assert_eq!(plain.body_read(302), BodyRead::Cut(FAILURE_TEXT_BYTES));
        let asking = plain.clone().read_body_up_to(10);
        assert!(asking.read_body);
        assert_eq!(asking.body_read(200), BodyRead::Whole(10));
        assert_eq!(asking.body_read(500), BodyRead::Whole(10));
        let mut by_field = plain;
        by_field.read_body = true;
        assert_eq!(
            by_field.body_read(200),
            BodyRead::Whole(DEFAULT_MAX_BODY_BYTES)
        );
        let (skipped, handed) = read_in_chunks(BodyRead::Skip, 200, b"ignored", 3);
        assert_eq!((skipped, handed), (Ok(String::new()), 0));
    }

    #[test]
    fn a_failure_s_text_is_cut_at_its_bound_and_the_rest_is_not_taken() {
        let endless = "é".repeat(1 << 20);
        let (text, handed) = read_in_chunks(
            BodyRead::Cut(FAILURE_TEXT_BYTES),
            404,
            endless.as_bytes(),
            1_000,
        );
        let text = text.unwrap();
        // 4096 bytes hold 2048 two-byte characters exactly; 4095 would drop one.
        assert_eq!(text.len(), FAILURE_TEXT_BYTES);
        assert!(handed <= FAILURE_TEXT_BYTES + 1_000, "{handed}");
        let (odd, _) = read_in_chunks(BodyRead::Cut(5), 404, "ééé".as_bytes(), 2);
        assert_eq!(odd.unwrap(), "éé");
        let (short, _) = read_in_chunks(BodyRead::Cut(5), 404, b"no", 1);
        assert_eq!(short.unwrap(), "no");
    }

    #[test]
    fn a_body_asked_for_is_whole_or_an_error_past_its_bound() {
        let (fits, _) = read_in_chunks(BodyRead::Whole(4), 200, b"1234", 3);
        assert_eq!(fits.unwrap(), "1234");
        let (over, handed) = read_in_chunks(BodyRead::Whole(4), 200, &[b'x'; 1 << 20], 3);
        assert_eq!(
            over.unwrap_err(),
            "HTTP 200: answer body over 4 bytes (Request::max_body_bytes)"
        );
        assert_eq!(handed, 6);
    }

    #[test]
    fn a_get_reads_its_body_and_a_post_does_not() {
        let get = Request::get("https://example.com/feed");
        assert_eq!(get.method, "GET");
        assert_eq!((get.body.as_deref(), get.headers.len()), (None, 0));
        assert_eq!(get.body_read(200), BodyRead::Whole(DEFAULT_MAX_BODY_BYTES));
        let put = Request::put_json("https://example.com/", "{}".into());
        assert_eq!(put.method, "PUT");
        assert_eq!(put.body_read(200), BodyRead::Skip);
        assert_eq!(put.header_value("content-type"), Some("application/json"));
        let typed = Request::new("POST", "https://example.com/")
            .json_body("{}".into())
            .body_with_type("text/plain", "hi".into());
        assert_eq!(
            typed.headers,
            vec![("Content-Type".into(), "text/plain".into())]
        );
        assert_eq!(Request::delete("https://example.com/").method, "DELETE");
    }

    #[test]
    fn a_body_not_read_or_not_utf8_is_an_error_not_an_empty_text() {
        let skipped = BodyReader::new(BodyRead::Skip, 200)
            .finish(Vec::new())
            .unwrap();
        assert_eq!(
            skipped.text().unwrap_err(),
            "HTTP 200: the answer's body was not read (Request::read_body)"
        );
        let mut cut = BodyReader::new(BodyRead::Cut(4), 404);
        cut.push(b"nope, not found");
        let cut = cut.finish(Vec::new()).unwrap();
        assert_eq!(cut.text_read(), "nope");
        assert!(cut.text().is_err());
        let mut bytes = BodyReader::new(BodyRead::Whole(16), 200);
        bytes.push(&[b'o', b'k', 0xff]);
        let bytes = bytes.finish(Vec::new()).unwrap();
        assert_eq!(bytes.body, vec![b'o', b'k', 0xff]);
        assert_eq!(
            bytes.text().unwrap_err(),
            "HTTP 200: the answer's body is not UTF-8 (at byte 2)"
        );
        let json = Response::with_body(200, r#"{"n": 3}"#);
        assert_eq!(json.json::<serde_json::Value>().unwrap()["n"], 3);
        assert!(Response::with_body(200, "[")
            .json::<serde_json::Value>()
            .unwrap_err()
            .starts_with("HTTP 200: the answer's body is not the JSON expected: "));
    }

    #[test]
    fn headers_are_found_whatever_their_case() {
        let r =
            Request::post_json("https://example.com/", "{}".into()).header("Idempotency-Key", "7");
        assert_eq!(r.header_value("idempotency-key"), Some("7"));
        assert_eq!(r.header_value("content-type"), Some("application/json"));
        assert_eq!(r.header_value("x"), None);
    }
}
