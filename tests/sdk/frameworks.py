"""The frameworks people build agents with, pointed at intentgate by base URL
alone: the openai SDK itself (chat completions, Responses, embeddings),
LangChain (`bind_tools`, `with_structured_output` on the OpenAI and
the Anthropic integrations), instructor (a structured answer, with a
re-ask after a failed validation) and a pydantic-ai agent with a tool. No
Idempotency-Key anywhere, the shipped routes: each to completion, with the
frameworks' own retries on, one job and one upstream call per model call.
One call of each framework's client is slower than its timeout, so it
retries (counted at its HTTP client): still one upstream call.

Run by tests/official_sdks.rs with INTENTGATE_URL, INTENTGATE_KEY and
SIM_URL set. Exits non-zero (with the failed assertion) on any deviation.
"""

import json
import os
import sys
import urllib.request
import uuid

import pydantic

BASE = os.environ["INTENTGATE_URL"]
KEY = os.environ["INTENTGATE_KEY"]
SIM = os.environ["SIM_URL"]


def sim_calls():
    with urllib.request.urlopen(f"{SIM}/sim/calls") as response:
        return json.load(response)["total"]


def slow_next_call(delay_ms=1500):
    """The simulator's next call waits longer than a client's 0.6 s timeout."""
    body = json.dumps({"model": None, "script": f"delay={delay_ms}", "times": 1}).encode()
    urllib.request.urlopen(urllib.request.Request(f"{SIM}/sim/scripts", data=body,
                                                  headers={"content-type": "application/json"}))


def counting(sent):
    """An HTTP client that notes every request it really sends, retries included."""
    import httpx

    return httpx.Client(event_hooks={"request": [sent.append]})


def counting_async(sent):
    """The same, for a framework that sends with httpx's async client."""
    import httpx

    async def note(request):
        sent.append(request)

    return httpx.AsyncClient(event_hooks={"request": [note]})


class counted_sends:
    """Every request an httpx transport sends while this is open, noted: for a
    framework that builds its HTTP client itself (LangChain's Anthropic,
    whose SDK sends through httpx's successor, httpx2)."""

    def __enter__(self):
        import importlib

        self.sent, self.patched = [], []
        for name in ("httpx", "httpx2"):
            try:
                transport = importlib.import_module(name).HTTPTransport
            except ImportError:
                continue
            self.patched.append((transport, transport.handle_request))
            transport.handle_request = self.noting(transport.handle_request)
        return self.sent

    def noting(self, original):
        def handle_request(transport, request):
            self.sent.append(request)
            return original(transport, request)

        return handle_request

    def __exit__(self, *_):
        for transport, original in self.patched:
            transport.handle_request = original


class Person(pydantic.BaseModel):
    name: str
    age: int


def weather(city: str) -> str:
    """The weather in a city."""
    return "rain"


def openai_sdk_retries_are_one_job():
    """The openai SDK itself, no key: chat completions, the Responses API and
    embeddings, each call slower than the client's timeout."""
    import openai

    sent = []
    client = openai.OpenAI(base_url=f"{BASE}/v1", api_key=KEY, max_retries=5, timeout=0.6,
                           http_client=counting(sent))
    calls = [
        lambda text: client.chat.completions.create(model="chat", messages=[{"role": "user", "content": text}])
        .choices[0].message.content,
        lambda text: client.responses.create(model="chat", input=text).output_text,
        lambda text: str(len(client.embeddings.create(model="embeddings", input=text).data)),
    ]
    for call in calls:
        sent.clear()
        slow_next_call()
        before = sim_calls()
        answer = call(f"slow {uuid.uuid4()}")
        assert answer, answer
        assert len(sent) >= 2, f"the client retried ({len(sent)} requests)"
        assert sim_calls() - before == 1, f"the client's retries found the same job: {answer}"


def langchain_openai_tools_and_structured_output():
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(model="chat", base_url=f"{BASE}/v1", api_key=KEY, max_retries=3, timeout=20)
    before = sim_calls()
    called = llm.bind_tools([weather], tool_choice="weather").invoke(f"Weather in Utrecht? {uuid.uuid4()}")
    assert called.tool_calls and called.tool_calls[0]["name"] == "weather", called
    person = llm.with_structured_output(Person, method="json_schema").invoke(f"Ann is 31. {uuid.uuid4()}")
    assert isinstance(person, Person), person
    assert sim_calls() - before == 2, "one upstream call per model call"


def langchain_openai_retry_is_one_job():
    from langchain_openai import ChatOpenAI

    sent = []
    impatient = ChatOpenAI(model="chat", base_url=f"{BASE}/v1", api_key=KEY, max_retries=5, timeout=0.6,
                           http_client=counting(sent))
    slow_next_call()
    before = sim_calls()
    answer = impatient.invoke(f"slow {uuid.uuid4()}")
    assert answer.content.startswith("echo: slow"), answer
    assert len(sent) >= 2, f"the client retried ({len(sent)} requests)"
    assert sim_calls() - before == 1, "the client's retries found the same job"


