"""The models a service serves, behind one interface: a gmlm checkpoint (AR or PaDIR, in this
process) or a CTranslate2 export of an AR checkpoint (in a worker process of its own, as the
bench runs it: CTranslate2's OpenMP runtime and torch's fight over the cores in one process).

A backend checks a request before it is queued (:meth:`Backend.prepare`: the decoding settings,
each line's length, the rows it would decode) and translates a batch when the batcher calls
:meth:`Backend.translate`, on the batcher's worker thread. A line's translation is the one
`gmlm translate` gives it in any file: PaDIR's random tokens are keyed by the seed and the
line's own ids (:mod:`gmlm.decoding.draws`), never by its place in a request or a batch.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from gmlm.data.lengths import SHOWN, encode_inputs
from gmlm.data.tokenizer import Tokenizer
from gmlm.decoding.options import (
    OPTIONS,
    DecodingOptions,
    Precision,
    RefinementOptions,
    decode_work,
    decoding_options,
    former_name_hint,
    rows_per_sentence,
)
from gmlm.errors import GmlmError
from gmlm.export.ctranslate2_worker import Ct2Worker, WorkerExited
from gmlm.serve.language import preload
from gmlm.serve.logs import LOG
from gmlm.serve.metrics import Captures
from gmlm.settings import cli_fields


@dataclass(frozen=True)
class Prepared:
    """A request checked by its backend: the decoding options (hashable: requests with equal
    keys may share a batch), its lines' source tokens, the decoder rows it asks for, its
    price in decoder row-positions (:func:`gmlm.decoding.options.decode_work`, summed over
    its lines), and its lines' ids as checking encoded them, which the decoder then takes (a
    request is tokenized once; empty for a backend that encodes elsewhere)."""

    options: DecodingOptions
    seed: int
    tokens: int
    rows: int
    work: int = 0
    ids: tuple[tuple[int, ...], ...] = field(default=(), compare=False, repr=False)

    @property
    def key(self) -> Hashable:
        return (self.options, self.seed)


def joined(batch: Sequence[Prepared]) -> Prepared:
    """The requests of one batch (equal keys) as one: their lines' ids in order, their
    tokens, rows and work summed."""
    first = batch[0]
    return dataclasses.replace(
        first,
        tokens=sum(p.tokens for p in batch),
        rows=sum(p.rows for p in batch),
        work=sum(p.work for p in batch),
        ids=tuple(line for p in batch for line in p.ids),
    )


class Backend(Protocol):
    name: str
    kind: str  # "padir", "ar" or "ctranslate2"
    device: str  # where its batches run: "cpu", "cuda:0", ...
    source: str  # the folder it serves
    languages: str | None  # "de-en": the pair its checkpoint records, None where it records none
    rescored_by: str | None  # the AR checkpoint that rescores a PaDIR model's candidates, if any

    def prepare(self, texts: Sequence[str], settings: Mapping[str, Any], seed: int) -> Prepared: ...

    def translate(self, texts: Sequence[str], prepared: Prepared) -> list[str]: ...

    def close(self) -> None: ...


def command_line_names(kind: str) -> list[str]:
    """The decoding settings a request may give: those `gmlm translate` offers as flags."""
    return [f.name for f in cli_fields(OPTIONS[kind])]


def check_settings(kind: str, settings: Mapping[str, Any]) -> None:
    allowed = command_line_names(kind)
    unknown = sorted(set(settings) - set(allowed))
    if unknown:
        raise GmlmError(
            f"unknown decoding setting{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} "
            f"for this model{former_name_hint(unknown)}; its settings are {', '.join(allowed)}"
        )


def prepared(
    options: DecodingOptions,
    seed: int,
    ids: Sequence[Sequence[int]],
    max_target_len: int,
) -> Prepared:
    """The Prepared request of the lines `ids` (empty lines cost nothing) under `options`."""
    lengths = [len(line) + 1 for line in ids if line]
    return Prepared(
        options,
        seed,
        sum(lengths),
        rows_per_sentence(options) * len(ids),
        sum(decode_work(options, length, max_target_len) for length in lengths),
        tuple(tuple(line) for line in ids),
    )


def check_lines(tokenizer: Tokenizer, texts: Sequence[str], max_source_len: int) -> list[list[int]]:
    """The ids of the request's lines; a line that does not encode as UTF-8 (a lone
    surrogate) or is over the model's maximum is a GmlmError naming it as the request does
    (`text[i]`, 0-based) and saying what a client can do (the service has no over-length
    policies: a line is translated whole or refused)."""
    for i, text in enumerate(texts):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise GmlmError(f"text[{i}] is not valid Unicode (a lone surrogate)") from None
    encoded = encode_inputs(tokenizer, texts, max_source_len, on_over_length="report")
    over = encoded.over_length
    if over:
        shown = ", ".join(f"text[{i}] ({encoded.lengths[i]} tokens)" for i in over[:SHOWN])
        more = f" and {len(over) - SHOWN} more" if len(over) > SHOWN else ""
        raise GmlmError(
            f"{len(over)} line(s) longer than the model's max_len={max_source_len} tokens (EOS "
            f"included): {shown}{more}; lines are never truncated: send each sentence of a "
            "longer text as a line of its own"
        )
    return encoded.ids


class TorchBackend:
    """A gmlm checkpoint decoded in this process at `precision`; a PaDIR one may have its
    candidates rescored by an autoregressive checkpoint, `rescore` = (folder, weight)
    (:meth:`gmlm.translation.translator.Translator.rescore_with`: both then decode eagerly,
    without CUDA graphs)."""

    def __init__(
        self,
        name: str,
        folder: str,
        precision: Precision,
        device: str = "cpu",
        rescore: tuple[str, float] | None = None,
    ):
        from gmlm.translation.translator import load

        self.name = name
        self.source = folder
        self.precision: Precision = precision
        graphs = False if rescore is not None else None
        self.translator = load(folder, device=device, cuda_graphs=graphs)
        self.kind: str = self.translator.kind
        self.device = str(self.translator.device)
        self.languages = self.translator.languages.name
        self.rescored_by = None if rescore is None else rescore[0]
        if rescore is not None:
            self._rescore_with(*rescore)
        self.translator.model_at(precision)  # the bf16/int8 copy now, not at first request
        preload(self.languages)  # the language check's identifier, likewise

    def _rescore_with(self, folder: str, weight: float) -> None:
        from gmlm.translation.translator import load

        where = f"--rescore {self.name}={folder}"
        if is_ctranslate2_export(folder):
            raise GmlmError(
                f"{where}: a CTranslate2 export; the rescoring model must be a gmlm "
                "autoregressive checkpoint"
            )
        try:
            other = load(folder, device=self.device, cuda_graphs=False)
            self.translator.rescore_with(other, weight)
        except GmlmError as err:
            raise GmlmError(f"{where}: {err}") from None
        other.model_at(self.precision)

    def prepare(self, texts: Sequence[str], settings: Mapping[str, Any], seed: int) -> Prepared:
        check_settings(self.kind, settings)
        options = self.translator.options(**settings)
        config = self.translator.config
        ids = check_lines(self.translator.tokenizer, texts, config.max_source_len)
        return prepared(options, seed, ids, config.max_target_len)

    def translate(self, texts: Sequence[str], prepared: Prepared) -> list[str]:
        """The lines' translations from the ids `prepare` encoded (the language was checked
        per request: :mod:`gmlm.serve.language`)."""
        if len(prepared.ids) != len(texts):
            raise GmlmError(f"{len(texts)} lines but {len(prepared.ids)} encoded: not prepared")
        return self.translator.translate_lines(
            prepared.ids,
            prepared.options,
            batch_size=max(1, len(texts)),
            seed=prepared.seed,
            precision=self.precision,
        )

    def graph_captures(self) -> Captures | None:
        if not self.translator.cuda_graphs:
            return None
        return Captures(
            self.translator.cuda_graph_count(), self.translator.cuda_graph_capture_seconds()
        )

    def close(self) -> None:
        pass


class Ct2Backend:
    """A CTranslate2 export of an AR checkpoint, decoded in a worker process on `threads`
    threads at `precision` (fp32 or int8). Its search follows gmlm's rules
    (:mod:`gmlm.export.ctranslate2`); PaDIR has no CTranslate2 form."""

    kind = "ctranslate2"
    device = "cpu"
    rescored_by: str | None = None

    def __init__(self, name: str, folder: str, precision: str, threads: int):
        from gmlm.export.ctranslate2 import Ct2ModelInfo
        from gmlm.nn.config import ModelConfig

        self.name = name
        self.source = folder
        path = Path(folder)
        self.info = Ct2ModelInfo.read(path)
        self.tokenizer = self.info.check_tokenizer(Tokenizer.load(path / "tokenizer"), path)
        # What search options are validated against: the limits the export recorded.
        self.config = ModelConfig(
            vocab_size=self.tokenizer.vocab_size,
            max_source_len=self.info.max_source_len,
            max_target_len=self.info.max_target_len,
        )
        self.languages = self.info.languages
        preload(self.languages)  # the language check's identifier, not at first request
        compute = "int8" if precision == "int8" else "fp32"
        # The worker's stderr lines go to the service's log (its bounded queue), never to an
        # inherited stderr a stalled reader could block the worker on.
        said = f"model {name!r}: CTranslate2 worker: %s"
        self._start = lambda: Ct2Worker(
            path, threads, compute, messages=lambda line: LOG.warning(said, line)
        )
        self.worker = self._start()
        self.lock = threading.Lock()  # one request at a time on the worker's pipe
        self.restarts = 0

    def prepare(self, texts: Sequence[str], settings: Mapping[str, Any], seed: int) -> Prepared:
        check_settings("ar", settings)
        options = decoding_options("ar", self.config, None, settings)
        ids = check_lines(self.tokenizer, texts, self.info.max_source_len)
        return prepared(options, seed, ids, self.config.max_target_len)

    def translate(self, texts: Sequence[str], prepared: Prepared) -> list[str]:
        with self.lock:
            if not self.worker.alive():
                self._restart()
            try:
                return self.worker.translate_texts(list(texts), prepared.options)
            except (OSError, WorkerExited) as err:  # killed (the OOM killer, a signal)
                status = self.worker.exit_status()
                self._restart()
                raise Unavailable(
                    f"model {self.name!r}: its CTranslate2 worker process died (status "
                    f"{status}) while translating ({type(err).__name__}); it has been "
                    "restarted: retry"
                ) from None

    def alive(self) -> bool:
        """Whether the worker process runs (a dead one is restarted by :meth:`revive` or by
        the next request)."""
        return self.worker.alive()

    def revive(self) -> None:
        """Restart the worker if it has died."""
        with self.lock:
            if not self.worker.alive():
                self._restart()

    def _restart(self) -> None:
        self.worker.close()
        self.worker = self._start()
        self.restarts += 1

    def close(self) -> None:
        with self.lock:
            self.worker.close()


class Unavailable(Exception):
    """A backend could not translate for a reason of its own, not the request's (503)."""


