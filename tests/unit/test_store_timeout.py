"""The etcd client's bound on one request per library (``[store] timeout_s``, ``LIBRARYFS_STORE_TIMEOUT_S``;
libraryfs.fs.backends.store_timeout_s), checked against a port nothing listens on: the bound given is the
one the client waits out, and a bad value is one line naming its source."""

from __future__ import annotations

import socket
import time

import pytest

from libraryfs.errors import InvalidArgument, Unavailable
from libraryfs.fs.backends import STORE_TIMEOUT_ENV, open_backend, store_timeout_s


def _library(tmp_path, extra: str = ""):
    with socket.socket() as s:  # a port nothing listens on: bound, then released
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    lib = tmp_path / "lib"
    lib.mkdir(mode=0o700)
    (lib / "config.toml").write_text(f'[store]\nurl = "etcd://127.0.0.1:{port}/gone"\n{extra}')
    return lib


def test_the_default_bound_is_the_clients(tmp_path, monkeypatch):
    monkeypatch.delenv(STORE_TIMEOUT_ENV, raising=False)
    assert store_timeout_s(_library(tmp_path)) is None  # etcd_gateway.TIMEOUT_S applies


@pytest.mark.parametrize("source", ["file", "env"])
def test_the_bound_given_is_the_one_waited_out(tmp_path, monkeypatch, source):
    monkeypatch.delenv(STORE_TIMEOUT_ENV, raising=False)
    lib = _library(tmp_path, "timeout_s = 30\n" if source == "env" else "timeout_s = 0.4\n")
    if source == "env":
        monkeypatch.setenv(STORE_TIMEOUT_ENV, "0.4")  # over the file's 30 s
    assert store_timeout_s(lib) == 0.4
    t0 = time.monotonic()
    with pytest.raises(Unavailable, match=r"gave up after 0\.4 s"):
        open_backend(lib)
    assert time.monotonic() - t0 < 10  # not the default bound (10 s); the real bound is in the message


@pytest.mark.parametrize(
    ("file_value", "env_value", "named"),
    [
        ("0", None, "timeout_s"),
        ('"soon"', None, "timeout_s"),
        ("true", None, "timeout_s"),
        (None, "-1", STORE_TIMEOUT_ENV),
        (None, "inf", STORE_TIMEOUT_ENV),
    ],
)
def test_a_bad_bound_is_one_line_naming_its_source(tmp_path, monkeypatch, file_value, env_value, named):
    monkeypatch.delenv(STORE_TIMEOUT_ENV, raising=False)
    lib = _library(tmp_path, f"timeout_s = {file_value}\n" if file_value else "")
    if env_value is not None:
        monkeypatch.setenv(STORE_TIMEOUT_ENV, env_value)
    with pytest.raises(InvalidArgument, match=named) as e:
        open_backend(lib)
    assert "\n" not in str(e.value)
