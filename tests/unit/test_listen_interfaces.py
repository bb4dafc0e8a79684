"""``swarm.listen_interfaces`` is checked at load, entry by entry, TLS listeners included.

libtorrent reads ``address:port`` entries (IPv6 in brackets, a device name for the address,
a trailing ``s`` for TLS, ``l`` for local); an entry it cannot use it skips with no more
than a warning alert, and a TLS listener on port 65536 (65535 + 1) leaves private versions
without a TLS port. Both are refused at load, naming the setting and the entry.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bloomswarm.agent.config import (
    ListenInterface,
    SwarmConfig,
    env_name,
    load_config,
    parse_listen_interfaces,
)
from bloomswarm.agent.session_settings import session_settings, with_tls_listeners
from bloomswarm.common.errors import ConfigError

CERTS = (Path("/etc/bloomswarm/certs"),)
"""A certificate directory: SwarmConfig does not read it (the agent checks it at start)."""

HEAD = """
data_dir = "/var/lib/bloomswarm"
public_keys = ["/etc/bloomswarm/a.pub"]

[origin]
cdn_base_url = "http://127.0.0.1:1"
"""


@pytest.mark.parametrize(("value", "expected"), [
    ("0.0.0.0:6881,[::]:6881", (ListenInterface("0.0.0.0:6881", "0.0.0.0", 6881),
                                ListenInterface("[::]:6881", "::", 6881))),
    ("127.0.0.1:0", (ListenInterface("127.0.0.1:0", "127.0.0.1", 0),)),
    ("127.0.0.1:65535", (ListenInterface("127.0.0.1:65535", "127.0.0.1", 65535),)),
    ("[::1]:6881", (ListenInterface("[::1]:6881", "::1", 6881),)),
    ("eth0:6881", (ListenInterface("eth0:6881", "eth0", 6881),)),
    ("10.0.0.1:7000,10.0.0.1:7443s", (ListenInterface("10.0.0.1:7000", "10.0.0.1", 7000),
                                      ListenInterface("10.0.0.1:7443s", "10.0.0.1", 7443, ssl=True))),
    ("192.168.0.2:6881l", (ListenInterface("192.168.0.2:6881l", "192.168.0.2", 6881, local=True),)),
    (" 127.0.0.1:1 , ,[fe80::1%eth0]:2sl,",
     (ListenInterface("127.0.0.1:1", "127.0.0.1", 1),
      ListenInterface("[fe80::1%eth0]:2sl", "fe80::1%eth0", 2, ssl=True, local=True))),
])
def test_good_entries_are_read(value: str, expected: tuple[ListenInterface, ...]) -> None:
    assert parse_listen_interfaces(value) == expected
    assert SwarmConfig(listen_interfaces=value).listen_interfaces == value


@pytest.mark.parametrize(("value", "message"), [
    ("127.0.0.1:65536", "swarm.listen_interfaces: '127.0.0.1:65536' has port 65536, not in 0..65535"),
    ("0.0.0.0:6881,[::]:99999", "swarm.listen_interfaces: '[::]:99999' has port 99999, not in 0..65535"),
    ("127.0.0.1:123456789012", "has port 123456789012, not in 0..65535"),
    ("127.0.0.1", "swarm.listen_interfaces: '127.0.0.1' is not address:port"),
    ("127.0.0.1:", "'127.0.0.1:' is not address:port"),
    (":6881", "':6881' is not address:port"),
    ("127.0.0.1:-1", "'127.0.0.1:-1' is not address:port"),
    ("::1:6881", "'::1:6881' is not address:port (an IPv6 address in brackets: [::1]:6881"),
    ("[::1]6881", "'[::1]6881' is not address:port"),
    ("[not-v6]:6881", "swarm.listen_interfaces: '[not-v6]:6881': 'not-v6' is not an IPv6 address"),
    ("999.1.1.1:6881", "swarm.listen_interfaces: '999.1.1.1:6881': '999.1.1.1' is not an IPv4 address"),
    ("127.0.0.1:6881x", "swarm.listen_interfaces: '127.0.0.1:6881x' ends in 'x'"),
    ("127.0.0.1:6881ss", "'127.0.0.1:6881ss' ends in 'ss'"),
    ("127.0.0.1:http", "'127.0.0.1:http' is not address:port"),
    ('"eth0:6881"', "is not address:port"),
    ("", "swarm.listen_interfaces must not be empty"),
    (" , ", "swarm.listen_interfaces must not be empty"),
])
def test_bad_entries_are_refused_naming_the_setting_and_the_entry(value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        SwarmConfig(listen_interfaces=value)
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_listen_interfaces(value)


def test_a_bad_entry_from_the_environment_is_refused_at_load(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text(HEAD)
    environ = {env_name("swarm.listen_interfaces"): "127.0.0.1:70000"}
    message = "swarm.listen_interfaces: '127.0.0.1:70000' has port 70000"
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(path, environ=environ)
    path.write_text(HEAD + '[swarm]\nlisten_interfaces = "0.0.0.0:65535"\n'
                    'certificate_dirs = ["/etc/bloomswarm/certs"]\n')
    message = ("swarm.listen_interfaces: '0.0.0.0:65535': with swarm.certificate_dirs a TLS "
               "listener goes on the next port")
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(path, environ={})


# --- the TLS listeners beside the plain ones -------------------------------------------------------


def test_port_65535_has_no_next_port_for_the_tls_listener() -> None:
    """The repro: 127.0.0.1:65535 with certificates gave a TLS listener on :65536s, which
    libtorrent refused with a warning alert only (ssl_listen_port 0)."""
    SwarmConfig(listen_interfaces="127.0.0.1:65535")  # no certificates: no TLS listener, fine
    message = ("swarm.listen_interfaces: '127.0.0.1:65535': with swarm.certificate_dirs a TLS "
               "listener goes on the next port, and 65535 is the last; choose a lower port or "
               "list the TLS listener yourself (127.0.0.1:65535,127.0.0.1:65534s)")
    with pytest.raises(ConfigError, match=re.escape(message)):
        SwarmConfig(listen_interfaces="127.0.0.1:65535", certificate_dirs=CERTS)
    with pytest.raises(ConfigError, match=re.escape("'[::]:65535': with swarm.certificate_dirs")):
        SwarmConfig(listen_interfaces="0.0.0.0:6881,[::]:65535", certificate_dirs=CERTS)
    with pytest.raises(ConfigError, match="65535 is the last"):
        with_tls_listeners("127.0.0.1:65535")


@pytest.mark.parametrize(("value", "listen"), [
    ("127.0.0.1:65534", "127.0.0.1:65534,127.0.0.1:65535s"),
    ("127.0.0.1:65535,127.0.0.1:7443s", "127.0.0.1:65535,127.0.0.1:7443s"),  # the operator's TLS port
    ("127.0.0.1:65535s", "127.0.0.1:65535s"),
    ("[::1]:0,eth0:6881", "[::1]:0,eth0:6881,[::1]:0s,eth0:6882s"),
    ("192.168.0.2:6881l", "192.168.0.2:6881l,192.168.0.2:6882sl"),
])
def test_tls_listeners_with_certificates(value: str, listen: str) -> None:
    assert with_tls_listeners(value) == listen
    pack = session_settings(SwarmConfig(listen_interfaces=value, certificate_dirs=CERTS))
    assert pack["listen_interfaces"] == listen
    for entry in parse_listen_interfaces(str(pack["listen_interfaces"])):
        assert 0 <= entry.port <= 65535


@pytest.mark.parametrize(("value", "taken"), [
    ("127.0.0.1:6881,127.0.0.1:6882", "'127.0.0.1:6882'"),
    ("0.0.0.0:6882,127.0.0.1:6881", "'0.0.0.0:6882'"),  # the wildcard holds every address
    ("[::]:6881,[::1]:6882", "'[::1]:6882'"),
])
def test_a_tls_listener_on_a_port_a_plain_entry_uses_is_refused(value: str, taken: str) -> None:
    """With certificates the TLS listener goes on the next port: where a plain entry of
    the same address (or its family's wildcard) already listens there, libtorrent would
    fail to bind it with a warning alert only, and private versions would have no TLS
    port."""
    with pytest.raises(ConfigError, match=re.escape(f"which {taken} already listens on")):
        SwarmConfig(listen_interfaces=value, certificate_dirs=CERTS)
    SwarmConfig(listen_interfaces=value)  # without certificates: no TLS listener, fine


@pytest.mark.parametrize("value", [
    "127.0.0.1:6881,127.0.0.2:6882",  # another address
    "[::]:6882,127.0.0.1:6881",  # another family
    "0.0.0.0:6881,[::]:6881",  # the default's shape
    "127.0.0.1:6881,127.0.0.1:6882,127.0.0.1:7000s",  # the operator's own TLS listener
])
def test_tls_listeners_that_clash_with_nothing_are_added(value: str) -> None:
    SwarmConfig(listen_interfaces=value, certificate_dirs=CERTS)
