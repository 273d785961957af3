"""Where a fedmor app may connect when another party supplied the URL (a member's reward URL):
the host is resolved once, every address it resolves to is checked, and the checked address
is the one dialled, so neither another spelling of an address nor a second DNS answer can
reach the app's own network.

An address's text is not the address: ``127.1``, ``2130706433``, ``0x7f.0.0.1``,
``017700000001`` and ``[::ffff:127.0.0.1]`` all reach loopback, and a DNS name can resolve to
anything. The check reads the addresses the dialler would use (``socket.inet_aton``'s reading
of an IPv4 spelling, ``socket.getaddrinfo``'s answers for a name) and refuses the whole host
when any of them is private, loopback, link-local, reserved, unspecified, multicast or not
globally routable (an IPv4 address inside IPv6, mapped, 6to4 or Teredo, counts as itself).
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import ssl
import urllib.parse
from collections.abc import Iterable
from typing import Any

import anyio.to_thread
import httpcore
import httpx

from sdk.wire._schemas import PayloadError

__all__ = ["DialRefused", "check_reward_url", "checked_addresses", "checked_transport"]

_log = logging.getLogger("fedmor.dial")
_Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class DialRefused(httpcore.ConnectError):
    """A host whose addresses may not be dialled (or that does not resolve); httpx reports it
    as a ``ConnectError``, like any other connection that did not open."""


class _Unresolved(DialRefused):
    """A host name with no address (now): refused at the dial, not at enrollment."""


def _plain(address: _Address) -> _Address:
    """An IPv4-mapped IPv6 address as the IPv4 address it dials; any other as it is."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _embedded(address: _Address) -> list[_Address]:
    """``address`` and any IPv4 address it carries (6to4, Teredo)."""
    found: list[_Address] = [address]
    if isinstance(address, ipaddress.IPv6Address):
        found += [a for a in (address.sixtofour, *(address.teredo or ())) if a is not None]
    return found


def _refused(address: _Address) -> bool:
    return any(a.is_private or a.is_loopback or a.is_link_local or a.is_reserved
               or a.is_unspecified or a.is_multicast or not a.is_global
               for a in _embedded(address))


def _literal(host: str) -> _Address | None:
    """The address a literal host names, in any spelling a dialler accepts (IPv4 in
    inet_aton's dotted, short, decimal, octal or hex forms; IPv6 with or without brackets
    or a zone); None for a DNS name."""
    name = host.strip("[]").split("%", 1)[0]
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        pass
    try:
        return ipaddress.IPv4Address(socket.inet_aton(name))
    except OSError:
        return None


def checked_addresses(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to, each one public; ``DialRefused`` when any is not
    (the operator's log names the host and the address; the message says only that the host
    may not be dialled)."""
    literal = _literal(host)
    if literal is not None:
        addresses = [_plain(literal)]
    else:
        try:
            infos = socket.getaddrinfo(host.rstrip("."), port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as exc:
            _log.warning("host %r does not resolve: %s", host, exc)
            raise _Unresolved(f"host {host!r} may not be dialled") from None
        addresses = [_plain(ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]))
                     for info in infos]
    bad = [str(a) for a in addresses if _refused(a)]
    if bad or not addresses:
        _log.warning("host %r resolves to %s: not dialled (allow_private_reward_urls permits "
                     "private addresses)", host, ", ".join(bad) or "nothing")
        raise DialRefused(f"host {host!r} may not be dialled")
    return [str(a) for a in addresses]


def check_reward_url(url: str, *, allow_http: bool, allow_private: bool = False) -> None:
    """Refuse (``PayloadError``) a member's push URL that is not ``https://host[:port][/path]``
    (``http://`` only with ``allow_http``): the server sends signed queries and images to it.
    Unless ``allow_private``, a host that resolves to any address :func:`checked_addresses`
    refuses is refused too: a fast fail at enrollment, since the broker checks the host again
    each time it connects (a DNS answer can change; a name that does not resolve yet is left
    to that check)."""
    parts = urllib.parse.urlsplit(url)
    schemes = ("https", "http") if allow_http else ("https",)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        port = 0
    if parts.scheme not in schemes or not parts.hostname or parts.username or parts.password \
            or parts.query or parts.fragment or not port:
        raise PayloadError(f"reward_url must be an {' or '.join(schemes)} URL with a host, a "
                           "valid port and no credentials, query or fragment")
    if allow_private:
        return
    try:
        checked_addresses(parts.hostname, port)
    except _Unresolved:
        return
    except DialRefused:
        raise PayloadError(f"reward_url host {parts.hostname!r} is or resolves to a loopback, "
                           "link-local, private or reserved address "
                           "(allow_private_reward_urls permits it)") from None


class _CheckedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's own backend, dialling only the addresses :func:`checked_addresses` passed;
    TLS still verifies (and sends as SNI) the URL's host, which httpcore passes on its own."""

    def __init__(self) -> None:
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None,
                          socket_options: Iterable[Any] | None = None
                          ) -> httpcore.AsyncNetworkStream:
        addresses = await anyio.to_thread.run_sync(checked_addresses, host, port)
        last: Exception | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(address, port, timeout, local_address,
                                                     socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last = exc
        assert last is not None
        raise last

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: Iterable[Any] | None = None
                                  ) -> httpcore.AsyncNetworkStream:
        raise DialRefused("unix sockets are not dialled")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class _CheckedTransport(httpx.AsyncHTTPTransport):
    """httpx's transport over a pool whose every connection goes through ``_CheckedBackend``
    (no proxy from the environment: a proxy would resolve the host itself)."""

    def __init__(self, verify: ssl.SSLContext | bool) -> None:
        super().__init__(verify=verify, trust_env=False)
        limits = httpx.Limits()
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(verify=verify, trust_env=False),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry, network_backend=_CheckedBackend())


def checked_transport(verify: ssl.SSLContext | bool) -> httpx.AsyncBaseTransport:
    """An async httpx transport that dials only public addresses, each the one it checked."""
    return _CheckedTransport(verify)
