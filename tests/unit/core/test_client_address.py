"""The client's address every limit counts by (core/client_address.py): REMOTE_ADDR unless PORTAL_TRUSTED_PROXIES
trusts proxies, then the address the outermost trusted proxy received the request from, whatever the client wrote
into X-Forwarded-For before it."""

from __future__ import annotations

import pytest
from django.test import RequestFactory

from core.client_address import address_from, client_address

PROXY, OUTER = "10.0.0.1", "10.0.0.2"
CLIENT = "198.51.100.7"
FORGED = "203.0.113.9"
NETWORKS = ["10.0.0.0/8", "2001:db8::/32"]


@pytest.mark.parametrize(
    ("remote", "forwarded", "trusted", "expected"),
    [
        # No proxy trusted (the default): the connection's address, whatever the header says.
        (CLIENT, "", 0, CLIENT),
        (CLIENT, FORGED, 0, CLIENT),
        (PROXY, f"{FORGED}, {CLIENT}", 0, PROXY),
        # One hop (one nginx or ingress): the address it appended, the last entry.
        (PROXY, CLIENT, 1, CLIENT),
        (PROXY, f"{FORGED}, {CLIENT}", 1, CLIENT),
        (PROXY, f" {FORGED} ,{CLIENT} ", 1, CLIENT),
        (PROXY, "", 1, PROXY),  # a proxy that sent no header: its own address (the demo's nginx)
        # Two hops (a load balancer, then nginx): the address the load balancer received it from.
        (PROXY, f"{FORGED}, {CLIENT}, {OUTER}", 2, CLIENT),
        (PROXY, CLIENT, 2, CLIENT),  # fewer entries than hops: the leftmost
        # Something that is not an address, where a trusted proxy's entry belongs: the nearest address to its right.
        (PROXY, "not-an-address", 1, PROXY),
        (PROXY, f"{CLIENT}, unknown", 2, PROXY),
        (PROXY, f"not-an-address, {CLIENT}", 2, CLIENT),
        # The proxies' networks: skip every address inside them from the right; the first outside is the client.
        (PROXY, f"{FORGED}, {CLIENT}", NETWORKS, CLIENT),
        (PROXY, f"{FORGED}, {CLIENT}, {OUTER}", NETWORKS, CLIENT),
        (CLIENT, FORGED, NETWORKS, CLIENT),  # not through a trusted proxy: the header is not believed
        (PROXY, f"{CLIENT}, 10.1.2.3", NETWORKS, CLIENT),
        (PROXY, "10.9.9.9", NETWORKS, "10.9.9.9"),  # all inside: the leftmost
        (PROXY, f"{CLIENT}, garbage", NETWORKS, PROXY),
        ("2001:db8::1", f"{FORGED}, 2001:0DB9:0:0::7", NETWORKS, "2001:db9::7"),
        ("2001:db8::1", f"{FORGED}, {CLIENT}", NETWORKS, CLIENT),
        # One address, one count: IPv4 seen through an IPv6 socket is the IPv4 address.
        ("::ffff:198.51.100.7", "", 0, CLIENT),
        ("::ffff:10.0.0.1", CLIENT, NETWORKS, CLIENT),
        # Not an IP connection (a Unix socket): as it came.
        ("", FORGED, 1, ""),
    ],
)
def test_address_from(remote, forwarded, trusted, expected):
    assert address_from(remote, forwarded, trusted) == expected


def test_client_address_reads_the_request_and_the_setting(settings):
    request = RequestFactory().get("/", REMOTE_ADDR=PROXY, HTTP_X_FORWARDED_FOR=f"{FORGED}, {CLIENT}")
    settings.PORTAL_TRUSTED_PROXIES = 0
    assert client_address(request) == PROXY
    settings.PORTAL_TRUSTED_PROXIES = 1
    assert client_address(request) == CLIENT
    settings.PORTAL_TRUSTED_PROXIES = ["192.0.2.0/24"]
    assert client_address(request) == PROXY
