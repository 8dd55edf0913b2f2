//! [`Outbound`] in memory, for host tests of job kinds (the built-in ones and
//! users' own): a virtual clock that moves only when every future waits on it,
//! answers scripted per URL or per service binding (a status after a delay, a
//! network error, or no answer at all), and a record of every request with how it
//! ended. A scripted body is what the receiver sends: the request gets what the
//! Worker's seam would read of it (`Request::body_read`), so a kind's host test
//! sees what it would see deployed.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::future::Future;
use std::pin::{pin, Pin};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use futures::future::{select, Either, LocalBoxFuture};
use futures::task::{waker, ArcWake};

use super::bindings::{Bindings, Kv};
use super::outbound::{BodyReader, Outbound, Request, Response, ServiceError, Signal};

/// What a scripted URL answers, after `after_ms` of virtual time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub after_ms: i64,
    pub reply: Reply,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Respond(Response),
    /// The fetch fails (a network error, a refused connection).
    Error(String),
    /// No answer ever: the fetch waits until it is aborted or dropped.
    Hang,
}

impl Answer {
    pub fn status(status: u16) -> Answer {
        Answer::respond(Response::new(status))
    }

    pub fn respond(response: Response) -> Answer {
        Answer {
            after_ms: 0,
            reply: Reply::Respond(response),
        }
    }

    pub fn error(message: &str) -> Answer {
        Answer {
            after_ms: 0,
            reply: Reply::Error(message.into()),
        }
    }

    pub fn hang() -> Answer {
        Answer {
            after_ms: 0,
            reply: Reply::Hang,
        }
    }

    /// The same answer, `ms` later.
    pub fn after(mut self, ms: i64) -> Answer {
        self.after_ms = ms;
        self
    }

    /// The same answer (a response) with this body text, as the receiver sends
    /// it: the request reads what its rule says of it (`Request::body_read`).
    pub fn body(self, text: &str) -> Answer {
        self.bytes(text.as_bytes())
    }

    /// The same answer (a response) with this body, any bytes.
    pub fn bytes(mut self, body: &[u8]) -> Answer {
        if let Reply::Respond(r) = &mut self.reply {
            r.body = body.to_vec();
        }
        self
    }

    /// The same answer (a response) with one more header.
    pub fn header(mut self, name: &str, value: &str) -> Answer {
        if let Reply::Respond(r) = &mut self.reply {
            r.headers.push((name.into(), value.into()));
        }
        self
    }
}

/// How a recorded request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Still out (the run has not finished with it).
    Open,
    Answered,
    /// Its signal was aborted before an answer (and it was stopped).
    Aborted,
    /// Its future was dropped before an answer (the runtime aborts it then).
    Dropped,
}

/// One request a job sent, when (virtual ms), and how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    pub request: Request,
    /// The service binding it went through (`Outbound::fetch_service`), if any.
    pub service: Option<String>,
    pub at_ms: i64,
    pub ended: Ended,
}

#[derive(Default)]
struct State {
    now_ms: i64,
    timers: Vec<(i64, Waker)>,
    answers: HashMap<String, VecDeque<Answer>>,
    /// Service bindings that exist, with their scripted answers.
    services: HashMap<String, VecDeque<Answer>>,
    sent: Vec<Sent>,
    vars: HashMap<String, String>,
    secrets: HashMap<String, String>,
    /// KV namespaces that exist, with their keys and values.
    kv: HashMap<String, BTreeMap<String, String>>,
}

/// The in-memory outbound side. Clone it to keep a handle for assertions.
#[derive(Clone, Default)]
pub struct MemoryOutbound(Rc<RefCell<State>>);

impl MemoryOutbound {
    /// A clock starting at `now_ms` and nothing scripted (an unscripted URL fails
    /// like a network error, naming the URL).
    pub fn new(now_ms: i64) -> MemoryOutbound {
        let out = MemoryOutbound::default();
        out.0.borrow_mut().now_ms = now_ms;
        out
    }

    /// Queue `answer` for the next request to `url` (answers to one URL are used
    /// in order).
    pub fn answer(&self, url: &str, answer: Answer) -> &Self {
        self.0
            .borrow_mut()
            .answers
            .entry(url.into())
            .or_default()
            .push_back(answer);
        self
    }

