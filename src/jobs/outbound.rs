//! The outbound seam: everything a job does outside itself (an HTTP request with
//! an abort signal, a sleep, the clock) goes through [`Outbound`]. The Worker fills
//! it with the runtime (`edge::outbound`); host tests fill it in memory
//! ([`super::memory::MemoryOutbound`]: a virtual clock, scripted answers, every
//! request recorded), so each kind's run path is tested without the runtime.
//! [`Correlated`] wraps either so that every request of a run names the
//! invocation that dispatched its item (`Fanout-Invocation`).

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
    /// Read the answer's body even when it is a 2xx. Off, only failures' bodies
    /// are read (their text goes into the reason): reading costs the runtime CPU.
    pub read_body: bool,
}

impl Request {
    /// A `POST` of a JSON body.
    pub fn post_json(url: &str, body: String) -> Request {
        Request {
            method: "POST".into(),
            url: url.into(),
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: Some(body),
            read_body: false,
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

/// An HTTP answer. `body` is the answer's text when it was read (any status
/// outside 2xx, or [`Request::read_body`]), otherwise empty.
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

    #[test]
    fn headers_are_found_whatever_their_case() {
        let r =
            Request::post_json("https://example.com/", "{}".into()).header("Idempotency-Key", "7");
        assert_eq!(r.header_value("idempotency-key"), Some("7"));
        assert_eq!(r.header_value("content-type"), Some("application/json"));
        assert_eq!(r.header_value("x"), None);
    }
}
