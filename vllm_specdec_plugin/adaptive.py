"""The adaptive proposer's public class path, as users write it in their speculative configs:

    {"method": "custom_class", "model": "vllm_specdec_plugin.adaptive.AdaptiveProposer", ...}

The code lives in `vllm_specdec_plugin/proposer/`.
"""

from vllm_specdec_plugin.proposer.proposer import AdaptiveProposer

__all__ = ["AdaptiveProposer"]
