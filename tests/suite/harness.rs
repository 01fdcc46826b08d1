//! The suite's runner: libtest-mimic (`harness = false`), so that a test which cannot run here
//! (no reference tree, no real model, no adapter) is counted as *ignored* with its reason
//! instead of as passed. libtest-mimic because its `Trial::ignorable_test` ignores at run time
//! with a reason and it takes libtest's command line (filter, `--skip`, `--exact`,
//! `--nocapture`, `--test-threads`, `--list`, `--ignored`, `--include-ignored`) and prints its
//! `test result: …` line; libtest2-mimic (0.0.4) refuses `--nocapture` and cannot run only the
//! ignored tests. Like every custom harness it does not capture output: what a test prints
//! shows as it runs, as under libtest's `--nocapture`.
//!
//! A test is a plain `fn()` (or `fn() -> Result<(), E: Debug>`), listed once in its module's
//! `tests![…]`; a listed name is `module::path::fn_name`, as libtest names it. The suite denies
//! dead code, so a test fn left out of its list fails to compile.

use std::cell::{Cell, RefCell};
use std::fmt::Debug;
use std::panic::{catch_unwind, AssertUnwindSafe};

use libtest_mimic::{Arguments, Completion, Failed, Trial};

/// `tests![a, #[cfg(unix)] b, #[ignore = "why"] c, #[should_panic = "text"] d]` defines
/// `pub fn tests() -> Vec<Test>` for the module it is written in. The attributes, each optional,
/// come in that order: `cfg` drops the entry where the fn does not exist, `ignore` skips it
/// unless `--ignored`/`--include-ignored` (the reason is printed), `should_panic` passes only on
/// a panic whose message contains the text.
macro_rules! tests {
    ($(
        $(#[cfg($cfg:meta)])?
        $(#[ignore = $why:literal])?
        $(#[should_panic = $expected:literal])?
        $f:ident
    ),* $(,)?) => {
        /// This module's tests (see `harness`).
        // One push per entry, so that an entry's `cfg` can drop it.
        #[allow(unused_mut, clippy::vec_init_then_push)]
        pub fn tests() -> Vec<$crate::harness::Test> {
            let mut v = Vec::new();
            $(
                $(#[cfg($cfg)])?
                v.push(
                    $crate::harness::Test::new(module_path!(), stringify!($f), $f)
                        $(.ignored($why))?
                        $(.should_panic($expected))?,
                );
            )*
            v
        }
    };
}

// The runner's own rules, checked like any other test.
tests![
    a_skip_is_an_ignore_with_its_reason,
    a_failure_is_a_failure_even_after_a_skip,
    should_panic_needs_a_panic_with_its_text,
    #[should_panic = "the expected text"]
    a_should_panic_entry_passes_on_its_panic,
];

/// What a test fn returns: `()`, or a `Result` whose `Err` fails the test (as libtest has it).
pub trait Outcome {
    fn into_result(self) -> Result<(), String>;
}

impl Outcome for () {
    fn into_result(self) -> Result<(), String> {
        Ok(())
    }
}

impl<E: Debug> Outcome for Result<(), E> {
    fn into_result(self) -> Result<(), String> {
        self.map_err(|e| format!("Error: {e:?}"))
    }
}

type Body = Box<dyn FnOnce() -> Result<(), String> + Send>;

/// One registered test.
pub struct Test {
    name: String,
    body: Body,
    ignore: Option<&'static str>,
    should_panic: Option<&'static str>,
}

impl Test {
    /// `module` is the caller's `module_path!()` (`suite::gpu::models`); the crate's own name
    /// is dropped, as libtest drops it.
    pub fn new<R: Outcome + 'static>(module: &str, name: &str, f: fn() -> R) -> Test {
        let module = module.split_once("::").map_or("", |(_, m)| m);
        let name = if module.is_empty() {
            name.to_string()
        } else {
            format!("{module}::{name}")
        };
        Test {
            name,
            body: Box::new(move || f().into_result()),
            ignore: None,
            should_panic: None,
        }
    }

    /// A test this build cannot hold at all (its code is compiled out): always ignored.
    #[cfg_attr(feature = "wgpu", allow(dead_code))]
    pub fn unavailable(name: &str, why: &'static str) -> Test {
        Test {
            name: name.to_string(),
            body: Box::new(|| Ok(())),
            ignore: None,
            should_panic: None,
        }
        .ignored(why)
    }

    pub fn ignored(mut self, why: &'static str) -> Test {
        self.ignore = Some(why);
        self
    }

    pub fn should_panic(mut self, expected: &'static str) -> Test {
        self.should_panic = Some(expected);
        self
    }

    /// The libtest-mimic trial. A test ignored by its list entry is flagged when the command
    /// line asks for ignored tests (so `--ignored` selects it); otherwise it is ignored at run
    /// time, which prints the reason.
    fn trial(self, run_ignored: bool) -> Trial {
        let Test {
            name,
            body,
            ignore,
            should_panic,
        } = self;
        match ignore {
            Some(why) if !run_ignored => Trial::ignorable_test(name, move || Ok(Completion::ignored_with(why))),
            _ => Trial::ignorable_test(name, move || run(body, should_panic)).with_ignored_flag(ignore.is_some()),
        }
    }
}

/// Runs one body: a failure (panic, `Err`, a missing expected panic) fails the test; a body
/// that returned after `note_skip` is ignored with the reasons it gave.
fn run(body: Body, should_panic: Option<&'static str>) -> Result<Completion, Failed> {
    take_skips();
    let result = match should_panic {
        None => body(),
        Some(expected) => match expecting_a_panic(body) {
            Ok(_) => Err("test did not panic as expected".to_string()),
            Err(payload) => {
                let msg = payload
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| payload.downcast_ref::<&str>().copied())
                    .unwrap_or("");
                if msg.contains(expected) {
                    Ok(())
                } else {
                    Err(format!(
                        "panic did not contain expected string\n      panic message: {msg:?}\n expected substring: {expected:?}"
                    ))
                }
            }
        },
    };
    // Taken on every exit, so that nothing is left for the next test on this thread.
    let skips = take_skips();
    result.map_err(Failed::from)?;
    Ok(if skips.is_empty() {
        Completion::Completed
    } else {
        Completion::ignored_with(skips.join("; "))
    })
}

thread_local! {
    /// Why the test running on this thread could not (fully) run; a trial runs on one thread.
    static SKIPS: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
    /// A `should_panic` body is running on this thread: its panic is not reported by the hook.
    static EXPECTING_PANIC: Cell<bool> = const { Cell::new(false) };
}

/// Runs `body`, catching its panic without the panic hook printing it (libtest captures that
/// output; this runner captures none).
fn expecting_a_panic(body: Body) -> std::thread::Result<Result<(), String>> {
    EXPECTING_PANIC.with(|e| e.set(true));
    let r = catch_unwind(AssertUnwindSafe(body));
    EXPECTING_PANIC.with(|e| e.set(false));
    r
}

/// Records that the current test cannot run here (called by `common::skip`): once it returns,
/// it is counted as ignored with `why`.
pub fn note_skip(why: &str) {
    SKIPS.with(|s| {
        let mut s = s.borrow_mut();
        if !s.iter().any(|w| w == why) {
            s.push(why.to_string());
        }
    });
}

fn take_skips() -> Vec<String> {
    SKIPS.with(|s| std::mem::take(&mut *s.borrow_mut()))
}

/// Parses libtest's command line, runs `tests` (sorted by name, as libtest runs them) and exits
/// with libtest's status: 0, or 101 where a test failed.
///
/// The exit skips the process's exit handlers (`_exit`): once the results are out nothing is
/// left to run, and the shared libraries' static destructors then race their own threads —
/// NVRTC's has been seen to fault there (a write to 0x108 inside libnvrtc.so.12, after every
/// test had passed), which would report a finished run as a crash.
pub fn main(mut tests: Vec<Test>) -> ! {
    tests.sort_by(|a, b| a.name.cmp(&b.name));
    if let Some(w) = tests.windows(2).find(|w| w[0].name == w[1].name) {
        panic!("{} is registered twice", w[0].name);
    }
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !EXPECTING_PANIC.with(Cell::get) {
            report(info)
        }
    }));
    let args = Arguments::from_args();
    let run_ignored = args.ignored || args.include_ignored;
    let trials = tests.into_iter().map(|t| t.trial(run_ignored)).collect();
    let code = if libtest_mimic::run(&args, trials).has_failed() {
        101
    } else {
        0
    };
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // SAFETY: ends the process at once; the output is flushed above and nothing else is pending.
    unsafe { libc::_exit(code) }
}

