# vllm_rbln/v1/worker/rbln_worker.py:25 (read at profiler set-up)
RBLN_PROFILER = False
