"""The architecture, checked by a test instead of by reviewers (DESIGN.md, "The three packages").

- imports go one way: app -> runtime -> planner (planner imports neither, runtime not app);
- no import cycle between modules, lazy (function-level) imports included;
- a route module (app/routes/api/*, app/routes/pages/*) is imported only by the router assembly;
- the web layer (app/routes/: routes, their errors, templates, the access middleware) is imported
  only from inside it and by the app's assembly (app/main.py): what serves the routes lives with them;
- services, the CLI and the lower packages never import FastAPI or Starlette;
- nobody imports another module's private (underscore) names;
- every module stays under a line budget, with a short list of exceptions and the reason for each;
  the browser's scripts (static/*.js, plain scripts without a build step) too;
- a kernel's hooks are fields of its `Kernel` value: no attribute set on a function, no getattr
  probe for a hook; and one dispatcher (`runtime.kernels.bound_call`) calls kernels: no other
  module reads `takes_opset` or calls a kernel's `fn` or `bind` itself.

The checks are plain functions over a source tree, so the tests below also plant an upward
import and a cycle in a scratch tree and see each check fail.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("planner", "runtime", "app")  # lowest first: each may import only those before it
OTHERS = ("bench", "reliability", "tests")  # may import anything, but no private names
ROUTE_PACKAGES = ("app.routes.api", "app.routes.pages")
ROUTER_ASSEMBLY = "app.routes"
WEB_LAYER = "app.routes"
APP_ASSEMBLY = "app.main"
WEB_FRAMEWORKS = ("fastapi", "starlette")
WEB_FREE = ("planner", "runtime", "app.services", "app.cli", "app.storage", "app.jobs", "app.settings", "app.errors")
# The bench's peers (torch: the bench extra; TVM, TensorFlow and onnx2tf: folders of their own),
# never imported by the core, the service or the tests.
BENCH_ONLY = ("torch", "torchvision", "tvm", "tensorflow", "onnx2tf", "onnxsim")
LINE_BUDGET = 500
DISPATCHER = "runtime.kernels"  # the one module that turns a kernel into a call (`bound_call`, `call`)
KERNEL_HOOKS = ("bind", "bind_static", "prime", "attributes_bound", "workspace", "prepare", "constants", "planes")
SCRIPTS = "static"  # the browser's modules: plain scripts the templates load, one concern each
OVER_BUDGET = {
    # module: why it may be longer than the budget
}


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the imported module (of this tree)
    names: tuple[str, ...]  # names taken with `from target import ...`
    line: int
    lazy: bool  # inside a function: runs when called, still a dependency


def modules(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file under the given top-level folders."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def imports(root: Path, packages: Iterable[str]) -> list[Import]:
    """Every import of a module of the tree by a module of the tree, with where it is."""
    known = modules(root, packages)
    everything = modules(root, [p.name for p in root.iterdir() if p.is_dir() and (p / "__init__.py").exists()])
    everything.update(known)
    found = []
    for source, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        is_package = path.name == "__init__.py"
        for node, lazy in _import_nodes(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    target = _longest_known(alias.name, everything)
                    if target:
                        found.append(Import(source, target, (), node.lineno, lazy))
                continue
            base = _absolute(source, is_package, node.module, node.level)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                if submodule in everything:
                    found.append(Import(source, submodule, (), node.lineno, lazy))
                elif base in everything:
                    found.append(Import(source, base, (alias.name,), node.lineno, lazy))
    return found


def _import_nodes(tree: ast.AST) -> Iterable[tuple[ast.Import | ast.ImportFrom, bool]]:
    def walk(node: ast.AST, lazy: bool) -> Iterable[tuple[ast.Import | ast.ImportFrom, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                yield child, lazy
            inner = lazy or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            yield from walk(child, inner)

    return walk(tree, False)


def _absolute(source: str, is_package: bool, module: str | None, level: int) -> str:
    if level == 0:
        return module or ""
    parts = source.split(".")
    anchor = parts if is_package else parts[:-1]
    anchor = anchor[: len(anchor) - (level - 1)]
    return ".".join([*anchor, *([module] if module else [])])


def _longest_known(name: str, known: dict[str, Path]) -> str | None:
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in known:
            return candidate
    return None


def _top(module: str) -> str:
    return module.split(".")[0]


def upward_imports(found: list[Import], order: tuple[str, ...] = PACKAGES) -> list[str]:
    """Imports from a lower package to a higher one (planner -> runtime, runtime -> app, ...)."""
    rank = {p: i for i, p in enumerate(order)}
    return [
        f"{i.source}:{i.line} imports {i.target}"
        for i in found
        if _top(i.source) in rank and _top(i.target) in rank and rank[_top(i.target)] > rank[_top(i.source)]
    ]


def cycles(found: list[Import]) -> list[list[str]]:
    """Strongly connected components of more than one module (or a module importing itself)."""
    graph: dict[str, set[str]] = {}
    for i in found:
        graph.setdefault(i.source, set()).add(i.target)
        graph.setdefault(i.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph[v]:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def route_imports(found: list[Import]) -> list[str]:
    """Imports of a route module by anything but the router assembly."""
    return [
        f"{i.source}:{i.line} imports route module {i.target}"
        for i in found
        if any(i.target == p or i.target.startswith(p + ".") for p in ROUTE_PACKAGES)
        and i.source != ROUTER_ASSEMBLY
        and i.target not in ROUTE_PACKAGES
    ]


def web_layer_imports(found: list[Import]) -> list[str]:
    """Imports of the web layer (app.routes and below) from outside it, but for the app's assembly."""
    inside = (WEB_LAYER, APP_ASSEMBLY)
    return [
        f"{i.source}:{i.line} imports {i.target}"
        for i in found
        if (i.target == WEB_LAYER or i.target.startswith(WEB_LAYER + "."))
        and _top(i.source) in PACKAGES
        and not any(i.source == s or i.source.startswith(s + ".") for s in inside)
    ]


