//! One streamed attempt. The difference from a plain one is the first byte:
//! until the provider's first chunk arrives the attempt may still fail over
//! like any other (phase `Live`); once a chunk has gone to the client the
//! answer is this attempt's (phase `Streamed`), and a later break ends the
//! stream with an in-band error — `unknown` if the upstream was cut — never
//! with a fallback, unless the route lets another provider continue it
//! (phase `Continuable`, see `continuation.rs`). What each outcome means is
//! decided in `decide.rs`.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use intentgate_providers::{CallContext, ChatRequest, Failure, Outcome, Provider, Rendered, StreamChunk};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::conclude::{LateCall, Next, Offered, Seen};
use super::continuation::Continuation;
use super::decide::Phase;
use super::gathered::Gathered;
use super::stream_claim::Claimant;
use super::{Engine, EngineError, StreamEvent};
use crate::config::RouteConfig;
use crate::jobs::Attempt;

/// How a streamed call ended, and whether a chunk had been passed on.
pub(super) struct Streamed {
    pub outcome: Outcome,
    pub after_first_chunk: bool,
    /// On a failure: what the client had received (to be continued).
    pub sent: Option<Box<Gathered>>,
}

impl Streamed {
    fn failed(failure: Failure, after_first_chunk: bool, sent: Gathered) -> Streamed {
        Streamed { outcome: Err(failure), after_first_chunk, sent: Some(Box::new(sent)) }
    }
}

/// A streamed call under way: its task, and the signal of its first chunk
/// passed on (or of its end, whichever comes first).
pub(super) struct StreamCall {
    pub task: JoinHandle<Option<Streamed>>,
    pub first_chunk: oneshot::Receiver<()>,
    pub started: std::time::Instant,
}

/// What a stream's chunks join.
pub(super) enum Joins {
    /// The client's stream, alone.
    Alone,
    /// A hedged race for the client's stream: its first chunk goes out only
    /// if it claims the stream; else it is read to its end unseen, its
    /// answer to be `superseded`.
    Race(Claimant),
    /// What the client received of a cut stream (see `continuation.rs`).
    Cut(Continuation),
}

impl Engine {
    /// `continuation`: the attempt continues a cut stream.
    pub(super) async fn run_stream_attempt(
        &self,
        route: &RouteConfig,
        attempt: Attempt,
        (provider, sending): (Arc<Provider>, (ChatRequest, Result<Rendered, Failure>)),
        context: CallContext,
        (live, continuation): (Phase, Option<Continuation>),
    ) -> Result<Next, EngineError> {
        let offer = self.gate().offer(&route.name, &sending.0);
        // Continuing, the phase is never live: the client has part of the answer.
        let (live, sent) = match &continuation {
            Some(continuation) => (Phase::Streamed, Some(Box::new(continuation.earlier().clone()))),
            None => (live, None),
        };
        let joins = continuation.map_or(Joins::Alone, Joins::Cut);
        let StreamCall { task, first_chunk, started } = self.spawn_stream(provider, sending, context, joins);
        let attempt_timeout: Duration = route.attempt_timeout.into();
        tokio::select! {
            _ = first_chunk => {}
            () = tokio::time::sleep(attempt_timeout) => {
                let reason = format!("no first chunk within the route's attempt_timeout of {}", route.attempt_timeout);
                let seen = match sent {
                    // Its chunks may not follow another's: it is closed.
                    Some(sent) => {
                        task.abort();
                        Seen::Cut { failure: Failure::Unknown { reason }, sent }
                    }
                    None => Seen::Silence { reason, call: Some(LateCall { call: self.outcome_only(task), streamed: true, offer }) },
                };
                let phase = if matches!(seen, Seen::Cut { .. }) { Phase::Continuable } else { live };
                return self.conclude(&attempt, &route.name, phase, seen).await;
            }
        };
        self.finish_stream(route, attempt, (task, started), offer, live).await
    }

    /// The rest of a stream whose first chunk went out (or which ended
    /// before one did): its outcome, concluded in phase `Streamed` once a
    /// chunk had reached the client, else in `live` — `Continuable` for a
    /// failure the route lets another provider continue.
    pub(super) async fn finish_stream(
        &self,
        route: &RouteConfig,
        attempt: Attempt,
        (task, call_started): (JoinHandle<Option<Streamed>>, std::time::Instant),
        offer: Offered,
        live: Phase,
    ) -> Result<Next, EngineError> {
        let joined = task.await;
        self.record_call_time(&attempt, call_started.elapsed(), true);
        let streamed = match joined {
            Ok(Some(streamed)) => streamed,
            Ok(None) => Streamed {
                outcome: Err(Failure::Unknown { reason: "the gateway is shutting down".into() }),
                after_first_chunk: true,
                sent: None,
            },
            Err(join) => Streamed {
                outcome: Err(Failure::Unknown { reason: format!("the stream task failed: {join}") }),
                after_first_chunk: true,
                sent: None,
            },
        };
        let phase = if streamed.after_first_chunk { Phase::Streamed } else { live };
        let (phase, seen) = match (streamed.outcome, streamed.sent) {
            (Ok(response), _) => {
                (phase, Seen::Answer { response: Box::new(response), streamed: true, offer })
            }
            (Err(failure), Some(sent)) if phase == Phase::Streamed && route.continue_cut_streams => {
                match sent.uncontinuable() {
                    None => (Phase::Continuable, Seen::Cut { failure, sent }),
                    Some(why) => {
                        tracing::info!(job_id = %attempt.job_id, attempt = attempt.number, why, "a cut stream is not continued");
                        (phase, Seen::Failure(failure))
                    }
                }
            }
            (Err(failure), _) => (phase, Seen::Failure(failure)),
        };
        self.conclude(&attempt, &route.name, phase, seen).await
    }

