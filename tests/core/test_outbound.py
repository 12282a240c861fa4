"""The outbound URL policy on its own: which addresses are refused, how the allow-list permits them."""

from __future__ import annotations

import ipaddress

import pytest
from pydantic import ValidationError

from app.core.outbound import AllowList, Refused, check_host, not_public
from app.core.settings import Settings

NONE = AllowList()

REFUSED = [
    ("127.0.0.1", "loopback"), ("127.255.0.9", "loopback"), ("::1", "loopback"),
    ("169.254.169.254", "metadata"), ("fd00:ec2::254", "metadata"), ("169.254.1.1", "link-local"),
    ("fe80::1", "link-local"), ("10.0.0.1", "private"), ("172.16.5.4", "private"), ("192.168.1.1", "private"),
    ("fc00::1", "private"), ("fd12:3456::1", "private"), ("100.64.0.1", "carrier-grade NAT"),
    ("100.127.255.254", "carrier-grade NAT"), ("0.0.0.0", "unspecified"), ("::", "unspecified"),
    ("224.0.0.1", "multicast"), ("ff02::1", "multicast"), ("240.0.0.1", "reserved"),
    ("::ffff:127.0.0.1", "loopback address (as IPv6)"), ("::ffff:169.254.169.254", "metadata address (as IPv6)"),
    ("::ffff:10.0.0.1", "private-network address (as IPv6)"), ("64:ff9b::7f00:1", "loopback address (as IPv6)"),
    ("2002:a00:1::1", "private-network address (as IPv6)"),
]


@pytest.mark.parametrize("host, kind", REFUSED)
def test_non_public_addresses_are_refused_by_kind(host, kind):
    with pytest.raises(Refused) as caught:
        check_host(host, 443, allow=NONE)
    assert kind in str(caught.value) and "CHARGEBACK_WEBHOOK_ALLOW" in str(caught.value)


@pytest.mark.parametrize("host", ["0x7f000001", "2130706433", "0177.0.0.1", "127.1", "0x7f.0.0.1", "127.0.0.1.",
                                  "017700000001", "0"])
def test_non_canonical_numeric_hosts_are_refused_even_when_their_address_is_allowed(host):
    with pytest.raises(Refused, match="non-canonical numeric"):
        check_host(host, 443, allow=AllowList.parse("127.0.0.0/8, 0.0.0.0/0"))


@pytest.mark.parametrize("host", ["1.1.1.1", "8.8.8.8", "2606:4700:4700::1111"])
def test_public_addresses_pass_and_are_the_address_connected_to(host):
    target = check_host(host, 443, allow=NONE)
    assert target is not None and ipaddress.ip_address(target.addresses[0]) == ipaddress.ip_address(host)


def test_a_name_is_checked_by_every_address_it_resolves_to():
    lookups = []

    def resolver(host, port):
        lookups.append((host, port))
        return {"mixed.example": ["1.1.1.1", "10.0.0.7"], "public.example": ["1.1.1.1", "2606:4700::1"]}[host]

    with pytest.raises(Refused, match="mixed.example resolves to a private-network address"):
        check_host("mixed.example", 8443, allow=NONE, resolver=resolver)
    assert check_host("Public.Example", 443, allow=NONE, resolver=resolver).addresses == ("1.1.1.1", "2606:4700::1")
    assert lookups == [("mixed.example", 8443), ("public.example", 443)]
    with pytest.raises(Refused, match="could not resolve nowhere.example"):
        check_host("nowhere.example", 443, allow=NONE, resolver=lambda h, p: (_ for _ in ()).throw(OSError("NXDOMAIN")))


def test_the_allow_list_permits_networks_and_names():
    allow = AllowList.parse(" 10.1.2.0/24, ::1 ,ERP.corp.example. ,127.0.0.1")
    assert check_host("10.1.2.9", 443, allow=allow).addresses == ("10.1.2.9",)
    assert check_host("::1", 443, allow=allow).addresses == ("::1",)
    assert check_host("::ffff:127.0.0.1", 443, allow=allow) is not None  # the mapped spelling of a permitted address
    with pytest.raises(Refused):
        check_host("10.1.3.1", 443, allow=allow)  # outside the listed network
    with pytest.raises(Refused):
        check_host("127.0.0.2", 443, allow=allow)
    # A listed name is trusted whatever it resolves to; saving it needs no lookup.
    assert check_host("erp.corp.example", 443, allow=allow, resolve_allowed=False) is None
    assert check_host("erp.corp.example", 443, allow=allow, resolver=lambda h, p: ["10.9.9.9"]).addresses == ("10.9.9.9",)
    with pytest.raises(Refused):
        check_host("other.corp.example", 443, allow=allow, resolver=lambda h, p: ["10.9.9.9"])


@pytest.mark.parametrize("entry", ["10.0.0.0/33", "not a host", "0x7f000001", "http://x"])
def test_a_bad_allow_list_entry_stops_the_start_naming_it(entry):
    with pytest.raises(ValidationError) as caught:
        Settings(webhook_allow=f"10.0.0.0/8,{entry}")
    assert "CHARGEBACK_WEBHOOK_ALLOW" in str(caught.value) and repr(entry) in str(caught.value)


def test_public_means_global():
    assert not_public(ipaddress.ip_address("1.1.1.1")) is None
    assert not_public(ipaddress.ip_address("192.0.2.1"))  # documentation range
    assert not_public(ipaddress.ip_address("198.18.0.1"))  # benchmarking range
