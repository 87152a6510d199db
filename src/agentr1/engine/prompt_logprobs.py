"""The log-probabilities of a prompt's own tokens (OpenAI's ``echo`` with ``logprobs``; vLLM's ``prompt_logprobs``,
SGLang's ``logprob_start_len=0``): ``GenerateRequest.prompt_logprobs``.

A row that asks for them gets one forward over its whole prompt beside its prefill (the batch's prefill reuses cached
prefixes and keeps only each segment's last logits, so it has no logits for most prompt positions): the model's
decoder over the prompt, then its output layer over the hidden states in chunks of :data:`CHUNK` positions, so that
the float32 logits held at once stay ``CHUNK x vocabulary`` (a Qwen2.5 prompt of 2,048 tokens: 155 MB, not 1.2 GB).
The values are those of the sampled tokens: ``log_softmax(logits / temperature)`` of each token given the ones before
(temperature 0: the logits as they are); the first token has none. The alternatives are the ``top_logprobs`` most
likely tokens at each position.
"""

from __future__ import annotations

from typing import Any

import torch

from agentr1.core.generation import SamplingParams, TokenLogprob

from .sampling import GREEDY_BELOW

__all__ = ["CHUNK", "PromptLogprobs", "prompt_logprobs"]

CHUNK = 256  # prompt positions whose logits are held at once

PromptLogprobs = tuple[list[float | None], list[list[TokenLogprob]]]


@torch.inference_mode()
def prompt_logprobs(model: Any, prompt_ids: list[int], sampling: SamplingParams) -> PromptLogprobs:
    """(each prompt token's log-probability, None for the first; each token's ``sampling.top_logprobs``
    alternatives, [] for the first) under ``model`` at ``sampling.temperature``."""
    device = next(model.parameters()).device
    ids = torch.tensor([prompt_ids], dtype=torch.long, device=device)
    hidden = model.get_decoder()(input_ids=ids, use_cache=False).last_hidden_state[0]
    head = model.get_output_embeddings()
    scale = getattr(model.config, "logits_scaling", None)  # architectures whose head divides the logits (Granite)
    cap = getattr(model.config, "final_logit_softcapping", None)  # or caps them (Gemma 2)
    values: list[float | None] = [None]
    tops: list[list[TokenLogprob]] = [[]]
    for start in range(0, len(prompt_ids) - 1, CHUNK):
        end = min(start + CHUNK, len(prompt_ids) - 1)  # positions start..end-1 predict tokens start+1..end
        logits = head(hidden[start:end]).float()
        if scale:
            logits = logits / scale
        if cap:
            logits = torch.tanh(logits / cap) * cap
        if sampling.temperature >= GREEDY_BELOW:
            logits = logits / sampling.temperature
        logp = torch.log_softmax(logits, dim=-1)
        values += logp.gather(1, ids[0, start + 1 : end + 1, None]).squeeze(1).tolist()
        if sampling.top_logprobs:
            best, best_ids = logp.topk(min(sampling.top_logprobs, logp.shape[-1]), dim=-1)
            tops += [[TokenLogprob(int(t), float(v)) for t, v in zip(row_ids, row, strict=True)]
                     for row_ids, row in zip(best_ids.tolist(), best.tolist(), strict=True)]
        else:
            tops += [[] for _ in range(end - start)]
    return values, tops