    /// Bind a service named `binding` (calls to a name never bound fail as
    /// `ServiceError::Unbound`).
    pub fn bind_service(&self, binding: &str) -> &Self {
        self.0
            .borrow_mut()
            .services
            .entry(binding.into())
            .or_default();
        self
    }

    /// Queue `answer` for the next call through `binding` (binding it).
    pub fn answer_service(&self, binding: &str, answer: Answer) -> &Self {
        self.0
            .borrow_mut()
            .services
            .entry(binding.into())
            .or_default()
            .push_back(answer);
        self
    }

    /// Set the Worker's `[vars]` value `name` (`Context::var`).
    pub fn set_var(&self, name: &str, value: &str) -> &Self {
        self.0.borrow_mut().vars.insert(name.into(), value.into());
        self
    }

    /// Set the Worker's secret `name` (`Context::secret`).
    pub fn set_secret(&self, name: &str, value: &str) -> &Self {
        self.0
            .borrow_mut()
            .secrets
            .insert(name.into(), value.into());
        self
    }

    /// Bind an empty KV namespace as `name` (`Context::kv`), or keep the one bound.
    pub fn bind_kv(&self, name: &str) -> &Self {
        self.0.borrow_mut().kv.entry(name.into()).or_default();
        self
    }

    /// Set `key` to `value` in the KV namespace `name` (binding it).
    pub fn kv_put(&self, name: &str, key: &str, value: &str) -> &Self {
        self.0
            .borrow_mut()
            .kv
            .entry(name.into())
            .or_default()
            .insert(key.into(), value.into());
        self
    }

    /// The value of `key` in the KV namespace `name`, as a run left it.
    pub fn kv_value(&self, name: &str, key: &str) -> Option<String> {
        self.0.borrow().kv.get(name)?.get(key).cloned()
    }

    /// Every request sent so far, in order.
    pub fn sent(&self) -> Vec<Sent> {
        self.0.borrow().sent.clone()
    }

    /// The virtual time now.
    pub fn now(&self) -> i64 {
        self.0.borrow().now_ms
    }

    /// Run `future` to completion on the virtual clock: whenever nothing can make
    /// progress, time jumps to the next timer. Panics if the future waits on
    /// something that is not a timer (it would wait forever).
    pub fn block_on<F: Future>(&self, future: F) -> F::Output {
        let woken = Arc::new(Flag(AtomicBool::new(false)));
        let waker = waker(woken.clone());
        let mut cx = Context::from_waker(&waker);
        let mut future = pin!(future);
        loop {
            if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
                return out;
            }
            if woken.0.swap(false, Ordering::SeqCst) {
                continue;
            }
            let due = {
                let mut s = self.0.borrow_mut();
                let next = s
                    .timers
                    .iter()
                    .map(|(at, _)| *at)
                    .min()
                    .expect("the future waits on something that is not a timer");
                s.now_ms = s.now_ms.max(next);
                let now = s.now_ms;
                let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut s.timers)
                    .into_iter()
                    .partition(|(at, _)| *at <= now);
                s.timers = later;
                due
            };
            due.into_iter().for_each(|(_, w)| w.wake());
        }
    }

    fn record(&self, request: Request, service: Option<&str>) -> (usize, Option<Answer>) {
        let mut s = self.0.borrow_mut();
        let answer = match service {
            None => s.answers.get_mut(&request.url),
            Some(name) => s.services.get_mut(name),
        }
        .and_then(VecDeque::pop_front);
        let at_ms = s.now_ms;
        s.sent.push(Sent {
            request,
            service: service.map(str::to_string),
            at_ms,
            ended: Ended::Open,
        });
        (s.sent.len() - 1, answer)
    }

    /// Record `request` and give its scripted answer when it comes (or fail with
    /// `unscripted`), unless `signal` aborts it first.
    async fn exchange(
        &self,
        request: Request,
        service: Option<&str>,
        signal: &Signal,
        unscripted: String,
    ) -> Result<Response, String> {
        let (index, answer) = self.record(request.clone(), service);
        let guard = DropGuard {
            out: self.clone(),
            index,
            signal: signal.clone(),
        };
        let Some(answer) = answer else {
            self.end(index, Ended::Answered);
            return Err(unscripted);
        };
        let wait: LocalBoxFuture<'_, ()> = match answer.reply {
            Reply::Hang => Box::pin(futures::future::pending()),
            _ => self.sleep(answer.after_ms),
        };
        let result = match select(wait, signal.aborted()).await {
            Either::Left(_) => {
                self.end(index, Ended::Answered);
                match answer.reply {
                    Reply::Respond(r) => as_read(&request, r),
                    Reply::Error(e) => Err(e),
                    Reply::Hang => unreachable!("a hanging answer never ends"),
                }
            }
            Either::Right(_) => {
                self.end(index, Ended::Aborted);
                Err("aborted".into())
            }
        };
        drop(guard);
        result
    }

    fn end(&self, index: usize, ended: Ended) {
        let mut s = self.0.borrow_mut();
        if s.sent[index].ended == Ended::Open {
            s.sent[index].ended = ended;
        }
    }
}

