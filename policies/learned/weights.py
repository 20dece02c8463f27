"""How every learned model is stored: safetensors bytes with one JSON header, no code.

A model is its tensors (safetensors: loading it runs nothing) plus one metadata key,
`arbiter`, holding a JSON object with the model's `format`, `format_version` and
`config`. One key, because safetensors orders several arbitrarily: equal weights then
give equal bytes. Reading checks everything a stored version could get wrong (another
model's bytes, another format version, a configuration this code rejects, tensors that
do not fit it or are not finite) and says which, as a `ModelLoadError`, so that the
policy's fallback answers instead.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Generic, Protocol, TypeVar

import numpy as np
import torch
from pydantic import BaseModel, JsonValue, ValidationError
from safetensors import SafetensorError
from safetensors.torch import load as load_tensors
from safetensors.torch import save as save_tensors
from torch import nn

from policies.learned.models import ModelBlob, ModelLoadError

HEADER_KEY = "arbiter"
_MAX_HEADER_BYTES = 10_000_000

C = TypeVar("C", bound=BaseModel)
M = TypeVar("M")
M_co = TypeVar("M_co", covariant=True)


class ShippedLike(Protocol[M_co]):
    """A model shipped with Arbiter, and its version name."""

    @property
    def model(self) -> M_co: ...

    @property
    def version(self) -> str: ...


@dataclass(frozen=True)
class Shipped(Generic[M]):
    """A model shipped with Arbiter as package data, loaded."""

    model: M
    version: str
    """`shipped-` and the first 12 hex digits of the file's SHA-256: names the exact weights."""


def shipped_file(package: str, filename: str, what: str) -> bytes:
    """A learned policy's shipped weights (`default/<filename>` of its package).

    The one file access in `policies`: a package's own data. ModelLoadError when missing.
    """
    path = resources.files(package).joinpath("default", filename)
    try:
        return path.read_bytes()
    except OSError as error:
        raise ModelLoadError(f"the shipped {what} model is missing: {error}") from error


def load_shipped(data: bytes, read: Callable[[bytes], M]) -> Shipped[M]:
    """The shipped model and its version name (from the bytes' hash)."""
    return Shipped(read(data), "shipped-" + hashlib.sha256(data).hexdigest()[:12])


@dataclass(frozen=True)
class Served(Generic[M]):
    """The model a learned policy serves, or why it has none."""

    model: M | None
    version: str
    unavailable: str
    """Why `model` is None (empty when it is not)."""


class ServesModel(Generic[M]):
    """What a learned policy keeps of the model it serves: the model, its version, and why
    there is none. DL2's scaling, RELMAS's dispatch and the dual agent's two policies
    inherit it, so none keeps its own copy of these three fields and their accessors."""

    _model: M | None
    _model_version: str
    _unavailable: str

    def _serve(self, served: Served[M]) -> None:
        self._model, self._model_version, self._unavailable = (
            served.model,
            served.version,
            served.unavailable,
        )

    @property
    def model_version(self) -> str:
        return self._model_version

    @property
    def model(self) -> M | None:
        return self._model


def served_model(
    blob: ModelBlob | None,
    *,
    use_shipped: bool,
    read: Callable[[bytes], M],
    shipped: Callable[[], ShippedLike[M]],
    what: str,
) -> Served[M]:
    """The active version if one is given, else the shipped model if allowed; never raises.

    A version that does not load, or a shipped model that cannot be read, leaves the
    policy without a model and the reason, so that its fallback answers and says why.
    """
    if blob is not None:
        try:
            return Served(read(blob.weights), blob.version, "")
        except ModelLoadError as error:
            return Served(
                None, blob.version, f"model version {blob.version!r} did not load: {error}"
            )
    if not use_shipped:
        return Served(
            None, "none", f"no {what} model version is active and the shipped one is not used"
        )
    try:
        found = shipped()
    except ModelLoadError as error:
        return Served(None, "none", str(error))
    return Served(found.model, found.version, "")


def dump(tensors: Mapping[str, torch.Tensor], meta: Mapping[str, JsonValue]) -> bytes:
    """Safetensors bytes of `tensors`, with `meta` as the one header document."""
    header = json.dumps(meta, sort_keys=True, separators=(",", ":"))
    contiguous = {name: t.detach().contiguous() for name, t in tensors.items()}
    return save_tensors(contiguous, metadata={HEADER_KEY: header})


def read_header(data: bytes, what: str) -> dict[str, JsonValue]:
    """The header document of `data`, read without touching the tensors.

    The format is an 8-byte little-endian header length, then a JSON header whose
    `__metadata__` maps strings to strings; ours is one JSON document under one key.
    """
    if len(data) < 8:
        raise ModelLoadError(f"{what} model: too short to be a safetensors file")
    (length,) = struct.unpack("<Q", data[:8])
    if length > len(data) - 8 or length > _MAX_HEADER_BYTES:
        raise ModelLoadError(f"{what} model: safetensors header length is out of range")
    try:
        header = json.loads(data[8 : 8 + length])
        ours = json.loads(header["__metadata__"][HEADER_KEY])
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as error:
        raise ModelLoadError(
            f"{what} model: no readable metadata in the header: {error}"
        ) from error
    if not isinstance(ours, dict):
        raise ModelLoadError(f"{what} model: the header's metadata is not an object")
    return ours


def read(
    data: bytes, *, what: str, format_name: str, format_version: str, config: type[C]
) -> tuple[C, dict[str, torch.Tensor]]:
    """The configuration and tensors of a model of `format_name`, checked; else ModelLoadError."""
    header = read_header(data, what)
    if header.get("format") != format_name:
        raise ModelLoadError(f"not a {what} model (format {header.get('format')!r})")
    if header.get("format_version") != format_version:
        raise ModelLoadError(
            f"{what} model format version {header.get('format_version')!r}; "
            f"this code reads {format_version!r}"
        )
    try:
        parsed = config.model_validate(header.get("config"))
    except ValidationError as error:
        raise ModelLoadError(f"{what} model configuration: {error}") from error
    try:
        tensors = load_tensors(data)
    except (SafetensorError, ValueError, RuntimeError) as error:
        raise ModelLoadError(f"{what} weights: {error}") from error
    return parsed, tensors


def load_into(module: nn.Module, tensors: Mapping[str, torch.Tensor], what: str) -> None:
    """Load `tensors` into `module` exactly (no key missing or extra), all finite."""
    try:
        module.load_state_dict(tensors, strict=True)
    except RuntimeError as error:
        raise ModelLoadError(f"{what} weights do not fit the configuration: {error}") from error
    for name, tensor in module.state_dict().items():
        if not bool(torch.isfinite(tensor).all()):
            raise ModelLoadError(f"{what} weights: {name} has non-finite values")


def numpy_view(parameter: torch.Tensor) -> np.ndarray:
    """A NumPy view of a CPU parameter (shared memory, no copy): the served forward pass."""
    view: np.ndarray = parameter.detach().numpy()
    return view
