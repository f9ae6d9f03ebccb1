"""Request and response schemas of the REST API (they are what /docs shows)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from planner import names as strategy_names
from runtime import MemoryOptions

DEFAULT_MEMORY = MemoryOptions()


class StepMemoryRequest(BaseModel):
    """The memory options of every request that plans or runs a step of a model, a training step
    included, with the defaults of `runtime.MemoryOptions`: how the arena is aligned and what
    the kernels put in it (the CLI's --alignment, --workspace and --prepared-weights)."""

    model_config = ConfigDict(extra="forbid")
    alignment: int = Field(default=DEFAULT_MEMORY.alignment, ge=1, le=1 << 20, description="offset alignment in bytes")
    workspace: bool = Field(default=DEFAULT_MEMORY.workspace, description="plan kernel scratch in the arena")
    prepared_weights: bool = Field(
        default=DEFAULT_MEMORY.prepared_weights,
        description=(
            "kernels keep transformed copies of constant weights beside the arena (Winograd's, RNNs' panels) "
            "and may transform weights per call in their scratch; false: weights read as stored, fewer "
            "parameter bytes, slower"
        ),
    )

    def memory(self) -> MemoryOptions:
        return MemoryOptions(**self.model_dump(include=set(MemoryOptions.__dataclass_fields__)))


class MemoryRequest(StepMemoryRequest):
    """How a model's memory is laid out: every request that plans or runs a model takes these
    fields, with the defaults of `runtime.MemoryOptions` (the CLI's --io, --workspace,
    --alignment, --inplace, --concat-inplace, --fuse and --prepared-weights)."""

    io: Literal["arena", "external"] = Field(
        default=DEFAULT_MEMORY.io, description="inputs/outputs planned in the arena, or held by the caller"
    )
    inplace: bool = Field(
        default=DEFAULT_MEMORY.inplace,
        description="ops write over an input that dies there (elementwise, LRN, pooling, depthwise Conv)",
    )
    concat_inplace: bool = Field(
        default=DEFAULT_MEMORY.concat_inplace, description="Concat's producers write straight into their slices"
    )
    fuse: bool = Field(
        default=DEFAULT_MEMORY.fuse,
        description=(
            "load-time fusions: BatchNorm into Conv, a 1x1 Conv with its residual Add, the exact GELU, "
            "a Conv with its activation, a squeeze-and-excitation block"
        ),
    )


# The memory options of a model's run that a training step does not take, and why (runtime.training_problem).
NOT_FOR_TRAINING = {
    "io": "its data, parameters and optimizer state always live in the arena",
    "inplace": "it always writes in place where it can, and its updates over what they replace",
    "concat_inplace": "the producers of its Concats always write straight into their slices",
    "fuse": "it differentiates the model's operators as stored, unfused",
}


class TrainingMemoryRequest(StepMemoryRequest):
    """The memory options a training step takes: those of `StepMemoryRequest`. The other fields of
    a run's body (`NOT_FOR_TRAINING`) are refused, naming the field and what is accepted."""

    @model_validator(mode="before")
    @classmethod
    def _training_only(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name, why in NOT_FOR_TRAINING.items():
                if name in data:
                    accepted = ", ".join(StepMemoryRequest.model_fields)
                    raise PydanticCustomError(
                        "not_for_training",
                        "{name}: a training step does not take this memory option ({why}); "
                        "its memory options are {accepted}",
                        {"name": name, "why": why, "accepted": accepted},
                    )
        return data


class InputShapes(BaseModel):
    """Whole input shapes, the REST twin of the CLI's ``--shape NAME=1x3x48x320``: each binds every
    axis of its input whatever the model declares there (-1, 0, an unnamed dim, a name reused for
    several axes). A size may be a list or the CLI's string; `dims` binds the other inputs."""

    shapes: dict[str, list[int]] = Field(
        default_factory=dict,
        description="whole input shapes by input name, e.g. {'x': [1, 3, 48, 320]} (or {'x': '1x3x48x320'})",
    )

    @field_validator("shapes", mode="before")
    @classmethod
    def _spelled(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        return {name: _sizes(name, sizes) for name, sizes in value.items()}

    @field_validator("shapes")
    @classmethod
    def _positive_sizes(cls, value: dict[str, list[int]]) -> dict[str, list[int]]:
        for name, sizes in value.items():
            for axis, size in enumerate(sizes):
                if size <= 0:
                    raise ValueError(
                        f"shape of {name!r}: sizes must be positive whole numbers, got {size} at axis {axis} of {sizes}"
                    )
        return value


def _sizes(name: str, sizes: Any) -> Any:
    """'1x3x48x320' -> [1, 3, 48, 320]; anything else is left to the field's type check."""
    if not isinstance(sizes, str):
        return sizes
    parts = sizes.split("x") if sizes.strip() else []
    try:
        return [int(p) for p in parts]
    except ValueError:
        raise ValueError(f"shape of {name!r}: {sizes!r} is not sizes like '1x3x640x640' or [1, 3, 640, 640]") from None


class PoolIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=64)
    capacity: int | None = Field(default=None, ge=0, description="bytes; null for unbounded")


class TileRequest(BaseModel):
    """Tiling of a plan or run (issue #29's `tile` and `tile_overhead`, the same on both bodies)."""

    tile: Literal["auto", "off"] = Field(
        default="off",
        description="auto: compute the first layers of a CNN in row bands when that lowers the planned arena "
        "(the planner chooses split point, band height and method); off: the model as it is",
    )
    tile_overhead: float = Field(
        default=0.2,
        ge=0,
        allow_inf_nan=False,
        description="extra multiply-accumulates 'auto' may add, a fraction of the model's",
    )
    tile_slack: float = Field(
        default=0.0,
        ge=0,
        allow_inf_nan=False,
        description="arena above the smallest tiled one that 'auto' may trade for fewer bands (faster runs), "
        "a fraction of it; 0, the default: the smallest arena",
    )


class PlanRequest(MemoryRequest, InputShapes, TileRequest):
    """Options of planning a model (the model page's form sends the same)."""

    strategies: list[str] | Literal["all"] = Field(default="all", description="strategy names, or 'all'")
    dims: dict[str, int] = Field(default_factory=dict, description="values of symbolic dims, e.g. {'batch': 8}")
    pools: list[PoolIn] | None = Field(default=None, description="pools with capacities; default one unbounded arena")
    time_limit: float | None = Field(default=None, gt=0, le=600, description="seconds a search strategy may take")
    seed: int = 0
    background: bool = Field(default=False, description="run every strategy as a job, even the fast ones")
    reorder: bool = Field(
        default=False,
        description="plan the nodes in a memory-aware order (exact up to about 200 nodes) instead of the model's",
    )

    @field_validator("strategies")
    @classmethod
    def _known(cls, value: list[str] | str) -> list[str] | str:
        if value == "all":
            return value
        if not value:
            raise ValueError("give at least one strategy, or 'all'")
        known = strategy_names()
        unknown = [s for s in value if s not in known]
        if unknown:
            raise ValueError(f"unknown strategy {unknown[0]!r}; accepted: {', '.join(known)} or 'all'")
        return value

    @field_validator("dims")
    @classmethod
    def _positive(cls, value: dict[str, int]) -> dict[str, int]:
        for name, size in value.items():
            if size <= 0:
                raise ValueError(f"dim {name!r} must be a positive size, got {size}")
        return value

    @field_validator("pools")
    @classmethod
    def _unique(cls, value: list[PoolIn] | None) -> list[PoolIn] | None:
        if value is not None:
            names = [p.name for p in value]
            if not names:
                raise ValueError("give at least one pool, or leave pools out")
            if len(set(names)) != len(names):
                raise ValueError(f"pool names must be unique, got {names}")
        return value

    def names(self) -> list[str]:
        return strategy_names() if self.strategies == "all" else list(self.strategies)


class PlanSummary(BaseModel):
    id: str
    strategy: str
    arena_bytes: int | None
    lower_bound: int
    naive_bytes: int
    seconds: float
    valid: bool
    ratio: float | None = None
    error: str | None = None
    pools: list[dict[str, Any]] = []
    links: dict[str, str] = {}


class JobOut(BaseModel):
    id: str
    kind: str
    title: str
    state: str
    progress: float
    message: str
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    links: dict[str, str] = {}


class PlansOut(BaseModel):
    problem_id: str | None = Field(
        description="the stored problem the plans belong to; null while a job still has to make it "
        "(a model planned with tile 'auto': its job's result holds the plans)"
    )
    plans: list[PlanSummary]
    job: JobOut | None = None
    links: dict[str, str] = {}
    reorder: dict[str, Any] | None = Field(
        default=None,
        description="with reorder on: the order's search (method exact/divided/heuristic, proven, LOAD before and after)",
    )
    tiling: dict[str, Any] | None = Field(
        default=None,
        description="with tile 'auto' and a tiling taken: its stages (nodes, method, tiles), extra_macs, "
        "arena_bytes_untiled and the curve of arena against extra MACs; null when untiled",
    )
    tiling_note: str | None = Field(default=None, description="with tile 'auto': what was tiled, or why not")


class ModelOut(BaseModel):
    id: str
    name: str
    sha256: str
    filename: str
    format: str
    bytes: int
    created: float
    summary: dict[str, Any]
    new: bool | None = None
    links: dict[str, str] = {}


class ModelList(BaseModel):
    models: list[ModelOut]


class RunRequest(MemoryRequest, InputShapes, TileRequest):
    """Execute a model inside a plan's arena. Inputs are seeded random unless an .npz is sent."""

    plan_id: str | None = Field(default=None, description="a plan of this model; default: plan with `strategy`")
    strategy: str = "greedy_by_size"
    dims: dict[str, int] = Field(default_factory=dict)
    seed: int = 0
    verify: Literal["auto", "onnxruntime", "reference", "none"] = "auto"
    canary: bool = Field(
        default=False,
        description="poison free bytes and check every live tensor after each step; a plan that corrupts data "
        "fails the run at the step it does so, naming the tensor and the bytes (an invalid plan may be run this way)",
    )
    zero_copy: bool = Field(
        default=False,
        description="bind caller memory to every input and output (a fresh plan then keeps them outside the arena, "
        "io 'external'); the result counts the copies that remain and says why",
    )

    @field_validator("strategy")
    @classmethod
    def _known(cls, value: str) -> str:
        if value not in strategy_names():
            raise ValueError(f"unknown strategy {value!r}; accepted: {', '.join(strategy_names())}")
        return value


class PipelineRequest(MemoryRequest):
    """Stored models run one after the other in one joint arena, outputs connected to inputs."""

    models: dict[str, str] = Field(
        description="pipeline name -> stored model id, in run order, e.g. {'a': id1, 'b': id2}", min_length=1
    )
    connections: dict[str, str] = Field(
        default_factory=dict, description="'<name>:<output>' -> '<name>:<input>', e.g. {'a:y': 'b:x'}"
    )
    strategy: str = "greedy_by_size"
    dims: dict[str, dict[str, int]] = Field(
        default_factory=dict, description="symbolic dims per pipeline name, e.g. {'a': {'N': 8}}"
    )
    run: bool = Field(default=False, description="also start a run of the pipeline (a job)")
    seed: int = 0

    @field_validator("strategy")
    @classmethod
    def _known(cls, value: str) -> str:
        return RunRequest._known(value)

    @field_validator("models")
    @classmethod
    def _names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not name or ":" in name:
                raise ValueError(f"pipeline name {name!r} must be non-empty and contain no ':'")
        return value


class PipelineRunRequest(BaseModel):
    """Run a planned pipeline; inputs are seeded random."""

    model_config = ConfigDict(extra="forbid")
    seed: int = 0
    zero_copy: bool = Field(default=False, description="bind caller memory to the pipeline's inputs and outputs")
    verify: Literal["auto", "onnxruntime", "reference", "none"] = "auto"
    canary: bool = Field(
        default=False, description="poison free bytes and check every live tensor after each step of the pipeline"
    )


class RematRequest(BaseModel):
    """Recomputation of a training step (the CLI's --remat and --remat-overhead): off, auto, or a budget
    in bytes ("20MB") or as a fraction of the arena without recomputation ("0.5")."""

    remat: str = Field(default="off", description="off, auto, a budget in bytes (20MB) or a fraction (0.5, 50%)")
    remat_overhead: float = Field(
        default=0.2, ge=0, allow_inf_nan=False, description="extra FLOPs allowed, a fraction of the step's"
    )

    @field_validator("remat", mode="before")
    @classmethod
    def _spec(cls, value: Any) -> str:
        from runtime.training.remat_spec import parse_remat

        try:
            return str(parse_remat(value))
        except ValueError as e:
            raise PydanticCustomError("remat", "{message}", {"message": str(e)}) from None


class TrainingPlanRequest(TrainingMemoryRequest, InputShapes, RematRequest):
    """A training step (forward, loss, backward, update) of a stored model, planned by category and unified."""

    trainable: list[str] | None = Field(default=None, description="initializers to train; default every float one")
    loss: Literal["cross_entropy", "mse"] = "cross_entropy"
    optimizer: Literal["sgd", "adam", "none"] = "sgd"
    dims: dict[str, int] = Field(default_factory=dict)
    strategy: str = "greedy_by_size"
    recompute: bool = Field(default=True, description="batch norm's backward recomputes its Conv input")

    @field_validator("strategy")
    @classmethod
    def _known(cls, value: str) -> str:
        return RunRequest._known(value)


class TrainingDemoRequest(TrainingMemoryRequest, RematRequest):
    """Train the demo MLP or small CNN on 8x8 digits inside one arena, as a job streaming the loss."""

    model: Literal["mlp", "cnn"] = "mlp"
    steps: int = Field(default=200, ge=1, le=5000)
    batch: int = Field(default=32, ge=1, le=512)
    optimizer: Literal["sgd", "adam"] = "adam"
    lr: float | None = Field(default=None, gt=0, le=10)
    strategy: str = "greedy_by_size"
    seed: int = 0
    canary: bool = Field(default=False, description="check every node of every step for writes over live tensors")

    @field_validator("strategy")
    @classmethod
    def _known(cls, value: str) -> str:
        return RunRequest._known(value)


class SweepRequest(MemoryRequest, InputShapes):
    """Plan every stored model x strategy x dims combination, one plan task each, over the workers."""

    models: list[str] = Field(min_length=1, description="stored model ids")
    strategies: list[str] | Literal["all"] = Field(default="all", description="strategy names, or 'all'")
    dims: list[dict[str, int]] = Field(
        default_factory=lambda: [dict[str, int]()],
        description="one mapping of symbolic dims per point, e.g. [{'batch': 1}, {'batch': 8}]",
    )

    @field_validator("strategies")
    @classmethod
    def _known(cls, value: list[str] | str) -> list[str] | str:
        return PlanRequest._known(value)

    @field_validator("dims")
    @classmethod
    def _positive(cls, value: list[dict[str, int]]) -> list[dict[str, int]]:
        for dims in value:
            PlanRequest._positive(dims)
        return value or [{}]

    def names(self) -> list[str]:
        return strategy_names() if self.strategies == "all" else list(self.strategies)


NOTE_TEXT_MAX = 2000  # characters of a note, after stripping spaces
NOTE_AUTHOR_MAX = 100  # characters of its author


class NoteRequest(BaseModel):
    """A reviewer's note on a plan, or on one of its tensors at a step (both `tensor` and `step`).

    Notes are text: markup in them is shown as written, never interpreted."""

    model_config = ConfigDict(extra="forbid")
    text: str = Field(description=f"the note: 1 to {NOTE_TEXT_MAX:,} characters after stripping spaces")
    tensor: str | None = Field(
        default=None, description="a tensor of the plan (an `id` among its `buffers`), given with `step`"
    )
    step: int | None = Field(default=None, description="a step of the plan, 0 to steps - 1, given with `tensor`")
    author: str | None = Field(default=None, description=f"who wrote it, free text up to {NOTE_AUTHOR_MAX} characters")


class NoteOut(BaseModel):
    id: str
    plan_id: str
    text: str
    tensor: str | None
    step: int | None
    author: str | None
    created: float = Field(description="seconds since the epoch")
