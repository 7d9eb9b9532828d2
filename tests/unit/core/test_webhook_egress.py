"""Webhook URLs never reach the portal's own network (core.egress). A real listener on 127.0.0.1 is sent every
spelling of this machine (decimal, hex and octal forms, short forms, 0, a trailing dot, the host name, IPv6 forms
that carry 127.0.0.1) and accepts nothing; names and literals for private, shared (100.64/10), link-local, NAT64
and 6to4 addresses are refused when saved; a name whose answer changes after the check is refused when sent; the
request goes to the address checked, with the name kept for Host, TLS's server name and the certificate check;
and every failed attempt records one sentence that tells nobody which ports are open and names no URL."""

from __future__ import annotations

import datetime
import http.server
import socket
import ssl
import threading

import pytest
import requests
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from core import webhooks
from core.models import Delivery, Webhook

pytestmark = pytest.mark.django_db

SECRET_PATH = "/hook/abc123secret"


@pytest.fixture(autouse=True)
def public_only(settings):
    settings.PORTAL_WEBHOOK_ALLOW_LOCAL, settings.PORTAL_WEBHOOK_ALLOW_NETWORKS = False, []
    settings.PORTAL_WEBHOOK_CONNECT_TIMEOUT_SECONDS, settings.PORTAL_WEBHOOK_TIMEOUT_SECONDS = 1.0, 1.0


class Listener:
    """A TCP listener on 127.0.0.1 that counts the connections it accepts (and answers nothing)."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.port, self.accepted, self.running = self.sock.getsockname()[1], 0, True
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while self.running:
            try:
                connection, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            connection.close()

    def close(self):
        self.running = False
        self.thread.join()
        self.sock.close()


@pytest.fixture
def listener():
    found = Listener()
    yield found
    found.close()


def attempt(people, url: str) -> webhooks.Outcome:
    """What the sender does with a webhook row holding ``url`` (a row saved before the rule, or written around it)."""
    webhook = Webhook.objects.create(team=people["vision"], name="w", url=url, events=["job.*"])
    delivery = Delivery.objects.create(webhook=webhook, event_id="00000000-0000-0000-0000-000000000001",
                                       event_type="job.failed", payload={})  # fmt: skip
    return webhooks.post(webhook, delivery)


def this_machine_spellings(port: int) -> list[str]:
    hosts = ["2130706433", "0x7f000001", "0177.0.0.1", "127.1", "0", "127.0.0.1", "localhost", "localhost.",
             socket.gethostname(), "[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[::127.0.0.1]", "[64:ff9b::7f00:1]",
             "[2002:7f00:1::1]", "[::1]"]  # fmt: skip
    return [f"{scheme}://{host}:{port}{SECRET_PATH}" for host in hosts for scheme in ("http", "https")]


def test_no_spelling_of_this_machine_reaches_a_local_listener(people, listener):
    urls = this_machine_spellings(listener.port)
    passed = [url for url in urls if not webhooks.url_problems(url)]
    answered = [url for url in urls if attempt(people, url).ok]
    assert (listener.accepted, passed, answered) == (0, [], []), "the sender connected to 127.0.0.1"


def resolving(monkeypatch, names: dict[str, list[str]], asked: list[str] | None = None):
    """The resolver answers for these names as given (and records each question about them in ``asked``)."""
    real = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):
        if host not in names:
            return real(host, port, *args, **kwargs)
        if asked is not None:
            asked.append(host)
        return [(socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port or 0))
                for a in names[host]]  # fmt: skip

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


@pytest.mark.parametrize(
    "url",
    [
        "https://kubernetes.default.svc/api",  # a cluster's internal name
        "https://metadata.google.internal/computeMetadata/v1/",
        "https://carrier.partner.test/",  # a public-looking name on shared address space (100.64/10)
        "https://nat64.partner.test/",  # NAT64 carrying 10.0.0.1
        "https://mapped.partner.test/",  # IPv4-mapped 10.0.0.1
        "https://sixtofour.partner.test/",  # 6to4 carrying 192.168.1.1
        "https://both.partner.test/",  # a public answer and a private one: refused whole
        "https://100.64.0.1/",
        "https://169.254.169.254/latest/meta-data/",
        "https://[fd00::1]/",
        "https://[64:ff9b::a00:1]/",
        "https://[64:ff9b:1::a00:1]/",
        "https://[2002:c0a8:101::1]/",
        "https://224.0.1.1/",
        "https://nowhere.invalid/",  # does not resolve: nothing shows it is public
    ],
)
def test_internal_names_and_addresses_are_refused_when_saved(monkeypatch, url):
    resolving(monkeypatch, {
        "kubernetes.default.svc": ["10.96.0.1"], "metadata.google.internal": ["169.254.169.254"],
        "carrier.partner.test": ["100.64.12.34"], "nat64.partner.test": ["64:ff9b::a00:1"],
        "mapped.partner.test": ["::ffff:10.0.0.1"], "sixtofour.partner.test": ["2002:c0a8:101::1"],
        "both.partner.test": ["93.184.215.14", "10.0.0.7"],
    })  # fmt: skip
    (problem,) = webhooks.url_problems(url)
    assert "does not resolve to a public address" in problem
    assert "PORTAL_WEBHOOK_ALLOW_NETWORKS" in problem, "the refusal says how an operator allows a network"


def test_public_hosts_and_allowed_networks_pass(monkeypatch, settings):
    resolving(monkeypatch, {"hooks.partner.test": ["2606:4700::6810:84e5", "104.16.132.229"]})
    assert webhooks.url_problems("https://hooks.partner.test/x") == []
    assert webhooks.url_problems("https://[2606:4700::6810:84e5]/x") == []
    resolving(monkeypatch, {"ci.corp.test": ["10.20.3.4"]})
    assert webhooks.url_problems("http://ci.corp.test/x")
    settings.PORTAL_WEBHOOK_ALLOW_NETWORKS = ["10.20.0.0/16"]
    assert webhooks.url_problems("http://ci.corp.test/x") == []
    assert webhooks.url_problems("https://10.21.0.1/x"), "only the network allowed"


def test_a_name_that_turns_private_after_the_check_is_refused_when_sent(people, listener, monkeypatch):
    """DNS rebinding: public when saved, this machine when sent."""
    answers = {"rebind.example.test": ["93.184.215.14"]}
    resolving(monkeypatch, answers)
    url = f"http://rebind.example.test:{listener.port}{SECRET_PATH}"
    assert "Use https://" in webhooks.url_problems(url)[0], "checked against the public answer"
    answers["rebind.example.test"] = ["127.0.0.1"]
    assert not attempt(people, url).ok
    assert listener.accepted == 0


class Receiver(http.server.ThreadingHTTPServer):
    """An HTTP(S) endpoint on 127.0.0.1 that records each request's Host header and TLS server name."""

    def __init__(self, context: ssl.SSLContext | None = None):
        self.hosts, self.server_names = [], []
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                self.rfile.read(int(self.headers["Content-Length"]))
                receiver.hosts.append(self.headers["Host"])
                self.send_response(202)
                self.end_headers()
                self.wfile.write(b"taken")

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        if context is not None:
            context.sni_callback = lambda sock, name, ctx: self.server_names.append(name)
            self.socket = context.wrap_socket(self.socket, server_side=True)
        self.port = self.server_address[1]
        threading.Thread(target=self.serve_forever, daemon=True).start()


