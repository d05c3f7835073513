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
//! Not continued, ending as without the option: a stream that passed the
//! provider's own protocol through (another provider's events cannot extend
//! it), one with more than one choice, and one that sent any part of a tool
//! call or of reasoning. A tool call's arguments spliced from two executions
//! could make a call no model made, which the client would then carry out;
//! reasoning is the model's own and signed where it matters.

use intentgate_providers::{Failure, StreamChunk};
use serde_json::Value;

use super::gathered::Gathered;
use super::outgoing::Outgoing;
use super::{Engine, EngineError, PreparedRequest, plan};
use crate::config::RouteConfig;
use crate::jobs::{Attempt, Job, JobFailure};

/// Delta fields of a chunk a continuation can extend: its role and text.
const CONTINUABLE_FIELDS: [&str; 2] = ["role", "content"];

impl Gathered {
    /// Why what this stream passed on cannot be continued by another
    /// provider (see the module doc), or `None` when it can.
    pub(super) fn uncontinuable(&self) -> Option<&'static str> {
        if self.passed_through {
            return Some(
                "the stream passed the provider's own protocol through, which another provider's cannot extend",
            );
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
        sent: Gathered,
        refused_so_far: &mut Vec<String>,
    ) -> Result<Option<(Attempt, Box<Outgoing>, Option<Continuation>)>, EngineError> {
        let attempts = self.store().attempts(job.id).await?;
        let remaining = plan::remaining(route, &attempts);
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
        match self.start_chosen(job, &chosen, &outgoing, route.open_attempts(), refused_so_far).await? {
            Some(attempt) => Ok(Some((attempt, outgoing, Some(continuation)))),
            None => {
                let reason = "a stream was cut after part of it reached the client, and no attempt could start \
                              to continue it (every lane of the job is open)";
                self.fail_job(job.id, &JobFailure::new(reason)).await?;
                Ok(None)
            }
        }
    }
}

/// How a continuing attempt's stream joins what the client already has.
pub(super) struct Continuation {
    /// What the client received, which the continuing stream's chunks are
    /// gathered after (so the stored answer and a replay are one answer).
    earlier: Gathered,
    /// Text the client has that the provider is expected to say again:
    /// skipped as it comes.
    again: String,
    /// A re-run must say `again` exactly; after a prefill only the trailing
    /// whitespace a prefill cannot end with is expected, and a model that
    /// does not say it again is followed as it is.
    strict: bool,
    /// The `id` of the client's first chunk, which every later one keeps.
    id: Option<Value>,
    /// Bytes of text the client received.
    received: usize,
}

impl Continuation {
    /// A continuation of `earlier` on a provider that `prefills` or not;
    /// with the text to begin the assistant's turn with, if any.
    pub(super) fn new(earlier: Gathered, prefills: bool) -> (Continuation, Option<String>) {
        let trimmed = earlier.text.trim_end();
        let prefill = (prefills && !trimmed.is_empty()).then(|| trimmed.to_owned());
        let again = match &prefill {
            Some(prefill) => earlier.text[prefill.len()..].to_owned(),
            None => earlier.text.clone(),
        };
        let id = earlier.chat_chunks.first().and_then(|chunk| chunk.get("id")).cloned();
        let (strict, received) = (prefill.is_none(), earlier.text.len());
        (Continuation { earlier, again, strict, id, received }, prefill)
    }

    /// What the client received.
    pub(super) fn earlier(&self) -> &Gathered {
        &self.earlier
    }

    /// What the client received, for the continuing stream to gather after.
    pub(super) fn take_earlier(&mut self) -> Gathered {
        std::mem::take(&mut self.earlier)
    }

    /// The continuing stream's `chunk` as the client is to receive it: in
    /// chat form, without a second role, under the first chunk's id, and
    /// without the text the client already has; `None` when nothing is
    /// left of it. A re-run that says other text than the client's fails.
    pub(super) fn join(&mut self, mut chunk: StreamChunk) -> Result<Option<StreamChunk>, Failure> {
        chunk.native = None;
        if let (Some(fields), Some(id)) = (chunk.chunk.as_object_mut(), &self.id) {
            fields.insert("id".into(), id.clone());
        }
        if let Some(delta) = chunk.chunk.pointer_mut("/choices/0/delta").and_then(Value::as_object_mut) {
            delta.remove("role");
        }
        if !self.again.is_empty() {
            let rest = self.skip(&chunk.delta)?;
            if let Some(content) = chunk.chunk.pointer_mut("/choices/0/delta/content") {
                *content = Value::String(rest.clone());
            }
            chunk.delta = rest;
        }
        let says_nothing = chunk.delta.is_empty()
            && chunk.finish_reason.is_none()
            && chunk.usage.is_none()
            && chunk.chunk.pointer("/choices/0/delta").and_then(Value::as_object).is_none_or(|delta| {
                delta.iter().all(|(key, value)| key == "content" && value.as_str().is_none_or(str::is_empty))
            });
        Ok((!says_nothing).then_some(chunk))
    }

