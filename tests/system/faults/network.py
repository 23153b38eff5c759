"""Network partitions between processes on this machine: nftables rules matched by cgroup v2 and address.

Every process of a fault run listens on loopback, but each party (a NATS node, an API process) gets its own
address (127.0.0.x) and runs in its own cgroup v2 directory, joined before exec so that every socket it
opens belongs to it. Cutting the link between parties A and B drops, in a table of our own:

- what A's sockets send to B's addresses (output hook), and what B's sockets send to A's;
- what A's sockets receive from B's addresses (input hook), and what B's sockets receive from A's.

Both directions of every connection between them die (a connection B opened to A carries A's data back to
B from A's address: the input rule drops it), and nothing else on the machine is touched: the rules match
only sockets of our cgroups. Healing deletes the rules; the cgroups and the table go with ``close``. Needs
root, ``nft`` (Debian's nftables; the Makefile installs it) and a cgroup v2 hierarchy (pure or hybrid).

    links = Links()
    nats0 = links.party("n0", ["127.0.0.21"])    # spawn the process with preexec joining nats0.cgroup
    links.cut(nats0, nats1); …; links.heal(); links.close()
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

# nft resolves a cgroupv2 path relative to this directory, whatever the hierarchy's mount point.
_NFT_CGROUP_ROOT = Path("/sys/fs/cgroup")


def cgroup2_mount() -> Path | None:
    """Where the cgroup v2 hierarchy is mounted (``/sys/fs/cgroup`` or, hybrid, ``…/unified``), if it is."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/mounts").read_text().splitlines():
            fields = line.split()
            if len(fields) > 2 and fields[2] == "cgroup2":
                return Path(fields[1])
    return None


def unavailable() -> str | None:
    """Why links cannot be cut here (no root, no nft, no cgroup v2), or None when they can."""
    if os.geteuid() != 0:
        return "cutting links needs root (nftables)"
    if shutil.which("nft") is None:
        return "nft not installed (Debian's nftables; `make test` and `make faults` install it)"
    mount = cgroup2_mount()
    if mount is None or not os.access(mount, os.W_OK):
        return "no writable cgroup v2 hierarchy"
    return None


@dataclass(frozen=True)
class Party:
    """A process (or several) whose links can be cut: its cgroup and the addresses it listens on."""

    name: str
    cgroup: Path
    addresses: tuple[str, ...]
    # The cgroup as nft names it (relative to /sys/fs/cgroup) and its depth in the v2 hierarchy.
    nft_path: str
    level: int

    def join(self) -> None:
        """Move the calling process into the party's cgroup (a ``preexec_fn``: before exec)."""
        (self.cgroup / "cgroup.procs").write_text(str(os.getpid()))


class Links:
    """An nftables table of our own with an output and an input chain, and a cgroup per party."""

    def __init__(self) -> None:
        reason = unavailable()
        if reason is not None:
            raise RuntimeError(reason)
        mount = cgroup2_mount()
        assert mount is not None
        self._mount = mount
        tag = f"{os.getpid()}_{secrets.token_hex(3)}"
        self._root = mount / f"qcfaults-{tag}"
        self._root.mkdir()
        self.table = f"qcfaults_{tag}"
        self._parties: list[Party] = []
        self._nft(f"add table inet {self.table}")
        self._nft(f"add chain inet {self.table} out {{ type filter hook output priority 0; }}")
        self._nft(f"add chain inet {self.table} in {{ type filter hook input priority 0; }}")
        self.cuts: list[tuple[str, str]] = []

    def party(self, name: str, addresses: list[str] | tuple[str, ...]) -> Party:
        """A new party: a cgroup for its processes to join, and the addresses its listeners are bound to."""
        cgroup = self._root / name
        cgroup.mkdir()
        relative = cgroup.relative_to(_NFT_CGROUP_ROOT) if cgroup.is_relative_to(_NFT_CGROUP_ROOT) else cgroup
        party = Party(
            name=name,
            cgroup=cgroup,
            addresses=tuple(addresses),
            nft_path=str(relative),
            level=len(cgroup.relative_to(self._mount).parts),
        )
        self._parties.append(party)
        return party

    def cut(self, a: Party, b: Party) -> None:
        """Drop every packet between ``a`` and ``b``, both ways, until ``heal``."""
        for one, other in ((a, b), (b, a)):
            if not other.addresses:
                continue
            addresses = ", ".join(other.addresses)
            match = f'socket cgroupv2 level {one.level} "{one.nft_path}"'
            self._nft(f"add rule inet {self.table} out {match} ip daddr {{ {addresses} }} drop")
            self._nft(f"add rule inet {self.table} in {match} ip saddr {{ {addresses} }} drop")
        self.cuts.append((a.name, b.name))

    def isolate(self, party: Party, others: list[Party]) -> None:
        """Cut ``party`` from each of ``others`` (a minority of one)."""
        for other in others:
            self.cut(party, other)

    def heal(self) -> None:
        """Every link works again (established connections resume if they have not timed out)."""
        self._nft(f"flush chain inet {self.table} out")
        self._nft(f"flush chain inet {self.table} in")
        self.cuts.clear()

    def close(self) -> None:
        """Delete the table and the parties' cgroups (their processes must have exited)."""
        with contextlib.suppress(subprocess.CalledProcessError):
            self._nft(f"delete table inet {self.table}")
        for party in self._parties:
            with contextlib.suppress(OSError):
                party.cgroup.rmdir()
        with contextlib.suppress(OSError):
            self._root.rmdir()

    @staticmethod
    def _nft(command: str) -> None:
        subprocess.run(["nft", command], check=True, capture_output=True, text=True, timeout=10)