@runtime_checkable
class Supervised(Protocol):
    """A backend that runs in a process of its own, which can die and be restarted."""

    def alive(self) -> bool: ...

    def revive(self) -> None: ...


@runtime_checkable
class Graphed(Protocol):
    """A backend that may decode by CUDA graphs (None where it runs without them: a CPU)."""

    def graph_captures(self) -> Captures | None: ...


def graph_captures(backend: Backend) -> Captures | None:
    """`backend`'s graph captures, or None for a model that decodes without CUDA graphs."""
    return backend.graph_captures() if isinstance(backend, Graphed) else None


def is_ctranslate2_export(folder: str) -> bool:
    from gmlm.export.ctranslate2 import is_export

    return is_export(Path(folder))


def load_backend(
    name: str,
    folder: str,
    precision: Precision,
    threads: int,
    device: str = "cpu",
    rescore: tuple[str, float] | None = None,
) -> Backend:
    """The backend for `folder`: a CTranslate2 export, or a gmlm checkpoint (or run folder),
    whose candidates, for a PaDIR one, `rescore` = (folder, weight) rescores."""
    if not Path(folder).exists():
        raise GmlmError(f"--model {name}={folder}: no such folder")
    if is_ctranslate2_export(folder):
        if rescore is not None:
            raise GmlmError(
                f"--rescore {name}={rescore[0]}: model {name} is a CTranslate2 export; only a "
                "PaDIR checkpoint's candidates can be rescored"
            )
        if precision == "bf16":
            raise GmlmError(
                f"--model {name}={folder} is a CTranslate2 export: it runs in fp32 or int8, "
                "not bf16 (--precision)"
            )
        return Ct2Backend(name, folder, precision, threads)
    return TorchBackend(name, folder, precision, device, rescore)


def options_json(options: DecodingOptions) -> dict[str, Any]:
    """The decoding settings a response reports (those a request may give)."""
    kind = "padir" if isinstance(options, RefinementOptions) else "ar"
    names = command_line_names(kind)
    values = dataclasses.asdict(options)
    return {name: values[name] for name in names}
