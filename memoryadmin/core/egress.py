"""Where the server may send requests: public addresses, plus what the operator allows.

Every address a provider origin reaches must be public (globally routable
unicast) unless it lies in a range of `MEMORYADMIN_PROVIDER_ALLOW`. The rule
is applied twice: when a declaration is deployed (`origin_address_check`:
literal addresses in any spelling, and names that resolve now) and on every
connection (`EgressBackend`: resolve once, check every address, connect to
an address that was checked, so a name cannot rebind between check and use).

A name lookup (a connection's, a deploy-time check's) runs on a thread of its own
(`Lookups`), so that the caller waits for it no longer than its deadline: the C library's
lookup cannot be interrupted, and a name whose servers answer slowly would otherwise hold
the caller past it. A project has at most `MEMORYADMIN_OUTBOUND_LOOKUPS_PER_PROJECT`
lookups running in a process, those its callers abandoned included, and all projects
together at most `MEMORYADMIN_OUTBOUND_LOOKUPS_PER_PROCESS` (of which one project's share
is at most half); past either, the next lookup waits, within its caller's deadline, for
one of them to end. Other projects' lookups never wait for a project's own share.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import ipaddress
import logging
import socket
import ssl
import threading
import time
import typing
from collections.abc import Callable, Iterable, Iterator

import httpcore
import httpx
from django.conf import settings

logger = logging.getLogger(__name__)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# IPv6 prefixes that carry an IPv4 address in their last 32 bits; the address
# they reach is the embedded one.
NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
CGNAT = ipaddress.IPv4Network("100.64.0.0/10")
SETTING = "MEMORYADMIN_PROVIDER_ALLOW"


class EgressRefused(httpcore.ConnectError):
    """A connection refused before it was attempted: the address is not public.

    A ConnectError to the HTTP client, so that it ends the request like any
    unreachable host; `address` and `category` are for the server's logs.
    """

    def __init__(self, host: str, address: str, category: str) -> None:
        super().__init__(f"{host} resolves to {address} ({category}), which is not allowed")
        self.host = host
        self.address = address
        self.category = category


def networks_parse(values: Iterable[str]) -> list[IPNetwork]:
    """CIDR ranges (`127.0.0.0/8`, `::1/128`); raises ValueError naming a bad one."""
    networks: list[IPNetwork] = []
    for value in values:
        try:
            networks.append(ipaddress.ip_network(value.strip(), strict=True))
        except ValueError as exc:
            raise ValueError(f"{value!r} is not a CIDR range such as 127.0.0.0/8 ({exc})") from exc
    return networks


def allowed_networks() -> list[IPNetwork]:
    return networks_parse(getattr(settings, SETTING, ()))


def _embedded_v4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address reaches: IPv4-mapped, NAT64 or 6to4."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address.sixtofour


def _category(address: IPAddress) -> str | None:
    """Why an address is not public, or None when it is."""
    if address.is_unspecified:
        return "unspecified"
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local"
    if isinstance(address, ipaddress.IPv6Address) and address.is_site_local:
        # fec0::/10, deprecated (RFC 3879) yet still routed inside some sites; the
        # library counts it global.
        return "site-local"
    if address.is_multicast:
        return "multicast"
    if isinstance(address, ipaddress.IPv4Address) and address in CGNAT:
        return "shared address space (CGNAT)"
    if address.is_reserved:
        return "reserved"
    if address.is_private or not address.is_global:
        return "private"
    return None


def address_refusal(address: IPAddress, allowed: list[IPNetwork] | None = None) -> str | None:
    """Why the server may not connect to `address` (a category such as "loopback"), or None."""
    networks = allowed_networks() if allowed is None else allowed
    embedded = _embedded_v4(address)
    if embedded is not None:
        # An embedding is judged by the address it reaches; the IPv6 form
        # itself may still be allowed explicitly.
        if any(address in network for network in networks if network.version == 6):
            return None
        refusal = address_refusal(embedded, networks)
        return None if refusal is None else f"{refusal}, embedded in {address.compressed}"
    if any(address in network for network in networks if network.version == address.version):
        return None
    return _category(address)


def literal_address(host: str) -> IPAddress | None:
    """The address a host spells literally, in any spelling a resolver accepts, else None.

    Besides dotted quads and IPv6, the C library reads `2130706433`,
    `0x7f000001`, `0177.0.0.1` and `127.1` as 127.0.0.1; so does this.
    """
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        return ipaddress.ip_address(bare)
    except ValueError:
        pass
    if not bare or any(c not in "0123456789abcdefxABCDEFX." for c in bare):
        return None
    try:
        return ipaddress.IPv4Address(socket.inet_aton(bare))
    except OSError:
        return None


def resolve(host: str, port: int) -> list[tuple[int, IPAddress]]:
    """Every (family, address) `host` resolves to now; raises OSError when it does not."""
    literal = literal_address(host)
    if literal is not None:
        family = socket.AF_INET if literal.version == 4 else socket.AF_INET6
        return [(family, literal)]
    found: list[tuple[int, IPAddress]] = []
    for family, _, _, _, sockaddr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        if family not in (socket.AF_INET, socket.AF_INET6):
            continue
        # A scope id (`fe80::1%eth0`) is not part of the address.
        address = ipaddress.ip_address(str(sockaddr[0]).split("%")[0])
        if (family, address) not in found:
            found.append((family, address))
    if not found:
        raise OSError(f"{host} has no IPv4 or IPv6 address")
    return found


def refusal_of(addresses: Iterable[IPAddress], host: str) -> EgressRefused | None:
    """The refusal of the first address that may not be reached, if any."""
    networks = allowed_networks()
    for address in addresses:
        category = address_refusal(address, networks)
        if category is not None:
            return EgressRefused(host, address.compressed, category)
    return None


# How long a check at deploy time waits for a name's lookup (which counts against the
# project's share of lookups, `Lookups`, as its calls' do); a check that finds no slot in
# time accepts the name as it accepts one that does not resolve (it is checked again when
# used).
DEPLOY_LOOKUP_SECONDS = 2.0

# When the deploy-time checks under way in this context (`deploy_checks`) stop waiting.
_deploy_until: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "deploy_until", default=None
)


@contextlib.contextmanager
def deploy_checks() -> Iterator[None]:
    """The checks of one deployment's declarations, however many names they make: their
    lookups share one DEPLOY_LOOKUP_SECONDS, so that a manifest naming hundreds of origins
    whose lookups hang holds its request that long in all, not that long a name. A name
    not looked up in time is accepted as one that does not resolve. Nested, the outer
    one's time counts."""
    if _deploy_until.get() is not None:
        yield
        return
    token = _deploy_until.set(time.monotonic() + DEPLOY_LOOKUP_SECONDS)
    try:
        yield
    finally:
        _deploy_until.reset(token)


