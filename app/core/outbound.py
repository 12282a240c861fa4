"""Outbound URL policy: which hosts the portal may call on a user's behalf (webhook receivers).

An admin types a receiver URL; the worker then calls it and shows what came back. Without a policy
that is a way to reach, and read, whatever the portal's network can: loopback services, the cloud
metadata endpoint, the company's private ranges. So a URL's host is resolved and every address it
resolves to must be public (not loopback, link-local, private, CGNAT, unspecified, multicast,
reserved, documentation, an IPv4-mapped or NAT64 spelling of one of those, or a metadata address),
both when the URL is saved and again at every delivery, and the connection is made to the very
address that was checked (`Target.addresses`), so a name re-pointed between the check and the connect
(DNS rebinding) cannot switch it. Numeric hosts must be spelled canonically: `0x7f000001`,
`2130706433`, `0177.0.0.1` and `127.1` are what inet_aton reads as 127.0.0.1, and are refused as such.

The operator's allow-list (CHARGEBACK_WEBHOOK_ALLOW: comma-separated CIDRs and host names) permits
an internal receiver on purpose: an address inside a listed network, or a listed host name whatever
it resolves to. Reasons name the kind of address refused, never the port's state.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], Sequence[str]]

ALLOW_SETTING = "CHARGEBACK_WEBHOOK_ALLOW"
# Cloud metadata endpoints (AWS, GCP, Azure, OpenStack: 169.254.169.254; AWS over IPv6: fd00:ec2::254).
METADATA = (ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254"))
_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
# Labels inet_aton reads as numbers: decimal, octal (leading 0) or hex (0x); 1 to 4 of them.
_NUMERIC_HOST = re.compile(r"^(0x[0-9a-f]*|[0-9]+)(\.(0x[0-9a-f]*|[0-9]+)){0,3}\.?$", re.I)
_HOST_NAME = re.compile(r"^(?=.{1,253}$)([a-z0-9_]([-a-z0-9_]{0,61}[a-z0-9_])?)(\.[a-z0-9_]([-a-z0-9_]{0,61}[a-z0-9_])?)*$")


class Refused(Exception):
    """The URL's host may not be called; the message says why (shown to the admin, stored with the attempt)."""


@dataclass(frozen=True)
class AllowList:
    """The operator's exceptions: networks whose addresses may be called, and host names trusted whatever they resolve to."""

    networks: tuple[IPNetwork, ...] = ()
    hosts: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def parse(cls, text: str) -> AllowList:
        """`10.1.2.0/24, erp.corp.example, ::1` -> AllowList; ValueError naming the entry that is neither."""
        networks: list[IPNetwork] = []
        hosts: set[str] = set()
        for raw in text.split(","):
            entry = raw.strip().lower()
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
                continue
            except ValueError:
                pass
            name = entry.rstrip(".")
            if not _HOST_NAME.match(name) or _NUMERIC_HOST.match(name):
                raise ValueError(f"{ALLOW_SETTING}: {raw.strip()!r} is neither a CIDR (10.0.0.0/8, ::1/128) "
                                 "nor a host name")
            hosts.add(name)
        return cls(networks=tuple(networks), hosts=frozenset(hosts))

    def permits(self, address: IPAddress) -> bool:
        return any(address in net for net in self.networks if net.version == address.version) or (
            isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None
            and self.permits(address.ipv4_mapped))

    def names(self, host: str) -> bool:
        return host.lower().rstrip(".") in self.hosts


@dataclass(frozen=True)
class Target:
    """A host that passed the policy, and the addresses checked: the only ones to connect to, in order."""

    host: str
    addresses: tuple[str, ...]


def not_public(address: IPAddress) -> str | None:
    """Why `address` is not one the portal calls unasked (None: a public unicast address)."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour or (
            ipaddress.IPv4Address(int(address) & 0xFFFFFFFF) if address in _NAT64 else None)
        if embedded is not None:
            reason = not_public(embedded)
            return f"{reason} (as IPv6)" if reason else None
    if address in METADATA:
        return "a cloud metadata address"
    if address.is_unspecified:
        return "an unspecified address"
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address"
    if isinstance(address, ipaddress.IPv4Address) and address in _CGNAT:
        return "a carrier-grade NAT address (100.64.0.0/10)"
    if address.is_multicast:
        return "a multicast address"
    if address.is_reserved:
        return "a reserved address"
    if address.is_private:
        return "a private-network address"
    if not address.is_global:
        return "a reserved address"
    return None


def _system_resolver(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def numeric_host(host: str) -> IPAddress | None:
    """The address a host written as one is (canonically); Refused for a numeric spelling that is not canonical."""
    try:
        return ipaddress.ip_address(host.split("%", 1)[0] if ":" in host else host)
    except ValueError:
        pass
    if _NUMERIC_HOST.match(host):
        raise Refused(f"{host!r} is a non-canonical numeric address (write an IPv4 address as four decimal numbers)")
    return None


def check_host(host: str, port: int, *, allow: AllowList, resolve_allowed: bool = True,
               resolver: Resolver = _system_resolver) -> Target | None:
    """The address to connect to for `host`, every address it resolves to checked; Refused with the reason.

    `resolve_allowed=False` (saving a URL whose name is on the allow-list needs no lookup) returns None for such a name.
    """
    host = host.lower()
    if allow.names(host):
        if not resolve_allowed:
            return None
        return Target(host=host, addresses=tuple(_lookup(host, port, resolver)))
    literal = numeric_host(host)
    addresses = [str(literal)] if literal is not None else _lookup(host, port, resolver)
    for text in addresses:
        address = ipaddress.ip_address(text.split("%", 1)[0])
        reason = not_public(address)
        if reason and not allow.permits(address):
            what = "is" if literal is not None else "resolves to"
            raise Refused(f"{host} {what} {reason}; receivers must be public unless {ALLOW_SETTING} permits them")
    return Target(host=host, addresses=tuple(addresses))


def _lookup(host: str, port: int, resolver: Resolver) -> list[str]:
    try:
        addresses = list(resolver(host, port))
    except (OSError, UnicodeError):
        addresses = []
    if not addresses:
        raise Refused(f"could not resolve {host}")
    return addresses
