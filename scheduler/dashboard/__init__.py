"""synergyd's read-only web dashboard (docs/dashboard.md) and the simulator's HTML report.

The daemon shell serves it (server.py) from JSON views of its state (views.py) and a bounded
in-memory history of cluster samples (history.py); the charts are drawn in the browser by
plotly.js, which the `plotly` package ships and the daemon serves itself (nothing is fetched
from the internet). report.py writes the simulator's self-contained page with the same charts.
"""
