//! One streamed attempt. The difference from a plain one is the first byte:
//! until the provider's first chunk arrives the attempt may still fail over
//! like any other; once a chunk has gone to the client the answer is this
//! attempt's, and a later break ends the stream with an in-band error —
//! `unknown` if the upstream was cut — never with a fallback.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use intentgate_providers::{CallContext, ChatRequest, ChatResponse, Failure, Outcome, Provider};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::driver::Next;
use super::{Engine, EngineError, StreamEvent};
use crate::config::RouteConfig;
use crate::jobs::{Attempt, Job};
use crate::store::CasOutcome;

/// How a streamed call ended, and whether a chunk had been passed on.
struct Streamed {
    outcome: Outcome,
    after_first_chunk: bool,
}

impl Engine {
    pub(super) async fn run_stream_attempt(
        &self,
        job: &Job,
        route: &RouteConfig,
        attempt: Attempt,
        chat: ChatRequest,
        context: CallContext,
        retries: u32,
    ) -> Result<Next, EngineError> {
        let Some(entry) = self.provider(&attempt.provider) else {
            return Ok(Next::FailOver);
        };
        let (first_chunk, first_chunk_seen) = oneshot::channel();
        let call_started = std::time::Instant::now();
        let task = self.spawn_stream(entry.provider.clone(), chat, context, attempt.number, first_chunk);
        let attempt_timeout: Duration = route.attempt_timeout.into();
        let started = tokio::select! {
            seen = first_chunk_seen => seen.is_ok(),
            () = tokio::time::sleep(attempt_timeout) => {
                let reason = format!("no first chunk within the route's attempt_timeout of {}", route.attempt_timeout);
                self.declare_unknown(job, &attempt, &reason).await?;
                self.spawn_late_listener(attempt, Some(outcome_only(task)), true);
                return Ok(Next::Stop);
            }
        };
        let joined = task.await;
        self.record_call_time(&attempt, call_started.elapsed(), true);
        let streamed = match joined {
            Ok(streamed) => streamed,
            Err(join) => Streamed {
                outcome: Err(Failure::Unknown { reason: format!("the stream task failed: {join}") }),
                after_first_chunk: started,
            },
        };
        match streamed.outcome {
            Ok(response) => {
                if let Err(violations) = self.gate().check_output(&job.route, &response.text) {
                    let reason =
                        format!("the streamed answer breaks the route's contract: {}", violations.join("; "));
                    self.settle_failed(&attempt, super::driver::CONTRACT_VIOLATION, &reason).await?;
                    let error = serde_json::json!({"reason": reason, "attempt": attempt.number});
                    self.fail_job(job, &error.to_string()).await?;
                    return Ok(Next::Stop);
                }
                self.deliver_stream(&attempt, &response).await?;
                Ok(Next::Stop)
            }
            Err(failure) if !streamed.after_first_chunk => {
                if failure.may_fail_over() {
                    self.settle_failed(&attempt, failure.class().as_str(), &failure.to_string()).await?;
                    Ok(self.after_failure(route, &attempt, &failure, retries))
                } else {
                    self.declare_unknown(job, &attempt, &failure.to_string()).await?;
                    self.spawn_late_listener(attempt, None, true);
                    Ok(Next::Stop)
                }
            }
            Err(failure) => {
                let reason = format!("the stream broke after its first chunk reached the client: {failure}");
                if failure.may_fail_over() {
                    self.settle_failed(&attempt, failure.class().as_str(), &reason).await?;
                    let error = serde_json::json!({"reason": reason, "attempt": attempt.number});
                    self.fail_job(job, &error.to_string()).await?;
                } else {
                    self.declare_unknown(job, &attempt, &reason).await?;
                }
                Ok(Next::Stop)
            }
        }
    }

    /// Reads the provider's stream, passing every chunk to the job's readers
    /// as it arrives, and assembles the whole answer. `raw` of the result is
    /// the JSON list of chunks, which a replay sends again byte for byte.
    fn spawn_stream(
        &self,
        provider: Arc<Provider>,
        chat: ChatRequest,
        context: CallContext,
        number: i32,
        first_chunk: oneshot::Sender<()>,
    ) -> JoinHandle<Streamed> {
        let engine = self.clone();
        tokio::spawn(async move {
            let job_id = context.job_id;
            let mut stream = match provider.chat_stream(&chat, &context).await {
                Ok(stream) => stream,
                Err(failure) => return Streamed { outcome: Err(failure), after_first_chunk: false },
            };
            let mut first_chunk = Some(first_chunk);
            let mut response = ChatResponse {
                text: String::new(),
                json: None,
                usage: None,
                finish_reason: None,
                raw: Default::default(),
                model: None,
            };
            let mut deltas: Vec<String> = Vec::new();
            while let Some(item) = stream.next().await {
                let chunk = match item {
                    Ok(chunk) => chunk,
                    Err(failure) => {
                        return Streamed { outcome: Err(failure), after_first_chunk: first_chunk.is_none() };
                    }
                };
                if let Some(signal) = first_chunk.take() {
                    let _ = signal.send(());
                }
                if !chunk.delta.is_empty() {
                    engine
                        .streams()
                        .publish(job_id, StreamEvent::Chunk { attempt: number, delta: chunk.delta.clone() });
                    response.text.push_str(&chunk.delta);
                    deltas.push(chunk.delta);
                }
                response.finish_reason = chunk.finish_reason.or(response.finish_reason);
                response.usage = chunk.usage.or(response.usage);
            }
            if let Some(signal) = first_chunk.take() {
                let _ = signal.send(());
            }
            response.raw = serde_json::to_vec(&deltas).unwrap_or_default().into();
            Streamed { outcome: Ok(response), after_first_chunk: true }
        })
    }

    pub(super) async fn deliver_stream(
        &self,
        attempt: &Attempt,
        response: &ChatResponse,
    ) -> Result<(), EngineError> {
        let outcome = self.deliver(attempt, response, true).await?;
        let event = match outcome {
            CasOutcome::Won(_) => {
                StreamEvent::Done { attempt: attempt.number, finish_reason: response.finish_reason.clone() }
            }
            _ => StreamEvent::Failed {
                attempt: attempt.number,
                code: "superseded",
                message: "another attempt completed this job first; this stream is not its result".into(),
            },
        };
        self.streams().publish(attempt.job_id, event);
        Ok(())
    }
}

fn outcome_only(task: JoinHandle<Streamed>) -> JoinHandle<Outcome> {
    tokio::spawn(async move {
        match task.await {
            Ok(streamed) => streamed.outcome,
            Err(join) => Err(Failure::Unknown { reason: format!("the stream task failed: {join}") }),
        }
    })
}
