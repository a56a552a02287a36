"""Network namespaces for partition tests: a process inside, a veth pair to the host, links
cut with iptables inside the namespace and healed again.

Only what the test makes itself is touched: the namespace and the two ends of its veth pair
are named after the test process (pid) and a counter, the rules live in the namespace's own
tables (the host's are never changed), and :meth:`NetNamespace.close` removes all of it. A
process started with :meth:`NetNamespace.prefix` runs inside (``ip netns exec`` execs it in
place, so its pid is the process's own: kill -9 and SIGSTOP reach it).

Addresses: ``10.234.X.Y/30`` per namespace, host side ``.1``, namespace side ``.2``; the
subnet is picked so that no interface of the machine already uses it. Traffic only flows
between the host and the namespace (no route beyond, no forwarding).

Cuts drop packets (``DROP``, not ``REJECT``): a partition looks like silence, as a dead
switch does, so each side finds out through its own timeouts, never through a reset.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field

_counter = itertools.count()


class NamespaceUnavailable(RuntimeError):
    """The kernel (or the lack of privileges, or of ``ip``/``iptables``) refuses namespaces."""


def _run(*args: str) -> None:
    done = subprocess.run(args, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, args, done.stdout, done.stderr)


def _remove_leftovers() -> None:
    """Namespaces an earlier test process made and could not remove (it was killed): named
    ``gc<pid>n<k>``, their pid no longer alive."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30)
    for name in re.findall(r"^(gc(\d+)n\d+)", listed.stdout, flags=re.M):
        if not os.path.exists(f"/proc/{name[1]}"):
            NetNamespace(name[0], f"{name[0]}h", "", "").close()


def _used_subnets() -> set[str]:
    out = subprocess.run(
        ["ip", "-4", "-o", "addr"], capture_output=True, text=True, timeout=30
    ).stdout
    return {word.rsplit(".", 1)[0] for word in out.split() if word.startswith("10.234.")}


@dataclass
class NetNamespace:
    name: str
    host_if: str
    host_ip: str
    ns_ip: str
    #: the iptables rules in force inside, as added (``cut`` adds, ``heal`` removes all)
    rules: list[list[str]] = field(default_factory=list)

    @classmethod
    def create(cls) -> NetNamespace:
        """A new namespace joined to the host by a veth pair, loopback up inside.
        NamespaceUnavailable when the machine does not allow it."""
        for tool in ("ip", "iptables"):
            if shutil.which(tool) is None:
                raise NamespaceUnavailable(f"{tool} is not installed (scripts/test installs it)")
        _remove_leftovers()
        n = next(_counter)
        pid = os.getpid()
        name = f"gc{pid}n{n}"
        used = _used_subnets()
        third = next(
            (x for x in ((pid + n + i) % 250 for i in range(250)) if f"10.234.{x}" not in used),
            None,
        )
        if third is None:
            raise NamespaceUnavailable("no free 10.234.X.0/30 subnet")
        ns = cls(name, f"{name}h", f"10.234.{third}.1", f"10.234.{third}.2")
        try:
            _run("ip", "netns", "add", name)
        except (subprocess.CalledProcessError, OSError) as ex:
            detail = ex.stderr if isinstance(ex, subprocess.CalledProcessError) else ex
            raise NamespaceUnavailable(f"ip netns add refused: {detail}") from ex
        try:
            _run("ip", "link", "add", ns.host_if, "type", "veth", "peer", "name", f"{name}i")
            _run("ip", "link", "set", f"{name}i", "netns", name)
            _run("ip", "addr", "add", f"{ns.host_ip}/30", "dev", ns.host_if)
            _run("ip", "link", "set", ns.host_if, "up")
            _run("ip", "-n", name, "addr", "add", f"{ns.ns_ip}/30", "dev", f"{name}i")
            _run("ip", "-n", name, "link", "set", f"{name}i", "up")
            _run("ip", "-n", name, "link", "set", "lo", "up")
            # iptables inside a namespace is what the cuts need: find out now, not mid-test
            _run("ip", "netns", "exec", name, "iptables", "-S")
        except (subprocess.CalledProcessError, OSError) as ex:
            ns.close()
            detail = ex.stderr if isinstance(ex, subprocess.CalledProcessError) else ex
            raise NamespaceUnavailable(f"cannot set up namespace {name}: {detail}") from ex
        return ns

    @property
    def prefix(self) -> list[str]:
        """The command prefix that runs a program inside."""
        return ["ip", "netns", "exec", self.name]

    def _iptables(self, *args: str) -> None:
        _run(*self.prefix, "iptables", *args)

    def cut_remote(self, port: int) -> None:
        """Drop the namespace's traffic to and from ``host_ip:port`` (a service on the host,
        e.g. the store): the process inside no longer reaches it."""
        for rule in (
            ["OUTPUT", "-p", "tcp", "-d", self.host_ip, "--dport", str(port), "-j", "DROP"],
            ["INPUT", "-p", "tcp", "-s", self.host_ip, "--sport", str(port), "-j", "DROP"],
        ):
            self._iptables("-A", *rule)
            self.rules.append(rule)

    def cut_local(self, port: int) -> None:
        """Drop the traffic to and from the namespace's ``port`` (a server inside): nobody on
        the host reaches it, while its own calls out still go through."""
        for rule in (
            ["INPUT", "-p", "tcp", "--dport", str(port), "-j", "DROP"],
            ["OUTPUT", "-p", "tcp", "--sport", str(port), "-j", "DROP"],
        ):
            self._iptables("-A", *rule)
            self.rules.append(rule)

    def cut_local_from_host(self, port: int) -> None:
        """Drop the traffic between the host and the namespace's ``port`` (a server inside):
        the host no longer reaches it, while processes inside the namespace still do."""
        for rule in (
            ["INPUT", "-p", "tcp", "-s", self.host_ip, "--dport", str(port), "-j", "DROP"],
            ["OUTPUT", "-p", "tcp", "-d", self.host_ip, "--sport", str(port), "-j", "DROP"],
        ):
            self._iptables("-A", *rule)
            self.rules.append(rule)

    def heal(self) -> None:
        """Remove every rule added by the cuts."""
        while self.rules:
            self._iptables("-D", *self.rules.pop())

    def close(self) -> None:
        """Delete the namespace and the host end of the veth (also after a partial set-up;
        never raises)."""
        for args in (
            ("ip", "link", "del", self.host_if),
            ("ip", "netns", "del", self.name),
        ):
            subprocess.run(args, capture_output=True, timeout=30, check=False)
