"""Named sections of docs/results.md that other evidence scripts own.

`make_results.py` regenerates the whole-trace tables; the research systems'
evidence (OASiS, Aryl, DL2) comes from their own scripts, which take longer or
need other workloads. Each such script writes its section between
`<!-- section:NAME -->` and `<!-- /section:NAME -->`; `splice` replaces that block
(or appends it), and `make_results.py` carries every block over when it rewrites
the rest of the file, so no script erases another's evidence.
"""

from __future__ import annotations

import re
from pathlib import Path

_BLOCK = re.compile(r"<!-- section:([a-z0-9-]+) -->\n.*?<!-- /section:\1 -->\n", re.DOTALL)


def _block(name: str, body: str) -> str:
    return f"<!-- section:{name} -->\n{body.rstrip()}\n<!-- /section:{name} -->\n"


def sections(text: str) -> dict[str, str]:
    """Every named block of `text`, markers included, by name, in file order."""
    return {m.group(1): m.group(0) for m in _BLOCK.finditer(text)}


def splice(path: Path, name: str, body: str) -> None:
    """Put `body` into `path` as section `name`, replacing an earlier version of it."""
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    block = _block(name, body)
    current = sections(text)
    if name in current:
        text = text.replace(current[name], block)
    else:
        text = text.rstrip("\n") + "\n\n" + block
    path.write_text(text, encoding="utf-8")


def carry_over(old_text: str, new_text: str) -> str:
    """`new_text` followed by every named section of `old_text` it does not have."""
    have = sections(new_text)
    extra = [block for name, block in sections(old_text).items() if name not in have]
    if not extra:
        return new_text
    return new_text.rstrip("\n") + "\n\n" + "\n".join(extra)
