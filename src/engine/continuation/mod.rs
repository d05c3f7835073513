//! Continuation after a cut, for routes that opt in (`continue_cut_streams`;
//! off by default, as it runs the intent a second time).
//!
//! Once part of a streamed answer reached the client no other provider may
//! answer the job by default: the client would receive two answers spliced
//! together. A route whose work is harmless to re-run may instead let the
//! chain's next eligible provider *continue* the answer, so the client
//! receives one coherent answer:
//!
//! - a provider whose dialect prefills (Claude's Messages wherever it is
//!   spoken, Converse) is sent the request with the assistant's turn begun
//!   with what the client received, and says the rest;
//! - any other is sent the request again (a re-run): what it says again of
//!   the text the client already has is skipped, and a re-run that says
//!   something else there has *diverged* — a proven failure of that
//!   attempt, so the next provider is asked in turn, else the job fails.
//!
//! The cut attempt stays `unknown` (its provider may have finished the work)
//! and is counted as a possible duplicate execution; the continuing attempt
//! takes another of the job's lanes beside it.
//!
//! A stream passed through in Anthropic's Messages (an agent's request on a
//! Claude provider) goes on in the same protocol: only a provider that
//! speaks it continues it, its events joining the text block the client has
//! open (`join.rs`).
//!
//! Not continued, ending as without the option: a stream with more than one
//! choice, one that sent any part of a tool call or of reasoning, one
//! passed through in Messages beyond its first text block, and one passed
//! through in the Responses API. A tool call's arguments spliced from two
//! executions could make a call no model made, which the client would then
//! carry out; reasoning is the model's own and signed where it matters.

mod join;

use intentgate_providers::Protocol;
use serde_json::Value;

pub(super) use self::join::Continuation;
use super::gathered::Gathered;
use super::outgoing::Outgoing;
use super::{Engine, EngineError, PreparedRequest, plan};
use crate::config::RouteConfig;
use crate::jobs::{Attempt, Job, JobFailure, JobResult};

/// Delta fields of a chunk a continuation can extend: its role and text.
const CONTINUABLE_FIELDS: [&str; 2] = ["role", "content"];

impl Gathered {
    /// Why what this stream passed on cannot be continued by another
    /// provider (see the module doc), or `None` when it can.
    pub(super) fn uncontinuable(&self) -> Option<&'static str> {
        if self.passed_through {
            return self.native_uncontinuable();
        }
        for chunk in &self.chat_chunks {
            let choices =
                chunk.get("choices").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
            if choices.len() > 1 || choices.iter().any(|choice| choice.get("index").is_some_and(|i| i != 0)) {
                return Some("the stream has more than one choice");
            }
            let delta = choices.first().and_then(|choice| choice.get("delta")).and_then(Value::as_object);
            if delta.is_some_and(|delta| delta.keys().any(|key| !CONTINUABLE_FIELDS.contains(&key.as_str())))
            {
                return Some(
                    "part of a tool call or of reasoning reached the client: spliced from two executions it \
                     could say what no model said",
                );
            }
        }
        None
    }

    /// A stream passed through in the provider's own protocol is continued
    /// only while it is one text block of Anthropic's Messages: its events
    /// so far a message's start, that block's start and its text.
    fn native_uncontinuable(&self) -> Option<&'static str> {
        let continuable = |event: &Value| match event["type"].as_str() {
            Some("message_start" | "ping") => true,
            Some("content_block_start") => event["index"] == 0 && event["content_block"]["type"] == "text",
            Some("content_block_delta") => event["index"] == 0 && event["delta"]["type"] == "text_delta",
            _ => false,
        };
        let events = self.chunks.iter().filter_map(|chunk| JobResult::native_event(chunk));
        match events.into_iter().all(continuable) {
            true => None,
            false => Some(
                "the stream passed through in the provider's own protocol is not one text block of \
                 Anthropic's Messages (a Responses stream, thinking, a tool call, a second block), which \
                 another execution cannot extend",
            ),
        }
    }
}

/// What a cut stream leaves its continuation: the attempt it was cut in,
/// and what the client received of it.
pub(super) struct Cut {
    pub attempt: i32,
    pub sent: Gathered,
}

impl Engine {
    /// Starts the attempt that continues what the client received (`sent`)
    /// on the chain's next eligible provider, with its request prefilled
    /// where its dialect prefills. `None` when none could start: the job
    /// failed (the chain ran out, a limit refused it, no lane was free).
    pub(super) async fn next_continuation(
        &self,
        job: &Job,
        route: &RouteConfig,
        request: &PreparedRequest,
        Cut { attempt: cut, sent }: Cut,
        refused_so_far: &mut Vec<String>,
    ) -> Result<Option<(Attempt, Box<Outgoing>, Option<Continuation>)>, EngineError> {
        let attempts = self.store().attempts(job.id).await?;
        let mut remaining = plan::remaining(route, &attempts);
        if sent.passed_through {
            remaining.retain(|&position| self.speaks_messages(&route.chain[position], refused_so_far));
        }
        let chosen = match self.choose_provider(route, remaining, request).await? {
            Ok(chosen) => chosen,
            Err(refused) => {
                refused_so_far.extend(refused);
                self.fail_exhausted(job, &attempts, std::mem::take(refused_so_far)).await?;
                return Ok(None);
            }
        };
        refused_so_far.extend(chosen.refused.iter().cloned());
        let prefills = self.provider(&chosen.name).is_some_and(|entry| entry.provider.dialect().prefills());
        let (continuation, prefill) = Continuation::new(sent, prefills);
        let prefilled = prefill.map(|text| request.prefilled(&text));
        let outgoing =
            Box::new(self.outgoing(job.payer(), prefilled.as_ref().unwrap_or(request), &chosen.name));
        match self
            .start_chosen(job, &chosen, &outgoing, (route.open_attempts(), Some(cut)), refused_so_far)
            .await?
        {
            Some(attempt) => Ok(Some((attempt, outgoing, Some(continuation)))),
            None => {
                let reason = "a stream was cut after part of it reached the client, and no attempt could start \
                              to continue it (every lane of the job is open)";
                self.fail_job(job.id, &JobFailure::new(reason)).await?;
                Ok(None)
            }
        }
    }

    /// Whether provider `name` is sent Anthropic's Messages as they are,
    /// which a continuation of a stream passed through in them needs; if
    /// not, it is passed over, and `refused` says why.
    fn speaks_messages(&self, name: &str, refused: &mut Vec<String>) -> bool {
        let speaks = self
            .provider(name)
            .is_some_and(|entry| Protocol::AnthropicMessages.spoken_by(entry.provider.dialect()));
        if !speaks {
            refused.push(format!(
                "{name}: it does not speak Anthropic's Messages, in which the stream it would continue was passed \
                 through"
            ));
        }
        speaks
    }
}
