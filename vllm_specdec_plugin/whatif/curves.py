"""Which step-cost curve prices the replay: measured where a running engine measured, else a prior.

- `--costs FILE` (`vllm-specdec status --json` of an engine running the schedule controller):
  its buckets as measured; buckets it has not seen come from the platform's prior, scaled to the
  nearest measured bucket (`costs.fill_from_prior`).
- No `--costs`: the prior alone. `cpu`: the roofline with the `cpu` row of
  `data/hardware.yaml`, fitted to this project's own measurement on its 2-core machine kind;
  `cuda`: the roofline with the `--gpu` row (its numbers from the vendors' datasheets, its
  efficiencies fitted to published step costs); `rbln`: no prior (no published step costs for
  RBLN NPUs to fit one to), so `--costs` is required there.
The output says which (`StepCostCurve.source`) and what share of the answer rests on a prior.
"""

from __future__ import annotations

from typing import Any

from vllm_specdec_plugin.core.errors import SpecDecodeConfigError
from vllm_specdec_plugin.core.step_cost import StepCostCurve

DEFAULT_GPU = "h100-sxm"
"""The `--gpu` row when `--platform cuda` names none."""


def prior_for(platform: str, gpu: str | None, shape: Any, context: float) -> StepCostCurve:
    """The platform's prior step-cost curve for a model of `shape` at mean `context` tokens."""
    from vllm_specdec_plugin.core.roofline import roofline_curve
    from vllm_specdec_plugin.inputs.hardware import cpu_prior, find_hardware

    if platform == "rbln":
        raise SpecDecodeConfigError(
            "--platform rbln: there is no step-cost prior for RBLN NPUs; give --costs FILE "
            "from `vllm-specdec status --json` of an engine running there")
    if shape is None:
        raise SpecDecodeConfigError("--model: its config.json gives no shape for a prior; "
                                    "give --costs FILE measured by a running engine")
    if platform == "cpu":
        return cpu_prior(shape, int(round(context)))
    return roofline_curve(shape, find_hardware(gpu or DEFAULT_GPU), int(round(context)))


def curve_for(costs: str | None, platform: str, gpu: str | None, shape: Any,
              context: float) -> StepCostCurve:
    """`--costs` filled from the prior where it has no bucket, else the prior alone."""
    if costs is None:
        return prior_for(platform, gpu, shape, context)
    from vllm_specdec_plugin.whatif.costs import fill_from_prior, load_costs

    measured = load_costs(costs)
    try:
        prior = prior_for(platform, gpu, shape, context)
    except SpecDecodeConfigError:
        return measured  # rbln: the measured buckets alone, the nearest one prices the rest
    return fill_from_prior(measured, prior)

