# vllm_rbln/compilation/backends.py:24
