"""``host:port`` text for addresses that may be IPv6 literals, which need brackets (RFC 3986 section 3.2.2)."""

from __future__ import annotations

import ipaddress


def host_port(host: str, port: int) -> str:
    """``host:port``, an IPv6 literal written in brackets so the port stays readable.

    >>> host_port("2001:db8::10", 6443)
    '[2001:db8::10]:6443'
    >>> host_port("192.0.2.10", 9400)
    '192.0.2.10:9400'
    >>> host_port("api.lab.internal", 6443)
    'api.lab.internal:6443'
    """
    try:
        if ipaddress.ip_address(host.strip("[]")).version == 6:
            return f"[{host.strip('[]')}]:{port}"
    except ValueError:
        # A host name: nothing to bracket.
        pass
    return f"{host}:{port}"


def with_default_port(endpoint: str, port: int) -> str:
    """``endpoint`` (``host``, ``host:port``, an IPv6 literal bare or in brackets, ``[v6]:port``) with ``port``
    added where it names none.

    A bare IPv6 literal has colons of its own, so counting colons cannot tell it from ``host:port``; it is parsed.

    >>> with_default_port("2001:db8::10", 6443)
    '[2001:db8::10]:6443'
    >>> with_default_port("[2001:db8::10]:7443", 6443)
    '[2001:db8::10]:7443'
    >>> with_default_port("api.lab.internal:7443", 6443)
    'api.lab.internal:7443'
    """
    if endpoint.startswith("["):
        host, _, rest = endpoint[1:].partition("]")
        return f"[{host}]{rest}" if rest.startswith(":") else host_port(host, port)
    try:
        ipaddress.IPv6Address(endpoint)
    except ValueError:
        return endpoint if ":" in endpoint else host_port(endpoint, port)
    return host_port(endpoint, port)
