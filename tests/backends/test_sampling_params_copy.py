"""SamplingParams.copy and as_dict (the call path's cheap stand-ins for dataclasses.asdict) give what asdict
gives, for every field, and share no list with the original."""

from __future__ import annotations

from dataclasses import asdict, fields

from agentr1.core.generation import SamplingParams


def full() -> SamplingParams:
    return SamplingParams(max_new_tokens=7, temperature=0.3, top_p=0.9, top_k=5, stop=["</x>"],
                          stop_token_ids=[2, 3], seed=11, top_logprobs=2)


def test_as_dict_is_asdict_for_every_field():
    for params in (SamplingParams(), full()):
        assert params.as_dict() == asdict(params)
    assert set(full().as_dict()) == {f.name for f in fields(SamplingParams)}  # a new field must be added there


def test_copies_share_no_list():
    original = full()
    copy, as_dict = original.copy(), original.as_dict()
    assert copy == original and copy is not original
    copy.stop.append("more")
    copy.stop_token_ids.append(9)
    as_dict["stop"].append("x")
    copy.seed = 12
    assert original == full()
