"""The suite's own machinery: what a parallel run's controller prepares for its workers."""

from __future__ import annotations

import marshal
import sys
from pathlib import Path

import pytest
from _pytest.assertion import rewrite

from tests.conftest import _test_modules_rewritten_once

SOURCE = "def test_one():\n    value = 1\n    assert value == 2, 'one is not two'\n"


def _cached(source: Path) -> Path:
    return rewrite.get_cache_dir(source) / (source.name[:-3] + rewrite.PYC_TAIL)


def test_the_controller_leaves_each_test_module_rewritten_as_a_worker_would_read_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    folder = tmp_path / "suite"
    folder.mkdir()
    module = folder / "test_numbers.py"
    module.write_text(SOURCE)
    helper = folder / "helpers.py"
    helper.write_text("VALUE = 1\n")

    _test_modules_rewritten_once(request.config, folder)

    cached = rewrite._read_pyc(module, _cached(module))
    assert cached is not None, "no rewritten module where pytest's hook looks for it"
    _, rewritten = rewrite._rewrite_test(module, request.config)
    assert marshal.dumps(cached) == marshal.dumps(marshal.loads(marshal.dumps(rewritten)))
    assert "@pytest_ar" in cached.co_names  # its asserts explain themselves
    assert not _cached(helper).exists()  # not a test module: imported as it is

    # Once: a module already rewritten is left as it is; one changed since is done again.
    written = _cached(module).stat().st_mtime_ns
    _test_modules_rewritten_once(request.config, folder)
    assert _cached(module).stat().st_mtime_ns == written
    module.write_text(SOURCE.replace("2", "3"))
    _test_modules_rewritten_once(request.config, folder)
    again = rewrite._read_pyc(module, _cached(module))
    _, fresh = rewrite._rewrite_test(module, request.config)
    assert again is not None
    assert marshal.dumps(again) == marshal.dumps(marshal.loads(marshal.dumps(fresh)))


def test_without_bytecode_the_controller_writes_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    (tmp_path / "test_numbers.py").write_text(SOURCE)

    _test_modules_rewritten_once(request.config, tmp_path)

    assert not _cached(tmp_path / "test_numbers.py").exists()
