"""AgentEnv + AgentEnvLoop and AgentFlowBase through a real gateway: the environment defines the
context (here a sliding window over its structured history), and the stored steps show that this
context, not the raw history, is what the model saw; flows make their own model calls as steps."""

from __future__ import annotations

import asyncio

import pytest

from agentr1.envs import AgentEnv, AgentEnvLoop, AgentFlowBase, StepResult
from agentr1.envs.loop import SEED_STRIDE
from agentr1.sdk import session

SECRET = 7


class GuessNumber(AgentEnv):
    """Guess a number with higher/lower hints. The observation keeps the instructions and only the
    last exchange (a sliding window): o_{t+1} = C(history), not the append-only transcript."""

    def __init__(self, task, *, window: int = 1):
        self.task, self.window = task, window
        self.history: list[tuple[str, str]] = []  # (guess, hint)
        self.closed = False

    def observation(self):
        messages = [{"role": "system", "content": "Guess the number between 1 and 9."},
                    {"role": "user", "content": "Your first guess?"}]
        for guess, hint in self.history[-self.window:]:
            messages += [{"role": "assistant", "content": guess}, {"role": "user", "content": hint}]
        return messages

    async def reset(self):
        self.history = []
        return self.observation()

    async def step(self, action):
        guess = int("".join(ch for ch in action["content"] if ch.isdigit()) or 0)
        hint = "correct" if guess == SECRET else ("higher" if guess < SECRET else "lower")
        self.history.append((action["content"], hint))
        return StepResult(self.observation(), 1.0 if guess == SECRET else -0.1, guess == SECRET, {"hint": hint})

    async def close(self):
        self.closed = True


def binary_search(prompt: str) -> str:
    """Reads only what the model was shown: the last hint (if any) and the last guess."""
    turns = prompt.split("<|im_start|>assistant\n")
    if len(turns) == 2:
        return "5"
    last_guess = int(turns[-2].split("<|im_end|>")[0])
    hint = turns[-2].split("<|im_start|>user\n")[-1].split("<|im_end|>")[0]
    return str(last_guess + 1 if hint == "higher" else last_guess - 1)


def test_env_defined_context_is_what_the_model_saw(gateway):
    env = GuessNumber({"id": "guess"})

    async def go():
        async with session(task_id="guess") as active:
            return active.id, await AgentEnvLoop(env, max_steps=6).run()

    with gateway(binary_search) as (_, store):
        session_id, episode = asyncio.run(go())
        steps = store.get_session(session_id).steps

    assert [s.action["content"] for s in steps] == ["5", "6", "7"]
    assert (episode.steps, episode.done, episode.info) == (3, True, {"hint": "correct"})
    assert episode.rewards == [-0.1, -0.1, 1.0] and abs(episode.total_reward - 0.8) < 1e-9
    assert [s.reward for s in steps] == [-0.1, -0.1, 1.0]
    assert env.closed
    # step 2 saw the window (instructions + the last exchange), not the guess "5"
    assert steps[2].messages_sent[2:] == [{"role": "assistant", "content": "6"}, {"role": "user", "content": "higher"}]
    assert steps[2].messages_seen == steps[2].messages_sent
    assert len(steps[2].messages_sent) == 4


class Debate(AgentFlowBase):
    """Its own control flow: two concurrent drafts, then a judge call that picks one."""

    async def run(self, task):
        client = self.client()

        async def ask(text):
            reply = await client.chat.completions.create(model="policy", messages=[{"role": "user", "content": text}])
            return reply.choices[0].message.content

        drafts = await asyncio.gather(ask("draft A"), ask("draft B"))
        verdict = await ask(f"pick one of {drafts}")
        await self.reward(0.5)  # on the judge's step
        return 1.0 if "draft" in verdict else 0.0


def test_flow_calls_are_ordinary_steps(gateway):
    async def go():
        async with session(task_id="debate") as active:
            return active.id, await Debate().run({"id": "debate"})

    with gateway(lambda prompt: "echo " + prompt.rsplit("<|im_start|>user\n", 1)[-1].split("<|im_end|>")[0]) as (_, store):
        session_id, result = asyncio.run(go())
        trace = store.get_session(session_id)

    assert result == 1.0
    assert len(trace.steps) == 3
    assert [s.reward for s in trace.steps] == [None, None, 0.5]
    assert trace.steps[2].messages_sent[0]["content"].startswith("pick one of")


def test_a_seeded_episode_gives_each_call_a_seed_of_its_own(gateway):
    """One seed for the episode; its calls reach the gateway (and the store) as seed + k * SEED_STRIDE,
    so the engine draws different random numbers for each call of a reproducible episode."""
    async def go():
        async with session(task_id="guess-seeded") as active:
            return active.id, await AgentEnvLoop(GuessNumber({"id": "guess"}), max_steps=6, seed=11,
                                                 temperature=1.0).run()

    with gateway(binary_search) as (_, store):
        session_id, episode = asyncio.run(go())
        steps = store.get_session(session_id).steps

    assert episode.steps == 3
    assert [s.sampling["seed"] for s in steps] == [11, 11 + SEED_STRIDE, 11 + 2 * SEED_STRIDE]
    assert all(s.sampling["temperature"] == 1.0 for s in steps)


def test_an_unseeded_episode_sends_no_seed_and_a_bad_seed_is_refused():
    loop = AgentEnvLoop(GuessNumber({"id": "guess"}), temperature=1.0)
    assert loop.call_sampling(2) == {"temperature": 1.0}
    with pytest.raises(ValueError, match="seed must be an int"):
        AgentEnvLoop(GuessNumber({"id": "guess"}), seed="7")
