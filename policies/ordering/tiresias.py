"""Tiresias discretized two-dimensional least-attained-service (Gu et al., NSDI 2019, §3-4).

Tiresias ranks jobs by the GPU service they have had so far (GPUs × time, the
"two dimensions"), needing no duration estimate. To avoid the churn of
continuous LAS it discretizes priority into K queues: a job starts in the top
queue and is demoted to the next once its attained service passes that
queue's threshold; the lower a queue, the later its jobs are served. Within a
queue jobs go first come, first served (by submission time). It is preemptive,
and it starts every job that fits (backfill), as the authors' simulator does.

Defaults: two queues split at 18,000 GPU-seconds (5 GPU-hours), as the Lucid
simulator's Tiresias replays Philly (Hu et al., ASPLOS 2023; S-Lab-System-Group/Lucid,
`simulation/policy/tiresias.py`); pass more thresholds for more queues. The authors'
own simulator splits at 3,250 (SymbioticLab/Tiresias, `simulator/jobs.py`,
`queue_limit`), tuned on its synthetic 480-job trace. On production traces that value
sits below most jobs' total service (ITP cluster04: 82 % of jobs need more than 3,250
GPU-seconds), so nearly every job is demoted within minutes, the lower queue is FIFO
with preemptions, and Tiresias loses to FIFO (+2 % mean JCT on ITP, 737 preemptions
per 1,000 jobs). At 18,000 the top queue holds 77–95 % of each shared trace's jobs but
only 2–14 % of its GPU service, the regime in which least-attained-service pays; the
comparison is in docs/results.md, section `tiresias`.

Starvation guard (the authors' simulator, `PROMOTE_KNOB`): a job whose
pending time reaches `starvation_factor` times its executed time is promoted to
the top queue, and both counters and its attained service are reset, so it
keeps the top queue until it has earned the first threshold again and can only
starve anew after waiting that factor times its new run. The resets are state
beyond the snapshot (DESIGN §5): under the `tiresias` key the policy keeps, per
promoted job, its attained service, executed time and pending time at the
promotion, and reckons from those offsets (pending time = `now - submit_time -
executed_time_s`). Without that memory (a caller that keeps no state) every
round starts from the totals, and a job stays promoted only while the
inequality holds: it then flips between queues round after round, each flip a
preemption and a restart. Jobs that never ran are in the top queue anyway; a
factor of 0 turns the guard off.

Placement (the `tiresias` profile, not this ordering): every preemption is a resume
later, wherever there is room then, which on a busy cluster is often over several
nodes, where a job whose gradients cross the network runs slower; least attained
service then serves that job last, so it can stay spread for days. The profile's
consolidated placement therefore gathers such a job onto one node once one has room
(`gather_spread_jobs`; Gandiva's migration for locality). On the Alibaba fortnight at
arrivals ×1.6 this turned a tie with FIFO into a lower mean JCT (docs/results.md,
section `tiresias`).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from itertools import pairwise
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field, JsonValue, field_validator

from policies.decision import Decision, Stage
from policies.model import Job, JobState
from policies.protocols import Context, Ordering

STATE_KEY = "tiresias"

Offsets = tuple[float, float, float]
"""Attained GPU-seconds, executed seconds and pending seconds at a job's last promotion."""


class TiresiasParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    queue_thresholds_gpu_s: tuple[float, ...] = Field(
        default=(18_000.0,),
        description=(
            "Attained GPU-seconds at which a job drops to the next queue, ascending; "
            "K thresholds make K + 1 queues."
        ),
    )
    starvation_factor: float = Field(
        default=10.0,
        ge=0,
        description=(
            "Promote a job to the top queue once its waiting time exceeds this many times "
            "its executed time (the paper's STARVELIMIT); 0 disables the guard."
        ),
    )
    backfill: bool = Field(
        default=True, description="Let later jobs start when a more urgent one does not fit."
    )

    @field_validator("queue_thresholds_gpu_s")
    @classmethod
    def _ascending(cls, thresholds: tuple[float, ...]) -> tuple[float, ...]:
        if any(t <= 0 for t in thresholds):
            raise ValueError("thresholds must be positive")
        if any(b <= a for a, b in pairwise(thresholds)):
            raise ValueError("thresholds must be strictly ascending")
        return thresholds


