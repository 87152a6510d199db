"""The one registry helper and callable loader (agentr1.core.Registry, load_callable) and the lazy
exports of the parts' packages (agentr1.core.lazy_exports)."""

from __future__ import annotations

import sys
import types

import pytest

from agentr1.core import Registry, UnknownName, lazy_exports, load_callable


def test_registry_registers_once_and_names_what_it_has():
    things: Registry[object] = Registry("thing")
    first = things.register("a")(object())
    assert things.get("a") is first and "a" in things and things.names() == ["a"]
    things.add("a", first)  # the same object again: fine (a module imported twice)
    with pytest.raises(ValueError, match="thing 'a' is already registered"):
        things.add("a", object())
    with pytest.raises(UnknownName, match=r"unknown thing 'b'; registered: a$") as caught:
        things.get("b")
    assert isinstance(caught.value, KeyError) and isinstance(caught.value, ValueError)
    assert str(caught.value).startswith("unknown")  # not quoted like a plain KeyError
    with pytest.raises(UnknownName, match="unknown thing 'json:dumps'"):
        things.get("json:dumps")  # import paths only where the registry allows them
    assert Registry("fn", import_paths=True).get("json:dumps") is __import__("json").dumps


def test_load_callable_from_modules_and_files(tmp_path, monkeypatch):
    assert load_callable("os.path:join") is __import__("os").path.join
    script = tmp_path / "tasks_here.py"
    script.write_text("def make(n):\n    return list(range(n))\n")
    assert load_callable(f"{script}:make")(3) == [0, 1, 2]
    monkeypatch.chdir(tmp_path)  # modules of the working directory count
    monkeypatch.delitem(sys.modules, "tasks_here", raising=False)
    assert load_callable("tasks_here:make")(2) == [0, 1]
    for spec, message in (("nocolon", "not a module:attr path"), ("os.path:", "not a module:attr path"),
                          ("no_such_module_xyz:f", "cannot import 'no_such_module_xyz'"),
                          ("os.path:nope", "has no 'nope'"), (f"{tmp_path / 'missing.py'}:f", "no such file")):
        with pytest.raises(UnknownName, match=message):
            load_callable(spec)


def test_lazy_exports_import_on_first_use_and_cache(monkeypatch):
    package = types.ModuleType("lazy_pkg_test")
    monkeypatch.setitem(sys.modules, "lazy_pkg_test", package)
    monkeypatch.setitem(sys.modules, "lazy_pkg_test.home", types.SimpleNamespace(thing=42))
    getter = lazy_exports("lazy_pkg_test", {"thing": "home"})
    assert getter("thing") == 42 and package.thing == 42  # cached on the package
    with pytest.raises(AttributeError, match="has no attribute 'other'"):
        getter("other")
