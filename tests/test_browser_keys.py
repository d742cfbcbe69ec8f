"""The Keys page in a real browser: an owner creates a key, copies it with the copy
button (no inline script: the page's CSP allows none), then revokes it after confirming."""

from __future__ import annotations

from typing import Any

import pytest

from memoryadmin.memory.models import ApiKey, Project, Resource
from memoryadmin.memory.services.keys import api_key_create
from tests.helpers import BROWSER_TESTS, TABLES_PAST_COLUMN, People

pytestmark = BROWSER_TESTS


def test_owner_creates_copies_and_revokes_a_key(open_page: Any, used_memory: Resource) -> None:
    from playwright.sync_api import expect

    page = open_page("olivia", permissions=["clipboard-read", "clipboard-write"])
    page.get_by_role("link", name="Keys", exact=True).click()
    expect(page.get_by_role("heading", name="API keys of Acme")).to_be_visible()

    page.get_by_label("Name").fill("deploy bot")
    page.get_by_role("button", name="Create key").click()
    secret = page.get_by_label("The new key").input_value()
    assert secret.startswith("mak_")
    page.get_by_role("button", name="Copy").click()
    expect(page.get_by_role("status").filter(has_text="Copied.")).to_be_visible()
    assert page.evaluate("navigator.clipboard.readText()") == secret

    key = ApiKey.objects.get(prefix=secret[:12])
    row = page.locator("table.keys").get_by_role("row", name="deploy bot")
    expect(row).to_contain_text("active")
    row.get_by_role("link", name="Revoke").click()
    dialog = page.locator("#key-dialog")
    expect(dialog.get_by_role("heading")).to_contain_text(f"Revoke key {key.prefix}")
    dialog.get_by_role("button", name="Revoke key").click()
    expect(page.get_by_text(f"Revoked {key.prefix}…")).to_be_visible()
    keys = page.locator("table.keys")
    expect(keys.get_by_role("row", name="deploy bot")).to_contain_text("revoked")
    page.goto("/projects/acme/development/keys/")
    assert secret not in page.content()
    key.refresh_from_db()
    assert key.revoked_at is not None
    assert page.js_errors == []


@pytest.mark.parametrize("width", [1280, 800, 390], ids=["1280px", "800px", "390px"])
def test_a_key_name_without_spaces_wraps_inside_its_column(
    open_page: Any, project: Project, people: People, width: int
) -> None:
    """An 80-character name with no space to break at, in the keys table and the usage
    table: each wraps it rather than grow past the page's column and widen the page."""
    from playwright.sync_api import expect

    name = "W" * 80  # wide letters: about 1,100 px on one line
    api_key_create(project_id=project.id, name=name)
    viewport = {"width": width, "height": 860}
    page = open_page("olivia", "/projects/acme/development/keys/", viewport=viewport)
    expect(page.locator("table.keys").get_by_role("row", name=name)).to_be_visible()
    expect(page.locator("table.key-usage-table").get_by_role("row", name=name)).to_be_visible()
    assert page.evaluate(TABLES_PAST_COLUMN) <= 0.5
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    assert page.js_errors == []
