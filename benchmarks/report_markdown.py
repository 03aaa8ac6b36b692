"""Every report's executed Markdown (after its cells and inline values run, before pandoc), saved or compared:
the check that a change which only moves code changes no report.

    python benchmarks/report_markdown.py --save /tmp/before          # on frozen results/, before the change
    python benchmarks/report_markdown.py --compare /tmp/before       # after it: exit 1 and a diff if any differs

Lines that describe the render itself (its time, host, commit and versions: ``- rendered:``, ``- versions:``)
are left out; everything else, every number and verdict, must match byte for byte.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from pathlib import Path

from remat.report import project_root, report_sources
from remat.report.fallback import executed_markdown

RENDER_LINES = re.compile(r"^- (rendered|versions): .*$", re.MULTILINE)


def markdown(qmd: Path, root: Path) -> str:
    return RENDER_LINES.sub("", executed_markdown(qmd, root))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--save", type=Path, help="folder to write NAME.md into")
    mode.add_argument("--compare", type=Path, help="folder of NAME.md saved before")
    parser.add_argument("names", nargs="*", help="reports (default: all)")
    args = parser.parse_args()
    root = project_root()
    differ = []
    for qmd in report_sources(root, args.names or None):
        text = markdown(qmd, root)
        if args.save:
            args.save.mkdir(parents=True, exist_ok=True)
            (args.save / f"{qmd.stem}.md").write_text(text, encoding="utf-8")
            print(f"saved {qmd.stem}: {len(text)} characters")
            continue
        before = (args.compare / f"{qmd.stem}.md").read_text(encoding="utf-8")
        same = before == text
        print(f"{qmd.stem}: {'identical' if same else 'NOT_REPRODUCED'}")
        if not same:
            differ.append(qmd.stem)
            sys.stdout.writelines(difflib.unified_diff(before.splitlines(True), text.splitlines(True),
                                                       f"before/{qmd.stem}.md", f"after/{qmd.stem}.md", n=1))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
