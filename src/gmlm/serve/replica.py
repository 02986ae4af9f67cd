"""What `gmlm serve` hands each replica it starts (:class:`ReplicaSpec`): the models, the
settings, the precision and device, and the URL it listens on. Under ``--workers N`` uvicorn
starts the replicas as processes of their own, which build their app from the environment;
:func:`to_environment` and :func:`from_environment` are the one way it is written and read
there, validated on the way in (a corrupt value is a :class:`~gmlm.errors.GmlmError` naming
the variable and the problem)."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from gmlm.config import from_dict
from gmlm.decoding.options import PRECISIONS, RESCORE_WEIGHT, Precision
from gmlm.errors import GmlmError
from gmlm.serve.settings import ServeSettings

# The environment variable that carries a replica's configuration.
VARIABLE = "GMLM_SERVE_SPEC"


@dataclass(frozen=True)
class ReplicaSpec:
    """One replica's configuration; the same for every replica of a service."""

    models: Mapping[str, str]  # {name: folder}
    settings: ServeSettings = field(default_factory=ServeSettings)
    precision: Precision = "fp32"
    device: str = "cpu"
    url: str = ""  # where the service listens, for its log lines
    rescorers: Mapping[str, str] = field(default_factory=dict)  # {PaDIR model name: AR folder}
    rescore_weight: float = 1.0

    def rescore(self, name: str) -> tuple[str, float] | None:
        """(folder, weight) of the model that rescores model `name`'s candidates, if any."""
        folder = self.rescorers.get(name)
        return None if folder is None else (folder, self.rescore_weight)

    def to_json(self) -> str:
        return json.dumps(
            {
                "models": dict(self.models),
                "settings": dataclasses.asdict(self.settings),
                "precision": self.precision,
                "device": self.device,
                "url": self.url,
                "rescorers": dict(self.rescorers),
                "rescore_weight": self.rescore_weight,
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> ReplicaSpec:
        """The spec `text` gives; GmlmError naming what is wrong with it."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise GmlmError(f"not JSON ({err})") from None
        if not isinstance(data, dict):
            raise GmlmError(f"expected a JSON object, got {type(data).__name__}")
        keys = {f.name for f in dataclasses.fields(cls)}
        if set(data) != keys:
            raise GmlmError(f"expected the keys {sorted(keys)}, got {sorted(data)}")
        models = data["models"]
        if not isinstance(models, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in models.items()
        ):
            raise GmlmError("models: expected an object of model names to folders")
        if not isinstance(data["settings"], dict):
            raise GmlmError("settings: expected an object")
        settings = from_dict(ServeSettings, data["settings"])
        settings.validate()
        if data["precision"] not in PRECISIONS:
            raise GmlmError(f"precision: {data['precision']!r} is not one of {PRECISIONS}")
        for name in ("device", "url"):
            if not isinstance(data[name], str):
                raise GmlmError(f"{name}: expected a string")
        rescorers = data["rescorers"]
        if not isinstance(rescorers, dict) or not all(
            k in models and isinstance(v, str) for k, v in rescorers.items()
        ):
            raise GmlmError("rescorers: expected an object of served model names to folders")
        weight = data["rescore_weight"]
        if isinstance(weight, bool) or not isinstance(weight, (int, float)):
            raise GmlmError(f"rescore_weight: expected a number, got {weight!r}")
        RESCORE_WEIGHT.check(float(weight), "rescore_weight")
        return cls(
            models,
            settings,
            data["precision"],
            data["device"],
            data["url"],
            rescorers,
            float(weight),
        )


def to_environment(spec: ReplicaSpec, environ: MutableMapping[str, str] | None = None) -> None:
    """Put `spec` where the replicas started from this process read it."""
    (os.environ if environ is None else environ)[VARIABLE] = spec.to_json()


def from_environment(environ: Mapping[str, Any] | None = None) -> ReplicaSpec:
    """The spec :func:`to_environment` put there; GmlmError if it is missing or corrupt."""
    text = (os.environ if environ is None else environ).get(VARIABLE)
    if text is None:
        raise GmlmError(f"{VARIABLE} is not set: a replica is started by `gmlm serve --workers`")
    try:
        return ReplicaSpec.from_json(text)
    except GmlmError as err:
        raise GmlmError(f"{VARIABLE}: a corrupt replica configuration: {err}") from None
