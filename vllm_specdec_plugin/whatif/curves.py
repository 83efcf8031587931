"""Which step-cost curve prices the replay: measured where a running engine measured, else a prior.

- `--costs FILE` (`vllm-specdec status --json` of an engine running the schedule controller):
  its buckets as measured; buckets it has not seen come from the platform's prior, scaled to the
  nearest measured bucket (`costs.fill_from_prior`).
- No `--costs`: the prior alone. `cpu`: the roofline with the `cpu` row of
  `data/hardware.yaml`, fitted to this project's own measurement on its 2-core machine kind;
  `cuda`: the roofline with the `--gpu` row (its numbers from the vendors' datasheets, its
  efficiencies fitted to published step costs); `rbln`: no prior (no published step costs for
  RBLN NPUs to fit one to), so `--costs` is required there.

Two steps, so that a bad `--costs`, `--gpu` or `--platform` is refused before the expensive
stages: `pricing_for` (the flags -> the measured costs read and the hardware row found, and why
that row: `Pricing`) and `curve_for` (with the model's shape and the traffic's mean context ->
the curve). The output says which row priced what, and where that choice came from
(`Pricing.describe`), besides `StepCostCurve.source`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vllm_specdec_plugin.core.errors import SpecDecodeConfigError
from vllm_specdec_plugin.core.roofline import Hardware
from vllm_specdec_plugin.core.step_cost import StepCostCurve

DEFAULT_GPU = "h100-sxm"
"""The `--gpu` row when `--platform cuda` names none."""
CPU_BASIS = ("fitted to SmolLM2-135M's step times on this project's 2-core VM, not measured on "
             "your host")
GPU_BASIS = ("the datasheet's peaks, with efficiencies fitted to one published H100 step-cost "
             "model (SpecDecode-Bench, Llama-3.1-8B) and applied to every GPU")


@dataclass(frozen=True)
class Pricing:
    """What prices the replay, settled before any expensive stage."""

    platform: str
    row: Hardware | None
    """The prior's hardware row; None on rbln (no prior there)."""
    chosen_by: str
    """Where the platform and row came from: the flags given, or the default."""
    measured: StepCostCurve | None = None
    """`--costs`, read and checked."""

    def describe(self, curve: StepCostCurve, prior_share: float) -> dict[str, Any]:
        """The row, why it was chosen and what it priced (`--json`'s `costs.pricing`)."""
        if self.row is None or curve is self.measured:
            priced = "nothing: the measured buckets price every batch size"
        elif prior_share == 0:
            priced = "nothing: --costs measured every predicted batch size"
        elif self.measured is None:
            priced = "every batch size"
        else:
            priced = f"{prior_share:.0%} of the batch sizes (those --costs did not measure)"
        row = self.row
        return {"platform": self.platform, "row": None if row is None else row.name,
                "title": None if row is None else row.title,
                "basis": None if row is None else CPU_BASIS if row.name == "cpu" else GPU_BASIS,
                "chosen_by": self.chosen_by, "priced": priced}


def pricing_for(costs: str | None, platform: str | None, gpu: str | None) -> Pricing:
    """The measured costs (read and checked) and the prior's row for the flags given (None:
    not given), or one line naming the flag and the fix."""
    from vllm_specdec_plugin.inputs.hardware import find_hardware
    from vllm_specdec_plugin.whatif.costs import load_costs

    measured = load_costs(costs) if costs is not None else None
    chosen = platform or ("cuda" if gpu else "cpu")
    if chosen == "rbln":
        if measured is None:
            raise SpecDecodeConfigError(
                "--platform rbln: there is no step-cost prior for RBLN NPUs; give --costs FILE "
                "from `vllm-specdec status --json` of an engine running there")
        return Pricing("rbln", None, "--platform rbln (no prior there: a bucket --costs did "
                                     "not measure takes the nearest measured one)", measured)
    if chosen == "cpu":
        why = "--platform cpu" if platform else "default: no --gpu or --platform given"
        return Pricing("cpu", find_hardware("cpu", "--platform cpu"), why, measured)
    row = find_hardware(gpu or DEFAULT_GPU)
    why = (f"--gpu {row.name}" if gpu else
           f"--platform cuda without --gpu: the default GPU row, {DEFAULT_GPU}")
    return Pricing("cuda", row, why, measured)


def prior_for(pricing: Pricing, shape: Any, context: float) -> StepCostCurve:
    """The prior step-cost curve of `pricing`'s row for a model of `shape` at mean `context`
    tokens (the cpu row's curve is `inputs/hardware.cpu_prior`)."""
    from vllm_specdec_plugin.core.roofline import roofline_curve

    if pricing.row is None:
        raise SpecDecodeConfigError("--platform rbln: there is no step-cost prior for RBLN "
                                    "NPUs; give --costs FILE")
    if shape is None:
        raise SpecDecodeConfigError("--model: its config.json gives no shape for a prior; "
                                    "give --costs FILE measured by a running engine")
    return roofline_curve(shape, pricing.row, int(round(context)))


def curve_for(pricing: Pricing, shape: Any, context: float) -> StepCostCurve:
    """`--costs` filled from the prior where it has no bucket, else the prior alone."""
    if pricing.measured is None:
        return prior_for(pricing, shape, context)
    from vllm_specdec_plugin.whatif.costs import fill_from_prior

    try:
        prior = prior_for(pricing, shape, context)
    except SpecDecodeConfigError:
        return pricing.measured  # no prior: the nearest measured bucket prices the rest
    return fill_from_prior(pricing.measured, prior)
