//! A persistent thread pool for the CPU backend. A forward runs a few hundred parallel
//! regions; spawning threads per region, or parking them between regions, would cost more than
//! the work itself. Workers spin for a short while after each region and park only when idle.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long an idle worker spins before parking. A decode step's regions are microseconds
/// apart; between steps (sampling, printing) the gap is well under this.
const SPIN: Duration = Duration::from_micros(500);

type Job = dyn Fn(usize) + Sync;

struct Shared {
    /// The current job, lifetime erased; valid while `run` waits for its workers.
    job: Mutex<Option<&'static Job>>,
    epoch: AtomicU64,
    done: AtomicUsize,
    panicked: AtomicBool,
    shutdown: AtomicBool,
    sleepers: Mutex<usize>,
    wake: Condvar,
}

pub struct Pool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    n_threads: usize,
    /// `run` is not re-entrant; this serialises callers from several contexts.
    busy: Mutex<()>,
}

impl Pool {
    /// `n_threads` counts the calling thread: `Pool::new(2)` spawns one worker.
    pub fn new(n_threads: usize) -> Pool {
        let n_threads = n_threads.max(1);
        let shared = Arc::new(Shared {
            job: Mutex::new(None),
            epoch: AtomicU64::new(0),
            done: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            sleepers: Mutex::new(0),
            wake: Condvar::new(),
        });
        let workers = (1..n_threads)
            .map(|tid| {
                let s = shared.clone();
                std::thread::Builder::new()
                    .name(format!("minfer-cpu-{tid}"))
                    .spawn(move || worker(s, tid))
                    .expect("spawning a CPU worker thread")
            })
            .collect();
        Pool {
            shared,
            workers,
            n_threads,
            busy: Mutex::new(()),
        }
    }

    pub fn n_threads(&self) -> usize {
        self.n_threads
    }

    /// Runs `f(thread_index)` on every thread (the caller is thread 0) and waits for all.
    pub fn run<F: Fn(usize) + Sync>(&self, f: F) {
        if self.n_threads == 1 {
            f(0);
            return;
        }
        let _guard = self.busy.lock().unwrap_or_else(|e| e.into_inner());
        let job: &(dyn Fn(usize) + Sync + '_) = &f;
        // SAFETY: the reference is cleared below only after every worker has finished with it.
        let job: &'static Job = unsafe { std::mem::transmute::<&(dyn Fn(usize) + Sync + '_), &'static Job>(job) };
        *self.shared.job.lock().unwrap_or_else(|e| e.into_inner()) = Some(job);
        self.shared.done.store(0, Ordering::Relaxed);
        self.shared.epoch.fetch_add(1, Ordering::Release);
        if *self.shared.sleepers.lock().unwrap_or_else(|e| e.into_inner()) > 0 {
            self.shared.wake.notify_all();
        }
        let mine = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(0)));
        while self.shared.done.load(Ordering::Acquire) < self.n_threads - 1 {
            std::hint::spin_loop();
        }
        *self.shared.job.lock().unwrap_or_else(|e| e.into_inner()) = None;
        if let Err(p) = mine {
            std::panic::resume_unwind(p);
        }
        if self.shared.panicked.swap(false, Ordering::Relaxed) {
            panic!("a CPU worker thread panicked");
        }
    }

    /// Splits `0..n` into chunks of `chunk` and hands them out dynamically:
    /// `f(thread, start..end)` is called once per chunk.
    pub fn for_chunks<F: Fn(usize, std::ops::Range<usize>) + Sync>(&self, n: usize, chunk: usize, f: F) {
        let chunk = chunk.max(1);
        let n_chunks = n.div_ceil(chunk);
        if n_chunks <= 1 || self.n_threads == 1 {
            if n > 0 {
                f(0, 0..n);
            }
            return;
        }
        let next = AtomicUsize::new(0);
        self.run(|tid| loop {
            let c = next.fetch_add(1, Ordering::Relaxed);
            if c >= n_chunks {
                break;
            }
            let start = c * chunk;
            f(tid, start..(start + chunk).min(n));
        });
    }
}

fn worker(s: Arc<Shared>, tid: usize) {
    let mut seen = 0u64;
    loop {
        let t0 = Instant::now();
        let mut spins = 0u32;
        loop {
            if s.shutdown.load(Ordering::Acquire) {
                return;
            }
            let e = s.epoch.load(Ordering::Acquire);
            if e != seen {
                seen = e;
                break;
            }
            spins += 1;
            if spins.is_multiple_of(1024) && t0.elapsed() > SPIN {
                let mut sleepers = s.sleepers.lock().unwrap_or_else(|e| e.into_inner());
                *sleepers += 1;
                while s.epoch.load(Ordering::Acquire) == seen && !s.shutdown.load(Ordering::Acquire) {
                    sleepers = s.wake.wait(sleepers).unwrap_or_else(|e| e.into_inner());
                }
                *sleepers -= 1;
            } else {
                std::hint::spin_loop();
            }
        }
        let job = *s.job.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(job) = job {
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(tid))).is_err() {
                s.panicked.store(true, Ordering::Relaxed);
            }
        }
        s.done.fetch_add(1, Ordering::Release);
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::Release);
        {
            let _g = self.shared.sleepers.lock().unwrap_or_else(|e| e.into_inner());
            self.shared.wake.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

/// A raw pointer that threads may share to write disjoint parts of one buffer.
#[derive(Clone, Copy)]
pub struct SyncPtr<T>(pub *mut T);
unsafe impl<T> Send for SyncPtr<T> {}
unsafe impl<T> Sync for SyncPtr<T> {}

impl<T> SyncPtr<T> {
    pub fn new(s: &mut [T]) -> Self {
        SyncPtr(s.as_mut_ptr())
    }

    /// # Safety
    /// `[start, start+len)` is in bounds and no other thread touches it meanwhile.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice(&self, start: usize, len: usize) -> &mut [T] {
        std::slice::from_raw_parts_mut(self.0.add(start), len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_chunk_runs_exactly_once() {
        let pool = Pool::new(3);
        for n in [0, 1, 7, 1000] {
            let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            pool.for_chunks(n, 13, |_, r| {
                for i in r {
                    hits[i].fetch_add(1, Ordering::Relaxed);
                }
            });
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1), "n={n}");
        }
    }

    #[test]
    fn run_reaches_every_thread_and_survives_idle() {
        let pool = Pool::new(2);
        for round in 0..3 {
            let seen = AtomicUsize::new(0);
            pool.run(|tid| {
                seen.fetch_or(1 << tid, Ordering::Relaxed);
            });
            assert_eq!(seen.load(Ordering::Relaxed), 0b11, "round {round}");
            std::thread::sleep(Duration::from_millis(2)); // let the worker park
        }
    }

    #[test]
    fn a_panicking_job_does_not_hang_the_pool() {
        let pool = Pool::new(2);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pool.run(|tid| {
                if tid == 1 {
                    panic!("boom");
                }
            })
        }));
        assert!(r.is_err());
        let ok = AtomicUsize::new(0);
        pool.run(|_| {
            ok.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(ok.load(Ordering::Relaxed), 2);
    }
}