def langchain_anthropic_tools_and_structured_output():
    from langchain_anthropic import ChatAnthropic

    llm = ChatAnthropic(model="claude-sonnet-4-5", base_url=BASE, api_key=KEY, max_retries=3, timeout=20)
    before = sim_calls()
    called = llm.bind_tools([weather], tool_choice="weather").invoke(f"Weather in Utrecht? {uuid.uuid4()}")
    assert called.tool_calls and called.tool_calls[0]["name"] == "weather", called
    person = llm.with_structured_output(Person).invoke(f"Ann is 31. {uuid.uuid4()}")
    assert isinstance(person, Person), person
    assert sim_calls() - before == 2, "one upstream call per model call"


def langchain_anthropic_retry_is_one_job():
    from langchain_anthropic import ChatAnthropic

    impatient = ChatAnthropic(model="claude-sonnet-4-5", base_url=BASE, api_key=KEY, max_retries=5,
                              default_request_timeout=0.6)
    slow_next_call()
    before = sim_calls()
    with counted_sends() as sent:
        answer = impatient.invoke(f"slow {uuid.uuid4()}")
    assert "echo: slow" in str(answer.content), answer
    assert len(sent) >= 2, f"the client retried ({len(sent)} requests)"
    assert sim_calls() - before == 1, "the client's retries found the same job"


def instructor_retry_is_one_job():
    import instructor
    import openai

    sent = []
    client = instructor.from_openai(openai.OpenAI(base_url=f"{BASE}/v1", api_key=KEY, max_retries=5, timeout=0.6,
                                                  http_client=counting(sent)))
    slow_next_call()
    before = sim_calls()
    person = client.chat.completions.create(
        model="chat", response_model=Person, messages=[{"role": "user", "content": f"Ann is 31. {uuid.uuid4()}"}])
    assert isinstance(person, Person), person
    assert len(sent) >= 2, f"the client retried ({len(sent)} requests)"
    assert sim_calls() - before == 1, "the client's retries found the same job"


def instructor_reasks_after_a_failed_validation():
    import instructor
    import openai

    asked = []

    class Checked(pydantic.BaseModel):
        name: str
        age: int

        @pydantic.field_validator("name")
        @classmethod
        def not_the_first_answer(cls, name):
            asked.append(name)
            if len(asked) == 1:
                raise ValueError("give the name again")
            return name

    client = instructor.from_openai(openai.OpenAI(base_url=f"{BASE}/v1", api_key=KEY, max_retries=3))
    before = sim_calls()
    person = client.chat.completions.create(
        model="chat", response_model=Checked, max_retries=2,
        messages=[{"role": "user", "content": f"Ann is 31. {uuid.uuid4()}"}])
    assert isinstance(person, Checked) and len(asked) == 2, (person, asked)
    assert sim_calls() - before == 2, "the re-ask is a new request: one upstream call each"


def pydantic_ai_agent_calls_a_tool():
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    model = OpenAIChatModel("chat", provider=OpenAIProvider(base_url=f"{BASE}/v1", api_key=KEY))
    agent = Agent(model)
    called = []

    @agent.tool_plain
    def forecast(city: str) -> str:
        """The weather in a city."""
        called.append(city)
        return "rain"

    before = sim_calls()
    result = agent.run_sync(f"Weather in Utrecht? {uuid.uuid4()}")
    assert len(called) == 1 and "rain" in result.output, (called, result.output)
    assert sim_calls() - before == 2, "a call, then an answer: one upstream call each"


def pydantic_ai_retry_is_one_job():
    import openai
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    sent = []
    client = openai.AsyncOpenAI(base_url=f"{BASE}/v1", api_key=KEY, max_retries=5, timeout=0.6,
                                http_client=counting_async(sent))
    agent = Agent(OpenAIChatModel("chat", provider=OpenAIProvider(openai_client=client)))
    slow_next_call()
    before = sim_calls()
    result = agent.run_sync(f"slow {uuid.uuid4()}")
    assert result.output.startswith("echo: slow"), result.output
    assert len(sent) >= 2, f"the client retried ({len(sent)} requests)"
    assert sim_calls() - before == 1, "the client's retries found the same job"


if __name__ == "__main__":
    for test in [openai_sdk_retries_are_one_job, langchain_openai_tools_and_structured_output, langchain_openai_retry_is_one_job,
                 langchain_anthropic_tools_and_structured_output, langchain_anthropic_retry_is_one_job,
                 instructor_reasks_after_a_failed_validation, instructor_retry_is_one_job,
                 pydantic_ai_agent_calls_a_tool, pydantic_ai_retry_is_one_job]:
        test()
        print(f"ok {test.__name__}")
    print("all passed")
    sys.exit(0)
