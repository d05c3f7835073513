//! How a continuing attempt's stream joins what the client already has
//! (see the module doc of `continuation`).

use intentgate_providers::{Failure, StreamChunk};
use serde_json::Value;

use super::Gathered;

/// How a continuing attempt's stream joins what the client already has.
pub(in crate::engine) struct Continuation {
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
    /// The client's stream is the provider's own events (Anthropic's
    /// Messages, passed through): the continuing stream's go on from them.
    native: bool,
    /// Of those, the client has the text block's start.
    block_started: bool,
}

impl Continuation {
    /// A continuation of `earlier` on a provider that `prefills` or not;
    /// with the text to begin the assistant's turn with, if any.
    pub(in crate::engine) fn new(earlier: Gathered, prefills: bool) -> (Continuation, Option<String>) {
        let trimmed = earlier.text.trim_end();
        let prefill = (prefills && !trimmed.is_empty()).then(|| trimmed.to_owned());
        let again = match &prefill {
            Some(prefill) => earlier.text[prefill.len()..].to_owned(),
            None => earlier.text.clone(),
        };
        let id = earlier.chat_chunks.first().and_then(|chunk| chunk.get("id")).cloned();
        let (strict, received, native) = (prefill.is_none(), earlier.text.len(), earlier.passed_through);
        let block_started = earlier.chunks.iter().any(|chunk| {
            crate::jobs::JobResult::native_event(chunk)
                .is_some_and(|event| event["type"] == "content_block_start")
        });
        (Continuation { earlier, again, strict, id, received, native, block_started }, prefill)
    }

    /// What the client received.
    pub(in crate::engine) fn earlier(&self) -> &Gathered {
        &self.earlier
    }

    /// What the client received, for the continuing stream to gather after.
    pub(in crate::engine) fn take_earlier(&mut self) -> Gathered {
        std::mem::take(&mut self.earlier)
    }

    /// The continuing stream's `chunk` as the client is to receive it:
    /// without a second start, under the first chunk's id, and without the
    /// text the client already has; `None` when nothing is left of it. A
    /// re-run that says other text than the client's fails.
    pub(in crate::engine) fn join(&mut self, mut chunk: StreamChunk) -> Result<Option<StreamChunk>, Failure> {
        if self.native {
            return self.join_native(chunk);
        }
        // In chat form, whatever the provider speaks: so the client's was.
        chunk.native = None;
        self.join_chat(&mut chunk)?;
        let says_nothing = chunk.delta.is_empty()
            && chunk.finish_reason.is_none()
            && chunk.usage.is_none()
            && chunk.chunk.pointer("/choices/0/delta").and_then(Value::as_object).is_none_or(|delta| {
                delta.iter().all(|(key, value)| key == "content" && value.as_str().is_none_or(str::is_empty))
            });
        Ok((!says_nothing).then_some(chunk))
    }

    /// A continuing event of a stream passed through in Anthropic's
    /// Messages: the client has the message's start and (unless the cut
    /// came first) its text block open, so neither starts again, and the
    /// block's text goes on where it stopped (the chat form beside it the
    /// same).
    fn join_native(&mut self, mut chunk: StreamChunk) -> Result<Option<StreamChunk>, Failure> {
        let Some(event) = &chunk.native else { return Ok(None) };
        let first_block = event["index"] == 0;
        match event["type"].as_str() {
            Some("message_start" | "ping") => return Ok(None),
            Some("content_block_start") if first_block && self.block_started => return Ok(None),
            _ => {}
        }
        let text = first_block && event["delta"]["type"] == "text_delta";
        self.join_chat(&mut chunk)?;
        if text {
            if chunk.delta.is_empty() {
                return Ok(None);
            }
            if let Some(said) = chunk.native.as_mut().and_then(|event| event.pointer_mut("/delta/text")) {
                *said = Value::String(chunk.delta.clone());
            }
        }
        Ok(Some(chunk))
    }

    /// The chunk's chat form joined on: no second role, the first id, the
    /// text expected again taken off.
    fn join_chat(&mut self, chunk: &mut StreamChunk) -> Result<(), Failure> {
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
        Ok(())
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

    fn event(event: serde_json::Value, text: &str) -> StreamChunk {
        StreamChunk { native: Some(event), delta: text.to_owned(), ..text_chunk("first", false, text) }
    }

    fn text_delta(text: &str) -> StreamChunk {
        let delta = serde_json::json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": text}});
        event(delta, text)
    }

    fn native_kinds(continuation: &mut Continuation, chunks: Vec<StreamChunk>) -> Vec<String> {
        chunks
            .into_iter()
            .filter_map(|chunk| continuation.join(chunk).unwrap())
            .map(|chunk| chunk.native.unwrap()["type"].as_str().unwrap().to_owned())
            .collect()
    }

    /// A passed-through Messages stream goes on in the block the client has
    /// open: the continuation's message and block starts are not sent
    /// again — the block's start only if the client never got one.
    #[test]
    fn a_passed_through_stream_goes_on_in_the_open_block() {
        let start = || event(serde_json::json!({"type": "message_start", "message": {}}), "");
        let block = || {
            event(
                serde_json::json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "text", "text": ""}}),
                "",
            )
        };
        let mut earlier = Gathered::default();
        for chunk in [start(), block(), text_delta("echo: hi")] {
            earlier.take("a", chunk);
        }
        assert_eq!(earlier.uncontinuable(), None);
        let (mut continuation, prefill) = Continuation::new(earlier, true);
        assert_eq!(prefill.as_deref(), Some("echo: hi"));
        let kinds = native_kinds(&mut continuation, vec![start(), block(), text_delta(" there")]);
        assert_eq!(kinds, ["content_block_delta"]);
        let mut only_started = Gathered::default();
        only_started.take("a", start());
        let (mut continuation, _) = Continuation::new(only_started, true);
        let kinds = native_kinds(&mut continuation, vec![start(), block(), text_delta("echo")]);
        assert_eq!(kinds, ["content_block_start", "content_block_delta"], "the block starts once");
    }

    #[test]
    fn shared_chunks_are_not_copied_into_the_continuation() {
        let earlier = sent(&["echo: hi"]);
        let first = Arc::clone(&earlier.chunks[0]);
        let (mut continuation, _) = Continuation::new(earlier, false);
        assert!(Arc::ptr_eq(&continuation.take_earlier().chunks[0], &first));
    }
}
