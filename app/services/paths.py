"""Where the browser side lives: static files, templates, and the installed plotly.js."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
STATIC_DIR = ROOT / "static"
TEMPLATES_DIR = ROOT / "templates"


def plotly_js_path() -> Path:
    """plotly.min.js of the installed plotly package: served as /static/vendor/plotly.min.js."""
    import plotly

    path = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    if not path.exists():  # pragma: no cover - every plotly wheel ships it
        raise RuntimeError(f"plotly.min.js not found in the plotly package at {path}; reinstall plotly")
    return path
