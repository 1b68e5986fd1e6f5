"""Real read-write mounts of an etcd library and acknowledged writers on them (issue 15's multi-mount and
fault tests).

``mount`` / ``unmount`` start and stop a mount server (and its indexer) with the launcher;
``start_writers`` / ``finish_writers`` run ``bench/acked_writers.py`` processes on mounts and collect their
ledgers (every acknowledged change); ``acked_writers()`` is that module (its ``verify`` reads every ledger
path back through mounts); ``indexer_role`` says whether an indexer process is the library's active one or
a standby.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

from libraryfs.layout import pid_alive, wait_exit

BENCH = Path(__file__).resolve().parents[2] / "bench"
CACHE_S = "60,60,60"  #: the kernel's entry, attribute and negative timeouts of the multi-mount tests


def acked_writers():
    """The module ``bench/acked_writers.py`` (``verify(mounts, ledgers)``, ``run_writer``)."""
    spec = importlib.util.spec_from_file_location("acked_writers", BENCH / "acked_writers.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def mount(lib: Path, mnt: Path, indexer: bool = True, timeouts: str = CACHE_S) -> dict:
    """Mount library directory ``lib`` read-write at ``mnt`` (made if missing) with the launcher, no LLM;
    ``timeouts``: the kernel's entry, attribute and negative timeouts (s). Returns the launcher's facts
    (``server_pid``, ``indexer_pid``)."""
    from libraryfs.daemon import launcher

    mnt.mkdir(exist_ok=True)
    return launcher.start(str(lib), str(mnt), indexer=indexer, timeouts=timeouts, llm=False)


def unmount(mnt: Path, info: dict) -> None:
    """Unmount ``mnt`` and stop its indexer; both processes are gone on return."""
    from libraryfs.daemon import launcher

    launcher.stop(str(mnt))
    for key in ("indexer_pid", "server_pid"):
        wait_exit(info.get(key), 30)
        assert not pid_alive(info.get(key))


def start_writers(
    mounts: dict[str, Path],
    per_mount: int,
    ledger_dir: Path,
    *,
    ops: int | None = None,
    until_file: dict[str, Path] | None = None,
) -> list[tuple[str, subprocess.Popen]]:
    """``per_mount`` writer processes on each mount of ``mounts`` (side name → mountpoint; writer ids are the
    side name + a number, their ledgers ``ledger_dir/<id>.json``), each for ``ops`` changes or until the
    side's ``until_file`` exists. The shared directories ``d0`` … ``d3`` must exist. Returns ``[(id, Popen)]``."""
    procs = []
    for side, m in mounts.items():
        for w in range(per_mount):
            wid = f"{side}{w}"
            cmd = [
                sys.executable,
                str(BENCH / "acked_writers.py"),
                str(m),
                wid,
                str(ledger_dir / f"{wid}.json"),
            ]
            cmd += ["--ops", str(ops)] if ops is not None else ["--until-file", str(until_file[side])]
            cmd += ["--seed", str(hash(wid) & 0xFFFF)]
            procs.append(
                (wid, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
            )
    return procs


def finish_writers(procs: list[tuple[str, subprocess.Popen]], ledger_dir: Path) -> list[dict]:
    """Wait for the writers (each must exit 0) and return their ledgers."""
    for _wid, p in procs:
        out, _ = p.communicate(timeout=600)
        assert p.returncode == 0, out
    return [json.loads((ledger_dir / f"{wid}.json").read_text()) for wid, _p in procs]


def indexer_role(run_cli, lib: Path, pid: int) -> str:
    """``"active"`` when process ``pid`` holds the indexer lease, ``"standby"`` when ``lib``'s status says it
    waits for another holder, else what was seen (for the wait's message)."""
    facts = json.loads(run_cli("status", str(lib), "--json", check_rc=True).stdout)
    holder = (facts["holders"]["indexer"] or {}).get("pid")
    standby = facts.get("indexer_standby") or {}
    if holder == pid and not standby and facts["indexer_pid"] == pid:
        return "active"
    if standby.get("state") == "standby" and standby.get("pid") == pid and holder not in (None, pid):
        return "standby"
    return f"holder {holder}, standby {standby}"