/// A scripted answer as the Worker's seam hands it over: its body read by the
/// request's rule (`Request::body_read`), an error past a `read_body` bound.
fn as_read(request: &Request, response: Response) -> Result<Response, String> {
    let mut reader = BodyReader::new(request.body_read(response.status), response.status);
    reader.push(&response.body);
    reader.finish(response.headers)
}

struct Flag(AtomicBool);

impl ArcWake for Flag {
    fn wake_by_ref(arc_self: &Arc<Self>) {
        arc_self.0.store(true, Ordering::SeqCst);
    }
}

/// A virtual timer.
struct Sleep {
    at_ms: i64,
    out: MemoryOutbound,
}

impl Future for Sleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut s = self.out.0.borrow_mut();
        if s.now_ms >= self.at_ms {
            Poll::Ready(())
        } else {
            s.timers.push((self.at_ms, cx.waker().clone()));
            Poll::Pending
        }
    }
}

/// Marks its request dropped (aborted, if its signal was) unless it ended first.
struct DropGuard {
    out: MemoryOutbound,
    index: usize,
    signal: Signal,
}

impl Drop for DropGuard {
    fn drop(&mut self) {
        let ended = if self.signal.is_aborted() {
            Ended::Aborted
        } else {
            Ended::Dropped
        };
        self.out.end(self.index, ended);
    }
}

impl Outbound for MemoryOutbound {
    fn fetch<'a>(
        &'a self,
        request: Request,
        signal: &'a Signal,
    ) -> LocalBoxFuture<'a, Result<Response, String>> {
        Box::pin(async move {
            let unscripted = format!("no answer scripted for {}", request.url);
            self.exchange(request, None, signal, unscripted).await
        })
    }

    fn fetch_service<'a>(
        &'a self,
        binding: &'a str,
        request: Request,
        signal: &'a Signal,
    ) -> LocalBoxFuture<'a, Result<Response, ServiceError>> {
        Box::pin(async move {
            if !self.0.borrow().services.contains_key(binding) {
                return Err(ServiceError::Unbound(binding.into()));
            }
            let unscripted = format!("no answer scripted for service {binding}");
            self.exchange(request, Some(binding), signal, unscripted)
                .await
                .map_err(ServiceError::Failed)
        })
    }

    fn sleep(&self, ms: i64) -> LocalBoxFuture<'static, ()> {
        let at_ms = self.now() + ms.max(0);
        Box::pin(Sleep {
            at_ms,
            out: self.clone(),
        })
    }

    fn now_ms(&self) -> i64 {
        self.now()
    }

    fn bindings(&self) -> Option<&dyn Bindings> {
        Some(self)
    }
}

impl Bindings for MemoryOutbound {
    fn var(&self, name: &str) -> Option<String> {
        self.0.borrow().vars.get(name).cloned()
    }

    fn secret(&self, name: &str) -> Option<String> {
        self.0.borrow().secrets.get(name).cloned()
    }

    fn kv(&self, name: &str) -> Option<Box<dyn Kv + '_>> {
        self.0.borrow().kv.contains_key(name).then(|| {
            Box::new(MemoryKv {
                out: self.clone(),
                name: name.into(),
            }) as Box<dyn Kv>
        })
    }
}

/// A KV namespace of a [`MemoryOutbound`]: its calls answer at once.
struct MemoryKv {
    out: MemoryOutbound,
    name: String,
}

impl MemoryKv {
    fn with<T>(&self, f: impl FnOnce(&mut BTreeMap<String, String>) -> T) -> T {
        let mut s = self.out.0.borrow_mut();
        f(s.kv.entry(self.name.clone()).or_default())
    }
}