def test_the_request_goes_to_the_address_checked_with_the_name_as_host(people, settings, monkeypatch):
    settings.PORTAL_WEBHOOK_ALLOW_NETWORKS = ["127.0.0.0/8"]
    asked = []
    resolving(monkeypatch, {"hooks.corp.test": ["127.0.0.1"]}, asked)
    receiver = Receiver()
    try:
        outcome = attempt(people, f"http://hooks.corp.test:{receiver.port}/x")
    finally:
        receiver.shutdown()
        receiver.server_close()
    assert (outcome.code, outcome.excerpt) == (202, "taken")
    assert receiver.hosts == [f"hooks.corp.test:{receiver.port}"]
    assert asked == ["hooks.corp.test"], "one lookup, checked, then that address: no second answer is asked for"


def certificate(tmp_path, name: str):
    """A CA and a server certificate for ``name`` signed by it: (CA file, server cert file, key file)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)

    def build(subject, issuer, extensions, signer):
        builder = x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(key.public_key())
        builder = builder.serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(1))
        builder = builder.not_valid_after(now + datetime.timedelta(1))
        for extension, critical in extensions:
            builder = builder.add_extension(extension, critical=critical)
        return builder.sign(signer, hashes.SHA256())

    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test CA")])
    ca = build(ca_name, ca_name, [(x509.BasicConstraints(ca=True, path_length=None), True)], key)
    server = build(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]), ca_name,
                   [(x509.SubjectAlternativeName([x509.DNSName(name)]), False)], key)  # fmt: skip
    files = tmp_path / "ca.pem", tmp_path / "server.pem", tmp_path / "key.pem"
    files[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files[1].write_bytes(server.public_bytes(serialization.Encoding.PEM))
    files[2].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))  # fmt: skip
    return files


@pytest.mark.parametrize("certified", ["hooks.corp.test", "someone-else.test"])
def test_tls_names_the_host_and_checks_its_certificate_at_the_pinned_address(
    people, settings, monkeypatch, tmp_path, certified
):
    settings.PORTAL_WEBHOOK_ALLOW_NETWORKS = ["127.0.0.0/8"]
    resolving(monkeypatch, {"hooks.corp.test": ["127.0.0.1"]})
    ca, cert, key = certificate(tmp_path, certified)
    monkeypatch.setattr(requests.adapters, "DEFAULT_CA_BUNDLE_PATH", str(ca))  # the sender trusts the test CA alone
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    receiver = Receiver(context)
    try:
        outcome = attempt(people, f"https://hooks.corp.test:{receiver.port}/x")
    finally:
        receiver.shutdown()
        receiver.server_close()
    assert receiver.server_names[:1] == ["hooks.corp.test"], "TLS names the host, not the address"
    if certified == "hooks.corp.test":
        assert outcome.code == 202 and receiver.hosts == [f"hooks.corp.test:{receiver.port}"]
    else:
        assert not outcome.ok and receiver.hosts == [], "a certificate for another name is refused"


def test_every_failed_attempt_records_the_same_sentence_without_the_url(people, settings, listener):
    """No oracle: a refused address, a closed port and a silent listener read alike, and nothing of the URL."""
    closed = socket.create_server(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()
    errors = {"not allowed": attempt(people, f"http://127.0.0.1:{listener.port}{SECRET_PATH}").error}
    settings.PORTAL_WEBHOOK_ALLOW_LOCAL = True
    errors["closed port"] = attempt(people, f"http://127.0.0.1:{closed_port}{SECRET_PATH}").error
    errors["no answer"] = attempt(people, f"http://127.0.0.1:{listener.port}{SECRET_PATH}").error
    assert len(set(errors.values())) == 1, errors
    (sentence,) = set(errors.values())
    assert sentence and "abc123secret" not in sentence and "127.0.0.1" not in sentence
    assert str(listener.port) not in sentence and str(closed_port) not in sentence
