//! The scheduler on its own thread, for programs that submit from several (desktop apps,
//! the server): [`Runner`] takes requests, [`Handle`] streams one's events and cancels it on
//! drop, [`Ticket`] cancels a request whose events go to a sink.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;

use super::{Event, Finished, Request, RequestId, Scheduler, Sink, Stats};
use crate::error::{Error, Result};

impl Scheduler {
    /// Runs the scheduler on its own thread; submit from anywhere through the runner.
    pub fn spawn(mut self) -> Runner {
        let (tx, rx) = mpsc::channel::<Cmd>();
        let stats = self.stats.clone();
        let thread = std::thread::spawn(move || loop {
            let cmd = if self.is_idle() {
                match rx.recv() {
                    Ok(c) => Some(c),
                    Err(_) => return,
                }
            } else {
                match rx.try_recv() {
                    Ok(c) => Some(c),
                    Err(mpsc::TryRecvError::Empty) => None,
                    Err(mpsc::TryRecvError::Disconnected) => return,
                }
            };
            match cmd {
                Some(Cmd::Submit(req, sink, cancel)) => {
                    self.submit_with(*req, sink, cancel);
                    continue;
                }
                Some(Cmd::FinishAll(why)) => {
                    self.finish_all(&why);
                    continue;
                }
                None => {}
            }
            self.step_or_fail();
        });
        Runner {
            tx,
            thread: Some(thread),
            stats,
        }
    }
}

enum Cmd {
    Submit(Box<Request>, Sink, Arc<AtomicBool>),
    FinishAll(String),
}

/// A request's events, in order; dropping it cancels the request.
pub struct Handle {
    pub id: RequestId,
    pub events: Receiver<Event>,
    cancel: Arc<AtomicBool>,
}

impl Handle {
    pub(super) fn new(id: RequestId, events: Receiver<Event>, cancel: Arc<AtomicBool>) -> Handle {
        Handle { id, events, cancel }
    }

    pub fn cancel(&self) {
        self.cancel.store(true, Ordering::Relaxed);
    }

    /// Waits for the end: the tokens and text, or the error.
    pub fn wait(self) -> Result<(Finished, String)> {
        let mut text = String::new();
        for e in self.events.iter() {
            match e {
                Event::Token { text: t, .. } => text.push_str(&t),
                Event::Done(f) => {
                    text.push_str(&f.rest);
                    return Ok((f, text));
                }
                Event::Error(e) => return Err(Error::InvalidArgument(e)),
                Event::Started { .. } => {}
            }
        }
        Err(Error::InvalidArgument("the scheduler stopped".into()))
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.cancel();
    }
}

/// A scheduler on its own thread. Dropping it lets the thread finish what is queued and end.
pub struct Runner {
    tx: Sender<Cmd>,
    thread: Option<std::thread::JoinHandle<()>>,
    stats: Arc<Stats>,
}

/// A request's cancel switch from [`Runner::submit_sink`]: dropping it cancels the request at
/// the next step (a server drops it when the client goes away).
pub struct Ticket {
    cancel: Arc<AtomicBool>,
}

impl Ticket {
    pub fn cancel(&self) {
        self.cancel.store(true, Ordering::Relaxed);
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.cancel();
    }
}

impl Runner {
    /// The scheduler's counters, updated every step.
    pub fn stats(&self) -> Arc<Stats> {
        self.stats.clone()
    }

    /// Queues a request whose events go to `sink` (on the scheduler's thread: it must not
    /// block); `false` back, or dropping the ticket, cancels it at the next step.
    pub fn submit_sink(&self, req: Request, sink: impl FnMut(Event) -> bool + Send + 'static) -> Ticket {
        let cancel = Arc::new(AtomicBool::new(false));
        if let Err(mpsc::SendError(Cmd::Submit(_, mut sink, _))) =
            self.tx.send(Cmd::Submit(Box::new(req), Box::new(sink), cancel.clone()))
        {
            sink(Event::Error("the scheduler stopped".into()));
        }
        Ticket { cancel }
    }

    pub fn submit(&self, req: Request) -> Handle {
        let (etx, rx) = mpsc::channel();
        let cancel = Arc::new(AtomicBool::new(false));
        let sink: Sink = Box::new(move |e| etx.send(e).is_ok());
        let id = NEXT_REMOTE.fetch_add(1, Ordering::Relaxed);
        if let Err(mpsc::SendError(Cmd::Submit(_, mut sink, _))) =
            self.tx.send(Cmd::Submit(Box::new(req), sink, cancel.clone()))
        {
            sink(Event::Error("the scheduler stopped".into()));
        }
        Handle { id, events: rx, cancel }
    }

    /// Ends every request at the scheduler's next turn ([`Scheduler::finish_all`]).
    pub fn finish_all(&self, why: &str) {
        let _ = self.tx.send(Cmd::FinishAll(why.to_string()));
    }
}

/// Handles from a runner number themselves (the scheduler's own ids stay inside its thread).
static NEXT_REMOTE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Drop for Runner {
    fn drop(&mut self) {
        let (tx, _) = mpsc::channel();
        drop(std::mem::replace(&mut self.tx, tx));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
