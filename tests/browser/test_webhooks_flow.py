"""A lead sets up a webhook in a real Chromium: from the team page to the form, the secret shown once, a test ping
that a real HTTP receiver gets signed with that secret, the delivery log with its response code, and redeliver.
(The delivery is sent in the live server's thread instead of by a worker; the worker path has its own test.)"""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from core import webhooks
from core.models import Delivery, Webhook

from .conftest import login

pytestmark = pytest.mark.browser
expect = pytest.importorskip("playwright.sync_api").expect


@pytest.fixture
def receiver():
    got = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers["Content-Length"]))
            got.append((dict(self.headers), body))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hooks/portal", got
    server.shutdown()
    server.server_close()


def test_a_lead_creates_pings_reads_the_log_and_redelivers(page, people, settings, monkeypatch, receiver):
    url, got = receiver
    settings.PORTAL_WEBHOOK_ALLOW_LOCAL = True
    monkeypatch.setattr(webhooks, "kick", webhooks.send_due)  # send at once, in the server's thread
    login(page, "alice")
    page.goto("/teams/vision/")
    with page.expect_navigation():
        page.get_by_test_id("team-webhooks-link").click()
    page.get_by_label("Name").fill("ci receiver")
    page.get_by_label("URL").fill(url)
    page.get_by_label("Every job event").check()
    with page.expect_navigation():
        page.get_by_role("button", name="Add webhook").click()
    shown = page.get_by_test_id("new-secret")
    expect(shown).to_contain_text("only time it is shown")
    secret = shown.locator("code").inner_text().strip()
    webhook = Webhook.objects.get()
    assert secret == webhook.secret and webhook.events == ["job.*"]

    with page.expect_navigation():
        page.get_by_role("link", name="ci receiver").click()
    with page.expect_navigation():
        page.get_by_role("button", name="Send a test ping").click()
    assert len(got) == 1
    headers, body = got[0]
    assert webhooks.verify(secret, headers["X-Portal-Signature"], body)
    assert json.loads(body)["type"] == "ping" and headers["X-Portal-Event"] == "ping"
    page.reload()
    delivery = Delivery.objects.get()
    row = page.locator(f'tr[data-delivery="{delivery.pk}"]')
    expect(row.locator('[data-role="status"]')).to_have_text("succeeded")
    expect(row).to_contain_text("204")
    with page.expect_navigation():
        row.get_by_role("button", name=f"Redeliver delivery {delivery.pk}").click()
    assert len(got) == 2 and got[1][1] == body, "the same body again"
    expect(page.locator("tr[data-delivery]")).to_have_count(2)
