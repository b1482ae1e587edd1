"""What every benchmark writes: its results as JSON and a PNG chart, side by side."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

ChartRenderer = Callable[[dict[str, Any], Path], None]


def write_results(results: dict[str, Any], out_dir: str, stem: str, render_chart: ChartRenderer) -> None:
    """`<out_dir>/<stem>.json` and `<stem>.png` (drawn by `render_chart`)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(results, indent=2) + "\n")
    render_chart(results, out / f"{stem}.png")
    print(f"\nwrote {out / (stem + '.json')} and {out / (stem + '.png')}")
