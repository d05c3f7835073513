//! The Responses API's shapes, rendered from a job: a `response` object
//! from its stored completion, and the semantic stream events from its
//! chunks (each numbered with `sequence_number`). Pure functions of the
//! stored job, so a replay is the original byte for byte.

use serde_json::{Map, Value, json};
use uuid::Uuid;

use crate::api::door::StreamRender;
use crate::jobs::{Job, JobRequest, JobResult};

/// The parts of a job a response is made of.
#[derive(Clone)]
pub struct Identity {
    id: String,
    message_id: String,
    created_at: i64,
    model: String,
    /// What a response echoes of its request: `instructions`,
    /// `temperature`, `top_p`, `tools`, `tool_choice`,
    /// `parallel_tool_calls`, `metadata` (see [`Identity::echo_of`]).
    echo: Map<String, Value>,
}

impl Identity {
    pub fn of(job: &Job) -> Identity {
        Identity {
            id: format!("resp_{}", job.id.simple()),
            message_id: format!("msg_{}", job.id.simple()),
            created_at: job.created_at_ms / 1000,
            model: job.route.clone(),
            echo: serde_json::from_str::<JobRequest>(&job.request)
                .map(|r| Identity::echo_of(&r))
                .unwrap_or_default(),
        }
    }

    /// A provider's `response` object as this gateway's: its id is the job's.
    fn own(&self, mut response: Value) -> Value {
        if let Some(fields) = response.as_object_mut() {
            fields.insert("id".into(), self.id.clone().into());
        }
        response
    }

    /// The request's settings in the Responses shape, as OpenAI echoes them
    /// on every response object (null or the default where it set none).
    fn echo_of(request: &JobRequest) -> Map<String, Value> {
        let params = &request.params;
        let param = |name: &str| params.get(name).cloned().unwrap_or(Value::Null);
        let instructions =
            request.input.messages.first().filter(|m| m.role == "system").map(|m| m.content().clone());
        let tools: Vec<Value> = params
            .get("tools")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|tool| {
                let function = &tool["function"];
                json!({"type": "function", "name": function["name"], "description": function.get("description"),
                    "parameters": function["parameters"], "strict": function.get("strict").cloned().unwrap_or(Value::Null)})
            })
            .collect();
        let tool_choice = match params.get("tool_choice") {
            Some(Value::Object(choice)) => {
                json!({"type": "function", "name": choice.get("function").map(|f| &f["name"])})
            }
            Some(mode) => mode.clone(),
            None => "auto".into(),
        };
        let mut echo = Map::new();
        echo.insert("instructions".into(), instructions.unwrap_or(Value::Null));
        echo.insert("temperature".into(), param("temperature"));
        echo.insert("top_p".into(), param("top_p"));
        echo.insert("tools".into(), tools.into());
        echo.insert("tool_choice".into(), tool_choice);
        echo.insert(
            "parallel_tool_calls".into(),
            params.get("parallel_tool_calls").cloned().unwrap_or(true.into()),
        );
        echo.insert("metadata".into(), params.get("metadata").cloned().unwrap_or(json!({})));
        echo
    }
}

/// The job a response id names (`resp_<job id>`).
pub fn job_of_response(id: &str) -> Option<Uuid> {
    Uuid::try_parse(id.strip_prefix("resp_")?).ok()
}

/// What a response says: its text and its function calls, how it ended.
#[derive(Default)]
struct Said {
    text: String,
    /// `(call_id, name, arguments)`.
    calls: Vec<(String, String, String)>,
    finish: Option<String>,
    usage: Option<Value>,
}

impl Said {
    fn of_completion(completion: &Value) -> Said {
        let choice = &completion["choices"][0];
        let message = &choice["message"];
        let calls = message["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|call| {
                let text = |value: &Value| value.as_str().unwrap_or_default().to_owned();
                (text(&call["id"]), text(&call["function"]["name"]), text(&call["function"]["arguments"]))
            })
            .collect();
        Said {
            text: message["content"].as_str().unwrap_or_default().to_owned(),
            calls,
            finish: choice["finish_reason"].as_str().map(str::to_owned),
            usage: completion.get("usage").filter(|u| u.is_object()).cloned(),
        }
    }
}

