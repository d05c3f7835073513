"""The official `openai` Python SDK against intentgate, as an application
would use it: only `base_url` changes, plus the Idempotency-Key header.

Run by tests/openai_sdk.rs with INTENTGATE_URL, INTENTGATE_KEY and SIM_URL
set. Exits non-zero (with the failed assertion) on any deviation.
"""

import json
import os
import sys
import time
import urllib.request
import uuid
from typing import Literal, Optional

import openai
import pydantic

BASE = os.environ["INTENTGATE_URL"]
SIM = os.environ["SIM_URL"]
requests_sent = []


def count(request):
    requests_sent.append(request.url.path)


# The SDK's own HTTP client (httpx, or httpx2 in later SDKs), with a hook
# that counts every request it really sends, retries included.
client = openai.OpenAI(
    base_url=f"{BASE}/v1",
    api_key=os.environ["INTENTGATE_KEY"],
    timeout=20,
    http_client=openai.DefaultHttpxClient(event_hooks={"request": [count]}),
)


def sim_calls():
    with urllib.request.urlopen(f"{SIM}/sim/calls") as response:
        return json.load(response)["total"]


def key():
    return f"sdk-{uuid.uuid4()}"


def messages(text):
    return [{"role": "user", "content": text}]


def plain_completion():
    completion = client.chat.completions.create(
        model="chat", messages=messages("hello from the sdk"), extra_headers={"Idempotency-Key": key()}
    )
    assert completion.choices[0].message.content == "echo: hello from the sdk", completion


def streamed_completion():
    stream = client.chat.completions.create(
        model="chat", messages=messages("stream from the sdk"), stream=True,
        extra_headers={"Idempotency-Key": key()},
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == "echo: stream from the sdk", text


def same_call_twice_is_one_upstream_call():
    k, before = key(), sim_calls()
    first = client.chat.completions.with_raw_response.create(
        model="chat", messages=messages("twice"), extra_headers={"Idempotency-Key": k}
    )
    second = client.chat.completions.with_raw_response.create(
        model="chat", messages=messages("twice"), extra_headers={"Idempotency-Key": k}
    )
    assert first.parse() == second.parse(), (first.parse(), second.parse())
    assert first.http_response.content == second.http_response.content
    assert second.headers.get("idempotent-replayed") == "true"
    assert sim_calls() - before == 1, "exactly one upstream call"


def conflicting_reuse_is_one_request_and_an_error():
    k = key()
    client.chat.completions.create(model="chat", messages=messages("original"), extra_headers={"Idempotency-Key": k})
    requests_sent.clear()
    try:
        client.chat.completions.create(model="chat", messages=messages("changed"), extra_headers={"Idempotency-Key": k})
    except openai.ConflictError as err:
        assert err.status_code == 409
        assert "idempotency-key-reused" in str(err.body), err.body
    else:
        raise AssertionError("a reused key must be refused")
    assert len(requests_sent) == 1, f"the SDK must not retry: {requests_sent}"


def unknown_job_is_an_error_not_a_hang():
    body = json.dumps({"model": "sim:ok", "script": "hang", "times": 1}).encode()
    urllib.request.urlopen(urllib.request.Request(f"{SIM}/sim/scripts", data=body, method="POST",
                                                  headers={"content-type": "application/json"}))
    requests_sent.clear()
    try:
        client.chat.completions.create(model="chat", messages=messages("will hang"),
                                       extra_headers={"Idempotency-Key": key()})
    except openai.ConflictError as err:
        assert "outcome-unknown" in str(err.body), err.body
    else:
        raise AssertionError("an unknown outcome must be an error")
    assert len(requests_sent) == 1, f"the SDK must not retry an unknown outcome: {requests_sent}"


WEATHER = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}]


def queue_script(script, times=1, model="sim:ok"):
    body = json.dumps({"model": model, "script": script, "times": times}).encode()
    urllib.request.urlopen(urllib.request.Request(f"{SIM}/sim/scripts", data=body, method="POST",
                                                  headers={"content-type": "application/json"}))


def get_json(url, headers=None):
    request = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(request) as response:
        return json.load(response)


def stored_job(job_id):
    return get_json(f"{BASE}/v1/jobs/{job_id}", {"authorization": f"Bearer {os.environ['INTENTGATE_KEY']}"})


