//! `/metrics`: the scheduler's counters and gauges, HTTP responses by status, and latency
//! histograms (queue wait, time to first token, inter-token latency, request duration), in
//! Prometheus' text format through the `metrics` facade and its Prometheus recorder.
//!
//! The scheduler keeps its own atomics (`sched::Stats`, also useful to a library user); they
//! are copied into the recorder when the page is rendered. Latencies are observed on the
//! scheduler thread as each request's events pass through its sink ([`Clock`]): the times are
//! when the engine produced the token, not when the client read it.

use std::sync::atomic::Ordering;
use std::time::Instant;

use anyhow::{Context as _, Result};
use axum::extract::Request as HttpRequest;
use axum::middleware::Next;
use axum::response::Response;
use metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram, Unit};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use minfer::engine::StopReason;
use minfer::sched::{Event, Stats};

/// Bucket bounds for every `*_seconds` histogram: from a fast decode step to a long prefill.
const LATENCY_BUCKETS: [f64; 16] = [
    0.002, 0.005, 0.01, 0.02, 0.035, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

pub(crate) struct Telemetry {
    handle: PrometheusHandle,
}

impl Telemetry {
    /// Installs the process-wide recorder (one server per process).
    pub(crate) fn install() -> Result<Telemetry> {
        let handle = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &LATENCY_BUCKETS)
            .context("metrics buckets")?
            .install_recorder()
            .context("installing the metrics recorder")?;
        describe();
        Ok(Telemetry { handle })
    }

    /// The page: the scheduler's atomics copied in first.
    pub(crate) fn render(&self, in_flight: usize, stats: Option<&Stats>) -> String {
        gauge!("minfer_requests_in_flight").set(in_flight as f64);
        if let Some(st) = stats {
            let g = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
            counter!("minfer_requests_total").absolute(g(&st.requests));
            counter!("minfer_requests_cancelled_total").absolute(g(&st.cancelled));
            counter!("minfer_prompt_tokens_total").absolute(g(&st.prompt_tokens));
            counter!("minfer_prompt_tokens_cached_total").absolute(g(&st.cached_tokens));
            counter!("minfer_generated_tokens_total").absolute(g(&st.generated_tokens));
            counter!("minfer_draft_tokens_total").absolute(g(&st.draft_tokens));
            counter!("minfer_draft_tokens_accepted_total").absolute(g(&st.draft_accepted));
            counter!("minfer_steps_total").absolute(g(&st.steps));
            gauge!("minfer_sequences_running").set(g(&st.running) as f64);
            gauge!("minfer_requests_waiting").set(g(&st.waiting) as f64);
            gauge!("minfer_kv_cells_used").set(g(&st.kv_cells_used) as f64);
            gauge!("minfer_kv_cells_max").set(g(&st.kv_cells_max) as f64);
            gauge!("minfer_sequences_kept").set(g(&st.kept) as f64);
            gauge!("minfer_kept_tokens").set(g(&st.kept_tokens) as f64);
        }
        self.handle.render()
    }
}

