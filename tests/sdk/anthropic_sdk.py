"""The official `anthropic` Python SDK against intentgate's Messages door, as
an application would use it: only `base_url` changes, plus the
Idempotency-Key header.

Run by tests/official_sdks.rs with INTENTGATE_URL, INTENTGATE_KEY and
SIM_URL set. Exits non-zero (with the failed assertion) on any deviation.
"""

import json
import os
import sys
import urllib.request
import uuid

import anthropic

BASE = os.environ["INTENTGATE_URL"]
SIM = os.environ["SIM_URL"]
client = anthropic.Anthropic(base_url=BASE, api_key=os.environ["INTENTGATE_KEY"], timeout=20, max_retries=0)
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def sim_calls():
    with urllib.request.urlopen(f"{SIM}/sim/calls") as response:
        return json.load(response)["total"]


def key():
    return {"Idempotency-Key": f"sdk-{uuid.uuid4()}"}


def ask(text):
    return [{"role": "user", "content": text}]


def plain_message():
    message = client.messages.create(model="chat", max_tokens=64, system="Be brief.",
                                     messages=ask("hello from the sdk"), extra_headers=key())
    assert message.type == "message" and message.role == "assistant", message
    assert message.content[0].type == "text" and message.content[0].text, message
    assert message.stop_reason == "end_turn", message
    assert message.usage.input_tokens > 0, message


def same_key_is_one_job():
    headers = key()
    before = sim_calls()
    first = client.messages.create(model="chat", max_tokens=64, messages=ask("once"), extra_headers=headers)
    again = client.messages.with_raw_response.create(model="chat", max_tokens=64, messages=ask("once"),
                                                     extra_headers=headers)
    assert again.headers.get("idempotent-replayed") == "true", again.headers
    assert again.parse().model_dump() == first.model_dump()
    assert sim_calls() - before == 1, "one upstream call"


def streamed_message():
    with client.messages.stream(model="chat", max_tokens=64, messages=ask("stream from the sdk"),
                                extra_headers=key()) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text and final.content[0].text == text, (text, final)
    assert final.stop_reason == "end_turn", final


def tool_round_trip():
    question = ask("Weather in Utrecht?")
    message = client.messages.create(model="tools", max_tokens=64, tools=[WEATHER],
                                     tool_choice={"type": "tool", "name": "get_weather"},
                                     messages=question, extra_headers=key())
    assert message.stop_reason == "tool_use", message
    call = next(block for block in message.content if block.type == "tool_use")
    assert call.name == "get_weather" and isinstance(call.input, dict), call
    answer = client.messages.create(model="tools", max_tokens=64, tools=[WEATHER], extra_headers=key(), messages=[
        *question,
        {"role": "assistant", "content": [block.model_dump() for block in message.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "Sunny"}]},
    ])
    assert answer.type == "message", answer


def forced_tool_on_the_plain_chat_route():
    # What LangChain's structured output sends: one tool, forced. No script: the echo model calls it.
    person = {"name": "Person", "input_schema": {"type": "object", "required": ["name", "age"],
              "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}}}}
    message = client.messages.create(model="chat", max_tokens=64, tools=[person],
                                     tool_choice={"type": "tool", "name": "Person"},
                                     messages=ask("Ada Lovelace, 36"), extra_headers=key())
    assert message.stop_reason == "tool_use", message
    call = next(block for block in message.content if block.type == "tool_use")
    assert call.name == "Person" and isinstance(call.input["age"], int), call


def reused_key_is_a_conflict():
    headers = key()
    client.messages.create(model="chat", max_tokens=64, messages=ask("one intent"), extra_headers=headers)
    try:
        client.messages.create(model="chat", max_tokens=64, messages=ask("another"), extra_headers=headers)
    except anthropic.ConflictError as err:
        assert err.body["type"] == "error", err.body
        assert err.body["error"]["type"] == "invalid_request_error", err.body
        assert "job_id" in err.body, err.body
    else:
        raise AssertionError("a reused key with another body must be refused")


def sdk_retry_without_a_key_is_one_job():
    """No Idempotency-Key, as the SDK sends by itself; the route derives one.
    The provider takes longer than the client's timeout, so the SDK's own
    retry machinery sends the request again: the retries find the same job."""
    sent = []
    retrying = anthropic.Anthropic(
        base_url=BASE, api_key=os.environ["INTENTGATE_KEY"], timeout=0.6, max_retries=5,
        http_client=anthropic.DefaultHttpxClient(event_hooks={"request": [lambda request: sent.append(request)]}),
    )
    script = json.dumps({"model": None, "script": "delay=1500", "times": 1}).encode()
    urllib.request.urlopen(urllib.request.Request(f"{SIM}/sim/scripts", data=script,
                                                  headers={"content-type": "application/json"}))
    before = sim_calls()
    message = retrying.messages.create(model="chat", max_tokens=64, messages=ask(f"slow {uuid.uuid4()}"))
    assert message.type == "message", message
    assert len(sent) >= 2, f"the SDK retried ({len(sent)} requests)"
    assert sim_calls() - before == 1, "one upstream call for all of the SDK's requests"


def tokens_counted():
    counted = client.messages.count_tokens(model="chat", system="Be brief.", messages=ask("how many tokens is this?"))
    assert counted.input_tokens > 0, counted


def failover_from_anthropic_to_openai():
    # `anthropic-first` runs the Anthropic-dialect provider first; it fails once.
    body = json.dumps({"model": "sim:ok", "script": "status=503", "times": 1}).encode()
    urllib.request.urlopen(urllib.request.Request(f"{SIM}/sim/scripts", data=body, method="POST",
                                                  headers={"content-type": "application/json"}))
    raw = client.messages.with_raw_response.create(model="anthropic-first", max_tokens=64,
                                                   messages=ask("fail over"), extra_headers=key())
    message = raw.parse()
    assert message.content[0].text == "echo: fail over", message
    assert raw.headers.get("x-intentgate-provider") == "sim-primary", raw.headers
    job = raw.headers.get("x-intentgate-job-id")
    request = urllib.request.Request(f"{BASE}/v1/jobs/{job}",
                                     headers={"authorization": f"Bearer {os.environ['INTENTGATE_KEY']}"})
    with urllib.request.urlopen(request) as response:
        attempts = json.load(response)["attempts"]
    assert [a["provider"] for a in attempts] == ["sim-fallback", "sim-primary"], attempts


def models_listed():
    ids = [model.id for model in client.models.list()]
    assert "chat" in ids and "tools" in ids, ids


for check in [plain_message, same_key_is_one_job, streamed_message, tool_round_trip,
              forced_tool_on_the_plain_chat_route, reused_key_is_a_conflict,
              sdk_retry_without_a_key_is_one_job, tokens_counted, failover_from_anthropic_to_openai, models_listed]:
    check()
    print(f"ok: {check.__name__}")
print("all passed")
sys.stdout.flush()
