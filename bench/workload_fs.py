"""The filesystems ``bench/workloads.py`` compares, each mounted in a private work directory and always unmounted.

The mirrored directories and the libraries live in one backing directory: the work directory on disk (the
default), or a tmpfs (``--backing tmpfs``: no disk cost in any of them, so the ratios are the servers' own
cost; fsync is then free for all).

* ``tmpfs`` — ``mount -t tmpfs``: the kernel alone (no FUSE). It has no cold state: its dentries and pages
  *are* its storage, so its "cold" cells are plain repeats;
* ``bindfs`` — bindfs (C, libfuse3; Debian package) mirroring a directory on the work disk, in the
  foreground, single-threaded (bindfs's default), libfuse's default 1 s entry/attribute timeouts;
* ``bindfs-mt`` — the same with ``--multithreaded`` (the yardstick for the concurrent workloads);
* ``binding`` — ``bench/passthroughfs.py``: the bare mfusepy binding mirroring a directory on the work disk,
  mounted with libraryfs's options (what the binding costs, above bindfs; what libraryfs costs, above it);
* ``libraryfs`` — ``libraryfs init`` + ``libraryfs mount LIB MNT --timeouts 1,1,1 --no-llm``: the server
  and its indexer daemon (deterministic index, no LLM endpoint);
* ``libraryfs-noidx`` — the same with ``--no-indexer``;
* ``libraryfs@LABEL``, ``libraryfs-noidx@LABEL`` — the same through another ``libraryfs`` command and/or
  with more mount flags, as ``workloads.py --variant LABEL=COMMAND [FLAG…]`` says (e.g. the code of another
  worktree measured beside this one in the same run, or ``--threads 1``).

Only the public command line of libraryfs is used (``init``, ``mount``, ``umount``, and the control file
``.libraryfs/status.json`` to wait until the indexer is idle), so the benchmark survives refactors of the
package. "Cold" = the FUSE filesystem unmounted and mounted again (a new server; the kernel holds no dentry,
attribute or page of it); the backing directory or LMDB file stays in the OS page cache unless
``drop_caches`` is asked for (then ``sync`` + ``echo 3 > /proc/sys/vm/drop_caches`` after the remount).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from fs_bench import _mounted as is_mounted  # noqa: E402  (listed in /proc/mounts and answers statvfs)

TIMEOUTS = "1,1,1"  #: kernel entry/attribute/negative timeouts (s) of the Python filesystems

FS_ALL = ("tmpfs", "bindfs", "bindfs-mt", "binding", "libraryfs-noidx", "libraryfs")


class FsError(RuntimeError):
    """A filesystem could not be mounted or unmounted (message says which and why)."""


def listed(mnt: str) -> bool:
    """True if ``mnt`` is in /proc/mounts (live or stale: a dead server's mount fails ``statvfs``)."""
    with open("/proc/mounts") as f:
        return any(line.split()[1] == mnt for line in f)


def force_unmount(mnt: str) -> None:
    """Last resort for a FUSE mount of ours that is still listed: ``fusermount3 -u``, then ``-uz``."""
    for args in (["-u"], ["-uz"]):
        if not listed(mnt):
            return
        subprocess.run(["fusermount3", *args, mnt], capture_output=True)


def process_cpu_s(pid: int) -> float:
    """CPU seconds (user + system, all threads, plus waited-for children) used so far by ``pid``; 0 if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(x) for x in rest[11:15]) / os.sysconf("SC_CLK_TCK")


def _pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def libraryfs_cli() -> list[str]:
    """The ``libraryfs`` command of this interpreter's environment (else the one on PATH)."""
    beside = os.path.join(os.path.dirname(sys.executable), "libraryfs")
    exe = beside if os.access(beside, os.X_OK) else shutil.which("libraryfs")
    if not exe:
        raise FsError("the libraryfs command is not installed (pip install -e .)")
    return [exe]


def drop_caches() -> None:
    """``sync`` and drop the page, dentry and inode caches (root; evicts every user's caches)."""
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


class Filesystem:
    """One filesystem under test, mounted at ``<work>/mnt-<name>``; workloads run in :attr:`root`."""

    cold = "remount"  #: how a cold cell is made: "remount", or "none" (tmpfs)

    def __init__(self, name: str, work: str, log_path: str, backing: str | None = None) -> None:
        self.name = name
        self.work = work
        self.backing = backing or work  #: where the mirrored directory or the library lives
        self.mnt = os.path.join(work, "mnt-" + name)
        self.root = self.mnt
        self.log_path = log_path

    def setup(self) -> None:
        """Create the backing store and mount."""
        os.makedirs(self.mnt, exist_ok=True)
        self.start()

    def start(self) -> None:
        """Mount (the backing store exists)."""
        raise NotImplementedError

    def stop(self) -> None:
        """Unmount; idempotent; never leaves a process or a mount behind."""
        raise NotImplementedError

    def remount(self, drop: bool = False) -> None:
        """Make the next access cold: unmount and mount again (and drop the OS caches if ``drop``)."""
        if self.cold == "none":
            return
        self.stop()
        self.start()
        if drop:
            drop_caches()

    def processes(self) -> dict[str, int]:
        """The filesystem's own processes by role (``"server"``, ``"indexer"``): their CPU is its cost."""
        return {}

    def settle(self, timeout_s: float = 600.0) -> float:
        """Wait until background work caused by the last cell is done; returns seconds waited."""
        return 0.0

    def describe(self) -> dict:
        """What was mounted, with which options (for the JSON)."""
        return {"name": self.name, "cold": self.cold, "backing": self.backing}

    def teardown(self) -> None:
        """Unmount and remove everything under the work directory that belongs to this filesystem."""
        self.stop()


class Tmpfs(Filesystem):
    """``mount -t tmpfs`` (root only)."""

    cold = "none"

    def start(self) -> None:
        r = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=8g,mode=0755", "wl-tmpfs", self.mnt],
            capture_output=True,
            text=True,
        )
        if r.returncode != 0:
            raise FsError(f"tmpfs: cannot mount at {self.mnt}: {r.stderr.strip()}")

    def stop(self) -> None:
        if listed(self.mnt) and subprocess.run(["umount", self.mnt], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", self.mnt], check=True)

    def describe(self) -> dict:
        return {**super().describe(), "options": "size=8g,mode=0755"}


class ServerFs(Filesystem):
    """A FUSE server we start in the foreground as our own child process, mirroring ``<work>/src-<name>``."""

    def __init__(self, name: str, work: str, log_path: str, backing: str | None = None) -> None:
        super().__init__(name, work, log_path, backing)
        self.src = os.path.join(self.backing, "src-" + name)
        self.proc: subprocess.Popen | None = None

    def command(self) -> list[str]:
        """argv of the server (foreground)."""
        raise NotImplementedError

    def setup(self) -> None:
        os.makedirs(self.src, exist_ok=True)
        super().setup()

    def start(self) -> None:
        env = dict(os.environ)
        env.pop("NOTIFY_SOCKET", None)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=env,
                start_new_session=True,
            )
        deadline = time.monotonic() + 60
        while not is_mounted(self.mnt):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self._kill()
                raise FsError(f"{self.name}: server did not mount {self.mnt} (see {self.log_path})")
            time.sleep(0.02)

    def stop(self) -> None:
        if self.proc is None:
            return
        for _ in range(2):
            if (
                not listed(self.mnt)
                or subprocess.run(["fusermount3", "-u", self.mnt], capture_output=True).returncode == 0
            ):
                break
            time.sleep(0.5)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._kill()
        force_unmount(self.mnt)
        self.proc = None

    def _kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def processes(self) -> dict[str, int]:
        return {"server": self.proc.pid} if self.proc is not None else {}

    def teardown(self) -> None:
        super().teardown()
        shutil.rmtree(self.src, ignore_errors=True)


