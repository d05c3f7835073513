//! The hedge: availability a route buys, knowingly, with a possible second
//! execution (its `hedge` setting, off by default).
//!
//! Without a hedge, an attempt that goes silent becomes `unknown` and its
//! job waits (R5): sending the intent elsewhere could run it twice. A route
//! whose requests are harmless to run twice may hedge instead: when the
//! newest open attempt has been silent for `hedge.after` — or one's
//! connection broke after its request was sent — the chain's next eligible
//! provider starts an attempt *beside* it. The silent one stays open: not
//! failed, not cancelled, not sent again. Whichever answers first wins the
//! compare-and-swap; an answer that comes after is kept as `superseded`,
//! charged, and counted (`intentgate_duplicate_executions_total`).
//!
//! What keeps it in bounds:
//! - a hedged attempt books its reservation in the transaction that starts
//!   it, so a budget is never passed: a hedge its budget cannot cover is
//!   not started, and the open attempts go on;
//! - a job's open attempts are bounded by `hedge.open_attempts`, which the
//!   job carries from its creation and the schema enforces (one open attempt
//!   per lane, `migrations/*/0006_hedged_attempts.sql`);
//! - a streamed request is hedged only where the hedge says `streams`, and
//!   only before its first chunk (`stream_hedge.rs`);
//! - the attempts still in flight when another won keep the job's lease
//!   (the winner's write leaves it to them), renewed until the last ends: a
//!   process that dies meanwhile leaves them to the sweep, which makes them
//!   `unknown` like any attempt whose driver died.
//!
//! Every outcome goes through the one executor: in phase `Hedged` while
//! another attempt is open beside it (it settles only itself), in the
//! drive's `Live` phase when it is the last one left (it decides how the
//! job goes on, exactly as without a hedge).

use tokio::task::JoinError;
use tokio::time::Instant;
use tracing::Instrument;
use uuid::Uuid;

use intentgate_providers::Outcome;

use super::conclude::Next;
use super::conclude::Seen;
use super::decide::Phase;
use super::driver::RunningCall;
use super::outgoing::Outgoing;
use super::{Engine, EngineError, PreparedRequest, plan};
use crate::config::{HedgeConfig, RouteConfig};
use crate::jobs::{Attempt, Job};
use crate::store::StartOutcome;
use crate::telemetry;

/// A hedged attempt just started, with what it sends and its span.
pub(super) struct Hedge {
    pub attempt: Attempt,
    pub provider: std::sync::Arc<intentgate_providers::Provider>,
    pub outgoing: Outgoing,
    pub span: tracing::Span,
}

/// What happened next in a race.
enum Event {
    /// The call of `open[index]` ended.
    /// Boxed: an outcome carries a whole answer, the other events a number.
    Ended(usize, Box<Result<Option<Outcome>, JoinError>>),
    /// `open[index]` reached its `attempt_timeout`.
    TimedOut(usize),
    /// The newest attempt has been silent for `hedge.after`.
    HedgeDue,
}

impl Engine {
    /// Runs `first` (its row `starting`, its call sent) under the route's
    /// hedge until the job has its answer or no attempt is left open.
    pub(super) async fn race(
        &self,
        job: &Job,
        route: &RouteConfig,
        request: &PreparedRequest,
        first: RunningCall,
        hedge: HedgeConfig,
        live: Phase,
    ) -> Result<Next, EngineError> {
        let bound = usize::from(hedge.open_attempts);
        let mut open = vec![first];
        // False once a hedge could not start: the open attempts go on alone.
        let mut may_hedge = true;
        // An attempt of this race was left `unknown`: if none answers, the
        // job waits on it.
        let mut left_unknown = false;
        loop {
            let newest = open.iter().map(|running| running.sent_at).max();
            let hedge_at = newest.filter(|_| may_hedge && open.len() < bound).map(|at| at + hedge.after.0);
            let (span, (attempt, seen)) = match next_event(&mut open, hedge_at).await {
                None => return Ok(Next::Stop),
                Some(Event::HedgeDue) => {
                    may_hedge = self.add_hedge(job, route, request, &mut open).await;
                    continue;
                }
                Some(Event::Ended(index, joined)) => {
                    let running = open.remove(index);
                    (running.span.clone(), self.ended(running, *joined))
                }
                Some(Event::TimedOut(index)) => {
                    let running = open.remove(index);
                    (running.span.clone(), self.timed_out(route, running))
                }
            };
            let proves_nothing = proves_nothing(&seen);
            // A broken connection or a timeout is what the hedge is for: the
            // next provider starts at once, while this attempt still holds
            // its lane, and this one stays open beside it.
            if open.is_empty() && proves_nothing && may_hedge && bound > 1 {
                may_hedge = self.add_hedge(job, route, request, &mut open).await;
            }
            if open.is_empty() {
                let last = self.conclude(&attempt, &route.name, live, seen).instrument(span).await?;
                return self.after_the_last(job, last, left_unknown).await;
            }
            left_unknown |= proves_nothing;
            let concluded =
                self.conclude(&attempt, &route.name, Phase::Hedged, seen).instrument(span).await?;
            if let Next::Completed(done) = concluded {
                self.trail(route, job.id, open);
                return Ok(Next::Completed(done));
            }
        }
    }