def seen_by_provider(job_id):
    return get_json(f"{SIM}/sim/requests/{job_id}")["body"]


def tool_call_plain():
    k = key()
    queue_script("tool_call")
    raw = client.chat.completions.with_raw_response.create(
        model="chat", messages=messages("Weather in Utrecht?"), tools=WEATHER,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        extra_headers={"Idempotency-Key": k},
    )
    completion = raw.parse()
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls", completion
    assert choice.message.content is None, completion
    call = choice.message.tool_calls[0]
    assert call.function.name == "get_weather", call
    assert "city" in json.loads(call.function.arguments), call
    assert completion.model == "sim:ok", "the body names the model that answered"
    assert raw.headers.get("x-intentgate-provider") == "sim-primary", dict(raw.headers)
    job_id = raw.headers["x-intentgate-job-id"]
    stored = stored_job(job_id)["result"]["completion"]["choices"][0]["message"]["tool_calls"][0]
    assert stored["function"]["arguments"] == call.function.arguments, stored
    assert seen_by_provider(job_id)["tools"] == WEATHER, "the tools reached the provider intact"
    again = client.chat.completions.with_raw_response.create(
        model="chat", messages=messages("Weather in Utrecht?"), tools=WEATHER,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        extra_headers={"Idempotency-Key": k},
    )
    assert again.http_response.content == raw.http_response.content, "the replay is byte-identical"


def tool_call_streamed():
    k = key()
    queue_script("tool_call")
    stream = client.chat.completions.create(
        model="chat", messages=messages("Weather in Delft?"), tools=WEATHER, stream=True,
        extra_headers={"Idempotency-Key": k},
    )
    name, arguments, finish, fragments = None, "", None, 0
    for chunk in stream:
        for choice in chunk.choices:
            for call in choice.delta.tool_calls or []:
                name = call.function.name or name
                if call.function.arguments:
                    arguments += call.function.arguments
                    fragments += 1
            finish = choice.finish_reason or finish
    assert name == "get_weather" and finish == "tool_calls", (name, finish)
    assert fragments >= 2, "the arguments arrived in fragments, passed through as they came"
    job = client.chat.completions.with_raw_response.create(
        model="chat", messages=messages("Weather in Delft?"), tools=WEATHER, stream=True,
        extra_headers={"Idempotency-Key": k},
    )
    stored = stored_job(job.headers["x-intentgate-job-id"])["result"]["completion"]["choices"][0]["message"]
    assert stored["tool_calls"][0]["function"]["arguments"] == arguments, (stored, arguments)
    json.loads(arguments)


def tool_round_trip_reaches_the_provider_intact():
    conversation = [
        {"role": "user", "content": "Weather in Utrecht?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Utrecht\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"},
    ]
    raw = client.chat.completions.with_raw_response.create(
        model="chat", messages=conversation, tools=WEATHER, extra_headers={"Idempotency-Key": key()},
    )
    completion = raw.parse()
    assert "sunny, 21 C" in completion.choices[0].message.content, completion
    seen = seen_by_provider(raw.headers["x-intentgate-job-id"])["messages"]
    assert seen == conversation, seen


