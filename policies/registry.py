"""The registry: every policy by stage and name, built by one explicit function.

Nothing registers itself on import. :func:`build_registry` lists the policies;
adding one is a new file plus one line here. Parameters are validated through
each policy's `Params` model, so an unknown or ill-typed parameter is an error
naming the policy and field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from pydantic import BaseModel, ValidationError

from policies.admission.accept_all import AcceptAll
from policies.admission.load_threshold import LoadThreshold
from policies.admission.oasis import OasisAdmission
from policies.admission.quota import TenantQuota
from policies.decision import Stage
from policies.dispatch.edf import EdfDispatch
from policies.dispatch.eft_greedy import EftGreedyDispatch
from policies.dispatch.fcfs import FcfsDispatch
from policies.dispatch.llf import LeastLaxityDispatch
from policies.dispatch.prema import PremaDispatch
from policies.dispatch.relmas import RelmasDispatch
from policies.learned.models import ModelProvider
from policies.ordering.dual_agent import DualAgentOrdering
from policies.ordering.fifo import Fifo
from policies.ordering.sjf import ShortestJobFirst
from policies.ordering.srtf import ShortestRemainingTimeFirst
from policies.ordering.tiresias import Tiresias
from policies.placement.consolidated import Consolidated
from policies.placement.first_fit import FirstFit
from policies.placement.hetero_greedy import HeteroGreedy
from policies.placement.loan_aware import LoanAware
from policies.placement.random_fit import RandomFit
from policies.placement.rwgp import RwgpPlacement
from policies.placement.spread import Spread
from policies.protocols import (
    AdmissionPolicy,
    DispatchPolicy,
    OrderingPolicy,
    PlacementPolicy,
    PolicyInfo,
    ReclaimPolicy,
    ScalingPolicy,
    learned_model_key,
)
from policies.reclaim.aryl import ArylReclaim
from policies.reclaim.fewest_jobs import FewestJobs
from policies.reclaim.random_servers import RandomReclaim
from policies.scaling.aryl_mckp import ArylKnapsack
from policies.scaling.as_requested import AsRequested
from policies.scaling.dl2 import Dl2Scaling
from policies.scaling.dl2_srtf import Dl2SrtfScaling
from policies.scaling.drf import DominantResourceFairness
from policies.scaling.oasis import OasisScaling
from policies.scaling.optimus import Optimus

AnyPolicy = (
    AdmissionPolicy
    | OrderingPolicy
    | ScalingPolicy
    | PlacementPolicy
    | ReclaimPolicy
    | DispatchPolicy
)


class UnknownPolicyError(LookupError):
    def __init__(self, stage: str, name: str, known: list[str]) -> None:
        super().__init__(f"no {stage} policy named {name!r}; known: {', '.join(known)}")
        self.stage = stage
        self.name = name


class PolicyParamsError(ValueError):
    def __init__(self, stage: str, name: str, error: ValidationError) -> None:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors()
        )
        super().__init__(f"bad parameters for {stage} policy {name!r}: {problems}")
        self.stage = stage
        self.name = name
        self.errors = error.errors()


@dataclass(frozen=True)
class PolicySpec:
    """A registered policy class and what to say about it."""

    cls: type[Any]

    @property
    def info(self) -> type[PolicyInfo]:
        return cast(type[PolicyInfo], self.cls)

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def stage(self) -> Stage:
        return self.info.stage

    def params_schema(self) -> dict[str, Any]:
        return self.info.Params.model_json_schema()

    def parse_params(self, params: Mapping[str, object]) -> BaseModel:
        try:
            return self.info.Params.model_validate(dict(params))
        except ValidationError as error:
            raise PolicyParamsError(self.stage.value, self.name, error) from error


class Registry:
    """Policies by (stage, name); creates configured instances."""

    def __init__(self, specs: list[PolicySpec]) -> None:
        self._specs: dict[tuple[Stage, str], PolicySpec] = {}
        for spec in specs:
            key = (spec.stage, spec.name)
            if key in self._specs:
                raise ValueError(f"{spec.stage.value} policy {spec.name!r} registered twice")
            self._specs[key] = spec

    def specs(self, stage: Stage | None = None) -> list[PolicySpec]:
        return [s for (st, _), s in self._specs.items() if stage is None or st is stage]

    def spec(self, stage: Stage, name: str) -> PolicySpec:
        spec = self._specs.get((stage, name))
        if spec is None:
            raise UnknownPolicyError(stage.value, name, [s.name for s in self.specs(stage)])
        return spec

    def create(
        self,
        stage: Stage,
        name: str,
        params: Mapping[str, object] | None = None,
        models: ModelProvider | None = None,
    ) -> Any:
        """A configured policy; a learned one also gets its model version from `models`.

        Without a provider (or when it has no version for the policy) a learned
        policy is given None and uses the model it ships with, if its parameters
        allow (see :class:`policies.protocols.LearnedPolicy`).
        """
        spec = self.spec(stage, name)
        parsed = spec.parse_params(params or {})
        key = learned_model_key(spec.cls)
        if key is None:
            return spec.cls(parsed)
        return spec.cls(parsed, models.model_for(key) if models is not None else None)

    def admission(
        self,
        name: str,
        params: Mapping[str, object] | None = None,
        models: ModelProvider | None = None,
    ) -> AdmissionPolicy:
        return cast(AdmissionPolicy, self.create(Stage.ADMISSION, name, params, models))

    def ordering(
        self,
        name: str,
        params: Mapping[str, object] | None = None,
        models: ModelProvider | None = None,
    ) -> OrderingPolicy:
        return cast(OrderingPolicy, self.create(Stage.ORDERING, name, params, models))

    def scaling(
        self,
        name: str,
        params: Mapping[str, object] | None = None,
        models: ModelProvider | None = None,
    ) -> ScalingPolicy:
        return cast(ScalingPolicy, self.create(Stage.SCALING, name, params, models))

    def placement(
        self,
        name: str,
        params: Mapping[str, object] | None = None,
        models: ModelProvider | None = None,
    ) -> PlacementPolicy:
        return cast(PlacementPolicy, self.create(Stage.PLACEMENT, name, params, models))

    def reclaim(self, name: str, params: Mapping[str, object] | None = None) -> ReclaimPolicy:
        return cast(ReclaimPolicy, self.create(Stage.RECLAIM, name, params))

    def dispatch(
        self,
        name: str,
        params: Mapping[str, object] | None = None,
        models: ModelProvider | None = None,
    ) -> DispatchPolicy:
        return cast(DispatchPolicy, self.create(Stage.DISPATCH, name, params, models))


def build_registry() -> Registry:
    """Every policy Arbiter ships, one line each."""
    return Registry(
        [
            PolicySpec(AcceptAll),
            PolicySpec(TenantQuota),
            PolicySpec(LoadThreshold),
            PolicySpec(OasisAdmission),
            PolicySpec(Fifo),
            PolicySpec(ShortestJobFirst),
            PolicySpec(ShortestRemainingTimeFirst),
            PolicySpec(Tiresias),
            PolicySpec(AsRequested),
            PolicySpec(DominantResourceFairness),
            PolicySpec(Dl2Scaling),
            PolicySpec(Dl2SrtfScaling),
            PolicySpec(Optimus),
            PolicySpec(OasisScaling),
            PolicySpec(ArylKnapsack),
            PolicySpec(Consolidated),
            PolicySpec(Spread),
            PolicySpec(FirstFit),
            PolicySpec(RandomFit),
            PolicySpec(LoanAware),
            PolicySpec(DualAgentOrdering),
            PolicySpec(RwgpPlacement),
            PolicySpec(HeteroGreedy),
            PolicySpec(ArylReclaim),
            PolicySpec(FewestJobs),
            PolicySpec(RandomReclaim),
            PolicySpec(FcfsDispatch),
            PolicySpec(EdfDispatch),
            PolicySpec(LeastLaxityDispatch),
            PolicySpec(EftGreedyDispatch),
            PolicySpec(PremaDispatch),
            PolicySpec(RelmasDispatch),
        ]
    )
