"""Where the portal connects on a team's behalf (webhook receivers): to public addresses only.

The rule: every address a URL's host resolves to must be globally routable (``ipaddress``'s ``is_global``, not
multicast, not one of this machine's own), and so must every IPv4 address an IPv6 one carries (IPv4-mapped and
IPv4-compatible, NAT64's 64:ff9b::/96, 6to4, Teredo); NAT64's local-use 64:ff9b:1::/48 is never public. An address
in a network the operator allowed (PORTAL_WEBHOOK_ALLOW_NETWORKS) passes too; PORTAL_WEBHOOK_ALLOW_LOCAL allows
every address, for development and tests.

The host is resolved when a URL is saved and again before every request, and the request goes to the address that
was checked (``PinnedAdapter``), never to the answer of a second lookup: a name whose answer changes in between
(DNS rebinding) cannot steer a request inside. The URL keeps its name for the Host header, TLS's server name and
the certificate check. Spellings such as ``2130706433``, ``0x7f000001``, ``0177.0.0.1``, ``127.1``, ``0``,
``localhost.`` or this machine's host name are names to the resolver like any other, so they meet the same rule.
"""

from __future__ import annotations

import functools
import ipaddress
import socket
from urllib.parse import urlsplit, urlunsplit

import requests
from django.conf import settings
from requests.adapters import HTTPAdapter

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

#: NAT64 (RFC 6052): the well-known prefix carries an IPv4 address in its last 32 bits; the local-use prefix
#: (RFC 8215) is for a network's own translators, never a public receiver.
NAT64_WELL_KNOWN = ipaddress.IPv6Network("64:ff9b::/96")
NAT64_LOCAL_USE = ipaddress.IPv6Network("64:ff9b:1::/48")
EVERY_ADDRESS = (ipaddress.IPv4Network("0.0.0.0/0"), ipaddress.IPv6Network("::/0"))


class Refused(Exception):
    """The host does not resolve, or resolves to an address the portal may not connect to."""


def carried(address: Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address leads to: IPv4-mapped (::ffff:a.b.c.d), IPv4-compatible (::a.b.c.d),
    NAT64 (64:ff9b::a.b.c.d), 6to4 (2002:aabb:ccdd::) and Teredo (server and client)."""
    if address.version == 4:
        return []
    inner = [address.ipv4_mapped, address.sixtofour, *(address.teredo or ())]
    if int(address) >> 32 == 0 or address in NAT64_WELL_KNOWN:
        inner.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return [found for found in inner if found is not None]


def public(address: Address) -> bool:
    """Globally routable, and so is every IPv4 address it leads to."""
    if address.version == 6 and address in NAT64_LOCAL_USE:
        return False
    return all(each.is_global and not each.is_multicast for each in (address, *carried(address)))


def allowed_networks() -> tuple[Network, ...]:
    """The non-public networks the operator lets receivers be in."""
    if settings.PORTAL_WEBHOOK_ALLOW_LOCAL:
        return EVERY_ADDRESS
    return tuple(ipaddress.ip_network(network, strict=False) for network in settings.PORTAL_WEBHOOK_ALLOW_NETWORKS)


def permitted(address: Address, networks: tuple[Network, ...]) -> bool:
    if any(each in network for each in (address, *carried(address)) for network in networks):
        return True
    return public(address) and not this_machine(address)


def this_machine(address: Address) -> bool:
    """One of this machine's own addresses (its host name may resolve to a public one): the kernel lets a socket
    bind only those, unless it binds anything (then this cannot tell, and says no)."""
    return not binds_anything(address.version) and _binds(str(address), address.version)


@functools.cache
def binds_anything(version: int) -> bool:
    """Whether the kernel binds addresses that are not this machine's (ip_nonlocal_bind): tried on a
    documentation address, which is nobody's."""
    return _binds("192.0.2.1" if version == 4 else "2001:db8::1", version)


def _binds(address: str, version: int) -> bool:
    try:
        with socket.socket(socket.AF_INET if version == 4 else socket.AF_INET6, socket.SOCK_DGRAM) as probe:
            probe.bind((address, 0))
    except OSError:
        return False
    return True


def resolve(host: str, port: int) -> list[Address]:
    """Every address ``host`` resolves to, in the resolver's order (a literal address resolves to itself). Raises
    OSError when it does not resolve."""
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except UnicodeError as error:  # a name IDNA cannot encode
        raise OSError(str(error)) from None
    addresses = (ipaddress.ip_address(info[4][0].partition("%")[0]) for info in found)
    return list(dict.fromkeys(addresses))


def checked_address(host: str, port: int) -> Address:
    """The address to connect to for ``host``: the first it resolves to, provided every one of them is permitted
    (a name that also resolves inside is refused whole). Raises Refused."""
    try:
        addresses = resolve(host, port)
    except OSError:
        raise Refused(f"{host} does not resolve") from None
    networks = allowed_networks()
    if not addresses or not all(permitted(address, networks) for address in addresses):
        raise Refused(f"{host} resolves to an address the portal may not connect to")
    return addresses[0]


def default_port(scheme: str) -> int:
    return 443 if scheme == "https" else 80


class PinnedAdapter(HTTPAdapter):
    """Sends every request to one address checked beforehand, whatever the URL's host would resolve to now. The
    URL's name stays in the Host header and, for https, in the TLS server name and the certificate check (urllib3's
    documented ``server_hostname``)."""

    def __init__(self, address: Address, server_name: str):
        self.address, self.server_name = address, server_name
        super().__init__(max_retries=0)

    def init_poolmanager(self, connections, maxsize, block=False, **pool_kwargs):
        super().init_poolmanager(connections, maxsize, block=block, server_hostname=self.server_name, **pool_kwargs)

    def send(self, request, **kwargs):
        parts = urlsplit(request.url)
        literal = f"[{self.address}]" if self.address.version == 6 else str(self.address)
        request.headers["Host"] = parts.netloc.rpartition("@")[2]
        request.url = urlunsplit(parts._replace(netloc=literal + (f":{parts.port}" if parts.port else "")))
        return super().send(request, **kwargs)


def post(url: str, body: bytes, headers: dict, timeout: tuple[float, float], keep: int) -> tuple[int, str]:
    """POST ``body`` to ``url`` at the checked address of its host; returns the status code and the first ``keep``
    characters of the answer. Redirects are not followed, and no proxy is taken from the environment (the request
    goes to the address checked). Raises Refused, or requests' errors when the connection fails."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        server_name = host.encode("idna").decode("ascii")
    except UnicodeError:
        raise Refused(f"{host} is not a host name") from None
    address = checked_address(host, parts.port or default_port(parts.scheme))
    with requests.Session() as session:
        session.trust_env = False
        session.mount(f"{parts.scheme}://", PinnedAdapter(address, server_name))
        with session.post(url, data=body, headers=headers, timeout=timeout, allow_redirects=False,
                          stream=True) as response:  # fmt: skip
            start = next(response.iter_content(keep), b"")
            return response.status_code, start.decode(response.encoding or "utf-8", errors="replace")[:keep]