fn message_item(identity: &Identity, text: &str, status: &str) -> Value {
    let content = if status == "completed" {
        json!([{"type": "output_text", "text": text, "annotations": [], "logprobs": []}])
    } else {
        json!([])
    };
    json!({"type": "message", "id": identity.message_id, "status": status, "role": "assistant", "content": content})
}

fn call_item(call_id: &str, name: &str, arguments: &str, status: &str) -> Value {
    json!({"type": "function_call", "id": format!("fc_{call_id}"), "call_id": call_id, "name": name,
        "arguments": arguments, "status": status})
}

/// The `response` object: not done (`Err` with its status: no output yet)
/// or as it ended.
fn response(identity: &Identity, said: Result<&Said, &str>) -> Value {
    let (status, output, usage, incomplete) = match said {
        Err(status) => (status, Vec::new(), Value::Null, Value::Null),
        Ok(said) => {
            let mut output = Vec::new();
            if !said.text.is_empty() || said.calls.is_empty() {
                output.push(message_item(identity, &said.text, "completed"));
            }
            output.extend(said.calls.iter().map(|(id, name, args)| call_item(id, name, args, "completed")));
            let tokens = |name: &str| said.usage.as_ref().and_then(|u| u[name].as_u64()).unwrap_or(0);
            let usage = json!({"input_tokens": tokens("prompt_tokens"), "output_tokens": tokens("completion_tokens"),
                "total_tokens": tokens("prompt_tokens") + tokens("completion_tokens"),
                "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}});
            match said.finish.as_deref() {
                Some("length") => ("incomplete", output, usage, json!({"reason": "max_output_tokens"})),
                Some("content_filter") => ("incomplete", output, usage, json!({"reason": "content_filter"})),
                _ => ("completed", output, usage, Value::Null),
            }
        }
    };
    let mut response = json!({"id": identity.id, "object": "response", "created_at": identity.created_at,
        "status": status, "model": identity.model, "output": output, "error": null,
        "incomplete_details": incomplete});
    if let Some(fields) = response.as_object_mut() {
        fields.extend(identity.echo.clone());
        // Not known before the answer; the published schema has no null for it.
        if !usage.is_null() {
            fields.insert("usage".into(), usage);
        }
    }
    response
}

/// The `response` object of a job not done: `queued`, `in_progress`, or
/// `cancelled` before it was.
pub fn unfinished(identity: &Identity, status: &str) -> Value {
    response(identity, Err(status))
}

/// A succeeded job's `response` object: the provider's own, when the
/// request passed through to it (with the gateway's id, which
/// `previous_response_id` and `GET /v1/responses/{id}` know it by).
pub fn response_body(identity: &Identity, result: &JobResult) -> Option<Vec<u8>> {
    if let Some(native) = &result.native {
        return serde_json::to_vec(&identity.own(native.clone())).ok();
    }
    let said = Said::of_completion(result.completion.as_ref()?);
    serde_json::to_vec(&response(identity, Ok(&said))).ok()
}

/// Which output item is open in the stream.
#[derive(PartialEq)]
enum Open {
    None,
    Text,
    /// The tool call of this chunk index.
    Call(u64),
}

/// The Responses stream: `response.created`, `response.in_progress`, per
/// output item `response.output_item.added`, its deltas and `.done`
/// events, then `response.completed` with the whole response.
pub struct EventStream {
    identity: Identity,
    sequence: u64,
    started: bool,
    open: Open,
    items: u64,
    said: Said,
    /// The stream is the provider's own events, passed on as they came.
    native: bool,
}

impl EventStream {
    pub fn new(identity: Identity) -> EventStream {
        EventStream {
            identity,
            sequence: 0,
            started: false,
            open: Open::None,
            items: 0,
            said: Said::default(),
            native: false,
        }
    }

    /// A provider's own event, as it sent it (the response it carries
    /// under the gateway's id); a whole `response` (a plain answer replayed
    /// as a stream) as the events that stream it.
    fn native_event(&mut self, event: &Value) -> Vec<u8> {
        self.native = true;
        let mut out = Vec::new();
        match event["type"].as_str() {
            Some("response") => self.whole_response(&mut out, event),
            Some(kind) => {
                let mut event = event.clone();
                if let Some(response) = event.get_mut("response") {
                    *response = self.identity.own(response.take());
                }
                self.sequence = event["sequence_number"].as_u64().map_or(self.sequence, |n| n + 1);
                let kind = kind.to_owned();
                out.extend(format!("event: {kind}\ndata: ").as_bytes());
                out.extend(serde_json::to_vec(&event).unwrap_or_default());
                out.extend(b"\n\n");
            }
            None => {}
        }
        out
    }

    /// A whole `response` as its stream: created, each output item added
    /// (a message's text as one delta) and done, then completed.
    fn whole_response(&mut self, out: &mut Vec<u8>, response: &Value) {
        let response = self.identity.own(response.clone());
        let mut started = response.clone();
        started["status"] = "in_progress".into();
        started["output"] = json!([]);
        self.emit(out, "response.created", json!({"response": started}));
        self.emit(out, "response.in_progress", json!({"response": started}));
        for (index, item) in response["output"].as_array().into_iter().flatten().enumerate() {
            let mut added = item.clone();
            if item["type"] == "message" {
                added["content"] = json!([]);
            }
            self.emit(out, "response.output_item.added", json!({"output_index": index, "item": added}));
            let parts =
                item["content"].as_array().filter(|_| item["type"] == "message").into_iter().flatten();
            for (part_index, part) in parts.enumerate() {
                let at = json!({"item_id": item["id"], "output_index": index, "content_index": part_index});
                let with = |key: &str, value: &Value| {
                    let mut event = at.clone();
                    event[key] = value.clone();
                    event
                };
                self.emit(
                    out,
                    "response.content_part.added",
                    with("part", &json!({"type": part["type"], "text": ""})),
                );
                if let Some(text) = part.get("text") {
                    self.emit(out, "response.output_text.delta", with("delta", text));
                    self.emit(out, "response.output_text.done", with("text", text));
                }
                self.emit(out, "response.content_part.done", with("part", part));
            }
            self.emit(out, "response.output_item.done", json!({"output_index": index, "item": item}));
        }
        let last =
            if response["status"] == "incomplete" { "response.incomplete" } else { "response.completed" };
        self.emit(out, last, json!({"response": response}));
    }

    fn emit(&mut self, out: &mut Vec<u8>, kind: &str, mut data: Value) {
        if let Some(fields) = data.as_object_mut() {
            fields.insert("type".into(), kind.into());
            fields.insert("sequence_number".into(), self.sequence.into());
        }
        self.sequence += 1;
        out.extend(format!("event: {kind}\ndata: ").as_bytes());
        out.extend(serde_json::to_vec(&data).unwrap_or_default());
        out.extend(b"\n\n");
    }

    fn start(&mut self, out: &mut Vec<u8>) {
        if !self.started {
            self.started = true;
            let response = response(&self.identity, Err("in_progress"));
            self.emit(out, "response.created", json!({"response": response}));
            self.emit(out, "response.in_progress", json!({"response": response}));
        }
    }

    fn open(&mut self, out: &mut Vec<u8>, block: Open) {
        if self.open == block {
            return;
        }
        self.close(out);
        let index = self.items;
        match &block {
            Open::Text => {
                let item = message_item(&self.identity, "", "in_progress");
                self.emit(out, "response.output_item.added", json!({"output_index": index, "item": item}));
                let part = json!({"type": "output_text", "text": "", "annotations": [], "logprobs": []});
                let id = self.identity.message_id.clone();
                self.emit(
                    out,
                    "response.content_part.added",
                    json!({"item_id": id, "output_index": index, "content_index": 0, "part": part}),
                );
            }
            Open::Call(_) => {
                let Some((id, name, _)) = self.said.calls.last().cloned() else { return };
                let item = call_item(&id, &name, "", "in_progress");
                self.emit(out, "response.output_item.added", json!({"output_index": index, "item": item}));
            }
            Open::None => {}
        }
        self.open = block;
    }

    fn close(&mut self, out: &mut Vec<u8>) {
        let index = self.items;
        match std::mem::replace(&mut self.open, Open::None) {
            Open::None => return,
            Open::Text => {
                let (id, text) = (self.identity.message_id.clone(), self.said.text.clone());
                self.emit(
                    out,
                    "response.output_text.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0, "text": text, "logprobs": []}),
                );
                let part = json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []});
                self.emit(
                    out,
                    "response.content_part.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0, "part": part}),
                );
                let item = message_item(&self.identity, &text, "completed");
                self.emit(out, "response.output_item.done", json!({"output_index": index, "item": item}));
            }
            Open::Call(_) => {
                let Some((id, name, arguments)) = self.said.calls.last().cloned() else { return };
                self.emit(
                    out,
                    "response.function_call_arguments.done",
                    json!({"item_id": format!("fc_{id}"), "output_index": index, "name": name, "arguments": arguments}),
                );
                let item = call_item(&id, &name, &arguments, "completed");
                self.emit(out, "response.output_item.done", json!({"output_index": index, "item": item}));
            }
        }
        self.items += 1;
    }
}

