"""The README's curl walkthrough, run verbatim against a live server."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from memoryadmin.memory.demo import demo_setup
from memoryadmin.memory.models import AuditEntry, Document

README = Path(__file__).resolve().parent.parent / "README.md"


def walkthrough() -> str:
    text = README.read_text()
    block = text.split("<!-- walkthrough:start -->", 1)[1].split("<!-- walkthrough:end -->", 1)[0]
    match = re.search(r"```sh\n(.*?)```", block, re.S)
    assert match is not None
    return match.group(1)


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
@pytest.mark.django_db(transaction=True)
def test_readme_walkthrough_runs_verbatim(live_server: Any, settings: Any, tmp_path: Path) -> None:
    settings.VAR_DIR = tmp_path
    key = demo_setup().api_key
    env = {**os.environ, "BASE": live_server.url, "KEY": key, "ID": "walkthrough"}
    result = subprocess.run(
        ["bash", "-c", "set -u\n" + walkthrough()],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    statuses = re.findall(r"-> HTTP (\d{3})", result.stdout)
    assert statuses == ["201", "200", "200", "412", "200", "204", "412"], result.stdout
    assert re.search(r'ETag: "[0-9a-f]+"', result.stdout)
    document = Document.objects.get(doc_id="walkthrough")
    assert document.deleted
    assert document.text == ""
    actions = list(
        AuditEntry.objects.filter(document_id="walkthrough")
        .order_by("id")
        .values_list("action", flat=True)
    )
    assert actions == [
        "document.create",
        "document.replace",
        "document.freeze",
        "document.delete",
    ]