class Bindfs(ServerFs):
    """bindfs mirroring ``src`` (``--multithreaded`` for ``bindfs-mt``)."""

    def command(self) -> list[str]:
        exe = shutil.which("bindfs")
        if not exe:
            raise FsError("bindfs is not installed (apt-get install bindfs)")
        mt = ["--multithreaded"] if self.name.endswith("-mt") else []
        return [exe, "-f", "--no-allow-other", *mt, self.src, self.mnt]

    def describe(self) -> dict:
        version = subprocess.run(["bindfs", "--version"], capture_output=True, text=True).stdout.strip()
        return {**super().describe(), "command": " ".join(self.command()), "version": version}


class Binding(ServerFs):
    """The bare mfusepy binding: ``bench/passthroughfs.py`` mirroring ``src``."""

    def command(self) -> list[str]:
        return [
            sys.executable,
            os.path.join(HERE, "passthroughfs.py"),
            self.src,
            self.mnt,
            "--timeouts",
            TIMEOUTS,
        ]

    def describe(self) -> dict:
        return {**super().describe(), "command": " ".join(self.command())}


class Libraryfs(Filesystem):
    """A library at ``<work>/lib-<name>`` mounted with the ``libraryfs`` command (indexer unless ``-noidx``);
    ``cli``: that command (default: :func:`libraryfs_cli`), ``flags``: more ``libraryfs mount`` flags."""

    def __init__(
        self,
        name: str,
        work: str,
        log_path: str,
        backing: str | None = None,
        cli: list[str] | None = None,
        flags: list[str] | None = None,
    ) -> None:
        super().__init__(name, work, log_path, backing)
        self.lib = os.path.join(self.backing, "lib-" + name)
        self.indexer = not name.partition("@")[0].endswith("-noidx")
        self.cli = cli
        self.flags = list(flags or [])
        self.server_pid: int | None = None
        self.indexer_pid: int | None = None
        self.extra_env: dict[str, str] = {}  #: added to the server's environment (bench/workload_profile.py)

    def _cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        env = dict(os.environ, **self.extra_env)
        env.pop("NOTIFY_SOCKET", None)
        r = subprocess.run(
            (self.cli or libraryfs_cli()) + list(args), capture_output=True, text=True, env=env
        )
        if check and r.returncode != 0:
            raise FsError(f"{self.name}: libraryfs {' '.join(args)}: {(r.stderr or r.stdout).strip()}")
        return r

    def mount_args(self) -> list[str]:
        """Arguments of ``libraryfs mount``."""
        extra = ["--no-llm"] if self.indexer else ["--no-indexer"]
        return ["mount", self.lib, self.mnt, "--timeouts", TIMEOUTS, *extra, *self.flags]

    def setup(self) -> None:
        self._cli("init", self.lib)
        super().setup()

    def start(self) -> None:
        out = self._cli(*self.mount_args()).stdout
        m = re.search(r"server pid (\d+)", out)
        if not m:  # the launcher's documented process file
            with open(os.path.join(self.lib, "run.json")) as f:
                info = json.load(f)
            self.server_pid, self.indexer_pid = info.get("server_pid"), info.get("indexer_pid")
        else:
            self.server_pid = int(m.group(1))
            mi = re.search(r"indexer pid (\d+)", out)
            self.indexer_pid = int(mi.group(1)) if mi else None
        if self.indexer and not self.indexer_pid:
            raise FsError(f"{self.name}: mounted without an indexer: {out.strip()}")

    def stop(self) -> None:
        if self.server_pid is None:
            return
        if listed(self.mnt) and self._cli("umount", self.mnt, check=False).returncode != 0:
            time.sleep(0.5)
            self._cli("umount", "--lazy", self.mnt, check=False)
        deadline = time.monotonic() + 30
        while any(p and _pid_alive(p) for p in (self.server_pid, self.indexer_pid)):
            if time.monotonic() > deadline:  # ours: started by our `libraryfs mount`
                for p in (self.server_pid, self.indexer_pid):
                    if p and _pid_alive(p):
                        os.kill(p, signal.SIGKILL)
                break
            time.sleep(0.05)
        force_unmount(self.mnt)
        self.server_pid = self.indexer_pid = None

    def processes(self) -> dict[str, int]:
        return {k: p for k, p in (("server", self.server_pid), ("indexer", self.indexer_pid)) if p}

    def status(self) -> dict:
        """``.libraryfs/status.json`` of the mount (read through the mount, like any tool would)."""
        with open(os.path.join(self.mnt, ".libraryfs", "status.json")) as f:
            return json.load(f)

    def settle(self, timeout_s: float = 600.0) -> float:
        """Wait until the indexer has consumed the journal and is idle; returns seconds waited."""
        if not self.indexer:
            return 0.0
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout_s:
            st = self.status()
            if st.get("pending_records", 1) == 0 and (st.get("indexer") or {}).get("state") == "idle":
                return time.monotonic() - t0
            time.sleep(0.1)
        raise FsError(f"{self.name}: the indexer did not become idle within {timeout_s:.0f} s")

    def describe(self) -> dict:
        return {
            **super().describe(),
            "command": " ".join(self.cli or ["libraryfs"]) + " " + " ".join(self.mount_args()),
            "indexer": self.indexer,
        }

    def teardown(self) -> None:
        super().teardown()
        shutil.rmtree(self.lib, ignore_errors=True)


def make(
    name: str, work: str, log_path: str, backing: str | None = None, variants: dict | None = None
) -> Filesystem:
    """The filesystem called ``name`` (one of :data:`FS_ALL`, or ``libraryfs[-noidx]@LABEL`` with
    ``variants[LABEL]`` = ``(command argv or None, extra mount flags)``); its mirrored directory or library
    goes in ``backing`` (default: ``work``)."""
    base, _, label = name.partition("@")
    if label and base in ("libraryfs", "libraryfs-noidx") and label in (variants or {}):
        cli, flags = variants[label]  # type: ignore[index]
        return Libraryfs(name, work, log_path, backing, cli=cli, flags=flags)
    if name == "tmpfs":
        return Tmpfs(name, work, log_path)
    if name in ("bindfs", "bindfs-mt"):
        return Bindfs(name, work, log_path, backing)
    if name == "binding":
        return Binding(name, work, log_path, backing)
    if name in ("libraryfs", "libraryfs-noidx"):
        return Libraryfs(name, work, log_path, backing)
    raise ValueError(f"unknown filesystem {name!r} (one of {', '.join(FS_ALL)})")
