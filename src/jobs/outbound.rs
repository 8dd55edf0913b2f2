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

/// An HTTP request as a job sends it. Redirects are never followed: a 3xx comes
/// back as it is (following one would send the request, and its signature,
/// wherever `Location` points).
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// A `POST` of a JSON body.
    pub fn post_json(url: &str, body: String) -> Request {
        Request {
            method: "POST".into(),
            url: url.into(),
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: Some(body),
            read_body: false,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
        }
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

/// An HTTP answer. `body` is the text of what was read of the answer's body
/// ([`Request::body_read`]: all of it with [`Request::read_body`], the start of
/// a failure's otherwise), empty when nothing was.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Response {
    pub fn new(status: u16) -> Response {
        Response {
            status,
            ..Response::default()
        }
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

    /// The text read (UTF-8, invalid bytes replaced; a character cut by a `Cut`
    /// bound dropped), or, for a body over a `Whole` bound, the fetch's error.
    pub fn finish(self) -> Result<String, String> {
        let mut bytes = self.bytes.as_slice();
        match self.read {
            BodyRead::Whole(n) if bytes.len() > n => {
                return Err(format!(
                    "HTTP {}: answer body over {n} bytes (Request::max_body_bytes)",
                    self.status
                ))
            }
            BodyRead::Cut(n) if bytes.len() == n => {
                // Only an unfinished sequence at the very end, not invalid bytes.
                if let Err(e) = std::str::from_utf8(bytes) {
                    if e.error_len().is_none() {
                        bytes = &bytes[..e.valid_up_to()];
                    }
                }
            }
            _ => {}
        }
        Ok(String::from_utf8_lossy(bytes).into_owned())
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
        (reader.finish(), handed)
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
    fn headers_are_found_whatever_their_case() {
        let r =
            Request::post_json("https://example.com/", "{}".into()).header("Idempotency-Key", "7");
        assert_eq!(r.header_value("idempotency-key"), Some("7"));
        assert_eq!(r.header_value("content-type"), Some("application/json"));
        assert_eq!(r.header_value("x"), None);
    }
}