def web_imports(root: Path, prefixes: tuple[str, ...] = WEB_FREE) -> list[str]:
    """Modules under `prefixes` that import FastAPI or Starlette."""
    bad = []
    for name, path in modules(root, {p.split(".")[0] for p in prefixes}).items():
        if not any(name == p or name.startswith(p + ".") for p in prefixes):
            continue
        for node, _ in _import_nodes(ast.parse(path.read_text(encoding="utf-8"))):
            targets = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            bad += [f"{name}:{node.lineno} imports {t}" for t in targets if _top(t) in WEB_FRAMEWORKS]
    return bad


def bench_only_imports(root: Path, packages: Iterable[str], forbidden: tuple[str, ...] = BENCH_ONLY) -> list[str]:
    """Imports of packages that only benchmarks may use (torch: gigabytes, in the bench extra)."""
    bad = []
    for name, path in modules(root, packages).items():
        for node, _ in _import_nodes(ast.parse(path.read_text(encoding="utf-8"))):
            targets = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            bad += [f"{name}:{node.lineno} imports {t}" for t in targets if _top(t) in forbidden]
    return bad


def private_imports(found: list[Import]) -> list[str]:
    """`from other import _name`, and imports of another package's underscore module."""
    bad = []
    for i in found:
        bad += [f"{i.source}:{i.line} imports {n} from {i.target}" for n in i.names if n.startswith("_")]
        module = i.target.rsplit(".", 1)[-1]
        owner = i.target.rsplit(".", 1)[0]
        if module.startswith("_") and not module.startswith("__") and not i.source.startswith(owner):
            bad.append(f"{i.source}:{i.line} imports private module {i.target}")
    return bad


