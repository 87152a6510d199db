"""One engine process, several processes' backends (``LocalBackend(engine_address=...)``): a client backend gets
the answers the owner gets, learns every policy version before the owner's weight load returns, never has a row
split across two versions, cannot load weights itself, and leaving (or a wrong key) is handled."""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Iterator
from typing import Any

import pytest

from agentr1.core.generation import BackendError, BackendUnavailable, GenerateRequest, SamplingParams
from agentr1.engine import EngineOptions
from agentr1.gateway.backends import LocalBackend

pytestmark = pytest.mark.slow  # the owner spawns a process that loads torch and the model


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.fixture(scope="module")
def owner_and_client(tiny_model_path) -> Iterator[tuple[LocalBackend, LocalBackend]]:
    owner = LocalBackend(tiny_model_path, EngineOptions(device="cpu", threads=1), engine_process=True)
    run(owner.start())
    client = LocalBackend(tiny_model_path, EngineOptions(device="cpu"), engine_address=owner.engine_address)
    run(client.start())
    yield owner, client
    run(client.close())
    folder = os.path.dirname(owner.engine_address.path)
    run(owner.close())
    assert not os.path.exists(folder)  # the socket and its folder are gone with the engine


def requests() -> list[GenerateRequest]:
    return [GenerateRequest(list(range(100, 110 + 5 * i)), SamplingParams(max_new_tokens=10, seed=i))
            for i in range(5)]


async def answers(backend: LocalBackend) -> list[tuple[list[int], int]]:
    results = await asyncio.gather(*(backend.generate(r) for r in requests()))
    return [(r.output_ids, r.policy_version) for r in results]


def test_a_client_gets_the_owners_answers_while_both_run(owner_and_client):
    owner, client = owner_and_client
    assert client.engine.model is None and client.engine_address is None  # it loads no model, starts no engine

    async def both() -> tuple[Any, Any]:
        return await asyncio.gather(answers(owner), answers(client))

    ours, theirs = run(both())
    assert ours == theirs
    before = owner.stats.tokens_generated
    owner.refresh_stats()  # the child's counters: the client's rows too
    assert owner.stats.tokens_generated >= before and owner.stats.tokens_generated >= 100


def test_weights_loaded_by_the_owner_reach_the_client_with_their_version(owner_and_client, tmp_path):
    owner, client = owner_and_client
    from transformers import AutoModelForCausalLM

    from agentr1.core.models import build_tiny_random_model

    new = AutoModelForCausalLM.from_pretrained(build_tiny_random_model(tmp_path / "other", seed=3)).state_dict()
    long = GenerateRequest([5, 6, 7], SamplingParams(max_new_tokens=300, temperature=1.0, seed=1))
    old = client.policy_version

    async def scenario() -> tuple[Any, int, int]:
        running = asyncio.ensure_future(client.generate(long))
        await asyncio.sleep(0.3)  # the client's row runs in the engine
        version = await owner.update_weights_from_tensors({k: v.clone() for k, v in new.items()})
        seen = client.policy_version  # read at once: the update returned only after the client took it in
        return await running, version, seen

    result, version, seen = run(scenario())
    assert version == old + 1 == seen
    assert result.policy_version == old and len(result.output_ids) == 300  # one row, one version: the old one
    assert {v for _, v in run(answers(client))} == {version}
    assert run(answers(client)) == run(answers(owner))

    with pytest.raises(BackendError, match="loaded by the process that started it") as caught:
        run(client.update_weights_from_tensors({k: v.clone() for k, v in new.items()}))
    assert caught.value.status_code == 409 and client.policy_version == owner.policy_version == version


def test_a_client_that_leaves_stops_its_rows_and_the_engine_goes_on(owner_and_client, tiny_model_path):
    owner, _ = owner_and_client
    leaving = LocalBackend(tiny_model_path, EngineOptions(device="cpu"), engine_address=owner.engine_address)

    async def scenario() -> None:
        await leaving.start()
        stream = leaving.stream(GenerateRequest([5, 6, 7], SamplingParams(max_new_tokens=1500, seed=2)))
        assert (await stream.__anext__()).token_ids  # running in the engine
        await leaving.close()
        with pytest.raises(BackendUnavailable):
            async for _ in stream:
                pass
        await asyncio.wait_for(owner.pause(), 30)  # nothing of the client's is left running there
        await owner.resume()

    run(scenario())
    assert run(answers(owner))

    wrong = dataclasses.replace(owner.engine_address, authkey=b"not the key")
    with pytest.raises(BackendUnavailable, match="no engine process"):
        LocalBackend(tiny_model_path, EngineOptions(device="cpu"), engine_address=wrong).engine.start()
    again = LocalBackend(tiny_model_path, EngineOptions(device="cpu"),
                         engine_address=owner.engine_address)  # still accepted
    run(again.start())
    try:
        assert run(answers(again)) == run(answers(owner))
    finally:
        run(again.close())
