"""Generated sections of the docs (`runtime.docsections`, where ``python -m runtime.conformance``
can reach it too): a command rewrites its own section between its markers, the rest stays."""

from __future__ import annotations

from runtime.docsections import replace_section

__all__ = ["replace_section"]
