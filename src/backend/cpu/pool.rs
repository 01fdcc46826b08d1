//! A persistent thread pool for the CPU backend. A forward runs a few hundred parallel
//! regions; spawning threads per region, or parking them between regions, would cost more than
//! the work itself. Workers spin briefly after each region, then yield, then park.
//!
//! Completion is tracked per chunk of work, not per worker: the caller takes chunks too and
//! returns as soon as every chunk is done, so a worker the OS has descheduled (a loaded machine)
//! delays nothing — it finds no work left when it wakes.

use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long an idle worker spins (then yields) before parking. A decode step's regions are
/// microseconds apart; between steps (sampling, printing) the gap is well under this.
const SPIN: Duration = Duration::from_micros(300);
const PARK_AFTER: Duration = Duration::from_millis(2);

/// One parallel region: chunks handed out by `next`, counted by `done`.
struct Region<'a> {
    f: &'a (dyn Fn(usize, std::ops::Range<usize>) + Sync),
    n: usize,
    chunk: usize,
    n_chunks: usize,
    next: AtomicUsize,
    done: AtomicUsize,
    panicked: AtomicUsize,
}

impl Region<'_> {
    /// Takes and runs chunks until none are left.
    fn work(&self, tid: usize) {
        loop {
            let c = self.next.fetch_add(1, SeqCst);
            if c >= self.n_chunks {
                return;
            }
            let start = c * self.chunk;
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                (self.f)(tid, start..(start + self.chunk).min(self.n))
            }));
            if r.is_err() {
                self.panicked.fetch_add(1, SeqCst);
            }
            self.done.fetch_add(1, SeqCst);
        }
    }
}

struct Shared {
    /// The current region (lifetime erased), or null. Valid while `active` says a worker may
    /// be reading it; the caller nulls it and waits for `active == 0` before returning.
    region: AtomicPtr<Region<'static>>,
    active: AtomicUsize,
    epoch: AtomicU64,
    shutdown: AtomicUsize,
    sleepers: Mutex<usize>,
    wake: Condvar,
}

pub struct Pool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    n_threads: usize,
    /// Regions are not re-entrant; this serialises callers from several contexts.
    busy: Mutex<()>,
}

impl Pool {
    /// `n_threads` counts the calling thread: `Pool::new(2)` spawns one worker.
    pub fn new(n_threads: usize) -> Pool {
        let n_threads = n_threads.max(1);
        let shared = Arc::new(Shared {
            region: AtomicPtr::new(std::ptr::null_mut()),
            active: AtomicUsize::new(0),
            epoch: AtomicU64::new(0),
            shutdown: AtomicUsize::new(0),
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

    /// Splits `0..n` into chunks of `chunk` and hands them out dynamically:
    /// `f(thread, start..end)` is called once per chunk; returns when all are done.
    pub fn for_chunks<F: Fn(usize, std::ops::Range<usize>) + Sync>(&self, n: usize, chunk: usize, f: F) {
        let chunk = chunk.max(1);
        let n_chunks = n.div_ceil(chunk);
        if n_chunks <= 1 || self.n_threads == 1 {
            if n > 0 {
                f(0, 0..n);
            }
            return;
        }
        let _guard = self.busy.lock().unwrap_or_else(|e| e.into_inner());
        let region = Region {
            f: &f,
            n,
            chunk,
            n_chunks,
            next: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            panicked: AtomicUsize::new(0),
        };
        let s = &self.shared;
        // SAFETY: `region` outlives every access: see `Shared::region`.
        let ptr = &region as *const Region as *mut Region<'static>;
        s.region.store(ptr, SeqCst);
        s.epoch.fetch_add(1, SeqCst);
        if *s.sleepers.lock().unwrap_or_else(|e| e.into_inner()) > 0 {
            s.wake.notify_all();
        }
        region.work(0);
        let t0 = Instant::now();
        let mut spins = 0u32;
        while region.done.load(SeqCst) < n_chunks {
            spins += 1;
            if spins.is_multiple_of(64) && t0.elapsed() > SPIN {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        s.region.store(std::ptr::null_mut(), SeqCst);
        while s.active.load(SeqCst) != 0 {
            std::hint::spin_loop();
        }
        if region.panicked.load(SeqCst) > 0 {
            panic!("a CPU kernel panicked");
        }
    }
}

fn worker(s: Arc<Shared>, tid: usize) {
    let mut seen = 0u64;
    loop {
        let t0 = Instant::now();
        let mut spins = 0u32;
        loop {
            if s.shutdown.load(SeqCst) != 0 {
                return;
            }
            let e = s.epoch.load(SeqCst);
            if e != seen {
                seen = e;
                break;
            }
            spins += 1;
            if !spins.is_multiple_of(64) {
                std::hint::spin_loop();
                continue;
            }
            let idle = t0.elapsed();
            if idle < SPIN {
                std::hint::spin_loop();
            } else if idle < PARK_AFTER {
                std::thread::yield_now();
            } else {
                let mut sleepers = s.sleepers.lock().unwrap_or_else(|e| e.into_inner());
                *sleepers += 1;
                while s.epoch.load(SeqCst) == seen && s.shutdown.load(SeqCst) == 0 {
                    sleepers = s.wake.wait(sleepers).unwrap_or_else(|e| e.into_inner());
                }
                *sleepers -= 1;
            }
        }
        s.active.fetch_add(1, SeqCst);
        let p = s.region.load(SeqCst);
        if !p.is_null() {
            // SAFETY: non-null after our `active` increment means the caller is still waiting.
            unsafe { (*p).work(tid) };
        }
        s.active.fetch_sub(1, SeqCst);
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.shutdown.store(1, SeqCst);
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
                    hits[i].fetch_add(1, SeqCst);
                }
            });
            assert!(hits.iter().all(|h| h.load(SeqCst) == 1), "n={n}");
        }
    }

    #[test]
    fn workers_take_chunks_and_survive_parking() {
        let pool = Pool::new(2);
        let mut helped = false;
        for _ in 0..200 {
            let by_worker = AtomicUsize::new(0);
            pool.for_chunks(64, 1, |tid, _| {
                std::thread::sleep(Duration::from_micros(50));
                if tid == 1 {
                    by_worker.fetch_add(1, SeqCst);
                }
            });
            helped |= by_worker.load(SeqCst) > 0;
            if helped {
                break;
            }
        }
        assert!(helped, "the worker never took a chunk");
        std::thread::sleep(Duration::from_millis(5)); // let the worker park
        let n = AtomicUsize::new(0);
        pool.for_chunks(10, 1, |_, _| {
            n.fetch_add(1, SeqCst);
        });
        assert_eq!(n.load(SeqCst), 10);
    }

    #[test]
    fn a_panicking_chunk_does_not_hang_the_pool() {
        let pool = Pool::new(2);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pool.for_chunks(8, 1, |_, r| {
                if r.start == 5 {
                    panic!("boom");
                }
            })
        }));
        assert!(r.is_err());
        let ok = AtomicUsize::new(0);
        pool.for_chunks(4, 1, |_, _| {
            ok.fetch_add(1, SeqCst);
        });
        assert_eq!(ok.load(SeqCst), 4);
    }
}
