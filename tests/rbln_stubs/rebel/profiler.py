# vllm_rbln/v1/worker/rbln_worker.py:26 (start()/done() only when profiling)
