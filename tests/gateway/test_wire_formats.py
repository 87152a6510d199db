"""One owner per call: each API's wire format is a codec module with decode, encode and stream, and no module of
the codecs imports the call owner (model_call) back, directly or through another module."""

from __future__ import annotations

import inspect

import grimp
import pytest

from agentr1.gateway.codecs import anthropic, chat, completions, responses

OWNER = "agentr1.gateway.model_call"


@pytest.mark.parametrize("wire", [chat, completions, anthropic, responses], ids=lambda m: m.__name__)
def test_each_api_is_a_wire_format(wire) -> None:
    assert inspect.signature(wire.decode).parameters.keys() >= {"gw"}
    assert list(inspect.signature(wire.encode).parameters) == ["call", "outcome"]
    assert list(inspect.signature(wire.stream).parameters) == ["call", "events"]
    assert inspect.isasyncgenfunction(wire.stream)


def owner_importers(graph: grimp.ImportGraph) -> list[str]:
    codecs = graph.find_descendants("agentr1.gateway.codecs")
    return sorted(m for m in codecs if graph.chain_exists(importer=m, imported=OWNER))


def test_no_codec_imports_the_call_owner() -> None:
    graph = grimp.build_graph("agentr1")
    assert owner_importers(graph) == []
    graph.add_import(importer="agentr1.gateway.codecs.errors", imported="agentr1.gateway.routes.openai",
                     line_number=1, line_contents="from agentr1.gateway.routes import openai")
    assert "agentr1.gateway.codecs.errors" in owner_importers(graph)  # through a route: caught too
