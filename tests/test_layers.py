"""Apps depend downward (docs/development.md, Layout).

The layers contract of pyproject.toml, checked by import-linter over every import
of `memoryadmin`, those inside functions and under TYPE_CHECKING included: the
doors on top, the kernel (memoryadmin/core) at the bottom, no two apps importing
each other. `python -m pytest tests/test_layers.py` is the check (`make lint` runs
it too); a broken contract names each upward import with its line.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    # No cache: a test run writes nothing into the tree it checks.
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo", str(root / "pyproject.toml")],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _layers() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    (contract,) = config["tool"]["importlinter"]["contracts"]
    # A name in parentheses is an optional layer (import-linter): it may be absent.
    return [
        name.strip() for layer in contract["layers"] for name in layer.split("|") if name.strip()
    ]


def _required(name: str) -> bool:
    return not name.startswith("(")


def test_the_apps_depend_downward() -> None:
    result = _lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 1 kept, 0 broken." in result.stdout


def test_every_app_and_the_kernel_has_a_layer() -> None:
    packages = {
        f"memoryadmin.{path.name}"
        for path in (ROOT / "memoryadmin").iterdir()
        if (path / "__init__.py").is_file()
    }
    layers = _layers()
    present = [name.strip("()") for name in layers if _required(name) or name[1:-1] in packages]
    assert sorted(present) == sorted(packages)
    assert layers[-1] == "memoryadmin.core"


@pytest.mark.parametrize(
    ("module", "added", "broken"),
    [
        pytest.param(
            "core/errors.py",
            "from memoryadmin.memory import models as _models  # noqa\n",
            "memoryadmin.core is not allowed to import memoryadmin.memory",
            id="the-kernel-imports-an-app",
        ),
        pytest.param(
            "memory/services/audit.py",
            "\n\ndef _later() -> None:\n    from memoryadmin.webhooks import outbox  # noqa\n",
            "memoryadmin.memory is not allowed to import memoryadmin.webhooks",
            id="inside-a-function",
        ),
        pytest.param(
            "runner/jobs.py",
            "\nfrom typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
            "    from memoryadmin.memory.models import Document  # noqa\n",
            "memoryadmin.runner is not allowed to import memoryadmin.memory",
            id="under-type-checking",
        ),
        pytest.param(
            "api/base.py",
            "\n\ndef _later() -> None:\n    from memoryadmin.web.views import base  # noqa\n",
            "memoryadmin.api is not allowed to import memoryadmin.web",
            id="one-door-imports-the-other",
        ),
        pytest.param(
            "memory/services/documents.py",
            "from memoryadmin.api import errors as _errors  # noqa\n",
            "memoryadmin.memory is not allowed to import memoryadmin.api",
            id="the-domain-imports-a-door",
        ),
    ],
)
def test_an_upward_import_breaks_the_contract(
    tmp_path: Path, module: str, added: str, broken: str
) -> None:
    shutil.copytree(
        ROOT / "memoryadmin",
        tmp_path / "memoryadmin",
        ignore=shutil.ignore_patterns("__pycache__", "migrations"),
    )
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / "memoryadmin" / module
    target.write_text(target.read_text(encoding="utf-8") + added, encoding="utf-8")

    result = _lint(tmp_path)

    assert result.returncode == 1, result.stdout + result.stderr
    assert broken in result.stdout
    assert "Contracts: 0 kept, 1 broken." in result.stdout