    /// What follows a race's last attempt, `last` its conclusion: with an
    /// attempt of the race left `unknown`, no failover — the job waits on
    /// it, since it may still have done the work.
    pub(super) async fn after_the_last(
        &self,
        job: &Job,
        last: Next,
        left_unknown: bool,
    ) -> Result<Next, EngineError> {
        if left_unknown && matches!(last, Next::FailOver | Next::Retry { .. }) {
            self.wait_on_unknown(job.id).await?;
            return Ok(Next::Stop);
        }
        Ok(last)
    }

    /// Starts a hedged attempt beside the open ones, on the chain's next
    /// eligible provider none of them is on, booking its reservation; the
    /// call is added to `open`. False when none started (and none will):
    /// no provider left, a budget or limit refused its reservation, or
    /// the job's bound on open attempts is reached.
    async fn add_hedge(
        &self,
        job: &Job,
        route: &RouteConfig,
        request: &PreparedRequest,
        open: &mut Vec<RunningCall>,
    ) -> bool {
        let busy: Vec<&str> = open.iter().map(|running| running.attempt.provider.as_str()).collect();
        let Some(hedge) = self.start_hedge(job, route, request, &busy).await else { return false };
        let (attempt, provider, outgoing) = (hedge.attempt, hedge.provider, hedge.outgoing);
        open.push(hedge.span.in_scope(|| self.spawn_call(route, provider, outgoing, attempt)));
        true
    }