def origin_address_check(host: str, *, project: str | None) -> str | None:
    """At deploy time: why `host` may not be reached, or None.

    A literal address is judged as it is; a name, when a `project` is given, by what it
    resolves to now, within DEPLOY_LOOKUP_SECONDS (those of the `deploy_checks` under way,
    if any) and that project's share of lookups. A name that is not looked up, or does not
    resolve (in that time), is accepted: it is checked again when used.
    """
    literal = literal_address(host)
    if literal is not None:
        addresses = [literal]
    elif project is None:
        return None
    else:
        until = _deploy_until.get() or time.monotonic() + DEPLOY_LOOKUP_SECONDS
        if not _left(until):
            return None  # no time left to wait for it: not looked up
        try:
            lookup = lookups.start(project, host, 443, until=until, stopped=lambda: False)
        except OSError:
            return None
        if lookup is None or not lookup.done.wait(_left(until)):
            return None
        if isinstance(lookup.error, (OSError, UnicodeError)):
            return None
        if lookup.error is not None:
            raise lookup.error
        addresses = [address for _, address in lookup.addresses]
    refused = refusal_of(addresses, host)
    if refused is None:
        return None
    if literal is not None:
        return f"is {refused.category}"
    return f"resolves to a {refused.category} address"


def lookups_limit_total() -> int:
    """Lookups of all projects together running at once in this process."""
    return int(settings.MEMORYADMIN_OUTBOUND_LOOKUPS_PER_PROCESS)