impl StreamRender for EventStream {
    fn chunk(&mut self, chunk: &Value) -> Vec<u8> {
        if let Some(native) = JobResult::native_event(chunk) {
            return self.native_event(native);
        }
        if self.native {
            // The provider's own events said it all, usage included.
            return Vec::new();
        }
        let mut out = Vec::new();
        self.start(&mut out);
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            self.said.usage = Some(usage.clone());
        }
        let choice = &chunk["choices"][0];
        if let Some(finish) = choice["finish_reason"].as_str() {
            self.said.finish = Some(finish.to_owned());
        }
        let delta = &choice["delta"];
        if let Some(text) = delta["content"].as_str().filter(|t| !t.is_empty()) {
            self.open(&mut out, Open::Text);
            self.said.text.push_str(text);
            let id = self.identity.message_id.clone();
            let index = self.items;
            self.emit(
                &mut out,
                "response.output_text.delta",
                json!({"item_id": id, "output_index": index, "content_index": 0, "delta": text, "logprobs": []}),
            );
        }
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            let index = call["index"].as_u64().unwrap_or(0);
            if self.open != Open::Call(index) {
                let id = call["id"].as_str().unwrap_or_default().to_owned();
                let name = call["function"]["name"].as_str().unwrap_or_default().to_owned();
                self.close(&mut out);
                self.said.calls.push((id, name, String::new()));
                self.open(&mut out, Open::Call(index));
            }
            if let Some(fragment) = call["function"]["arguments"].as_str().filter(|f| !f.is_empty()) {
                let item_id = self.said.calls.last().map(|(id, ..)| format!("fc_{id}")).unwrap_or_default();
                if let Some(last) = self.said.calls.last_mut() {
                    last.2.push_str(fragment);
                }
                let output_index = self.items;
                self.emit(
                    &mut out,
                    "response.function_call_arguments.delta",
                    json!({"item_id": item_id, "output_index": output_index, "delta": fragment}),
                );
            }
        }
        out
    }

    fn done(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        if self.native {
            // The provider's `response.completed` went by: it was the end.
            return out;
        }
        self.start(&mut out);
        self.close(&mut out);
        let response = response(&self.identity, Ok(&self.said));
        let kind =
            if response["status"] == "incomplete" { "response.incomplete" } else { "response.completed" };
        self.emit(&mut out, kind, json!({"response": response}));
        out
    }

    fn failed(&mut self, code: &str, message: &str) -> Vec<u8> {
        let mut out = Vec::new();
        self.emit(&mut out, "error", json!({"code": code, "message": message, "param": null}));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_streamed_call_numbers_every_event_and_completes_with_the_whole_response() {
        let identity = Identity {
            id: "resp_1".into(),
            message_id: "msg_1".into(),
            created_at: 0,
            model: "m".into(),
            echo: Map::new(),
        };
        let mut stream = EventStream::new(identity);
        let mut out = Vec::new();
        for chunk in [
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c1",
                "function": {"name": "w", "arguments": "{\"a\":"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 2}}),
        ] {
            out.extend(stream.chunk(&chunk));
        }
        out.extend(stream.done());
        let events: Vec<Value> = String::from_utf8_lossy(&out)
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter_map(|d| serde_json::from_str(d).ok())
            .collect();
        let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
        assert_eq!(
            kinds,
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.done",
                "response.output_item.done",
                "response.completed"
            ]
        );
        for (n, event) in events.iter().enumerate() {
            assert_eq!(event["sequence_number"], n as u64);
        }
        let done = &events[7]["response"];
        assert_eq!(done["output"][0]["arguments"], "{\"a\":1}");
        assert_eq!(done["usage"]["total_tokens"], 5);
    }
}
