"""The paired harness: two configurations, both engines up at once, bursts interleaved in time.

`run.py` (the command, `python -m benchmarks paired`), `configs.py` (the configurations, one row
each), `engine_client.py` (the harness's side of an engine process), `engine.py` (the engine
process), `figures.py` and `targets.py` (a cell's figures and its target), `report.py` (JSON,
Markdown and a plot; `python -m benchmarks report` re-renders a result).
"""
