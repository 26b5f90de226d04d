"""An older IANA time zone database beside the machine's, for the tests that need both."""

import os
import shutil
import subprocess
import sys
import tempfile
import zoneinfo
from pathlib import Path

import pytest

from scheduling import zonedata

BASE_DIR = Path(__file__).resolve().parents[2]

# IANA 2023d: Asia/Almaty still UTC+6 (UTC+5 from 2024a), no America/Coyhaique (2025b).
OLD_TZDATA_WHEEL = "2023.4"
OLD_VERSION = "2023d"


@pytest.fixture(scope="session")
def old_tzdata() -> Path:
    """A directory holding the `tzdata` package of the older database: PYTHONPATH for a process.

    Installed by pip from the package registry the first time, then kept in
    var/ (2.9 MB) for every later run; not vendored, not in the venv (whose
    newer tzdata is the product's own fallback).
    """
    target = BASE_DIR / "var" / f"tzdata-{OLD_TZDATA_WHEEL}"
    if not (target / "tzdata" / "zoneinfo" / "tzdata.zi").is_file():
        target.parent.mkdir(exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=".tzdata-"))
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-deps",
                "--no-compile",
                "--target",
                str(staging),
                f"tzdata=={OLD_TZDATA_WHEEL}",
            ],
            check=True,
        )
        try:
            staging.rename(target)  # whole or not at all, for a run beside this one
        except OSError:
            shutil.rmtree(staging)
    return target


def old_zone_env(env: dict, old_tzdata: Path) -> dict:
    """`env` for a process that computes with the older database only.

    PYTHONTZPATH for the zone files; PYTHONPATH so that the fallback for a zone
    missing there is the older `tzdata` package too, not the venv's newer one
    (which would make America/Coyhaique valid).
    """
    return {
        **env,
        "PYTHONTZPATH": str(old_tzdata / "tzdata" / "zoneinfo"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(old_tzdata), env.get("PYTHONPATH")])),
    }


@pytest.fixture
def look_at_once(monkeypatch):
    """zone_data_refresh looks at the version file on every call, not once a second."""
    monkeypatch.setattr(zonedata, "LOOK_EVERY", 0.0)


@pytest.fixture
def use_zone_database(old_tzdata, look_at_once):
    """`use("old")` makes this process compute with the older database, `use("current")` with the machine's.

    As an update does: the zone files zoneinfo reads change, and the next
    zone_data_refresh drops every cached zone. Back to the machine's at the end.
    """

    def use(which: str) -> None:
        if which == "old":
            zoneinfo.reset_tzpath(to=[str(old_tzdata / "tzdata" / "zoneinfo")])
        else:
            zoneinfo.reset_tzpath()
        zonedata.zone_data_refresh()
        assert (zonedata.zone_data_version() == OLD_VERSION) == (which == "old")

    yield use
    use("current")


@pytest.fixture
def zone_database(request, use_zone_database):
    """For a test parametrized with indirect=True over "current" and "old": the database it runs under."""
    use_zone_database(request.param)
    return request.param