fn describe() {
    describe_gauge!("minfer_requests_in_flight", "Requests running or queued.");
    describe_counter!("minfer_requests_total", "Requests submitted to the scheduler.");
    describe_counter!("minfer_requests_cancelled_total", "Requests cancelled while running.");
    describe_counter!("minfer_requests_finished_total", "Requests finished, by reason.");
    describe_counter!("minfer_prompt_tokens_total", "Prompt tokens evaluated.");
    describe_counter!(
        "minfer_prompt_tokens_cached_total",
        "Prompt tokens reused from cached cells."
    );
    describe_counter!("minfer_generated_tokens_total", "Tokens generated.");
    describe_counter!("minfer_draft_tokens_total", "Speculative tokens drafted.");
    describe_counter!(
        "minfer_draft_tokens_accepted_total",
        "Speculative drafted tokens accepted."
    );
    describe_counter!("minfer_steps_total", "Scheduler steps.");
    describe_gauge!("minfer_sequences_running", "Sequences decoding.");
    describe_gauge!("minfer_requests_waiting", "Requests waiting for a sequence.");
    describe_gauge!("minfer_kv_cells_used", "KV cells held by sequences (running and kept).");
    describe_gauge!("minfer_kv_cells_max", "KV cells the pool may hold.");
    describe_gauge!("minfer_sequences_kept", "Finished sequences kept for prefix reuse.");
    describe_gauge!(
        "minfer_kept_tokens",
        "Tokens of the kept sequences (cells they may hold)."
    );
    describe_counter!("minfer_http_responses_total", "HTTP responses, by status code.");
    describe_histogram!(
        "minfer_queue_wait_seconds",
        Unit::Seconds,
        "From submission to the request's first step."
    );
    describe_histogram!(
        "minfer_time_to_first_token_seconds",
        Unit::Seconds,
        "From submission to the first generated token."
    );
    describe_histogram!(
        "minfer_inter_token_latency_seconds",
        Unit::Seconds,
        "Between consecutive generated tokens of one request."
    );
    describe_histogram!(
        "minfer_request_duration_seconds",
        Unit::Seconds,
        "From submission to the request's end."
    );
}

/// One request's latencies, fed each of its events on the scheduler thread.
pub(crate) struct Clock {
    submitted: Instant,
    last_token: Option<Instant>,
}

impl Clock {
    pub(crate) fn start() -> Clock {
        Clock {
            submitted: Instant::now(),
            last_token: None,
        }
    }

    pub(crate) fn observe(&mut self, e: &Event) {
        let now = Instant::now();
        match e {
            Event::Started { .. } => {
                histogram!("minfer_queue_wait_seconds").record(now - self.submitted);
            }
            Event::Token { .. } => {
                match self.last_token {
                    None => histogram!("minfer_time_to_first_token_seconds").record(now - self.submitted),
                    Some(t) => histogram!("minfer_inter_token_latency_seconds").record(now - t),
                }
                self.last_token = Some(now);
            }
            Event::Done(f) => {
                histogram!("minfer_request_duration_seconds").record(now - self.submitted);
                counter!("minfer_requests_finished_total", "reason" => reason(f.reason)).increment(1);
            }
            Event::Error(_) => {
                counter!("minfer_requests_finished_total", "reason" => "error").increment(1);
            }
        }
    }
}

fn reason(r: StopReason) -> &'static str {
    match r {
        StopReason::EndOfText | StopReason::StopString => "stop",
        StopReason::MaxTokens => "length",
        StopReason::ContextFull => "context_full",
        StopReason::Callback => "cancelled",
    }
}

/// Middleware: every response counted by its status.
/// A request's tokens, where its handler knows them when it answers (a whole answer; a stream's
/// are in its last chunk): what the access log prints.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Tokens {
    pub(crate) prompt: usize,
    pub(crate) completion: usize,
}

/// One line on stderr per request (unless `--log-disable`): method, path, status, prompt +
/// completion tokens where the answer carries them, and the time to the response's head (a
/// stream's first byte).
pub(crate) async fn access_log(
    axum::extract::State(app): axum::extract::State<std::sync::Arc<super::App>>,
    req: HttpRequest,
    next: Next,
) -> Response {
    if !app.access_log {
        return next.run(req).await;
    }
    let (method, path) = (req.method().clone(), req.uri().path().to_string());
    let t0 = Instant::now();
    let r = next.run(req).await;
    let tokens = r
        .extensions()
        .get::<Tokens>()
        .map_or("-".to_string(), |t| format!("{}+{}", t.prompt, t.completion));
    eprintln!(
        "{method} {path} {} tokens {tokens} {:.1} ms",
        r.status().as_u16(),
        t0.elapsed().as_secs_f64() * 1e3
    );
    r
}

pub(crate) async fn count_responses(req: HttpRequest, next: Next) -> Response {
    let r = next.run(req).await;
    counter!("minfer_http_responses_total", "status" => r.status().as_u16().to_string()).increment(1);
    r
}
