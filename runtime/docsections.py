"""Generated sections of the docs: a command rewrites its own section, the rest stays.

It lives in runtime, the lowest package that writes docs, so that ``python -m
runtime.conformance`` can use it too; app, bench and reliability reach it as
`app.services.docsections.replace_section`.
"""

from __future__ import annotations

from pathlib import Path


def replace_section(path: Path, key: str, body: str, *, title: str = "memplan benchmarks") -> None:
    """Put `body` between this key's markers in `path`, replacing what was there.

    The section is appended when the file has no markers for `key`, and the file is
    created (with `title`) when missing.
    """
    begin, end = f"<!-- begin {key} (generated) -->", f"<!-- end {key} -->"
    block = f"{begin}\n{body.rstrip()}\n{end}\n"
    text = path.read_text() if path.exists() else f"# {title}\n\n"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = head + block + tail.lstrip("\n")
    else:
        text = text.rstrip("\n") + "\n\n" + block
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