def function_attribute_hooks(root: Path, packages: Iterable[str]) -> list[str]:
    """Attributes set on a function (``f.bind = ...``) and getattr/hasattr probes for a kernel hook's name."""
    bad = []
    for name, path in modules(root, packages).items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        functions = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
        # A name also assigned as a variable somewhere is not (only) a function: `model.ir_version = 8`.
        functions -= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        for node in ast.walk(tree):
            targets = node.targets if isinstance(node, ast.Assign) else []
            if isinstance(node, ast.AugAssign | ast.AnnAssign):
                targets = [node.target]
            for target in targets:
                for t in target.elts if isinstance(target, ast.Tuple) else [target]:
                    if (
                        isinstance(t, ast.Attribute)
                        and isinstance(t.value, ast.Name)
                        and t.value.id in functions
                        and not t.attr.startswith("__")  # a wrapper's __name__ and __doc__
                    ):
                        bad.append(f"{name}:{node.lineno} sets {t.value.id}.{t.attr}")
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr")
                and len(node.args) > 1
                and isinstance(node.args[1], ast.Constant)
                and node.args[1].value in KERNEL_HOOKS
            ):
                bad.append(f"{name}:{node.lineno} probes for {node.args[1].value!r}")
    return sorted(bad)


def second_dispatchers(root: Path, packages: Iterable[str]) -> list[str]:
    """Modules other than the dispatcher that call kernels themselves: reading `takes_opset`, or
    calling a kernel's `fn` or `bind` (its run or bind hook; a kernel named `k` or `*kernel*`)."""
    bad = []
    for name, path in modules(root, packages).items():
        if name == DISPATCHER:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr == "takes_opset":
                bad.append(f"{name}:{node.lineno} reads takes_opset")
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("fn", "bind")
                and isinstance(node.func.value, ast.Name)
                and (node.func.value.id == "k" or "kernel" in node.func.value.id)
            ):
                bad.append(f"{name}:{node.lineno} calls .{node.func.attr}()")
    return sorted(bad)


def route_names(root: Path, packages: Iterable[str]) -> set[str]:
    """The names of the routes declared in route tables: the first argument of each ``*Route("name", ...)``."""
    names = set()
    for path in modules(root, packages).values():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id.endswith("Route")
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                names.add(node.args[0].value)
    return names


def route_name_branches(root: Path, packages: Iterable[str]) -> list[str]:
    """Comparisons with a declared route's name (``path == "taps"``, ``path in ("taps", ...)``): code
    that branches on a route's name instead of reading the route object its table picked."""
    names, bad = route_names(root, packages), []
    for name, path in modules(root, packages).items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Compare):
                continue
            for side in (node.left, *node.comparators):
                values = side.elts if isinstance(side, ast.Tuple | ast.List | ast.Set) else [side]
                hits = [v.value for v in values if isinstance(v, ast.Constant) and v.value in names]
                if hits:
                    bad.append(f"{name}:{node.lineno} compares with route name {hits[0]!r}")
    return sorted(bad)


def over_budget(root: Path, packages: Iterable[str], budget: int = LINE_BUDGET) -> dict[str, int]:
    return {
        name: lines
        for name, path in modules(root, packages).items()
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > budget
    }


def scripts_over_budget(root: Path, budget: int = LINE_BUDGET) -> dict[str, int]:
    """The browser's scripts (static/*.js, not the vendored plotly.js) longer than `budget` lines."""
    return {
        path.name: lines
        for path in sorted((root / SCRIPTS).glob("*.js"))
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > budget
    }


# ---- the real tree ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tree() -> list[Import]:
    return imports(ROOT, PACKAGES + OTHERS)


def test_imports_go_one_way(tree):
    assert upward_imports(tree) == []


def test_no_import_cycle_anywhere(tree):
    assert cycles([i for i in tree if _top(i.source) in PACKAGES]) == []


def test_route_modules_are_imported_only_by_the_router_assembly(tree):
    assert route_imports(tree) == []