    /// Sends `chat`'s rendered body and reads the provider's stream, passing
    /// every chunk to the job's readers as it arrives (as `joins` says), and
    /// assembles the whole answer. `raw` of the result is the JSON list of
    /// the chunks, which a replay sends again.
    pub(super) fn spawn_stream(
        &self,
        provider: Arc<Provider>,
        (chat, body): (ChatRequest, Result<Rendered, Failure>),
        context: CallContext,
        mut joins: Joins,
    ) -> StreamCall {
        let (first_chunk, first_chunk_seen) = oneshot::channel();
        let started = std::time::Instant::now();
        let gathered = match &mut joins {
            Joins::Cut(continuation) => continuation.take_earlier(),
            Joins::Alone | Joins::Race(_) => Gathered::default(),
        };
        let reader = Reader {
            engine: self.clone(),
            job_id: context.job_id,
            number: i32::try_from(context.attempt).unwrap_or(i32::MAX),
            provider: Arc::clone(&provider),
            started,
            joins,
            first_chunk: Some(first_chunk),
            unseen: false,
            gathered,
        };
        let task = self.tasks().spawn_watch(async move {
            let stream = match body {
                Ok(body) => provider.call_stream(&chat, &body, &context).await,
                Err(failure) => Err(failure),
            };
            match stream {
                Ok(stream) => reader.read(stream, &chat).await,
                Err(failure) => Streamed::failed(failure, false, reader.gathered),
            }
        });
        StreamCall { task, first_chunk: first_chunk_seen, started }
    }

    /// The stream task, seen by a late listener only for its outcome.
    pub(super) fn outcome_only(&self, task: JoinHandle<Option<Streamed>>) -> JoinHandle<Option<Outcome>> {
        self.tasks().spawn_watch(async move {
            match task.await {
                Ok(Some(streamed)) => streamed.outcome,
                Ok(None) => Err(Failure::Unknown { reason: "the gateway is shutting down".into() }),
                Err(join) => Err(Failure::Unknown { reason: format!("the stream task failed: {join}") }),
            }
        })
    }
}

/// One stream being read: where its chunks go and what it gathered.
struct Reader {
    engine: Engine,
    job_id: uuid::Uuid,
    number: i32,
    provider: Arc<Provider>,
    started: std::time::Instant,
    joins: Joins,
    first_chunk: Option<oneshot::Sender<()>>,
    /// A hedged attempt that did not claim the job's stream.
    unseen: bool,
    gathered: Gathered,
}

impl Reader {
    async fn read(mut self, mut stream: intentgate_providers::ChunkStream, chat: &ChatRequest) -> Streamed {
        while let Some(item) = stream.next().await {
            let passed = match item {
                Ok(chunk) => self.pass(chunk).await,
                Err(failure) => Err(failure),
            };
            if let Err(failure) = passed {
                return Streamed::failed(failure, self.first_chunk.is_none(), self.gathered);
            }
        }
        let after_first_chunk = self.first_chunk.is_none();
        if let Some(signal) = self.first_chunk.take() {
            let _ = signal.send(());
        }
        // The room the stream took is the answer's now, until it is stored
        // and rendered (see `AnswerBudget`).
        let response = self.gathered.into_response(&self.provider, chat, stream.take_room());
        Streamed { outcome: Ok(response), after_first_chunk, sent: None }
    }

    /// Gathers `chunk` and passes it to the job's readers, unless it is
    /// unseen or says nothing a client would see.
    async fn pass(&mut self, chunk: StreamChunk) -> Result<(), Failure> {
        let chunk = match &mut self.joins {
            Joins::Cut(continuation) => match continuation.join(chunk)? {
                Some(chunk) => chunk,
                None => return Ok(()),
            },
            Joins::Alone | Joins::Race(_) => chunk,
        };
        let Some(delivered) = self.gathered.take(self.provider.name(), chunk) else { return Ok(()) };
        if self.first_chunk.is_some()
            && !self.unseen
            && let Joins::Race(claimant) = &self.joins
        {
            self.unseen = !claimant.claim(&self.engine).await;
        }
        if self.unseen {
            return Ok(());
        }
        if let Some(signal) = self.first_chunk.take() {
            metrics::histogram!(crate::telemetry::TIME_TO_FIRST_TOKEN, "provider" => self.provider.name().to_owned())
                .record(self.started.elapsed().as_secs_f64());
            let _ = signal.send(());
        }
        self.engine
            .streams()
            .publish(self.job_id, StreamEvent::Chunk { attempt: self.number, chunk: delivered });
        Ok(())
    }
}