class Tiresias:
    name: ClassVar[str] = "tiresias"
    version: ClassVar[str] = "1"
    stage: ClassVar[Stage] = Stage.ORDERING
    summary: ClassVar[str] = (
        "Discretized 2D-LAS: queues by attained GPU service, FIFO within, preemptive."
    )
    source: ClassVar[str] = "Gu et al., Tiresias, NSDI 2019, §3-4."
    Params: ClassVar[type[TiresiasParams]] = TiresiasParams

    def __init__(self, params: TiresiasParams) -> None:
        self.params = params

    state_key: ClassVar[str] = STATE_KEY

    def _promotions(self, ctx: Context) -> dict[str, Offsets]:
        """The kept promotions, per job id; anything malformed is ignored (the snapshot wins)."""
        kept = ctx.state.get(STATE_KEY)
        if not isinstance(kept, dict):
            return {}
        out: dict[str, Offsets] = {}
        for job_id, value in kept.items():
            if not isinstance(value, list):
                continue
            numbers = [float(v) for v in value if isinstance(v, int | float)]
            if len(numbers) == 3 == len(value):
                out[job_id] = (numbers[0], numbers[1], numbers[2])
        return out

    @staticmethod
    def _counters(ctx: Context, job: Job) -> Offsets:
        executed = job.executed_time_s
        return (job.attained_service_gpu_s, executed, ctx.now - job.submit_time - executed)

    def _standings(
        self, ctx: Context, jobs: Sequence[Job], kept: dict[str, Offsets]
    ) -> list[tuple[int, bool]]:
        """(queue, promoted this round) of each job, reckoned from its last promotion.

        One loop for all the jobs, with the parameters read once: the order asks this
        for every job of every round, and `commit` for every job that ever ran.
        """
        now = ctx.now
        factor = self.params.starvation_factor
        thresholds = self.params.queue_thresholds_gpu_s
        running = JobState.RUNNING
        # One (queue, False) pair per queue, shared by the jobs in it: no pair per job.
        unpromoted = [(queue, False) for queue in range(len(thresholds) + 1)]
        out: list[tuple[int, bool]] = []
        for job in jobs:
            attained = job.attained_service_gpu_s
            offsets = kept.get(job.id) if kept else None
            if offsets is not None:
                attained -= offsets[0]
            # Only a waiting job can starve (as in the authors' simulator, which checks its
            # pending queue); a running one keeps the queue its service says, and its
            # waiting time is not even worked out (most jobs of a busy round run).
            if factor > 0 and job.state is not running:
                executed = job.executed_time_s
                pending = now - job.submit_time - executed
                if offsets is not None:
                    executed -= offsets[1]
                    pending -= offsets[2]
                if executed > 0 and pending >= factor * executed and pending > 0:
                    out.append((0, True))
                    continue
            out.append(unpromoted[bisect_right(thresholds, attained)])
        return out

    def queue(self, ctx: Context, job: Job) -> int:
        """The job's queue, 0 (served first) to K."""
        return self._standings(ctx, [job], self._promotions(ctx))[0][0]

    def starving(self, ctx: Context, job: Job) -> bool:
        """Whether `job` is promoted this round (it waited too long since its last run)."""
        return self._standings(ctx, [job], self._promotions(ctx))[0][1]

    def order(self, ctx: Context, jobs: Sequence[Job]) -> Ordering:
        kept = self._promotions(ctx)
        position = ctx.snapshot.job_positions
        # Queue by queue; within a queue first come, first served, same-second arrivals in
        # snapshot order (then the job's index, as a stable sort leaves ties). Each queue
        # is sorted on tuples that open with the float submission time, which Python
        # compares much faster than keys that open with a queue most jobs share.
        queues: list[list[tuple[float, int, int]]] = [
            [] for _ in range(len(self.params.queue_thresholds_gpu_s) + 1)
        ]
        for i, ((queue, _), job) in enumerate(
            zip(self._standings(ctx, jobs, kept), jobs, strict=True)
        ):
            queues[queue].append((job.submit_time, position.get(job.id, 0), i))
        ranked: list[int] = []
        for members in queues:
            members.sort()
            ranked += [key[-1] for key in members]
        return Ordering(
            job_ids=tuple([jobs[i].id for i in ranked]),
            preemptive=True,
            backfill=self.params.backfill,
        )

    def commit(self, ctx: Context, decision: Decision) -> JsonValue:
        """Promotions of jobs still in the snapshot, with this round's new ones."""
        kept = self._promotions(ctx)
        # Jobs that never ran and were never promoted: nothing to remember. Nor running
        # jobs never promoted: a running job is not promoted (it does not starve).
        running = JobState.RUNNING
        ran = [
            j
            for j in ctx.snapshot.jobs
            if (j.executed_time_s > 0 and j.state is not running) or j.id in kept
        ]
        out: dict[str, JsonValue] = {}
        for job, (_, promoted) in zip(ran, self._standings(ctx, ran, kept), strict=True):
            offsets = self._counters(ctx, job) if promoted else kept.get(job.id)
            if offsets is not None:
                out[job.id] = list(offsets)
        return out
