"""The systemd units: installed with absolute paths, accepted by `systemd-analyze verify`, with the
lifecycle properties the service depends on (Type=notify, watchdog, restart, clean stop, env file)."""

from __future__ import annotations

import os
import shutil
import sys

import pytest
from helpers.facility import unavailable

UNITS = ("libraryfs@.service", "libraryfs-indexer@.service")


def need_systemd_analyze() -> None:
    if shutil.which("systemd-analyze") is None:
        unavailable("systemd-analyze is missing (apt-get install systemd)")


def keys(text: str) -> dict[str, list[str]]:
    """``{"Section.Key": [values...]}`` of a unit file (keys may repeat)."""
    out: dict[str, list[str]] = {}
    section = ""
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        k, _, v = line.partition("=")
        out.setdefault(f"{section}.{k}", []).append(v)
    return out


@pytest.fixture(params=["system", "user"])
def installed(request, tmp_path, run_cli):
    user = request.param == "user"
    dest = tmp_path / request.param
    r = run_cli("units", "install", *(["--user"] if user else []), "--prefix", str(dest), check_rc=True)
    assert str(dest / UNITS[0]) in r.stdout
    return user, dest


def test_installed_units_have_absolute_paths_and_lifecycle(installed):
    user, dest = installed
    exe = shutil.which("libraryfs") or os.path.join(os.path.dirname(sys.executable), "libraryfs")
    mount = keys((dest / "libraryfs@.service").read_text())
    index = keys((dest / "libraryfs-indexer@.service").read_text())
    for u in (mount, index):
        assert u["Service.Type"] == ["notify"] and u["Service.NotifyAccess"] == ["main"]
        assert u["Service.Restart"] == ["on-failure"]
        for cmd in u["Service.ExecStart"] + u["Service.ExecReload"]:
            assert cmd.split()[0].startswith("/") and "@" not in cmd.split()[0]
        assert all(os.path.isabs(f.lstrip("-").replace("%h", "/h")) for f in u["Service.EnvironmentFile"])
        assert all(f.startswith("-") for f in u["Service.EnvironmentFile"])  # optional files
    assert mount["Service.ExecStart"][0].split()[0] == exe
    assert "--foreground" in mount["Service.ExecStart"][0] and "--no-indexer" in mount["Service.ExecStart"][0]
    assert mount["Service.ExecStop"][0].lstrip("-").split()[1] == "umount"
    assert mount["Unit.Wants"] == ["libraryfs-indexer@%i.service"]
    assert (
        index["Unit.PartOf"] == ["libraryfs@%i.service"] and "libraryfs@%i.service" in index["Unit.After"][0]
    )
    assert index["Service.WatchdogSec"] == ["60"]
    assert "Service.WatchdogSec" not in mount
    # the mount unit must not get a private mount namespace (the FUSE mount would be invisible outside)
    for ns_option in (
        "ProtectSystem",
        "ProtectHome",
        "PrivateTmp",
        "PrivateDevices",
        "ReadWritePaths",
        "PrivateMounts",
        "ProtectKernelTunables",
        "ProtectHostname",
    ):
        assert f"Service.{ns_option}" not in mount, ns_option
    if user:  # seccomp would imply NoNewPrivileges=yes and break the setuid fusermount3
        assert "Service.SystemCallFilter" not in mount and "Service.NoNewPrivileges" not in mount
        assert mount["Install.WantedBy"] == ["default.target"]
    else:
        assert mount["Service.DeviceAllow"] == ["/dev/fuse rw"]
        assert "@mount" in mount["Service.SystemCallFilter"][0]
        assert mount["Install.WantedBy"] == ["multi-user.target"]
    assert (dest / "libraryfs.env.example").exists()
    assert "API_KEY=\n" in (dest / "libraryfs.env.example").read_text()  # an example without a secret


def test_units_pass_systemd_analyze_verify(installed, run_cli):
    need_systemd_analyze()
    user, dest = installed
    r = run_cli("units", "verify", *(["--user"] if user else []), "--prefix", str(dest))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "pass systemd-analyze" in r.stdout


def test_verify_fails_on_a_typo_and_a_missing_program(installed, run_cli):
    need_systemd_analyze()
    user, dest = installed
    flag = ["--user"] if user else []
    unit = dest / "libraryfs@.service"
    good = unit.read_text()
    unit.write_text(good.replace("Restart=on-failure", "Restart=on-failure\nRestartSecs=2"))
    r = run_cli("units", "verify", *flag, "--prefix", str(dest))
    assert r.returncode == 1 and "RestartSecs" in r.stderr
    exe = keys(good)["Service.ExecStart"][0].split()[0]
    unit.write_text(good.replace(f"ExecStart={exe}", "ExecStart=/nonexistent/libraryfs"))
    r = run_cli("units", "verify", *flag, "--prefix", str(dest))
    assert r.returncode == 1 and "/nonexistent/libraryfs" in r.stderr


def test_verify_without_install_is_one_line_error(tmp_path, run_cli):
    r = run_cli("units", "verify", "--prefix", str(tmp_path / "empty"))
    assert r.returncode == 1
    assert r.stderr.strip().count("\n") == 0 and "units install" in r.stderr


def test_install_is_idempotent_and_dry_run_writes_nothing(tmp_path, run_cli):
    dest = tmp_path / "u"
    run_cli("units", "install", "--prefix", str(dest), check_rc=True)
    r = run_cli("units", "install", "--prefix", str(dest), check_rc=True)
    assert r.stdout.count("unchanged") == 2
    r = run_cli("units", "install", "--user", "--dry-run", "--prefix", str(tmp_path / "d"), check_rc=True)
    assert "# --- libraryfs@.service" in r.stdout and not (tmp_path / "d").exists()
    r = run_cli("units", "install", "--exe", str(tmp_path / "nope"), "--prefix", str(dest))
    assert r.returncode == 1 and "not an executable" in r.stderr
