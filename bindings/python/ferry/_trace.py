"""A runtime's trace as Python data, and a Gantt chart of it."""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class TaskSpan:
    name: str
    kernel: str
    device: str
    lane: str
    start: float  # seconds since the trace began
    end: float
    task_id: int
    failed: bool = False
    predecessors: list[int] = field(default_factory=list)


@dataclass
class TransferSpan:
    what: str
    link: str
    lane: str
    start: float
    end: float
    bytes: int


class Trace:
    """What ran where and when: tasks per CPU worker, GPU stream or remote
    lane, and transfers per link direction. From Runtime.trace()."""

    def __init__(self, chrome_json: str, summary: str = ""):
        doc = json.loads(chrome_json)
        lanes: dict[int, str] = {}
        for e in doc["traceEvents"]:
            if e.get("ph") == "M" and e.get("name") == "thread_name":
                lanes[e["tid"]] = e["args"]["name"]
        self.lanes: list[str] = [lanes[k] for k in sorted(lanes)]
        self.tasks: list[TaskSpan] = []
        self.transfers: list[TransferSpan] = []
        for e in doc["traceEvents"]:
            if e.get("ph") != "X":
                continue
            lane = lanes.get(e["tid"], str(e["tid"]))
            start, end = e["ts"] * 1e-6, (e["ts"] + e["dur"]) * 1e-6
            args = e.get("args", {})
            if e.get("cat") == "task":
                self.tasks.append(TaskSpan(e["name"], args.get("kernel", ""), args.get("device", ""), lane, start,
                                           end, int(args.get("task_id", 0)), bool(args.get("failed", False)),
                                           list(args.get("predecessors", []))))
            else:
                self.transfers.append(TransferSpan(e["name"], args.get("link", ""), lane, start, end,
                                                   int(args.get("bytes", 0))))
        self.summary = summary
        self._json = chrome_json

    @property
    def wall_seconds(self) -> float:
        spans = [*self.tasks, *self.transfers]
        return max(s.end for s in spans) - min(s.start for s in spans) if spans else 0.0

    def save(self, path: str) -> None:
        """Writes Chrome trace-event JSON (open it in Perfetto or chrome://tracing)."""
        with open(path, "w") as f:
            f.write(self._json)

    def plot(self, ax: Any = None, *, title: str | None = None) -> Any:
        """A Gantt chart: one row per lane, tasks coloured by kernel and
        named where there is room, transfers hatched. Returns the matplotlib Axes."""
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch

        used = [lane for lane in self.lanes
                if any(s.lane == lane for s in self.tasks) or any(x.lane == lane for x in self.transfers)]
        if ax is None:
            # Constrained layout leaves room for the title and the legend,
            # however few lanes there are.
            _, ax = plt.subplots(figsize=(10, 1.6 + 0.45 * max(len(used), 1)), layout="constrained")
        row = {lane: i for i, lane in enumerate(used)}
        kernels = sorted({t.kernel for t in self.tasks})
        palette = plt.get_cmap("tab10")
        colour = {k: palette(i % 10) for i, k in enumerate(kernels)}
        for t in self.tasks:
            ax.broken_barh([(t.start * 1e3, max((t.end - t.start) * 1e3, 1e-4))], (row[t.lane] - 0.4, 0.8),
                           facecolors="red" if t.failed else colour[t.kernel], edgecolor="none")
        # Names inside the bars wide enough to hold them (a 20th of the run).
        first = min((t.start for t in self.tasks), default=0.0)
        last = max((t.end for t in self.tasks), default=0.0)
        for t in self.tasks:
            if last > first and (t.end - t.start) >= 0.05 * (last - first):
                ax.text((t.start + t.end) / 2 * 1e3, row[t.lane], t.name, ha="center", va="center",
                        fontsize="x-small", clip_on=True)
        for x in self.transfers:
            ax.broken_barh([(x.start * 1e3, max((x.end - x.start) * 1e3, 1e-4))], (row[x.lane] - 0.4, 0.8),
                           facecolors="lightgrey", edgecolor="dimgrey", hatch="///", linewidth=0.5)
        ax.set_yticks(range(len(used)), used)
        ax.invert_yaxis()
        ax.set_xlabel("time (ms)")
        ax.set_title(title or f"{len(self.tasks)} tasks, {len(self.transfers)} transfers")
        handles = [Patch(facecolor=colour[k], label=k) for k in kernels]
        if self.transfers:
            handles.append(Patch(facecolor="lightgrey", edgecolor="dimgrey", hatch="///", label="transfer"))
        if handles:
            ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
        return ax

    def _repr_html_(self) -> str:
        moved = sum(x.bytes for x in self.transfers)
        return (f"<b>ferry trace</b>: {len(self.tasks)} tasks on {len(self.lanes)} lanes, "
                f"{len(self.transfers)} transfers ({moved / 2**20:.1f} MiB), {self.wall_seconds * 1e3:.2f} ms"
                f"<pre>{html.escape(self.summary)}</pre>")

    def __repr__(self) -> str:
        return f"ferry.Trace({len(self.tasks)} tasks, {len(self.transfers)} transfers, lanes={self.lanes})"