def an_agent_loop_on_the_plain_chat_route():
    # No script: the echo model calls the offered tool, then answers its result.
    conversation = messages("Weather in Utrecht?")
    first = client.chat.completions.create(model="chat", messages=conversation, tools=WEATHER,
                                           extra_headers={"Idempotency-Key": key()})
    assert first.choices[0].message.tool_calls, first
    call = first.choices[0].message.tool_calls[0]
    assert first.choices[0].finish_reason == "tool_calls" and call.function.name == "get_weather", first
    assert isinstance(json.loads(call.function.arguments)["city"], str), call
    conversation += [first.choices[0].message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"}]
    answer = client.chat.completions.create(model="chat", messages=conversation, tools=WEATHER,
                                            extra_headers={"Idempotency-Key": key()})
    assert answer.choices[0].finish_reason == "stop", answer
    assert "sunny, 21 C" in answer.choices[0].message.content, answer


class Pet(pydantic.BaseModel):
    name: str
    kind: Literal["cat", "dog"]


class Person(pydantic.BaseModel):
    name: str
    age: int = pydantic.Field(ge=18)
    nickname: Optional[str]
    pets: list[Pet]


def parse_gives_the_client_s_model():
    # Older SDKs have `parse` under `beta` only.
    parse = getattr(client.chat.completions, "parse", None) or client.beta.chat.completions.parse
    completion = parse(model="chat", messages=messages("Ada Lovelace"), response_format=Person,
                       extra_headers={"Idempotency-Key": key()})
    person = completion.choices[0].message.parsed
    assert isinstance(person, Person) and person.age >= 18 and person.pets, completion


def multi_part_content_reaches_the_provider_intact():
    parts = [{"type": "text", "text": "What is in this picture?"},
             {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]
    raw = client.chat.completions.with_raw_response.create(
        model="chat", messages=[{"role": "user", "content": parts}], extra_headers={"Idempotency-Key": key()},
    )
    raw.parse()
    assert seen_by_provider(raw.headers["x-intentgate-job-id"])["messages"][0]["content"] == parts


def two_choices_plain_and_streamed():
    completion = client.chat.completions.create(
        model="chat", messages=messages("two"), n=2, extra_headers={"Idempotency-Key": key()},
    )
    assert [c.index for c in completion.choices] == [0, 1], completion
    assert completion.choices[0].message.content == "echo: two", completion
    assert completion.choices[1].message.content == "echo[1]: two", completion
    texts = {}
    for chunk in client.chat.completions.create(
        model="chat", messages=messages("two"), n=2, stream=True, extra_headers={"Idempotency-Key": key()},
    ):
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + (choice.delta.content or "")
    assert texts == {0: "echo: two", 1: "echo[1]: two"}, texts


def usage_details_and_fingerprint_are_kept():
    completion = client.chat.completions.create(
        model="chat", messages=messages("usage"), extra_headers={"Idempotency-Key": key()},
    )
    assert completion.system_fingerprint, completion
    assert completion.usage.prompt_tokens_details is not None, completion.usage
    assert completion.usage.completion_tokens_details is not None, completion.usage
    last = None
    for chunk in client.chat.completions.create(
        model="chat", messages=messages("usage"), stream=True, stream_options={"include_usage": True},
        extra_headers={"Idempotency-Key": key()},
    ):
        last = chunk
    assert last.choices == [] and last.usage is not None and last.usage.total_tokens > 0, last


def invalid_shape_is_refused_and_nothing_stored():
    k, before = key(), sim_calls()
    try:
        client.chat.completions.create(
            model="chat", messages=[{"role": "user", "content": 42}], extra_headers={"Idempotency-Key": k},
        )
    except openai.UnprocessableEntityError as err:
        assert "/messages/0/content" in str(err), str(err)
    else:
        raise AssertionError("content 42 must be refused")
    assert sim_calls() == before, "no provider was called"


def conflict_exception_carries_the_detail():
    k = key()
    client.chat.completions.create(model="chat", messages=messages("one"), extra_headers={"Idempotency-Key": k})
    try:
        client.chat.completions.create(model="chat", messages=messages("two"), extra_headers={"Idempotency-Key": k})
    except openai.ConflictError as err:
        assert "bound to a different request body" in str(err), str(err)
        assert err.response.headers.get("x-intentgate-job-id"), dict(err.response.headers)
    else:
        raise AssertionError("a reused key must be refused")


def model_by_id():
    assert client.models.retrieve("chat").id == "chat"
    try:
        client.models.retrieve("no-such-route")
    except openai.NotFoundError as err:
        assert "no-such-route" in str(err), str(err)
    else:
        raise AssertionError("an unknown model is 404")


FUNCTION_TOOL = {"type": "function", "name": "get_weather", "description": "The weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def responses_plain_and_streamed():
    response = client.responses.create(model="chat", instructions="Be brief.", input="hello responses",
                                       extra_headers={"Idempotency-Key": key()})
    assert response.status == "completed", response
    assert response.output_text == "echo: hello responses", response.output_text
    with client.responses.stream(model="chat", input="stream responses",
                                 extra_headers={"Idempotency-Key": key()}) as stream:
        deltas = "".join(event.delta for event in stream if event.type == "response.output_text.delta")
        final = stream.get_final_response()
    assert deltas == "echo: stream responses" == final.output_text, (deltas, final)


def responses_function_tool_round_trip():
    question = [{"role": "user", "content": "Weather in Utrecht?"}]
    first = client.responses.create(model="tools", input=question, tools=[FUNCTION_TOOL],
                                    tool_choice={"type": "function", "name": "get_weather"},
                                    extra_headers={"Idempotency-Key": key()})
    call = next(item for item in first.output if item.type == "function_call")
    assert call.name == "get_weather" and json.loads(call.arguments)["city"], call
    second = client.responses.create(
        model="tools", tools=[FUNCTION_TOOL], extra_headers={"Idempotency-Key": key()},
        input=[*question, call.model_dump(), {"type": "function_call_output", "call_id": call.call_id,
                                              "output": "Sunny"}])
    assert second.output_text == "echo: Sunny", second.output_text


def responses_previous_response_id():
    first = client.responses.create(model="chat", input="My name is Ada.", extra_headers={"Idempotency-Key": key()})
    second = client.responses.with_raw_response.create(model="chat", input="What is my name?",
                                                       previous_response_id=first.id,
                                                       extra_headers={"Idempotency-Key": key()})
    sent = seen_by_provider(second.headers["x-intentgate-job-id"])
    assert [m["content"] for m in sent["messages"]][0] == "My name is Ada.", sent
    assert second.parse().status == "completed"


def responses_background_then_retrieve():
    started = client.responses.create(model="chat", input="in the background", background=True,
                                      extra_headers={"Idempotency-Key": key()})
    assert started.status in ("in_progress", "completed"), started
    for _ in range(100):
        response = client.responses.retrieve(started.id)
        if response.status == "completed":
            break
        time.sleep(0.05)
    assert response.status == "completed" and response.output_text == "echo: in the background", response


def responses_input_items_and_cancel():
    first = client.responses.create(model="chat", input="My name is Grace.", extra_headers={"Idempotency-Key": key()})
    second = client.responses.create(model="chat", input="And yours?", previous_response_id=first.id,
                                     extra_headers={"Idempotency-Key": key()})
    items = client.responses.input_items.list(second.id, order="asc")
    texts = [item.content[0].text for item in items.data]
    assert texts == ["My name is Grace.", "echo: My name is Grace.", "And yours?"], texts
    queue_script("hold=sdk-cancel")
    started = client.responses.create(model="chat", input="cancel me", background=True,
                                      extra_headers={"Idempotency-Key": key()})
    cancelled = client.responses.cancel(started.id)
    assert cancelled.status == "cancelled", cancelled
    urllib.request.urlopen(urllib.request.Request(f"{SIM}/sim/release/sdk-cancel", method="POST"))


def embeddings_once_per_key():
    # The SDK asks for base64 unless told otherwise, and decodes it.
    before = sim_calls()
    idem = {"Idempotency-Key": key()}
    first = client.embeddings.create(model="embeddings", input=["a red fox", "a lazy dog"], dimensions=8,
                                     extra_headers=idem)
    again = client.embeddings.create(model="embeddings", input=["a red fox", "a lazy dog"], dimensions=8,
                                     extra_headers=idem)
    assert [len(item.embedding) for item in first.data] == [8, 8], first
    assert abs(sum(x * x for x in first.data[0].embedding) - 1.0) < 1e-4, first
    assert again.data[1].embedding == first.data[1].embedding
    assert first.usage.prompt_tokens > 0 and first.model == "sim:ok", first
    assert sim_calls() == before + 1, "one upstream call for two requests"


for test in [plain_completion, streamed_completion, same_call_twice_is_one_upstream_call,
             conflicting_reuse_is_one_request_and_an_error, unknown_job_is_an_error_not_a_hang,
             tool_call_plain, tool_call_streamed, tool_round_trip_reaches_the_provider_intact,
             an_agent_loop_on_the_plain_chat_route, parse_gives_the_client_s_model,
             multi_part_content_reaches_the_provider_intact, two_choices_plain_and_streamed,
             usage_details_and_fingerprint_are_kept, invalid_shape_is_refused_and_nothing_stored,
             conflict_exception_carries_the_detail, model_by_id, responses_plain_and_streamed,
             responses_function_tool_round_trip, responses_previous_response_id,
             responses_background_then_retrieve, responses_input_items_and_cancel, embeddings_once_per_key]:
    test()
    print(f"ok   {test.__name__}")
print(f"openai {openai.__version__}: all passed")
sys.exit(0)
