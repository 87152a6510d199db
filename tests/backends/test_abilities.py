"""What a backend can do is declared on it and held to where it is handed to the gateway, never probed per call.

- Every backend class of ``src/`` is built here and passes :func:`check_backend`: it declares each ability flag of
  :class:`Backend`, and implements the protocol of each operation it declares (a class of ``src/`` that defines
  ``generate`` and ``stream`` but is missing from :func:`each_backend` fails the test, so a new backend cannot slip by).
- A backend that declares an operation it does not implement, lacks a flag or sets one to something else than a bool
  is refused by ``create_app`` and ``EmbeddedGateway``, with a message that names what is missing.
- No module of the gateway or the trainer asks a backend with ``getattr``/``hasattr`` what it can do (an AST scan).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest

from agentr1.gateway import EmbeddedGateway, GatewaySettings
from agentr1.gateway.app import create_app
from agentr1.gateway.backends import WeightsFromTensors, check_backend
from agentr1.gateway.backends.base import promised_operations
from agentr1.gateway.backends.instant import InstantBackend

SRC = Path(__file__).resolve().parents[2] / "src" / "agentr1"
ABSTRACT = {"RemoteBase"}  # the SGLang and vLLM clients' shared base: never handed over itself
SCANNED = ("gateway", "trainer")  # the parts that hold and call backends


@pytest.fixture(scope="module")
def tokenizer(tiny_model_path: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_path)


def each_backend(tiny_model_path: Path, tokenizer: Any) -> dict[str, Any]:
    """One of every backend class of ``src/`` (not started: nothing connects or loads weights)."""
    from agentr1.core.rendering import load_renderer
    from agentr1.engine import EngineOptions
    from agentr1.gateway.backends import (
        LiteLLMBackend,
        LocalBackend,
        ScriptedBackend,
        SGLangBackend,
        VLLMBackend,
    )

    return {"LocalBackend": LocalBackend(tiny_model_path, EngineOptions(device="cpu")),
            "SGLangBackend": SGLangBackend("http://127.0.0.1:9", tokenizer=str(tiny_model_path), vocab_size=100),
            "VLLMBackend": VLLMBackend("http://127.0.0.1:9", tokenizer=str(tiny_model_path)),
            "LiteLLMBackend": LiteLLMBackend("openai/teacher"),
            "InstantBackend": InstantBackend(tokenizer),
            "ScriptedBackend": ScriptedBackend(load_renderer(tiny_model_path))}


def backend_classes_in_src() -> set[str]:
    """The classes of ``src/`` that define ``generate`` and ``stream`` or inherit them from one that does: the backends
    (but the shared base of the server clients, :data:`ABSTRACT`)."""
    bases: dict[str, set[str]] = {}
    own: set[str] = set()
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and "Protocol" not in {ast.unparse(b) for b in node.bases}:
                bases[node.name] = {ast.unparse(b).split(".")[-1] for b in node.bases}
                if {"generate", "stream"} <= {f.name for f in node.body
                                             if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)}:
                    own.add(node.name)

    def is_backend(name: str, seen: frozenset[str] = frozenset()) -> bool:
        return name in own or any(is_backend(b, seen | {name}) for b in bases.get(name, set()) - seen - {name})

    return {name for name in bases if is_backend(name)} - ABSTRACT


def test_every_backend_of_src_keeps_to_what_it_declares(tiny_model_path: Path, tokenizer: Any) -> None:
    backends = each_backend(tiny_model_path, tokenizer)
    assert backend_classes_in_src() == set(backends)
    for name, backend in backends.items():
        abilities = check_backend(backend)
        for protocol in promised_operations(backend):
            assert isinstance(backend, protocol), (name, protocol)
        assert (abilities.chat is backend) == (not backend.trainable), name
        assert (abilities.cache is backend) == backend.releases_cache, name
        assert (abilities.engine_stats is backend) == backend.reports_engine_stats, name
    local = backends["LocalBackend"]
    assert local.weights_in_memory and local.releases_cache and local.reports_engine_stats
    assert local.served_on == ("float32", "cpu")
    assert not backends["SGLangBackend"].weights_in_memory  # chosen by the trainer's serving (rollout.weight_sync)
    assert isinstance(backends["SGLangBackend"], WeightsFromTensors)  # ... which the backend implements


def test_the_trainers_weight_sync_wrappers_keep_to_what_they_declare() -> None:
    from agentr1.trainer.serving import _OnGatewayLoop, _TensorsOnGatewayLoop

    assert _OnGatewayLoop.weights_in_memory is False
    assert _TensorsOnGatewayLoop.weights_in_memory is True and issubclass(_TensorsOnGatewayLoop, WeightsFromTensors)


class _ClaimsTensors(InstantBackend):
    weights_in_memory = True


class _ClaimsCache(InstantBackend):
    releases_cache = True


class _ClaimsEngine(InstantBackend):
    reports_engine_stats = True

    @property
    def stats(self) -> Any:
        return None


class _ClaimsChat(InstantBackend):
    trainable = False


class _FlagNotBool(InstantBackend):
    accepts_grammar = "yes"  # type: ignore[assignment]


class _NoFlags:
    name, model_name, model_path, max_context, tokenizer, trainable = "bare", "bare", None, 8, None, True

    async def generate(self, request: Any) -> Any: ...

    def stream(self, request: Any) -> Any: ...


@pytest.mark.parametrize(("cls", "message"), [
    (_ClaimsTensors, "declares weights_in_memory = True but does not implement WeightsFromTensors: it lacks "
                     "update_weights_from_tensors"),
    (_ClaimsCache, "declares releases_cache = True but does not implement CacheRelease: it lacks release_cache"),
    (_ClaimsEngine, "declares reports_engine_stats = True but does not implement EngineStatsReport: it lacks "
                    "queue_depth, refresh_stats, served_on"),
    (_ClaimsChat, "declares trainable = False but does not implement ChatGeneration: it lacks generate_chat"),
    (_FlagNotBool, "accepts_grammar must be True or False, not 'yes'"),
])
def test_a_backend_declaring_what_it_cannot_do_is_refused_where_it_is_handed_over(cls: type, message: str,
                                                                                   tokenizer: Any) -> None:
    backend = cls(tokenizer)
    expected = f"^{cls.__name__}[ .]{re.escape(message)}$"
    with pytest.raises(TypeError, match=expected):
        create_app(GatewaySettings(), backend=backend)
    with pytest.raises(TypeError, match=expected):
        EmbeddedGateway(GatewaySettings(), backend=backend).start()


def test_a_backend_without_the_flags_is_refused() -> None:
    with pytest.raises(TypeError, match="_NoFlags is not a gateway backend: it lacks accepts_grammar, accepts_images, "
                                        "accepts_prompt_logprobs, close, pause, policy_version, ready, "
                                        "releases_cache, reports_engine_stats, resume, start, update_weights, "
                                        "weights_in_memory"):
        create_app(GatewaySettings(), backend=_NoFlags())  # type: ignore[arg-type]


# -- no probe of a backend in the gateway or the trainer ------------------------------------------------------------

def backend_probes(source: str) -> list[str]:
    """The ``getattr(x, ...)`` / ``hasattr(x, ...)`` calls of ``source`` whose object names a backend."""
    return [ast.unparse(node) for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
            and node.args and "backend" in ast.unparse(node.args[0]).lower()]


def test_no_module_of_the_gateway_or_the_trainer_probes_a_backend() -> None:
    found = {}
    for part in SCANNED:
        for path in sorted((SRC / part).rglob("*.py")):
            probes = backend_probes(path.read_text())
            if probes:
                found[str(path.relative_to(SRC))] = probes
    assert found == {}, "read the backend's declared abilities (Backend, check_backend) instead of probing"


@pytest.mark.parametrize("source", [
    "if getattr(self.gw.backend, 'accepts_grammar', False): pass",
    "def f(backend):\n    return hasattr(backend, 'release_cache')",
    "stats = getattr(gateway.backend, 'stats', None)",
])
def test_the_scan_finds_a_probe(source: str) -> None:
    assert backend_probes(source)
    assert not backend_probes("value = getattr(stats, name)")
