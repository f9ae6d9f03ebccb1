"""docs/KERNELS.md lists every registered kernel with the file that implements it, as the
registry says now; and each file named there defines the kernel's function or registers its op."""

from __future__ import annotations

import inspect

from runtime.kernels import catalog, kernels


def test_the_kernels_table_matches_the_registry():
    assert catalog.DOC.read_text(encoding="utf-8") == catalog.table(), (
        "docs/KERNELS.md is out of date: run `python -m runtime.kernels.catalog`"
    )


def test_each_file_named_defines_its_kernel_function():
    for key, k in kernels().items():
        fn = inspect.unwrap(k.fn)
        source = (catalog.ROOT / catalog.source_file(k)).read_text(encoding="utf-8")
        # A factory's kernels (the unary ufuncs) are registered by op type in the file that makes them.
        assert f"def {fn.__name__}(" in source or f'"{k.op_type}"' in source, (key, catalog.source_file(k))


def test_every_route_names_the_loops_it_runs_in_the_table():
    rows = catalog.route_rows()
    assert len(rows) == len({row.split("|")[2] for row in rows}), "a route name twice across the tables"
    for row in rows:
        loops = row.split("|")[4].strip()
        assert loops, row
