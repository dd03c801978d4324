"""Your data in a real headless Chromium (issue 20): an archived chat reads as before and
comes back when written to; export downloads a zip of every chat; a ChatGPT export imports
the branch that was shown; deleting the account ends in the log-in screen for good."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext, Page, expect

from tests.e2e.conftest import PASSWORD, Server, ServerFactory, fake_engine, log_in, shot
from tests.test_cli import parley

pytestmark = pytest.mark.slow

CHATGPT = Path(__file__).parent.parent / "portability" / "chatgpt_conversations.json"


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("data-ui")


@pytest.fixture
def data_server(servers: ServerFactory, data_dir: Path) -> Server:
    return servers(PARLEY_DATA_DIR=str(data_dir), **fake_engine(ttft_ms=0, itl_ms=5, tokens=12))


def open_app(page: Page, url: str) -> None:
    page.goto(url + "/")
    expect(page.locator("#shell")).to_be_visible()


def test_an_archived_chat_reads_as_before_and_comes_back_when_written_to(
    context: BrowserContext, page: Page, data_server: Server, data_dir: Path
) -> None:
    api = log_in(context, data_server)
    chat = api.post("/api/chats", {"title": "Old times"})
    for question in ("/echo first question", "/echo second question"):
        api.wait_run(api.send(chat["id"], question)["run_id"])
    before = [m["content"] for m in api.messages(chat["id"])]

    r = parley("archive", "--idle-days", "0", env={"PARLEY_DATA_DIR": str(data_dir)})
    assert r.returncode == 0 and "archived 1 chats" in r.stdout, (r.stdout, r.stderr)
    assert api.get(f"/api/chats/{chat['id']}")["archived_at"] is not None

    open_app(page, data_server.url)
    link = page.locator("li.chat-item.archived a", has_text="Old times")
    expect(link).to_be_visible()
    link.click()
    expect(page.locator("li.assistant")).to_have_count(2)
    expect(page.locator("li.user").first).to_contain_text("first question")
    shot(page, "archived-chat")
    page.get_by_role("textbox", name="Message").fill("/echo back again")
    page.get_by_role("textbox", name="Message").press("Enter")
    expect(page.locator("li.assistant").last).to_contain_text("back again")
    assert api.get(f"/api/chats/{chat['id']}")["archived_at"] is None
    assert [m["content"] for m in api.messages(chat["id"])][:4] == before


def test_export_downloads_every_chat_and_import_reads_chatgpts_export(
    context: BrowserContext, page: Page, data_server: Server
) -> None:
    api = log_in(context, data_server)
    chat = api.post("/api/chats", {"title": "Kept"})
    api.wait_run(api.send(chat["id"], "/echo worth keeping")["run_id"])
    open_app(page, data_server.url)

    with page.expect_download() as download:
        page.get_by_role("button", name="Export chats").click()
    zf = zipfile.ZipFile(io.BytesIO(Path(download.value.path()).read_bytes()))
    document = json.loads(zf.read("parley-export.json"))
    assert [c["title"] for c in document["chats"]] == ["Kept"]
    expect(page.locator("#data-status")).to_contain_text("1 chats, 2 messages")

    page.locator("#import-file").set_input_files(str(CHATGPT))
    expect(page.locator("#data-status")).to_contain_text("Imported")
    lisbon = page.locator("a.chat-link", has_text="Trip to Lisbon")
    expect(lisbon).to_be_visible()
    lisbon.click()
    expect(page.locator("li.user", has_text="And where should I eat fish?")).to_be_visible()
    expect(page.locator("li.assistant", has_text="Cervejaria Ramiro")).to_be_visible()
    shot(page, "imported-chatgpt")


def test_deleting_the_account_needs_the_password_and_ends_everything(
    context: BrowserContext, page: Page, data_server: Server
) -> None:
    email = data_server.new_email()
    api = log_in(context, data_server, email)
    api.post("/api/chats", {"title": "Soon gone"})
    open_app(page, data_server.url)

    page.get_by_role("button", name="Delete account").click()
    page.locator("#delete-password").fill("not my password")
    page.get_by_role("button", name="Delete for good").click()
    expect(page.locator("#errors")).to_contain_text("password")
    page.locator("#delete-password").fill(PASSWORD)
    page.get_by_role("button", name="Delete for good").click()

    expect(page.locator("#auth-notice")).to_contain_text("deleted")
    r = context.request.post(
        f"{data_server.url}/api/auth/login", data={"email": email, "password": PASSWORD}
    )
    assert r.status == 401
