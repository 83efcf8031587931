"""Draw the Grafana dashboard's panels from a real run: its own PromQL, evaluated by Prometheus.

Not a Grafana screenshot: this starts `vllm-specdec-launch` (SmolLM2-135M-Instruct, opted in),
a local Prometheus (the `prometheus` binary, e.g. `apt-get install prometheus`) scraping the
server every second, and three phases of traffic: editing requests one at a time (speculation
pays), open-ended requests one at a time (it pays less), then 16 open-ended requests in flight
(the load-aware schedule stops drafting). Each panel's query from
`launch/monitoring/grafana-dashboard.json` is then evaluated over the run with Prometheus's
`query_range` ($__rate_interval = 15s, $model_name = .*) and drawn with matplotlib in the
dashboard's layout, with the decision table from the instant query.

    python scripts/plot_dashboard.py [--out launch/monitoring/dashboard.png] [--model DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
sys.path.insert(0, str(REPO))

from demo import REQUESTS, Server, call, chat, free_port  # noqa: E402

DASHBOARD = REPO / "launch" / "monitoring" / "grafana-dashboard.json"
OPEN_ENDED = [
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Explain why the sky is blue to a ten-year-old.",
    "Describe a busy market in a small town on a Saturday morning.",
    "Write a poem about autumn leaves.",
    "What are three good habits for staying healthy? Explain each.",
    "Tell me about the history of bicycles.",
    "Describe your ideal weekend.",
    "Write a letter to a friend about a trip to the mountains.",
]
RATE_INTERVAL = "15s"


def prometheus(target: str, workdir: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    config = workdir / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n  - job_name: vllm\n"
        f"    static_configs: [{{targets: ['{target}']}}]\n")
    proc = subprocess.Popen(
        [shutil.which("prometheus") or "prometheus", f"--config.file={config}",
         f"--storage.tsdb.path={workdir / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
        stdout=(workdir / "prometheus.log").open("w"), stderr=subprocess.STDOUT,
        start_new_session=True)
    return proc, f"http://127.0.0.1:{port}"


def query(prom: str, path: str, **params: str) -> list[dict]:
    url = f"{prom}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    answer = json.loads(call(url))
    if answer.get("status") != "success":
        raise RuntimeError(f"Prometheus refused {params.get('query')}: {answer}")
    return answer["data"]["result"]


def traffic(base: str) -> list[tuple[str, float, float]]:
    """The three phases; returns (name, start, end) in Unix time."""
    phases = []
    for _ in range(2):
        chat(base, "Say hello.", max_tokens=8)
    start = time.time()
    for prompt in REQUESTS * 10:
        chat(base, prompt)
    phases.append(("editing, 1 at a time", start, time.time()))
    start = time.time()
    for prompt in OPEN_ENDED[:6]:
        chat(base, prompt)
    phases.append(("open-ended, 1 at a time", start, time.time()))
    start = time.time()
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda p: chat(base, p), (OPEN_ENDED * 4)[:32]))
    phases.append(("open-ended, 16 in flight", start, time.time()))
    time.sleep(5)
    return phases


def draw(panels: list[dict], prom: str, phases: list, start: float, end: float,
         out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series_panels = [p for p in panels if p["type"] == "timeseries"]
    table = next(p for p in panels if p["type"] == "table")
    # The dashboard's layout: two panels per row, a full-width panel (w=24) on a row of its own.
    places, row, column = [], 0, 0
    for panel in series_panels:
        wide = panel["gridPos"]["w"] >= 24
        if wide and column:
            row, column = row + 1, 0
        places.append((row, slice(0, 2) if wide else column))
        row, column = (row + 1, 0) if wide or column else (row, 1)
    rows_needed = row + (1 if column else 0)
    fig = plt.figure(figsize=(14, 1.2 + 3.2 * rows_needed))
    grid = fig.add_gridspec(1 + rows_needed, 2, height_ratios=[0.3] + [1] * rows_needed)
    rows = query(prom, "query", query=substitute(table["targets"][0]["expr"]), time=str(end))
    ax = fig.add_subplot(grid[0, :])
    ax.axis("off")
    ax.set_title(table["title"], loc="left", fontsize=11)
    columns = ["method", "num_speculative_tokens", "source", "preset", "platform", "schedule"]
    cells = [[Path(r["metric"].get(c, "")).name if c == "preset" else r["metric"].get(c, "")
              for c in columns] for r in rows]
    if cells:
        ax.table(cellText=cells, colLabels=columns, loc="center", cellLoc="left")
    for panel, (row, column) in zip(series_panels, places, strict=True):
        ax = fig.add_subplot(grid[1 + row, column])
        for target in panel["targets"]:
            for result in query(prom, "query_range", query=substitute(target["expr"]),
                                start=str(start), end=str(end), step="2"):
                xs = [float(t) - start for t, _ in result["values"]]
                ys = [float(v) for _, v in result["values"]]
                ax.plot(xs, ys, label=legend(target.get("legendFormat", ""), result["metric"]))
        for number, (_, begin, finish) in enumerate(phases):
            ax.axvspan(begin - start, finish - start, alpha=0.08,
                       color=("tab:green", "tab:orange", "tab:red")[number])
        unit = panel["fieldConfig"]["defaults"].get("unit")
        if unit == "percentunit":
            ax.set_ylim(0, 1.05)
        ax.set_title(panel["title"], loc="left", fontsize=11)
        ax.set_xlabel("seconds")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper right")
    names = "; ".join(f"{('green', 'orange', 'red')[i]}: {name}"
                      for i, (name, _, _) in enumerate(phases))
    fig.suptitle("grafana-dashboard.json's queries, evaluated by Prometheus on a real vllm serve "
                 f"(SmolLM2-135M, opted in) - drawn with matplotlib, not Grafana\n{names}",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=80)


def substitute(expr: str) -> str:
    for variable in ("$model_name", "$namespace", "$pod"):  # the dashboard's variables: all
        expr = expr.replace(variable, ".*")
    return expr.replace("$__rate_interval", RATE_INTERVAL)


def legend(pattern: str, labels: dict) -> str:
    for key, value in labels.items():
        pattern = pattern.replace("{{" + key + "}}", Path(value).name if key == "model_name"
                                  else value)
    return pattern


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "launch/monitoring/dashboard.png")
    parser.add_argument("--model", help="a local checkpoint (default: SmolLM2-135M-Instruct)")
    args = parser.parse_args()
    if shutil.which("prometheus") is None:
        sys.exit("plot_dashboard: needs the prometheus binary (apt-get install prometheus)")
    if args.model:
        model = args.model
    else:
        from benchmarks.smollm2 import ensure_smollm2

        model = str(ensure_smollm2())
    panels = json.loads(DASHBOARD.read_text())["panels"]
    with tempfile.TemporaryDirectory(prefix="specdec-plot-") as tmp:
        work = Path(tmp)
        server = Server(model, "true", work / "vllm.log")
        prom_proc = None
        try:
            server.wait_ready()
            prom_proc, prom = prometheus(f"127.0.0.1:{server.port}", work)
            time.sleep(5)
            start = time.time()
            phases = traffic(server.base)
            end = time.time()
            time.sleep(2)
            draw(panels, prom, phases, start, end, args.out)
        finally:
            server.stop()
            if prom_proc is not None:
                prom_proc.terminate()
                prom_proc.wait(timeout=30)
    print(f"wrote {args.out}; phases: {[(n, round(e - s)) for n, s, e in phases]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