    /// What is left of `said` once the text expected again is taken off it.
    fn skip(&mut self, said: &str) -> Result<String, Failure> {
        if let Some(rest) = self.again.strip_prefix(said) {
            self.again = rest.to_owned();
            return Ok(String::new());
        }
        if let Some(rest) = said.strip_prefix(self.again.as_str()) {
            self.again.clear();
            return Ok(rest.to_owned());
        }
        if !self.strict {
            self.again.clear();
            return Ok(said.to_owned());
        }
        let received = self.received;
        let reason = format!(
            "the re-run diverged from the {received} bytes of text the client already received: it cannot \
             continue them"
        );
        Err(Failure::BadOutput { reason, raw: Default::default() })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn text_chunk(id: &str, role: bool, text: &str) -> StreamChunk {
        let mut delta = serde_json::json!({ "content": text });
        if role {
            delta["role"] = "assistant".into();
        }
        StreamChunk {
            chunk: serde_json::json!({"id": id, "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": delta, "finish_reason": null}]}),
            delta: text.to_owned(),
            finish_reason: None,
            usage: None,
            raw: Default::default(),
            native: None,
            skipped: None,
        }
    }

    fn sent(pieces: &[&str]) -> Gathered {
        let mut gathered = Gathered::default();
        for (i, piece) in pieces.iter().enumerate() {
            gathered.take("a", text_chunk("first", i == 0, piece));
        }
        gathered
    }

    fn joined(continuation: &mut Continuation, pieces: &[&str]) -> Result<Vec<String>, Failure> {
        let mut out = Vec::new();
        for (i, piece) in pieces.iter().enumerate() {
            if let Some(chunk) = continuation.join(text_chunk("second", i == 0, piece))? {
                assert_eq!(chunk.chunk["id"], "first", "the client's first id is kept");
                assert!(chunk.chunk.pointer("/choices/0/delta/role").is_none(), "one role per answer");
                out.push(chunk.delta);
            }
        }
        Ok(out)
    }

    /// A re-run says again what the client has, across chunk borders; only
    /// the rest goes on.
    #[test]
    fn a_re_run_skips_the_text_the_client_has() {
        let (mut continuation, prefill) = Continuation::new(sent(&["echo: ", "hello w"]), false);
        assert_eq!(prefill, None);
        let out = joined(&mut continuation, &["", "echo", ": hel", "lo world", "!"]).unwrap();
        assert_eq!(out, ["orld", "!"]);
    }

    /// A re-run that says something else fails, so it is never spliced on.
    #[test]
    fn a_re_run_that_diverges_fails() {
        let (mut continuation, _) = Continuation::new(sent(&["echo: hello"]), false);
        let failure = joined(&mut continuation, &["", "echo: goodbye"]).unwrap_err();
        assert!(matches!(failure, Failure::BadOutput { .. }), "{failure:?}");
    }

    /// A prefill is the text without its trailing whitespace (which Claude
    /// refuses); the whitespace said again is skipped.
    #[test]
    fn a_prefill_leaves_out_trailing_whitespace_and_skips_it_when_said_again() {
        let (mut continuation, prefill) = Continuation::new(sent(&["echo: ", "hello "]), true);
        assert_eq!(prefill.as_deref(), Some("echo: hello"));
        assert_eq!(joined(&mut continuation, &["", " world"]).unwrap(), ["world"]);
        let (mut lenient, _) = Continuation::new(sent(&["echo: ", "hello "]), true);
        assert_eq!(joined(&mut lenient, &["", "world"]).unwrap(), ["world"], "followed as it is");
    }

    /// What cannot be continued says why.
    #[test]
    fn tool_calls_and_several_choices_are_not_continued() {
        assert_eq!(sent(&["echo: hi"]).uncontinuable(), None);
        let mut tool = sent(&["echo: hi"]);
        let mut call = text_chunk("first", false, "");
        call.chunk["choices"][0]["delta"] =
            serde_json::json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"a\""}}]});
        tool.take("a", call);
        assert!(tool.uncontinuable().unwrap().contains("tool call"));
        let mut two = sent(&["echo: hi"]);
        let mut second = text_chunk("first", false, "x");
        second.chunk["choices"][0]["index"] = 1.into();
        two.take("a", second);
        assert!(two.uncontinuable().unwrap().contains("more than one choice"));
    }

    #[test]
    fn shared_chunks_are_not_copied_into_the_continuation() {
        let earlier = sent(&["echo: hi"]);
        let first = Arc::clone(&earlier.chunks[0]);
        let (mut continuation, _) = Continuation::new(earlier, false);
        assert!(Arc::ptr_eq(&continuation.take_earlier().chunks[0], &first));
    }
}
