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


# Swagger UI's files the API page loads, from the installed swagger-ui-bundle-v2 package.
SWAGGER_ASSETS = ("swagger-ui-bundle.js", "swagger-ui.css")


def swagger_ui_dir() -> Path | None:
    """The Swagger UI dist folder of the installed swagger_ui_bundle package, or None when it is not
    installed (the API page then says how to install it; nothing is fetched from the internet)."""
    try:
        from swagger_ui_bundle import swagger_ui_path
    except ImportError:
        return None
    path = Path(swagger_ui_path)
    return path if all((path / name).exists() for name in SWAGGER_ASSETS) else None
