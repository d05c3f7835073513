"""The official `openai` Python SDK against intentgate, as an application
would use it: only `base_url` changes, plus the Idempotency-Key header.

Run by tests/openai_sdk.rs with INTENTGATE_URL, INTENTGATE_KEY and SIM_URL
set. Exits non-zero (with the failed assertion) on any deviation.
"""

import json
import os
import sys
import urllib.request
import uuid

import openai

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


for test in [plain_completion, streamed_completion, same_call_twice_is_one_upstream_call,
             conflicting_reuse_is_one_request_and_an_error, unknown_job_is_an_error_not_a_hang]:
    test()
    print(f"ok   {test.__name__}")
print(f"openai {openai.__version__}: all passed")
sys.exit(0)
