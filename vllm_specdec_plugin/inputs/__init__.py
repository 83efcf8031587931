"""Thin adapters: env, files, vLLM's own types and engine arguments -> the core's typed inputs."""
