"""A tiny random vision-language model for tests: Idefics3 (SmolVLM's architecture) on SmolLM2's tokenizer.

No vision-language weights can be installed here, so the tests that carry images build one locally
from real transformers classes, the way :func:`agentr1.core.models.build_tiny_random_model` builds the
tiny text model:

- ``Idefics3ForConditionalGeneration`` with a 2-layer Llama text model (hidden 64) and a 1-layer
  SigLIP-style vision encoder (32x32 tiles of 8x8 patches, pixel shuffle by 2: 4 tokens per tile);
- ``Idefics3Processor`` = ``Idefics3ImageProcessorPil`` (tiles of 32 px, images resized to at most
  64 px on the longest edge: up to 2x2 tiles plus the global view, as SmolVLM splits large images)
  + the SmolLM2 tokenizer with the image tokens SmolVLM's tokenizer carries added as special tokens
  (``<fake_token_around_image>``, ``<image>``, ``<global-img>``, ``<row_i_col_j>``,
  ``<end_of_utterance>``) and the ChatML + hermes tools chat template of the text model.

SmolVLM-256M/500M-Instruct use the same classes (their processor is ``SmolVLMProcessor``, which
also needs ``num2words`` and torchvision for video); a real checkpoint directory is used as it is
(see ``docs/multimodal.md``). Nothing here downloads anything.
"""

from __future__ import annotations

import os
from pathlib import Path

from agentr1.core.model_cache import build_atomically, is_complete, models_cache_dir, offline_hub, save_random_model
from agentr1.core.models import SMOLLM2_DIRNAME, _smollm2_tokenizer_from_gguf

__all__ = ["IMAGE_TOKENS", "TINY_VLM_DIRNAME", "build_tiny_random_vlm", "ensure_tiny_vlm", "is_vlm_dir",
           "load_vlm_processor"]

TINY_VLM_DIRNAME = "tiny-random-idefics3-smollm2"
TILE = 32  # the vision encoder's image size (one tile)
PATCH = 8
SCALE_FACTOR = 2
IMAGE_SEQ_LEN = (TILE // PATCH) ** 2 // SCALE_FACTOR**2  # 4 <image> tokens per tile
# SmolVLM's tokenizer has these as added special tokens; ``<row_i_col_j>`` up to 6 x 6 as Idefics3's.
IMAGE_TOKENS = (
    "<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>",
    *(f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)),
)


def _token_id(tokenizer: object, token: str) -> int:
    tid = tokenizer.convert_tokens_to_ids(token)  # type: ignore[attr-defined]
    if not isinstance(tid, int):
        raise ValueError(f"the tokenizer has no single id for {token!r}")
    return tid


def build_tiny_random_vlm(path: str | os.PathLike[str], *, base: str | os.PathLike[str] | None = None,
                          seed: int = 0) -> Path:
    """Save a tiny random Idefics3 model and its processor to ``path`` (deterministic in ``seed``).

    ``base``: a HF directory whose SmolLM2 tokenizer is reused (default: the converted SmolLM2 if
    cached, else the tokenizer is built from the GGUF)."""
    offline_hub()
    from transformers import AutoTokenizer, GenerationConfig, Idefics3Config, Idefics3ForConditionalGeneration
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil
    from transformers.models.idefics3.processing_idefics3 import Idefics3Processor

    out = Path(path)
    if base is None and is_complete(models_cache_dir() / SMOLLM2_DIRNAME, "smollm2"):
        base = models_cache_dir() / SMOLLM2_DIRNAME
    tokenizer = AutoTokenizer.from_pretrained(base) if base is not None else _smollm2_tokenizer_from_gguf()
    tokenizer.add_special_tokens({"additional_special_tokens": list(IMAGE_TOKENS)},
                                 replace_extra_special_tokens=False)
    image_processor = Idefics3ImageProcessorPil(
        size={"longest_edge": 2 * TILE}, max_image_size={"longest_edge": TILE}, do_image_splitting=True,
    )
    processor = Idefics3Processor(image_processor, tokenizer, image_seq_len=IMAGE_SEQ_LEN,
                                  chat_template=tokenizer.chat_template)
    eos_id, bos_id = _token_id(tokenizer, "<|im_end|>"), _token_id(tokenizer, "<|im_start|>")
    config = Idefics3Config(
        text_config={
            "model_type": "llama", "vocab_size": len(tokenizer), "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "max_position_embeddings": 2048, "rope_theta": 100000.0, "rms_norm_eps": 1e-5,
            "tie_word_embeddings": True, "initializer_range": 0.15,
            "bos_token_id": bos_id, "eos_token_id": eos_id, "pad_token_id": eos_id,
        },
        vision_config={
            "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
            "image_size": TILE, "patch_size": PATCH, "num_channels": 3, "initializer_range": 0.15,
        },
        scale_factor=SCALE_FACTOR,
        image_token_id=_token_id(tokenizer, "<image>"),
        pad_token_id=eos_id,
        tie_word_embeddings=True,
    )
    generation = GenerationConfig(bos_token_id=bos_id, eos_token_id=[eos_id], pad_token_id=eos_id)
    return save_random_model(Idefics3ForConditionalGeneration, config, seed=seed, generation_config=generation,
                             out=out, companion=processor)


def ensure_tiny_vlm(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """A cached tiny random VLM (``<cache_dir>/tiny-random-idefics3-smollm2``), built on first use."""
    root = Path(cache_dir).expanduser() if cache_dir is not None else models_cache_dir()
    return build_atomically(root / TINY_VLM_DIRNAME, "tiny-vlm", build_tiny_random_vlm)


def is_vlm_dir(path: str | os.PathLike[str]) -> bool:
    """Whether a local HF model directory holds a vision-language model (a processor with images)."""
    import json

    root = Path(path)
    config = root / "config.json"
    if not config.is_file():
        return False
    try:
        data = json.loads(config.read_text())
    except ValueError:
        return False
    return "vision_config" in data and ((root / "processor_config.json").is_file()
                                        or (root / "preprocessor_config.json").is_file())


def load_vlm_processor(path: str | os.PathLike[str]) -> object:
    """The model's processor from a local directory (never downloads).

    transformers 5.10 resolves Idefics3's and SmolVLM's PIL image processors to a placeholder when
    torchvision is missing (its lazy module marks them as needing torchvision, though they do not),
    so for those the processor is assembled from the same classes directly: the PIL image processor
    (the torchvision one computes the same tiles), the tokenizer and ``Idefics3Processor``, whose
    image-token expansion is SmolVLM's for images."""
    import json

    offline_hub()
    from transformers import AutoProcessor
    from transformers.utils import is_torchvision_available

    root = Path(path)
    config_path = root / "processor_config.json"
    config = json.loads(config_path.read_text()) if config_path.is_file() else {}
    image_config = config.get("image_processor") or {}
    kind = str(image_config.get("image_processor_type", ""))
    if is_torchvision_available() or kind not in ("Idefics3ImageProcessor", "SmolVLMImageProcessor"):
        return AutoProcessor.from_pretrained(root)
    from transformers import AutoTokenizer
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil
    from transformers.models.idefics3.processing_idefics3 import Idefics3Processor

    settings = {k: v for k, v in image_config.items() if k != "image_processor_type"}
    tokenizer = AutoTokenizer.from_pretrained(root)
    return Idefics3Processor(Idefics3ImageProcessorPil(**settings), tokenizer,
                             image_seq_len=int(config.get("image_seq_len", 169)),
                             chat_template=tokenizer.chat_template)
