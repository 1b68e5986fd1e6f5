"""Per-FUSE-op counters for a libraryfs mount server, loaded only by ``bench/workload_profile.py``.

That script starts the server with ``PYTHONPATH=bench/profile_hook`` and ``LIBRARYFS_BENCH_OPSTATS=DIR``;
Python imports this file at start-up (``sitecustomize``). Nothing happens without the variable. When the
store module and the FUSE adapter of libraryfs are imported (``libraryfs.store``/``libraryfs.fs.store``,
``libraryfs.fuse_adapter``/``libraryfs.fs.fuse_adapter``), it wraps, without changing their code:

* every FUSE operation of the adapter's ``FuseOps`` class: calls and server time (ns, the op's Python call:
  adapter + view + store, not the binding or the kernel);
* ``Store.run_write`` / ``Store.read`` (and ``read_committed``) / ``Store.sync``: write transactions (and their time, commit
  included), read transactions and syncs, each charged to the FUSE op running on that thread (else to the
  thread's name, e.g. the invalidator's periodic sync).

A ``getattr`` of ``/.bench-opstats-<tag>`` writes the cumulative counters to ``DIR/<tag>.json`` (the lookup
itself then fails with ENOENT as usual), so the caller takes a snapshot synchronously between two steps.
The wrappers cost ~1–2 µs per op; the timings they report are not the benchmark's figures.
"""

from __future__ import annotations

import os

_OUT = os.environ.get("LIBRARYFS_BENCH_OPSTATS")

if _OUT:
    import importlib.abc
    import json
    import sys
    import threading
    import time

    _local = threading.local()
    _stats: dict[str, dict[str, int]] = {}
    _DUMP = "/.bench-opstats-"
    _FIELDS = ("calls", "ns", "write_txns", "write_ns", "read_txns", "syncs", "sync_ns")

    def _slot(op: str | None = None) -> dict[str, int]:
        key = op or getattr(_local, "op", None) or f"({threading.current_thread().name})"
        s = _stats.get(key)
        if s is None:
            s = _stats[key] = dict.fromkeys(_FIELDS, 0)
        return s

    def _dump(path: str) -> None:
        tag = path[len(_DUMP) :].replace("/", "_")
        tmp = os.path.join(_OUT, f".{tag}.tmp")
        with open(tmp, "w") as f:
            json.dump({"pid": os.getpid(), "ops": _stats}, f)
        os.replace(tmp, os.path.join(_OUT, f"{tag}.json"))

    def _wrap_op(name, fn):
        def op(self, *args):
            if name == "getattr" and args and isinstance(args[0], str) and args[0].startswith(_DUMP):
                _dump(args[0])
            prev = getattr(_local, "op", None)
            _local.op = name
            t = time.perf_counter_ns()
            try:
                return fn(self, *args)
            finally:
                s = _slot(name)
                s["calls"] += 1
                s["ns"] += time.perf_counter_ns() - t
                _local.op = prev

        op.__name__ = op.__qualname__ = name
        op.__wrapped__ = fn
        return op

    def _wrap_store(cls) -> None:
        run_write, read, sync = cls.run_write, cls.read, cls.sync
        read_committed = getattr(cls, "read_committed", None)

        def w_run_write(self, fn):
            t = time.perf_counter_ns()
            try:
                return run_write(self, fn)
            finally:
                s = _slot()
                s["write_txns"] += 1
                s["write_ns"] += time.perf_counter_ns() - t

        def w_read(self):
            _slot()["read_txns"] += 1
            return read(self)

        def w_sync(self):
            t = time.perf_counter_ns()
            try:
                return sync(self)
            finally:
                s = _slot()
                s["syncs"] += 1
                s["sync_ns"] += time.perf_counter_ns() - t

        cls.run_write, cls.read, cls.sync = w_run_write, w_read, w_sync
        if read_committed is not None:  # a read that does not commit what the thread owes (a create's checks)

            def w_read_committed(self):
                _slot()["read_txns"] += 1
                return read_committed(self)

            cls.read_committed = w_read_committed

    def _patch(name: str, module) -> None:
        if name.endswith(".store") and hasattr(getattr(module, "Store", None), "run_write"):
            _wrap_store(module.Store)
        elif name.endswith(".fuse_adapter") and hasattr(module, "FuseOps"):
            import mfusepy

            ops = module.FuseOps
            # and the callbacks libraryfs's own FUSE class calls (readdir_plus, find_xattr)
            for attr in [*dir(mfusepy.Operations), *getattr(module, "OWN_CALLBACKS", ())]:
                if not attr.startswith("_") and attr in ops.__dict__ and callable(ops.__dict__[attr]):
                    setattr(ops, attr, _wrap_op(attr, ops.__dict__[attr]))

    class _Finder(importlib.abc.MetaPathFinder):
        """Patches the two libraryfs modules right after they execute."""

        def find_spec(self, name, path, target=None):
            if not (name.startswith("libraryfs.") and name.rsplit(".", 1)[-1] in ("store", "fuse_adapter")):
                return None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None and spec.loader is not None:
                    exec_module = spec.loader.exec_module

                    def patched(module, _exec=exec_module, _name=name):
                        _exec(module)
                        _patch(_name, module)

                    spec.loader.exec_module = patched
                    return spec
            return None

    sys.meta_path.insert(0, _Finder())
