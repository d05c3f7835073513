//! Hedged streams: a route's hedge applied to streamed requests, before
//! their first chunk (`hedge = { …, streams = true }`, off by default).
//!
//! A streamed request goes to one provider, and once a byte of its answer
//! reached the client the answer is that attempt's (`stream_attempt.rs`).
//! Before that byte, a stream is no different from a plain call: a provider
//! that resets, goes silent or is slow to its first token can be hedged.
//! So on a route that opts in, the attempts race as `hedge.rs` races plain
//! ones, and **the first to produce a chunk claims the client's stream**:
//! in the store, by moving the job's version on from the one every attempt
//! of the race read (`Store::claim_stream`), so the result's
//! compare-and-swap can only ever take the claimer's answer, whichever
//! attempt ends first, on whichever replica. The others are read to their
//! end unseen and `superseded`, charged and counted, like a plain hedge's
//! loser; after the claim everything is as without a hedge (phase
//! `Streamed`: a later break ends the stream, never a fallback).
//!
//! An attempt past its `attempt_timeout` with no chunk is withdrawn from
//! the race (it can no longer claim) and becomes `unknown`, its late answer
//! listened for, exactly as a plain hedged attempt's silence.

use std::sync::Arc;
use std::time::Duration;

use intentgate_providers::{ChatRequest, Failure, Provider, Rendered};
use tokio::time::Instant;
use tracing::Instrument;

use super::conclude::{LateCall, Next, Offered, Seen};
use super::decide::Phase;
use super::driver::{RunningCall, call_context};
use super::outgoing::Outgoing;
use super::stream_attempt::{Joins, StreamCall, Streamed};
use super::stream_claim::{Claimant, StreamClaim};
use super::{Engine, EngineError, PreparedRequest, Work};
use crate::config::{HedgeConfig, RouteConfig};
use crate::jobs::{Attempt, AttemptOutcome, AttemptState, Job};

/// A stream of the race, before any chunk of the race went out.
struct OpenStream {
    attempt: Attempt,
    call: StreamCall,
    sent_at: Instant,
    /// Its `attempt_timeout`: the time its first chunk has.
    deadline: Instant,
    offer: Offered,
    span: tracing::Span,
}

/// What happened next in a race of streams.
enum RaceEvent {
    /// `open[index]` passed its first chunk on, or ended without one.
    First(usize),
    TimedOut(usize),
    HedgeDue,
}

impl Engine {
    /// Runs `first` (its row `starting`, marked sent) and the hedges its
    /// route allows until one claims the client's stream, then that one to
    /// its end; the others trail (see the module doc).
    pub(super) async fn race_streams(
        &self,
        (job, route, request): (&Job, &RouteConfig, &PreparedRequest),
        first: (Attempt, Arc<Provider>, ChatRequest, Result<Rendered, Failure>),
        hedge: HedgeConfig,
        live: Phase,
    ) -> Result<Next, EngineError> {
        let claim = Arc::new(StreamClaim::default());
        let bound = usize::from(hedge.open_attempts);
        let (attempt, provider, chat, body) = first;
        let mut open =
            vec![self.open_stream(route, &claim, (attempt, provider, chat, body), tracing::Span::current())];
        let mut may_hedge = true;
        let mut left_unknown = false;
        loop {
            let newest = open.iter().map(|stream| stream.sent_at).max();
            let hedge_at = newest.filter(|_| may_hedge && open.len() < bound).map(|at| at + hedge.after.0);
            let (span, attempt, seen) = match next_event(&mut open, hedge_at).await {
                None => return Ok(Next::Stop),
                Some(RaceEvent::HedgeDue) => {
                    may_hedge = self.add_stream_hedge(job, route, request, &claim, &mut open).await;
                    continue;
                }
                Some(RaceEvent::First(index)) if claim.won_by() == Some(open[index].attempt.number) => {
                    return self.stream_won(route, job, open, index, live).await;
                }
                Some(RaceEvent::First(index)) => self.stream_ended(open.remove(index)).await,
                Some(RaceEvent::TimedOut(index)) => {
                    if !claim.withdraw(open[index].attempt.number) {
                        // It is claiming the stream now: its first chunk follows.
                        open[index].deadline += Duration::from(route.attempt_timeout);
                        continue;
                    }
                    self.stream_timed_out(route, open.remove(index))
                }
            };
            let proves_nothing = super::hedge::proves_nothing(&seen);
            if open.is_empty() && proves_nothing && may_hedge && bound > 1 {
                may_hedge = self.add_stream_hedge(job, route, request, &claim, &mut open).await;
            }
            if open.is_empty() {
                let last = self.conclude(&attempt, &route.name, live, seen).instrument(span).await?;
                return self.after_the_last(job, last, left_unknown).await;
            }
            left_unknown |= proves_nothing;
            self.conclude(&attempt, &route.name, Phase::Hedged, seen).instrument(span).await?;
        }
    }