def lookups_limit() -> int:
    """Lookups of one project running at once in this process: as configured, and at most
    half of all projects' (at least one), so that no project holds all of theirs."""
    configured = int(settings.MEMORYADMIN_OUTBOUND_LOOKUPS_PER_PROJECT)
    return min(configured, max(1, lookups_limit_total() // 2))


class _Lookup:
    """One name lookup running on its own thread: its answer, or the error it raised."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.addresses: list[tuple[int, IPAddress]] = []
        self.error: BaseException | None = None


class Lookups:
    """Name lookups on threads of their own, at most `lookups_limit()` running per project
    and `lookups_limit_total()` for all projects (in this process), waited for until a
    deadline or until the caller stops waiting."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._running: dict[str, int] = {}
        self._total = 0

    def running(self, project: str | None = None) -> int:
        """Lookups running for `project`, or for all projects."""
        with self._changed:
            return self._total if project is None else self._running.get(project, 0)

    def _full(self, project: str) -> bool:
        return (
            self._running.get(project, 0) >= lookups_limit() or self._total >= lookups_limit_total()
        )

    def wake(self) -> None:
        """Wakes every caller waiting for a slot, to see whether it still waits."""
        with self._changed:
            self._changed.notify_all()

    def start(
        self,
        project: str,
        host: str,
        port: int,
        *,
        until: float | None,
        stopped: Callable[[], bool],
    ) -> _Lookup | None:
        """Starts looking `host` up once `project` has a lookup slot, within its share
        and the process's; None when `until` (`time.monotonic()`, None for no bound)
        passed or `stopped()` held first; OSError when no thread could be started for it
        (its slot given back)."""
        with self._changed:
            while self._full(project):
                remaining = _left(until)
                if (remaining is not None and remaining <= 0) or stopped():
                    return None
                self._changed.wait(remaining)
            if stopped():
                return None
            self._running[project] = self._running.get(project, 0) + 1
            self._total += 1
        lookup = _Lookup()

        def run() -> None:
            try:
                lookup.addresses = resolve(host, port)
            except BaseException as exc:  # handed to the caller, if it still waits
                lookup.error = exc
            finally:
                self._release(project)
                lookup.done.set()

        try:
            threading.Thread(target=run, name="egress-lookup", daemon=True).start()
        except RuntimeError as exc:
            # No thread to be had (the process's limit; the interpreter shutting down):
            # the slot is given back, and the name is one that could not be looked up.
            self._release(project)
            raise OSError(f"{host} could not be looked up: {exc}") from exc
        return lookup

    def _release(self, project: str) -> None:
        with self._changed:
            self._total -= 1
            left = self._running[project] - 1
            if left:
                self._running[project] = left
            else:
                del self._running[project]
            self._changed.notify_all()


lookups = Lookups()


def _left(until: float | None) -> float | None:
    return None if until is None else max(0.0, until - time.monotonic())


class EgressBackend(httpcore.SyncBackend):
    """Connects only to checked addresses: one resolution, every address checked.

    The socket goes to the address that was checked; TLS still verifies the
    certificate against, and sends SNI for, the origin's host name (httpcore
    starts TLS with the request's host, not with the address).

    A name is looked up on a thread of its own, within the connection's timeout and
    `project`'s share of lookups (`Lookups`).

    `abort()` (from any thread) shuts down every connection it opened, so a request
    waiting on one fails at once, stops waiting for a lookup, and refuses new connections.
    It holds a duplicate of each connection's socket for that: TLS wraps the socket it
    connected in a new one and detaches it (a shutdown of the first then reached nothing,
    so neither a cancellation nor the deadline's watchdog stopped an https call), while a
    shutdown through any descriptor of a connection ends the connection itself. The
    duplicates are closed with the transport (`release`).
    """

    def __init__(self, project: str) -> None:
        self.project = project
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._lookups: list[_Lookup] = []
        self._aborted = False

    def abort(self) -> None:
        with self._lock:
            self._aborted = True
            held = list(self._sockets)
            pending, self._lookups = self._lookups, []
        for sock in held:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for lookup in pending:
            lookup.done.set()
        lookups.wake()

    def release(self) -> None:
        """Closes the duplicates `abort` would shut down (the transport is closed)."""
        with self._lock:
            held, self._sockets = self._sockets, []
        for sock in held:
            with contextlib.suppress(OSError):
                sock.close()

    def _aborted_now(self) -> bool:
        with self._lock:
            return self._aborted

    def _resolve(self, host: str, port: int, timeout: float | None) -> list[tuple[int, IPAddress]]:
        """What `host` resolves to, looked up within `timeout` (a literal address at once)."""
        if literal_address(host) is not None:
            return resolve(host, port)
        until = None if timeout is None else time.monotonic() + timeout
        lookup = lookups.start(self.project, host, port, until=until, stopped=self._aborted_now)
        if lookup is None:
            raise httpcore.ConnectTimeout(f"{host} was not looked up in time")
        with self._lock:
            if self._aborted:
                lookup.done.set()
            else:
                self._lookups.append(lookup)
        lookup.done.wait(_left(until))
        with self._lock:
            if lookup in self._lookups:
                self._lookups.remove(lookup)
            aborted = self._aborted
        if aborted:
            raise httpcore.ConnectError("the call was cancelled")
        if not lookup.done.is_set():
            raise httpcore.ConnectTimeout(f"{host} did not resolve in time")
        if lookup.error is not None:
            raise lookup.error
        return lookup.addresses

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        try:
            addresses = self._resolve(host, port, timeout)
        except (OSError, UnicodeError) as exc:
            raise httpcore.ConnectError(f"{host} does not resolve") from exc
        refused = refusal_of((address for _, address in addresses), host)
        if refused is not None:
            logger.warning("provider egress refused: %s", refused)
            raise refused
        last: httpcore.ConnectError | None = None
        for _, address in addresses:
            try:
                stream = super().connect_tcp(
                    address.compressed, port, timeout, local_address, socket_options
                )
            except httpcore.ConnectError as exc:
                last = exc
                continue
            sock = stream.get_extra_info("socket")
            held = sock.dup() if sock is not None else None
            with self._lock:
                if not self._aborted:
                    if held is not None:
                        self._sockets.append(held)
                    return stream
            if held is not None:
                with contextlib.suppress(OSError):
                    held.shutdown(socket.SHUT_RDWR)
                held.close()
            raise httpcore.ConnectError("the call was cancelled")
        assert last is not None
        raise last


class EgressTransport(httpx.HTTPTransport):
    """httpx's transport over EgressBackend; no proxies (a proxy would connect for us)."""

    def __init__(self, verify: ssl.SSLContext | None = None, *, project: str = "") -> None:
        context = verify or _ssl_context("")
        super().__init__(verify=context, trust_env=False)
        self._backend = EgressBackend(project)
        self._pool = httpcore.ConnectionPool(ssl_context=context, network_backend=self._backend)

    def abort(self) -> None:
        """Stops the requests in flight on this transport at once (a cancellation)."""
        self._backend.abort()

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._backend.release()


@functools.cache
def _ssl_context(extra_ca_file: str) -> ssl.SSLContext:
    """Public roots (certifi), plus the operator's private CA when one is configured;
    loaded once per process for each."""
    context = httpx.create_ssl_context(trust_env=False)
    if extra_ca_file:
        context.load_verify_locations(cafile=extra_ca_file)
    return context


def egress_transport(project: str) -> EgressTransport:
    """A transport trusting public roots and `MEMORYADMIN_PROVIDER_CA_FILE`, if set, whose
    lookups count against `project`'s share: the one of every outbound call
    (core/exchange.py `outbound()`)."""
    extra = str(getattr(settings, "MEMORYADMIN_PROVIDER_CA_FILE", "") or "")
    return EgressTransport(verify=_ssl_context(extra), project=project)


def egress_refusal(exc: BaseException) -> EgressRefused | None:
    """The EgressRefused behind an HTTP client error, if that is what it was."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, EgressRefused):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None
