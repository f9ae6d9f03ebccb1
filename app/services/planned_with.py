"""What a plan was made with, as its page and report show it: the input shapes it was planned at
(whole shapes given, else the declared dims with the symbolic ones bound) and its memory options."""

from __future__ import annotations

from typing import Any

from runtime import MemoryOptions

# The memory options a plan records, in the planning form's words.
OPTION_LABELS = {
    "io": "inputs/outputs",
    "alignment": "alignment",
    "workspace": "kernel scratch in the arena",
    "prepared_weights": "prepared weights in the arena",
    "inplace": "in place",
    "concat_inplace": "concat in place",
    "fuse": "fuse at load",
}


def input_shapes(summary: dict[str, Any] | None, options: dict[str, Any]) -> list[dict[str, Any]]:
    """Each model input with the shape the plan was made for: `shape` (sizes, or a name left unbound)
    and `how` (as given whole, or the declared dims with the symbolic ones bound)."""
    shapes = options.get("shapes") or {}
    dims = options.get("dims") or {}
    rows = []
    for declared in (summary or {}).get("inputs", []):
        name = declared["name"]
        if name in shapes:
            rows.append({"name": name, "shape": list(shapes[name]), "how": "given as a whole shape"})
            continue
        shape = [dims.get(d, d) if isinstance(d, str) else d for d in declared.get("dims", [])]
        bound = [d for d in declared.get("dims", []) if isinstance(d, str)]
        how = "declared" if not bound else "declared, " + ", ".join(f"{d} = {dims.get(d, '?')}" for d in bound)
        rows.append({"name": name, "shape": shape, "how": how})
    return rows


def memory_options(options: dict[str, Any]) -> list[dict[str, Any]]:
    """The memory options the plan was made with (the defaults where the record predates one)."""
    defaults = MemoryOptions().to_json()
    rows = []
    for key, label in OPTION_LABELS.items():
        value = options.get(key, defaults.get(key))
        shown = (
            ("on" if value else "off")
            if isinstance(value, bool)
            else f"{value:,}"
            if isinstance(value, int)
            else str(value)
        )
        if key == "io":
            shown = "inside the arena" if value == "arena" else "outside (caller's memory)"
        rows.append({"name": key, "label": label, "value": shown})
    if options.get("order"):
        rows.append({"name": "order", "label": "node order", "value": "memory-aware"})
    return rows


def planned_with(summary: dict[str, Any] | None, options: dict[str, Any] | None) -> dict[str, Any]:
    options = options or {}
    return {"inputs": input_shapes(summary, options), "options": memory_options(options)}