// ---- the runner's own tests -----------------------------------------------------------------

fn ignored_because(c: Result<Completion, Failed>) -> Option<String> {
    match c {
        Ok(Completion::Ignored { reason }) => reason,
        Ok(Completion::Completed) => None,
        Err(f) => panic!("failed: {f:?}"),
    }
}

/// A body that skipped is ignored, never passed, with each distinct reason once.
fn a_skip_is_an_ignore_with_its_reason() {
    let skipped = run(
        Box::new(|| {
            note_skip("no adapter");
            note_skip("m.gguf is missing");
            note_skip("no adapter");
            Ok(())
        }),
        None,
    );
    assert_eq!(
        ignored_because(skipped).as_deref(),
        Some("no adapter; m.gguf is missing")
    );
    assert!(matches!(run(Box::new(|| Ok(())), None), Ok(Completion::Completed)));
    // Nothing carries over to the next body on this thread.
    assert!(matches!(run(Box::new(|| Ok(())), None), Ok(Completion::Completed)));
}

fn a_failure_is_a_failure_even_after_a_skip() {
    let failed = run(
        Box::new(|| {
            note_skip("m.gguf is missing");
            Err("wrong logits".to_string())
        }),
        None,
    );
    assert!(failed.is_err(), "a failed test counted as passed or ignored");
    assert!(matches!(run(Box::new(|| Ok(())), None), Ok(Completion::Completed)));
    assert_eq!(Err::<(), _>("bad").into_result(), Err("Error: \"bad\"".to_string()));
}

fn should_panic_needs_a_panic_with_its_text() {
    let expect = Some("boom");
    assert!(matches!(
        run(Box::new(|| panic!("boom 42")), expect),
        Ok(Completion::Completed)
    ));
    assert!(run(Box::new(|| panic!("other")), expect).is_err());
    assert!(run(Box::new(|| Ok(())), expect).is_err());
}

fn a_should_panic_entry_passes_on_its_panic() {
    panic!("the expected text");
}
