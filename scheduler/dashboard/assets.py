"""The files the pages are made of: this package's static/ folder and plotly.js.

plotly.js comes from the `plotly` package (plotly.offline.get_plotlyjs), pinned in
pyproject.toml: served by synergyd and inlined into simulator reports, never fetched.
"""

from __future__ import annotations

from importlib import resources


def static_text(name: str) -> str:
    """A file shipped in this package's static/ folder."""
    return resources.files("synergy.scheduler.dashboard").joinpath("static", name).read_text()


def plotly_js() -> str:
    """plotly.min.js as bundled in the `plotly` package (imported on first use: 4.6 MB)."""
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()