    /// Starts `attempt`'s stream as a claimant of the race.
    fn open_stream(
        &self,
        route: &RouteConfig,
        claim: &Arc<StreamClaim>,
        (attempt, provider, chat, body): (Attempt, Arc<Provider>, ChatRequest, Result<Rendered, Failure>),
        span: tracing::Span,
    ) -> OpenStream {
        let offer = self.gate().offer(&route.name, &chat);
        let claimant = Claimant::new(Arc::clone(claim), attempt.clone());
        let context = call_context(&attempt);
        let call =
            span.in_scope(|| self.spawn_stream(provider, (chat, body), context, Joins::Race(claimant)));
        let sent_at = Instant::now();
        let deadline = sent_at + Duration::from(route.attempt_timeout);
        OpenStream { attempt, call, sent_at, deadline, offer, span }
    }

    /// Starts a hedged attempt's stream beside the open ones; false when
    /// none started (see [`Engine::start_hedge`]).
    async fn add_stream_hedge(
        &self,
        job: &Job,
        route: &RouteConfig,
        request: &PreparedRequest,
        claim: &Arc<StreamClaim>,
        open: &mut Vec<OpenStream>,
    ) -> bool {
        let busy: Vec<&str> = open.iter().map(|stream| stream.attempt.provider.as_str()).collect();
        let Some(hedge) = self.start_hedge(job, route, request, &busy).await else { return false };
        let Outgoing { work: Work::Chat(chat), body, .. } = hedge.outgoing else {
            let reason = "a streamed request's hedge has no chat to stream";
            let settled = self
                .settle_failed(&hedge.attempt, AttemptState::Starting, AttemptOutcome::NotSent, reason)
                .await;
            if let Err(err) = settled {
                tracing::warn!(job_id = %job.id, error = %err, "cannot settle an unsent hedge; the sweep will");
            }
            return false;
        };
        open.push(self.open_stream(route, claim, (hedge.attempt, hedge.provider, chat, body), hedge.span));
        true
    }

    /// `open[index]` claimed the client's stream: it goes on to its end as
    /// an unhedged stream does, with the version its claim moved the job
    /// to; the others trail, unseen.
    async fn stream_won(
        &self,
        route: &RouteConfig,
        job: &Job,
        mut open: Vec<OpenStream>,
        index: usize,
        live: Phase,
    ) -> Result<Next, EngineError> {
        let OpenStream { mut attempt, call, offer, span, .. } = open.remove(index);
        attempt.job_version += 1;
        let next =
            self.finish_stream(route, attempt, (call.task, call.started), offer, live).instrument(span).await;
        let trailing = open.into_iter().map(|stream| self.trailing(route, stream)).collect();
        self.trail(route, job.id, trailing);
        next
    }

    /// A stream of the race that ended before any chunk of it went out.
    async fn stream_ended(&self, stream: OpenStream) -> (tracing::Span, Attempt, Seen) {
        let joined = stream.call.task.await;
        self.record_call_time(&stream.attempt, stream.call.started.elapsed(), true);
        let seen = match joined {
            Ok(Some(Streamed { outcome: Ok(response), .. })) => {
                Seen::Answer { response: Box::new(response), streamed: true, offer: stream.offer }
            }
            Ok(Some(Streamed { outcome: Err(failure), .. })) => Seen::Failure(failure),
            Ok(None) => Seen::Failure(Failure::Unknown { reason: "the gateway is shutting down".into() }),
            Err(join) => {
                Seen::Failure(Failure::Unknown { reason: format!("the stream task failed: {join}") })
            }
        };
        (stream.span, stream.attempt, seen)
    }

    /// A stream of the race with no chunk within its `attempt_timeout`:
    /// withdrawn, and silent; its answer is listened for.
    fn stream_timed_out(&self, route: &RouteConfig, stream: OpenStream) -> (tracing::Span, Attempt, Seen) {
        self.record_call_time(&stream.attempt, stream.call.started.elapsed(), false);
        let reason =
            format!("no first chunk within the route's attempt_timeout of {}", route.attempt_timeout);
        let call =
            Some(LateCall { call: self.outcome_only(stream.call.task), streamed: true, offer: stream.offer });
        (stream.span, stream.attempt, Seen::Silence { reason, call })
    }

    /// A stream that lost the race, as a trailing hedged call: read to its
    /// end unseen, for another `attempt_timeout` from now.
    fn trailing(&self, route: &RouteConfig, stream: OpenStream) -> RunningCall {
        let deadline = Instant::now() + Duration::from(route.attempt_timeout);
        let call = self.outcome_only(stream.call.task);
        RunningCall {
            attempt: stream.attempt,
            call,
            sent_at: stream.sent_at,
            deadline,
            offer: stream.offer,
            span: stream.span,
        }
    }
}

/// Waits for whichever comes first: a stream's first chunk (or its end), an
/// attempt's timeout, or the hedge falling due. `None` when nothing is open.
async fn next_event(open: &mut [OpenStream], hedge_at: Option<Instant>) -> Option<RaceEvent> {
    let (soonest, deadline) =
        open.iter().enumerate().map(|(index, stream)| (index, stream.deadline)).min_by_key(|(_, at)| *at)?;
    let firsts = futures_util::future::select_all(open.iter_mut().map(|stream| &mut stream.call.first_chunk));
    Some(tokio::select! {
        (_, index, _) = firsts => RaceEvent::First(index),
        () = tokio::time::sleep_until(deadline) => RaceEvent::TimedOut(soonest),
        () = tokio::time::sleep_until(hedge_at.unwrap_or(deadline)), if hedge_at.is_some() => RaceEvent::HedgeDue,
    })
}
