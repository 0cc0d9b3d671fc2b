"""figures/make_geometry.py (docs/guides/geometry.md's figures) runs its four float64
rankflow runs and writes a PNG per kind; its asserts are what each title says, so a
title that stops being true fails here (~15 s)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_geometry_figures_are_made_and_their_titles_hold(tmp_path):
    spec = importlib.util.spec_from_file_location(
        "make_geometry", ROOT / "figures" / "make_geometry.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(["--out", str(tmp_path)])
    for kind in ("gd", "sign_gd", "lion", "muon"):
        png = tmp_path / f"geometry_{kind}.png"
        assert png.stat().st_size > 10_000, kind
        assert (ROOT / "figures" / png.name).is_file(), f"{png.name} not committed"
    page = (ROOT / "docs/guides/geometry.md").read_text()
    assert all(f"figures/geometry_{k}.png" in page for k in ("gd", "sign_gd", "lion", "muon"))