impl Kv for MemoryKv {
    fn get<'a>(&'a self, key: &'a str) -> LocalBoxFuture<'a, Result<Option<String>, String>> {
        Box::pin(async move { Ok(self.with(|kv| kv.get(key).cloned())) })
    }

    fn put<'a>(&'a self, key: &'a str, value: &'a str) -> LocalBoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            self.with(|kv| kv.insert(key.into(), value.into()));
            Ok(())
        })
    }

    fn delete<'a>(&'a self, key: &'a str) -> LocalBoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            self.with(|kv| kv.remove(key));
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_moves_only_to_the_next_timer() {
        let out = MemoryOutbound::new(1_000);
        let o = out.clone();
        let t = out.block_on(async move {
            o.sleep(250).await;
            o.sleep(0).await;
            o.now_ms()
        });
        assert_eq!(t, 1_250);
    }

    #[test]
    fn scripted_answers_come_in_order_and_requests_are_recorded() {
        let out = MemoryOutbound::new(0);
        out.answer("https://a.test/", Answer::status(503).after(40))
            .answer("https://a.test/", Answer::status(200));
        let signal = Signal::new();
        let req = || Request::post_json("https://a.test/", "{}".into());
        let (first, second, unscripted) = out.block_on(async {
            (
                out.fetch(req(), &signal).await,
                out.fetch(req(), &signal).await,
                out.fetch(Request::post_json("https://b.test/", "{}".into()), &signal)
                    .await,
            )
        });
        assert_eq!(first.unwrap().status, 503);
        assert_eq!(second.unwrap().status, 200);
        assert_eq!(
            unscripted.unwrap_err(),
            "no answer scripted for https://b.test/"
        );
        let sent = out.sent();
        assert_eq!(
            sent.iter().map(|s| (s.at_ms, s.ended)).collect::<Vec<_>>(),
            vec![
                (0, Ended::Answered),
                (40, Ended::Answered),
                (40, Ended::Answered)
            ]
        );
    }

    #[test]
    fn a_scripted_body_is_read_as_the_worker_reads_it() {
        let out = MemoryOutbound::new(0);
        let url = "https://a.test/";
        let endless = "x".repeat(3 << 20);
        out.answer(url, Answer::status(200).body("unread"))
            .answer(url, Answer::status(200).body("wanted"))
            .answer(url, Answer::status(404).body(&endless))
            .answer(url, Answer::status(200).body(&endless));
        let signal = Signal::new();
        let plain = || Request::post_json(url, "{}".into());
        let asking = || plain().read_body_up_to(1_024);
        let (skipped, wanted, failure, over) = out.block_on(async {
            (
                out.fetch(plain(), &signal).await,
                out.fetch(asking(), &signal).await,
                out.fetch(plain(), &signal).await,
                out.fetch(asking(), &signal).await,
            )
        });
        assert_eq!(skipped.unwrap().body, b"");
        assert_eq!(wanted.unwrap().text(), Ok("wanted"));
        let failure = failure.unwrap();
        assert_eq!(failure.status, 404);
        assert_eq!(
            failure.body.len(),
            crate::jobs::outbound::FAILURE_TEXT_BYTES
        );
        assert_eq!(
            over.unwrap_err(),
            "HTTP 200: answer body over 1024 bytes (Request::max_body_bytes)"
        );
    }

    #[test]
    fn a_hanging_request_ends_when_aborted_or_dropped() {
        let out = MemoryOutbound::new(0);
        out.answer("https://a.test/", Answer::hang())
            .answer("https://a.test/", Answer::hang());
        let signal = Signal::new();
        let req = || Request::post_json("https://a.test/", "{}".into());
        let aborted = out.block_on(async {
            let s = signal.clone();
            let o = out.clone();
            let abort_later = async move {
                o.sleep(100).await;
                s.abort();
            };
            futures::join!(out.fetch(req(), &signal), abort_later).0
        });
        assert_eq!(aborted.unwrap_err(), "aborted");
        let fresh = Signal::new();
        let raced = out.block_on(async {
            let raced = select(out.fetch(req(), &fresh), out.sleep(50)).await;
            matches!(raced, Either::Right(_))
        });
        assert!(raced);
        let ends: Vec<_> = out.sent().iter().map(|s| (s.at_ms, s.ended)).collect();
        assert_eq!(ends, vec![(0, Ended::Aborted), (100, Ended::Dropped)]);
        assert_eq!(out.now(), 150);
    }
}