    /// A hedged attempt started (its row written, marked sent) on the
    /// chain's next eligible provider not among `busy`; `None` when none
    /// started, and none will (see [`Engine::add_hedge`]).
    pub(super) async fn start_hedge(
        &self,
        job: &Job,
        route: &RouteConfig,
        request: &PreparedRequest,
        busy: &[&str],
    ) -> Option<Hedge> {
        let not_started = |reason: &'static str, detail: &str| {
            tracing::info!(job_id = %job.id, route = %route.name, reason, detail, "hedge due but not started; the open attempts go on");
            metrics::counter!(telemetry::HEDGES_NOT_STARTED, "route" => route.name.clone(), "reason" => reason)
                .increment(1);
            None
        };
        let attempts = match self.store().attempts(job.id).await {
            Ok(attempts) => attempts,
            Err(err) => return not_started("store", &err.to_string()),
        };
        let taken = |position: &usize| busy.contains(&route.chain[*position].as_str());
        let positions = plan::remaining(route, &attempts).into_iter().filter(|p| !taken(p)).collect();
        let chosen = match self.choose_provider(route, positions, request).await {
            Ok(Ok(chosen)) => chosen,
            Ok(Err(refused)) => return not_started("no_provider", &refused.join("; ")),
            Err(err) => return not_started("store", &err.to_string()),
        };
        let provider = chosen.name.clone();
        let Some(entry) = self.provider(&provider) else { return not_started("no_provider", &provider) };
        let outgoing = self.outgoing(job.payer(), request, &provider);
        let started = self
            .store()
            .start_attempt(
                job.id,
                &provider,
                &outgoing.reservation,
                (route.open_attempts(), None),
                self.now_ms(),
            )
            .await;
        if !matches!(started, Ok(StartOutcome::Started(_))) {
            self.sent_nothing(&chosen);
        }
        let mut attempt = match started {
            Ok(StartOutcome::Started(attempt)) => attempt,
            Ok(StartOutcome::Refused(refusal)) => {
                self.record_refusal(&job.owner, &job.route, &refusal);
                return not_started("budget", &refusal.to_string());
            }
            Ok(StartOutcome::Blocked(blocked)) => return not_started("blocked", &format!("{blocked:?}")),
            Err(err) => return not_started("store", &err.to_string()),
        };
        match self.hand_over(&mut attempt).await {
            Ok(true) => {}
            Ok(false) => return not_started("settled", "the job was taken over"),
            // Settled `not_sent`: beside the open attempts it just ends.
            Err(err) => return not_started("store", &err.to_string()),
        }
        tracing::warn!(job_id = %job.id, attempt = attempt.number, provider = %provider, beside = busy.len(),
            "hedging: a second execution of this intent is possible; the first answer wins");
        metrics::counter!(telemetry::HEDGES, "route" => route.name.clone(), "provider" => provider.clone())
            .increment(1);
        let _ = self.inner.events.send(super::EngineEvent::AttemptStarted {
            job_id: job.id,
            number: attempt.number,
            provider: provider.clone(),
        });
        // Its own span, in the job's trace beside the one it was started
        // from (an OpenTelemetry child of it, not a `tracing` one: that
        // would hold the first span open until this one ends).
        let span = tracing::info_span!(
            parent: None,
            "attempt",
            job_id = %job.id,
            attempt = attempt.number,
            provider = %attempt.provider,
            outcome = tracing::field::Empty,
        );
        crate::traces::beside_current(&span);
        self.describe_attempt(&span, &attempt, request);
        Some(Hedge { attempt, provider: entry.provider.clone(), outgoing, span })
    }

    /// The attempts still open when another won: each one's outcome is
    /// still recorded when it comes (an answer `superseded` and charged, a
    /// failure `failed`, silence `unknown` with its late answer listened
    /// for), in the background. The job's lease, which the winner's write
    /// left while they were `starting`, is renewed until the last of them
    /// ends and then released: should this process die first, the lease
    /// expires and the sweep makes them `unknown` (they were sent).
    pub(super) fn trail(&self, route: &RouteConfig, job_id: Uuid, open: Vec<RunningCall>) {
        if open.is_empty() {
            return;
        }
        let (engine, route) = (self.clone(), route.clone());
        let what = format!("{} hedged attempt(s) of job {job_id}", open.len());
        self.tasks().spawn_listener(
            what,
            self.keep_config(async move {
                let held = engine.hold_lease(job_id);
                let trailing = open.into_iter().map(|running| {
                    let span = running.span.clone();
                    let (engine, route) = (&engine, &route);
                    async move {
                        let (attempt, seen) = engine.await_call(route, running).await;
                        let concluded = engine.conclude(&attempt, &route.name, Phase::Hedged, seen).await;
                        if let Err(err) = &concluded {
                            tracing::error!(job_id = %attempt.job_id, attempt = attempt.number, error = %err,
                            "cannot record a hedged attempt's outcome; the recovery sweep will");
                        }
                        concluded.is_ok()
                    }
                    .instrument(span)
                });
                let recorded = futures_util::future::join_all(trailing).await;
                drop(held);
                // One not recorded is still `starting`: the lease, left to
                // expire, sends the sweep to it.
                if recorded.iter().all(|&ok| ok)
                    && let Err(err) = engine.store().release_lease(job_id, engine.instance()).await
                {
                    tracing::warn!(%job_id, error = %err, "cannot release the lease; it will expire");
                }
            }),
        );
    }
}

/// Whether `seen` leaves open that the attempt ran — a silence, a broken
/// connection — which is what a hedge is for.
pub(super) fn proves_nothing(seen: &Seen) -> bool {
    match seen {
        Seen::Silence { .. } => true,
        Seen::Failure(failure) => !failure.may_fail_over(),
        // Part of it reached the client: not a hedge's to rescue.
        Seen::Answer { .. } | Seen::Cut { .. } => false,
    }
}

/// Waits for whichever comes first: a call's end, an attempt's timeout, or
/// the hedge falling due. `None` when nothing is open.
async fn next_event(open: &mut [RunningCall], hedge_at: Option<Instant>) -> Option<Event> {
    let (soonest, deadline) = open
        .iter()
        .enumerate()
        .map(|(index, running)| (index, running.deadline))
        .min_by_key(|(_, at)| *at)?;
    let calls = futures_util::future::select_all(open.iter_mut().map(|running| &mut running.call));
    Some(tokio::select! {
        (joined, index, _) = calls => Event::Ended(index, Box::new(joined)),
        () = tokio::time::sleep_until(deadline) => Event::TimedOut(soonest),
        () = tokio::time::sleep_until(hedge_at.unwrap_or(deadline)), if hedge_at.is_some() => Event::HedgeDue,
    })
}
