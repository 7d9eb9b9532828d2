"""core.egress's address rules on their own: which addresses are public, what an IPv6 address carries, and this
machine's own addresses (refused even when public). The end-to-end checks are test_webhook_egress.py."""

from ipaddress import ip_address

import pytest

from core import egress


@pytest.mark.parametrize(
    ("address", "public"),
    [
        ("8.8.8.8", True),
        ("2606:4700::6810:84e5", True),
        ("127.0.0.1", False),
        ("0.0.0.0", False),
        ("10.1.2.3", False),
        ("100.64.0.1", False),  # shared address space (carrier-grade NAT)
        ("169.254.169.254", False),
        ("224.0.1.1", False),  # multicast, which is_global lets through
        ("::1", False),
        ("::ffff:127.0.0.1", False),
        ("::127.0.0.1", False),  # IPv4-compatible, which is_global lets through
        ("64:ff9b::7f00:1", False),  # NAT64 to 127.0.0.1, which is_global lets through
        ("64:ff9b::808:808", True),  # NAT64 to 8.8.8.8
        ("64:ff9b:1::808:808", False),  # NAT64 local use
        ("2002:7f00:1::1", False),  # 6to4 from 127.0.0.1
        ("fd00::1", False),
    ],
)
def test_public_means_globally_routable_all_the_way_through(address, public):
    assert egress.public(ip_address(address)) is public


def test_what_an_ipv6_address_carries():
    assert egress.carried(ip_address("64:ff9b::a00:1")) == [ip_address("10.0.0.1")]
    assert egress.carried(ip_address("::ffff:10.0.0.1")) == [ip_address("10.0.0.1")]
    assert egress.carried(ip_address("2002:c0a8:101::1")) == [ip_address("192.168.1.1")]
    assert egress.carried(ip_address("8.8.8.8")) == []


def test_this_machines_own_addresses_are_known():
    assert egress.this_machine(ip_address("127.0.0.1"))
    assert not egress.this_machine(ip_address("93.184.215.14"))
    assert not egress.permitted(ip_address("127.0.0.1"), ())
    assert egress.permitted(ip_address("127.0.0.1"), (egress.ipaddress.ip_network("127.0.0.0/8"),))
