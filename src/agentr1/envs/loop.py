"""AgentEnvLoop: drive an :class:`AgentEnv` with the policy, through the gateway.

Every model call goes through an OpenAI client of the current agentr1 session, so it is an ordinary
recorded step (exact token ids, logprobs, the messages the model saw). Each step's environment
reward is reported on that step (``areward(..., step="last", source="environment")``), so the trace
carries r_t where it was earned. When the environment names its state (:meth:`AgentEnv.anchor`),
the anchor of the state each action was taken from is recorded on that action's step too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentr1.envs.base import AgentEnv, StepResult
from agentr1.sdk import areward, async_openai_client

SEED_STRIDE = 1_000_003  # a seeded episode's k-th model call samples under seed + k * SEED_STRIDE


@dataclass
class Episode:
    """The result of one :meth:`AgentEnvLoop.run`."""

    total_reward: float
    steps: int
    done: bool  # False when max_steps ran out first
    info: dict[str, Any] = field(default_factory=dict)  # the last step's info
    rewards: list[float] = field(default_factory=list)  # r_t of each step
    last_action: dict[str, Any] | None = None  # the model's last assistant message


class AgentEnvLoop:
    """``await AgentEnvLoop(env, max_steps=8, temperature=0).run()`` inside an agentr1 session.

    ``sampling`` goes to ``chat.completions.create`` as is (``temperature``, ``max_tokens``, ...), except a
    ``seed``: the episode's k-th call is sent ``seed + k *`` :data:`SEED_STRIDE`, so the episode is reproducible
    and its calls still draw different random numbers. (With one seed for every call, an engine replays the
    same draws at each call's output positions: the calls' samples are correlated, and a multi-step success
    rate measured that way is not the one of independent sampling. With the SmolLM2 chains demo's policy, 9/32
    with one seed per episode against 1-7/32 unseeded.) ``model`` is the name the gateway serves (``policy``).

    The default client never retries and waits up to ``request_timeout_s`` for an answer: the
    openai client's own defaults (600 s, then 2 retries) turn a slow answer on a busy CPU into a
    second, ghost step of the trajectory. The caller (the trainer's agent timeout) bounds the episode."""

    def __init__(self, env: AgentEnv, max_steps: int = 8, *, model: str = "policy", client: Any = None,
                 request_timeout_s: float = 3600.0, **sampling: Any) -> None:
        if not isinstance(env, AgentEnv):
            raise TypeError(f"env must be an AgentEnv, got {type(env).__name__}")
        if not isinstance(max_steps, int) or isinstance(max_steps, bool) or max_steps < 1:
            raise ValueError(f"max_steps must be a positive int, got {max_steps!r}")
        for reserved in ("messages", "tools", "stream"):
            if reserved in sampling:
                raise ValueError(f"{reserved!r} is set by the loop, not a sampling parameter")
        seed = sampling.get("seed")
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
            raise ValueError(f"seed must be an int, got {seed!r}")
        self.env, self.max_steps, self.model, self.client, self.sampling = env, max_steps, model, client, sampling
        self.request_timeout_s = request_timeout_s

    def call_sampling(self, call: int) -> dict[str, Any]:
        """The sampling arguments of the episode's ``call``-th model call (0-based)."""
        seed = self.sampling.get("seed")
        if seed is None:
            return self.sampling
        return {**self.sampling, "seed": seed + call * SEED_STRIDE}

    async def _act(self, client: Any, observation: list[dict[str, Any]], call: int) -> dict[str, Any]:
        tools = [tool.schema() for tool in self.env.tools]
        extra = {"tools": tools} if tools else {}
        reply = await client.chat.completions.create(model=self.model, messages=observation, **extra,
                                                     **self.call_sampling(call))
        return reply.choices[0].message.model_dump(exclude_none=True)

    async def run(self) -> Episode:
        client = self.client or async_openai_client(max_retries=0, timeout=self.request_timeout_s)
        episode = Episode(total_reward=0.0, steps=0, done=False)
        try:
            observation = await self.env.reset()
            while episode.steps < self.max_steps and not episode.done:
                state = self.env.anchor()  # the state the action is taken from (GiGPO), before the call
                action = await self._act(client, observation, episode.steps)
                result = await self.env.step(action)
                if not isinstance(result, StepResult):
                    raise TypeError(f"{type(self.env).__name__}.step must return a StepResult, got {result!r}")
                # the step's reward and its anchor in one request (one round trip and transaction, not two)
                await areward(float(result.reward), name="env", step="last", source="environment", anchor=state)
                episode.steps += 1
                episode.rewards.append(float(result.reward))
                episode.total_reward += float(result.reward)
                episode.done, episode.info, episode.last_action = result.done, result.info, action
                observation = result.observation
        finally:
            await self.env.close()
        return episode