def test_only_the_web_layer_and_the_app_assembly_import_the_web_layer(tree):
    assert web_layer_imports(tree) == []


def test_services_cli_and_lower_packages_never_import_the_web_framework():
    assert web_imports(ROOT) == []


def test_only_benchmarks_import_torch():
    assert bench_only_imports(ROOT, PACKAGES + ("tests", "reliability")) == []


def test_no_module_imports_a_private_name_of_another(tree):
    assert private_imports(tree) == []


def test_kernel_hooks_are_declared_not_set_on_functions():
    assert function_attribute_hooks(ROOT, PACKAGES) == []


def test_one_dispatcher_calls_kernels():
    assert second_dispatchers(ROOT, PACKAGES) == []


def test_no_code_branches_on_a_route_name():
    assert route_name_branches(ROOT, PACKAGES) == []


def test_modules_stay_under_the_line_budget():
    over = over_budget(ROOT, PACKAGES)
    assert {name: lines for name, lines in over.items() if name not in OVER_BUDGET} == {}
    stale = sorted(set(OVER_BUDGET) - set(over))
    assert stale == [], f"back under {LINE_BUDGET} lines: drop them from OVER_BUDGET"


def test_scripts_stay_under_the_line_budget():
    assert scripts_over_budget(ROOT) == {}


# ---- the checks fail when they should --------------------------------------------------------------


