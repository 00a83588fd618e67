"""The official `openai` Python client against a real reference engine process."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.engine_process import MODEL, EngineProcess, running_engine

openai = pytest.importorskip("openai")
pytestmark = pytest.mark.e2e
KEY = "sk-openai-client-test"


@pytest.fixture(scope="module")
def served() -> Iterator[EngineProcess]:
    with running_engine("--api-key", KEY) as eng:
        yield eng


@pytest.fixture()
def client(served: EngineProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=served.url + "/v1", api_key=KEY, max_retries=0, timeout=30)


def test_models_list(client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list()] == [MODEL]


def test_completion_non_stream(client: openai.OpenAI) -> None:
    resp = client.completions.create(model=MODEL, prompt="The capital of France is",
                                     max_tokens=10, temperature=0, seed=1,
                                     extra_body={"ignore_eos": True})
    assert resp.id.startswith("cmpl-")
    assert resp.choices[0].finish_reason == "length"
    assert resp.usage is not None
    assert resp.usage.prompt_tokens == len(b"The capital of France is") + 1
    assert resp.usage.completion_tokens == 10
    again = client.completions.create(model=MODEL, prompt="The capital of France is",
                                      max_tokens=10, temperature=0, seed=1,
                                      extra_body={"ignore_eos": True})
    assert again.choices[0].text == resp.choices[0].text  # seeded: reproducible


def test_completion_stream_with_usage(client: openai.OpenAI) -> None:
    stream = client.completions.create(model=MODEL, prompt="Count:", max_tokens=15,
                                       stream=True, stream_options={"include_usage": True},
                                       temperature=0, seed=1,
                                       extra_body={"ignore_eos": True})
    chunks = list(stream)
    text_chunks, last = chunks[:-1], chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert last.usage.completion_tokens == 15
    assert text_chunks[-1].choices[0].finish_reason == "length"
    streamed = "".join(c.choices[0].text for c in text_chunks)
    whole = client.completions.create(model=MODEL, prompt="Count:", max_tokens=15,
                                      temperature=0, seed=1, extra_body={"ignore_eos": True})
    assert streamed == whole.choices[0].text


def test_chat_non_stream(client: openai.OpenAI) -> None:
    resp = client.chat.completions.create(
        model=MODEL, messages=[{"role": "system", "content": "Be brief."},
                               {"role": "user", "content": "Hello"}],
        max_completion_tokens=8, extra_body={"ignore_eos": True})
    assert resp.id.startswith("chatcmpl-")
    assert resp.object == "chat.completion"
    assert resp.choices[0].message.role == "assistant"
    assert isinstance(resp.choices[0].message.content, str)
    assert resp.usage is not None and resp.usage.completion_tokens == 8


def test_chat_stream_with_usage_and_stop(client: openai.OpenAI) -> None:
    kwargs = dict(model=MODEL, messages=[{"role": "user", "content": "Go"}], max_tokens=40,
                  temperature=0, seed=5, extra_body={"ignore_eos": True})
    whole = client.chat.completions.create(**kwargs).choices[0].message.content
    stop = whole[10:12]
    stream = client.chat.completions.create(**kwargs, stream=True, stop=stop,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-2].choices[0].finish_reason == "stop"
    text = "".join(c.choices[0].delta.content or "" for c in chunks[:-1])
    assert text == whole[:whole.index(stop)]


def test_client_errors_map_to_openai_exceptions(served: EngineProcess) -> None:
    bad = openai.OpenAI(base_url=served.url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.completions.create(model=MODEL, prompt="x", max_tokens=1)
    good = openai.OpenAI(base_url=served.url + "/v1", api_key=KEY, max_retries=0)
    with pytest.raises(openai.BadRequestError) as excinfo:
        good.completions.create(model=MODEL, prompt="x", max_tokens=1, n=2)
    assert excinfo.value.body["param"] == "n"
    with pytest.raises(openai.BadRequestError, match="max_model_len"):
        good.completions.create(model=MODEL, prompt="x", max_tokens=100_000)


@pytest.mark.parametrize("question", ["Hello", "What is a KV cache? " * 5, "Why " * 40])
def test_chat_without_max_tokens_stops_like_a_model_does(client: openai.OpenAI, question: str) -> None:
    # vLLM lets such a request run to max_model_len; a model stops at EOS long before.
    resp = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": question}],
                                          timeout=60)
    assert resp.choices[0].finish_reason == "stop"
    assert resp.usage is not None and 16 <= resp.usage.completion_tokens < 2000
