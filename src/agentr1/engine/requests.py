"""What the embedded engine can run: :func:`check_request`, the local backend's check of every request before it is
queued (the prompt's ids, the sampling parameters, the context length, images)."""

from __future__ import annotations

from agentr1.core.generation import ContextLengthExceeded, GenerateRequest

__all__ = ["MAX_TOP_LOGPROBS", "check_request"]

MAX_TOP_LOGPROBS = 20


def check_request(request: GenerateRequest, *, vocab_size: int, max_context: int, model_name: str,
                  image_token_id: int | None) -> None:
    """Raise ValueError (ContextLengthExceeded for length) for a request a model of ``vocab_size`` ids and
    ``max_context`` positions cannot run; ``image_token_id``: a vision-language model's (None: a text model)."""
    ids, p = request.prompt_ids, request.sampling
    if not ids:
        raise ValueError("the prompt is empty: at least one token is needed")
    if any((not isinstance(t, int)) or t < 0 or t >= vocab_size for t in ids):
        raise ValueError(f"prompt token ids must be integers in [0, {vocab_size})")
    if p.max_new_tokens < 1:
        raise ValueError("max_new_tokens must be at least 1")
    if len(ids) + p.max_new_tokens > max_context:
        raise ContextLengthExceeded(len(ids), p.max_new_tokens, max_context)
    if p.temperature < 0:
        raise ValueError("temperature must be >= 0")
    if not 0 < p.top_p <= 1:
        raise ValueError("top_p must be in (0, 1]")
    if p.top_k < 0:
        raise ValueError("top_k must be >= 0 (0 = disabled)")
    if not 0 <= p.top_logprobs <= MAX_TOP_LOGPROBS:
        raise ValueError(f"top_logprobs must be in [0, {MAX_TOP_LOGPROBS}]")
    if request.prompt_logprobs and request.multimodal is not None:
        raise ValueError("the prompt's log-probabilities are computed for text prompts only")
    if request.multimodal is not None and image_token_id is None:
        raise ValueError(f"{model_name} is a text model: it takes no images")
    if request.multimodal is None and image_token_id is not None and image_token_id in ids:
        raise ValueError("the prompt holds image tokens but the request carries no images")