def _plant(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        for parent in path.relative_to(root).parents:
            if str(parent) != ".":
                (root / parent / "__init__.py").touch()
    return root


CLEAN = {
    "planner/core.py": "X = 1\n",
    "runtime/graph.py": "from planner.core import X\n",
    "app/routes/__init__.py": "from app.routes.api import models\n",
    "app/routes/api/models.py": "from app.services import library\n",
    "app/services/library.py": "import runtime.graph\n",
}


def test_a_clean_planted_tree_passes_every_check(tmp_path):
    root = _plant(tmp_path, CLEAN)
    found = imports(root, PACKAGES)
    assert (upward_imports(found), cycles(found), route_imports(found), private_imports(found)) == ([], [], [], [])
    assert web_layer_imports(found) == []
    assert web_imports(root) == []


def test_a_planted_upward_import_fails(tmp_path):
    root = _plant(tmp_path, {**CLEAN, "planner/core.py": "def f():\n    from runtime import graph\n"})
    assert upward_imports(imports(root, PACKAGES)) == ["planner.core:2 imports runtime.graph"]


def test_a_planted_cycle_fails_even_through_a_lazy_import(tmp_path):
    planted = {
        **CLEAN,
        "app/services/a.py": "from app.services import b\n",
        "app/services/b.py": "def g():\n    from app.services.a import thing\n",
    }
    assert cycles(imports(_plant(tmp_path, planted), PACKAGES)) == [["app.services.a", "app.services.b"]]


def test_a_route_module_imported_by_a_service_fails(tmp_path):
    planted = {**CLEAN, "app/services/library.py": "from app.routes.api.models import helper\n"}
    found = imports(_plant(tmp_path, planted), PACKAGES)
    assert route_imports(found) == ["app.services.library:1 imports route module app.routes.api.models"]


def test_a_module_outside_the_routes_importing_their_errors_fails(tmp_path):
    planted = {**CLEAN, "app/routes/errors.py": "X = 1\n", "app/security.py": "from app.routes.errors import X\n"}
    found = imports(_plant(tmp_path, planted), PACKAGES)
    assert web_layer_imports(found) == ["app.security:1 imports app.routes.errors"]


def test_a_service_importing_fastapi_fails(tmp_path):
    root = _plant(tmp_path, {**CLEAN, "app/services/library.py": "from fastapi import Request\n"})
    assert web_imports(root) == ["app.services.library:1 imports fastapi"]


def test_a_private_name_imported_from_another_module_fails(tmp_path):
    planted = {**CLEAN, "runtime/graph.py": "from planner.core import _hidden\n"}
    assert private_imports(imports(_plant(tmp_path, planted), PACKAGES)) == [
        "runtime.graph:1 imports _hidden from planner.core"
    ]


def test_torch_imported_by_the_runtime_is_reported(tmp_path):
    root = _plant(tmp_path, {**CLEAN, "runtime/graph.py": "def f():\n    import torch\n"})
    assert bench_only_imports(root, PACKAGES) == ["runtime.graph:2 imports torch"]


def test_a_module_over_the_budget_is_reported(tmp_path):
    root = _plant(tmp_path, {**CLEAN, "runtime/big.py": "x = 1\n" * 12})
    assert over_budget(root, PACKAGES, budget=10) == {"runtime.big": 12}


def test_a_script_over_the_budget_is_reported(tmp_path):
    root = _plant(
        tmp_path, {"static/big.js": "x;\n" * 12, "static/small.js": "x;\n" * 3, "static/vendor/v.js": "x;\n" * 99}
    )
    assert scripts_over_budget(root, budget=10) == {"big.js": 12}


def test_a_planted_function_attribute_hook_fails(tmp_path):
    planted = "def conv(x):\n    pass\n\n\ndef bind(i, o, a):\n    pass\n\n\nconv.bind = bind\n"
    probe = "def run(fn):\n    return getattr(fn, 'prime', None)\n"
    root = _plant(tmp_path, {**CLEAN, "runtime/kernels/conv/conv.py": planted, "runtime/step_calls.py": probe})
    assert function_attribute_hooks(root, PACKAGES) == [
        "runtime.kernels.conv.conv:9 sets conv.bind",
        "runtime.step_calls:2 probes for 'prime'",
    ]


def test_a_planted_second_dispatcher_fails(tmp_path):
    planted = "def call(k, inputs, out, attrs, opset):\n    extra = {'opset': opset} if k.takes_opset else {}\n"
    planted += "    k.fn(*inputs, out=out, **attrs, **extra)\n"
    root = _plant(tmp_path, {**CLEAN, "runtime/fold.py": planted, "runtime/kernels/__init__.py": planted})
    assert second_dispatchers(root, PACKAGES) == ["runtime.fold:2 reads takes_opset", "runtime.fold:3 calls .fn()"]


def test_a_planted_if_chain_over_route_names_fails(tmp_path):
    table = "ROUTES = (ConvRoute('taps', None), ConvRoute('im2col', None))\n"
    chain = "def run(path):\n    if path == 'taps':\n        return 1\n    if path in ('im2col',):\n        return 2\n"
    root = _plant(tmp_path, {**CLEAN, "runtime/kernels/routes.py": table, "runtime/kernels/conv/conv.py": chain})
    assert route_name_branches(root, PACKAGES) == [
        "runtime.kernels.conv.conv:2 compares with route name 'taps'",
        "runtime.kernels.conv.conv:4 compares with route name 'im2col'",
    ]


def test_a_planted_branch_over_a_pool_recurrence_or_over_input_route_name_fails(tmp_path):
    tables = (
        "ROUTES = (PoolRoute('max_compiled', 'MaxPool'), RecurrenceRoute('recurrence_numpy', None))\n"
        "OVER_ROWS = OverRoute('over_rows', False)\n"
    )
    chain = (
        "def run(route, over):\n    if route.name == 'max_compiled' or over.name != 'over_rows':\n        return 1\n"
    )
    chain += "    return route.name in ['recurrence_numpy']\n"
    root = _plant(tmp_path, {**CLEAN, "runtime/kernels/pool_routes.py": tables, "runtime/kernels/pool.py": chain})
    assert route_name_branches(root, PACKAGES) == [
        "runtime.kernels.pool:2 compares with route name 'max_compiled'",
        "runtime.kernels.pool:2 compares with route name 'over_rows'",
        "runtime.kernels.pool:4 compares with route name 'recurrence_numpy'",
    ]
