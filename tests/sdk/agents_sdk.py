"""The `openai-agents` SDK running an agent with one function tool to
completion through intentgate's Responses door: only the client's base URL
changes. The SDK sends no Idempotency-Key; the shipped `tools` route
derives one from each request, so each model call is one job and one
upstream call — also when the SDK's client gives up on a slow answer and
retries.

Run by tests/official_sdks.rs with INTENTGATE_URL, INTENTGATE_KEY and
SIM_URL set. Exits non-zero (with the failed assertion) on any deviation.
"""

import asyncio
import json
import os
import sys
import urllib.request

import openai
from agents import Agent, Runner, function_tool, set_default_openai_client, set_tracing_disabled

SIM = os.environ["SIM_URL"]
sent = []


async def count(request):
    sent.append(request.url.path)


def sim_calls():
    with urllib.request.urlopen(f"{SIM}/sim/calls") as response:
        return json.load(response)["total"]


client = openai.AsyncOpenAI(base_url=os.environ["INTENTGATE_URL"] + "/v1", api_key=os.environ["INTENTGATE_KEY"],
                            http_client=openai.DefaultAsyncHttpxClient(event_hooks={"request": [count]}))
set_default_openai_client(client, use_for_tracing=False)
set_tracing_disabled(True)


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny in {city}"


agent = Agent(name="weather", instructions="Answer with the weather.", model="tools", tools=[get_weather])
before = sim_calls()
result = asyncio.run(Runner.run(agent, "Weather in Utrecht?"))
assert "Sunny in" in result.final_output, result.final_output
assert sent == ["/v1/responses", "/v1/responses"], f"a tool call, then the answer: {sent}"
assert sim_calls() - before == 2, "one upstream call per model call"
print("ok tool agent")

# The same agent with an impatient client: its first model call is slower
# than the client's timeout, so the SDK sends it again (and again).
sent.clear()
impatient = openai.AsyncOpenAI(base_url=os.environ["INTENTGATE_URL"] + "/v1", api_key=os.environ["INTENTGATE_KEY"],
                               timeout=0.6, max_retries=5,
                               http_client=openai.DefaultAsyncHttpxClient(event_hooks={"request": [count]}))
set_default_openai_client(impatient, use_for_tracing=False)
script = json.dumps({"model": None, "script": "delay=1500", "times": 1}).encode()
urllib.request.urlopen(urllib.request.Request(f"{SIM}/sim/scripts", data=script,
                                              headers={"content-type": "application/json"}))
before = sim_calls()
result = asyncio.run(Runner.run(agent, "Weather in Delft?"))
assert "Sunny in" in result.final_output, result.final_output
assert len(sent) >= 3, f"the slow call was sent again: {sent}"
assert sim_calls() - before == 2, "still one upstream call per model call"
print("ok retries")
print("all passed")
sys.stdout.flush()
