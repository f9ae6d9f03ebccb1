"""Below LOAD: the first layers of a CNN planned and run band by band (row stripes or patches).

LOAD, the peak of live bytes, is the floor of any placement of a given graph; tiling changes
the graph instead, without changing what it computes. A chain at the head of the schedule
becomes a stage computed in bands of rows (`runtime.tiling.stage`): only a band's tiles and the
rows later bands still need are alive at once, and the stage's output is written band by band
into its place. The tiled graph is an ordinary `Graph`, so its memory problem is an ordinary
`planner.Problem` and the Session runs it as it runs any model, canary included.

::

    from runtime.tiling import tile_auto
    tiling = tile_auto(graph, options, strategy="greedy_by_size", overhead=0.2)
    tiling.graph        # the graph to plan and run (the model itself when nothing pays)
    tiling.to_json()    # the plan JSON's "tiling" field, None when untiled
    tiling.note         # what was chosen, or why the model stays untiled

Per-op region maths lives in `runtime.tiling.regions` (one registry, keyed like the kernels);
the search in `runtime.tiling.search`; the one op a tiled stage adds in `runtime.tiling.rows`.
"""

from __future__ import annotations

from runtime.tiling import regions_shape as _regions_shape  # noqa: F401  (Reshape's and Transpose's regions)
from runtime.tiling import regions_tflite as _regions_tflite  # noqa: F401  (registers TFLite's ops' regions)
from runtime.tiling import rows as _rows  # noqa: F401  (registers TileRows with the kernels)
from runtime.tiling.regions import Region, region_of, tileable_ops
from runtime.tiling.search import DEFAULT_OVERHEAD, DEFAULT_SLACK, TILE_MODES, Candidate, Tiling, tile_auto
from runtime.tiling.stage import METHODS, Chain, chains, tiled_graph

__all__ = [
    "DEFAULT_OVERHEAD",
    "DEFAULT_SLACK",
    "METHODS",
    "TILE_MODES",
    "Candidate",
    "Chain",
    "Region",
    "Tiling",
    "chains",
    "region_of",
    "tile_auto",
    "tiled_graph",
    "tileable_ops",
]
