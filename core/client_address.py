"""The client's address, as every limit counts it: the API throttles (core.throttles: wrong tokens, sign-in codes
and their polls, token creation without a user) and the sign-in lockout (django-axes, AXES_CLIENT_IP_CALLABLE).

X-Forwarded-For is written by whoever sends the request, so only the entries that proxies the portal trusts appended
are believed. PORTAL_TRUSTED_PROXIES says which:

- 0 (the default): none. The client is REMOTE_ADDR, the address the connection came from; X-Forwarded-For is
  ignored.
- A number N of proxy hops in front of the portal (1: one nginx or ingress): each appends the address it received
  the request from, so the client is the N-th address from the right of X-Forwarded-For followed by REMOTE_ADDR
  (the nearest proxy). With fewer entries than that (a request that did not pass every proxy) the leftmost one.
- A list of the proxies' networks ("10.0.0.0/8", "192.0.2.7"): from REMOTE_ADDR leftwards through X-Forwarded-For,
  every address inside them is a proxy; the first outside is the client (all inside: the leftmost).

An entry that is not an IP address was not written by a trusted proxy; the address to its right, the nearest one a
trusted proxy vouches for, counts instead. The answer is normalised (``ipaddress``; an IPv4-mapped IPv6 address as
the IPv4 one), so one address is one count.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Sequence

from django.conf import settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def _parse(text: str) -> IPAddress | None:
    try:
        address = ipaddress.ip_address(text.strip())
    except ValueError:
        return None
    # An IPv4 client of a server listening on IPv6 arrives as ::ffff:a.b.c.d: the same client, the same count.
    return getattr(address, "ipv4_mapped", None) or address


@functools.lru_cache(maxsize=8)
def _networks(trusted: tuple[str, ...]) -> tuple[IPNetwork, ...]:
    return tuple(ipaddress.ip_network(network, strict=False) for network in trusted)


def client_address(request) -> str:
    """The address ``request`` (Django's or DRF's) counts as, per PORTAL_TRUSTED_PROXIES."""
    remote = request.META.get("REMOTE_ADDR") or ""
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR") or ""
    return address_from(remote, forwarded, settings.PORTAL_TRUSTED_PROXIES)


def address_from(remote: str, forwarded: str, trusted: int | Sequence[str]) -> str:
    """The client's address from the connection's (``remote``) and X-Forwarded-For, trusting ``trusted`` (a number
    of proxy hops, or the proxies' networks)."""
    nearest = _parse(remote)
    if nearest is None:
        return remote  # not an IP connection (a Unix socket): nothing to walk
    if not trusted:
        return str(nearest)
    # Right to left: the nearest proxy first, then what each trusted proxy appended, then what the client wrote.
    hops = [remote, *reversed(forwarded.split(","))] if forwarded.strip() else [remote]
    if isinstance(trusted, int):
        hops = hops[: trusted + 1]
        for hop in hops[1:]:
            address = _parse(hop)
            if address is None:
                break
            nearest = address
        return str(nearest)
    networks = _networks(tuple(trusted))
    for hop in hops[1:]:
        if not any(nearest in network for network in networks):
            break
        address = _parse(hop)
        if address is None:
            break
        nearest = address
    return str(nearest)
