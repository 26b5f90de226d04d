"""Checkouts a bench runs in turns (`--product LABEL=PATH`): each its own manage.py and the python of its .venv."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Product:
    """A checkout to run: its manage.py and the python of its .venv."""

    label: str
    path: Path

    @property
    def python(self) -> str:
        return str(self.path / ".venv" / "bin" / "python")

    def commit(self) -> str:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=self.path, capture_output=True, text=True
        )
        if head.returncode == 0:
            dirty = subprocess.run(
                ["git", "status", "--short", "--", "delivery", "config"],
                cwd=self.path,
                capture_output=True,
                text=True,
            ).stdout.strip()
            return head.stdout.strip() + (" (with uncommitted changes)" if dirty else "")
        marker = self.path / "COMMIT"  # an export (git archive) says where it came from here
        return marker.read_text().strip() if marker.exists() else "unknown"


def products_parse(specs: Sequence[str], *, default: Product) -> list[Product]:
    """The checkouts named by `--product LABEL=PATH` options, in their order; `default` alone if none."""
    return [Product(label, Path(path).resolve()) for label, _, path in (s.partition("=") for s in specs)] or [
        default
    ]
