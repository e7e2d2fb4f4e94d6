"""The built wheel carries every app the settings install (not only the editable checkout)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from django.conf import settings

ROOT = Path(__file__).resolve().parents[1]
_NOT_SOURCE = (".git", ".venv", "var", "build", "node_modules", "*.egg-info", "__pycache__")


def test_every_installed_app_imports_from_the_wheel(tmp_path: Path) -> None:
    # Built from a copy: setuptools reuses a build/ folder it finds, with what an earlier build
    # put there.
    source = tmp_path / "src"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*_NOT_SOURCE))
    subprocess.run(
        [
            *(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"),
            *("-w", str(tmp_path / "dist"), str(source)),
        ],
        check=True,
        cwd=tmp_path,
    )
    (wheel,) = (tmp_path / "dist").glob("infrai-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", wheel],
        check=True,
    )
    # The fresh environment borrows the dependencies (not the project: the checkout's editable
    # finder is a .pth of this environment, and paths a .pth adds get none of theirs run).
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    borrowed = Path(sysconfig.get_paths()["purelib"])
    (site / "borrowed.pth").write_text(f"{borrowed}\n")
    probe = (
        "import importlib, json, sys\n"
        "print(json.dumps({a: importlib.import_module(a).__file__ for a in sys.argv[1:]}))"
    )
    # -I: no current directory or PYTHONPATH on sys.path; run from elsewhere than the checkout.
    out = subprocess.run(
        [str(python), "-I", "-c", probe, *settings.INSTALLED_APPS],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    ).stdout
    files = json.loads(out)
    assert set(files) == set(settings.INSTALLED_APPS)
    from_checkout = {
        app: f
        for app, f in files.items()
        if f and Path(f).is_relative_to(ROOT) and not Path(f).is_relative_to(borrowed)
    }
    assert not from_checkout, f"imported from the checkout, not the wheel: {from_checkout}"
    ours = [app for app, f in files.items() if f and Path(f).is_relative_to(site)]
    assert {"accounts", "billing", "management", "vectors", "infra.observability"} <= set(ours)
