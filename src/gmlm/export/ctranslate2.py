"""CTranslate2 for the autoregressive baseline: convert a checkpoint into an export folder.

    export_ctranslate2("checkpoints/multi30k-de-en/ar", "ar-ct2")   # needs torch

Needs the optional extra: ``pip install 'gmlm[ctranslate2]'``. The folder's format
(:class:`Ct2ModelInfo`, the files) is declared here; :mod:`gmlm.export.ctranslate2_runtime`
decodes an export by gmlm's search rules, without torch.

Conversion. The AR model (docs/DESIGN.md) is CTranslate2's ``TransformerSpec`` weight for
weight: pre-LayerNorm layers with a final LayerNorm per stack (eps from the model's own
LayerNorms, 1e-5), learned absolute position tables from position 0, token embeddings
scaled by sqrt(d_model), exact (erf) GELU, no linear biases (CTranslate2's are optional), and
the tied table as source embedding, target embedding and output projection (untied models
give three). Query/key/value projections are fused the way CTranslate2 stores them. The
vocabulary is the SentencePiece pieces in id order, so piece i is id i, and the folder works
with plain ``sentencepiece`` too. The weights stay fp32.

Folder (written atomically)::

    model.bin, config.json, shared_vocabulary.json   CTranslate2's model
    gmlm.json                                        limits and special ids (Ct2ModelInfo)
    tokenizer/                                       the checkpoint's SentencePiece model
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gmlm import provenance
from gmlm.data.tokenizer import Tokenizer
from gmlm.errors import GmlmError
from gmlm.io import atomic_write_json
from gmlm.locking import output_folder

if TYPE_CHECKING:
    from torch import Tensor, nn

    from gmlm.models.autoregressive import AutoregressiveModel

INFO_FILE = "gmlm.json"
CT2_FILES = ("model.bin", "config.json", "shared_vocabulary.json")
FORMAT = "gmlm-ctranslate2"
INSTALL = "pip install 'gmlm[ctranslate2]'"
# gmlm's precisions that CTranslate2 runs on a CPU, and its compute type for each.
COMPUTE_TYPES = {"fp32": "float32", "int8": "int8"}


def import_ctranslate2() -> Any:
    """The ctranslate2 module, or a GmlmError that names the extra to install."""
    try:
        import ctranslate2
    except ImportError:
        raise GmlmError(
            f"CTranslate2 is not installed; install the optional extra: {INSTALL}"
        ) from None
    return ctranslate2


@dataclass(frozen=True)
class Ct2ModelInfo:
    """What gmlm's decoding rules need beside CTranslate2's files (gmlm.json).

    max_source_len, max_target_len: the model's limits in tokens, EOS counted.
    eos_id: the end-of-sentence id; refused_ids: the other special ids, never output.
    exported_from: the checkpoint folder; versions: gmlm and ctranslate2 at export.
    languages: the pair the checkpoint records ("de-en"), None where it records none.
    source_fingerprint: the checkpoint's fingerprint (:mod:`gmlm.checkpoint.source`);
    tokenizer_sha256: the fingerprint of the tokenizer the model was made with, which the
    folder's tokenizer/ must match. The last three are None in exports written before gmlm
    recorded them, which lack the keys.
    """

    max_source_len: int
    max_target_len: int
    eos_id: int
    refused_ids: tuple[int, ...]
    exported_from: str
    versions: dict[str, str]
    languages: str | None = None
    source_fingerprint: str | None = None
    tokenizer_sha256: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, **asdict(self), "refused_ids": list(self.refused_ids)}

    @classmethod
    def from_json(cls, data: Any, origin: str) -> Ct2ModelInfo:
        fields = {"format", *cls.__dataclass_fields__}
        optional = {"languages", "source_fingerprint", "tokenizer_sha256"}
        if (
            not isinstance(data, dict)
            or data.get("format") != FORMAT
            or not fields - optional <= set(data) <= fields
        ):
            raise GmlmError(
                f"{origin}: not a gmlm CTranslate2 export; write one with "
                "`gmlm export --format ctranslate2`"
            )
        values = {k: v for k, v in data.items() if k != "format"}
        return cls(**{**values, "refused_ids": tuple(values["refused_ids"])})

    @classmethod
    def read(cls, folder: Path) -> Ct2ModelInfo:
        """The gmlm.json of the export in `folder`."""
        path = Path(folder) / INFO_FILE
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise GmlmError(f"{path}: unreadable ({err})") from None
        return cls.from_json(data, str(path))

    def check_tokenizer(self, tokenizer: Tokenizer, folder: Path) -> Tokenizer:
        """`tokenizer`, the one in the export `folder`, where it is the one the model was made
        with (or none was recorded); else a GmlmError."""
        if self.tokenizer_sha256 is not None and self.tokenizer_sha256 != tokenizer.fingerprint:
            raise GmlmError(
                f"{Path(folder) / 'tokenizer'}: its tokenizer (sha256 "
                f"{tokenizer.fingerprint[:12]}...) is not the {self.tokenizer_sha256[:12]}... "
                f"that {Path(folder) / INFO_FILE} records, the one the model was made with: it "
                "would encode text into ids this model did not learn; export the checkpoint "
                "again (`gmlm export --format ctranslate2`)"
            )
        return tokenizer


def transformer_spec(model: AutoregressiveModel, tokenizer: Tokenizer) -> Any:
    """The ``ctranslate2.specs.TransformerSpec`` of `model`, vocabulary from `tokenizer`."""
    import_ctranslate2()
    from ctranslate2.specs import common_spec
    from ctranslate2.specs import transformer_spec as ts

    config = model.config
    pieces = [tokenizer.id_to_piece(i) for i in range(tokenizer.vocab_size)]
    if len(pieces) != config.vocab_size or len(set(pieces)) != len(pieces):
        raise GmlmError(
            f"the tokenizer's {len(set(pieces))} distinct pieces do not name the model's "
            f"{config.vocab_size} ids one to one; export a checkpoint whose tokenizer/ is "
            "the one it was trained with"
        )
    spec = ts.TransformerSpec.from_config(
        (config.n_encoder_layers, config.n_decoder_layers),
        config.n_heads,
        pre_norm=True,
        activation=common_spec.Activation.GELU,
    )
    spec.config.layer_norm_epsilon = model.final_norm.eps
    spec.config.unk_token = pieces[config.unk_id]
    spec.config.bos_token = spec.config.decoder_start_token = pieces[config.bos_id]
    spec.config.eos_token = pieces[config.eos_id]
    spec.config.add_source_eos = True

    net: Any = model  # torch modules' attributes are typed loosely
    embeddings = net.embeddings
    source = embeddings.source.weight
    target = source if embeddings.target is None else embeddings.target.weight
    output = source if embeddings.output is None else embeddings.output.weight
    encoder, decoder = spec.encoder, spec.decoder
    encoder.embeddings[0].weight = _array(source)
    encoder.position_encodings.encodings = _array(net.encoder.positions.table.weight)
    _set_norm(encoder.layer_norm, net.encoder.norm)
    for layer_spec, layer in zip(encoder.layer, net.encoder.layers, strict=True):
        _set_norm(layer_spec.self_attention.layer_norm, layer.attn_norm)
        _set_self_attention(layer_spec.self_attention, layer.attn)
        _set_ffn(layer_spec.ffn, layer.ffn_norm, layer.ffn)
    decoder.embeddings.weight = _array(target)
    decoder.position_encodings.encodings = _array(net.target_positions.table.weight)
    _set_norm(decoder.layer_norm, net.final_norm)
    decoder.projection.weight = _array(output)
    for layer_spec, layer in zip(decoder.layer, net.layers, strict=True):
        _set_norm(layer_spec.self_attention.layer_norm, layer.self_norm)
        _set_self_attention(layer_spec.self_attention, layer.self_attn)
        _set_norm(layer_spec.attention.layer_norm, layer.cross_norm)
        attention = layer.cross_attn
        layer_spec.attention.linear[0].weight = _array(attention.q_proj.weight)
        layer_spec.attention.linear[1].weight = _fused(attention.k_proj, attention.v_proj)
        layer_spec.attention.linear[2].weight = _array(attention.out_proj.weight)
        _set_ffn(layer_spec.ffn, layer.ffn_norm, layer.ffn)
    spec.register_source_vocabulary(pieces)
    spec.register_target_vocabulary(pieces)
    spec.validate()
    spec.optimize(quantization=None)  # aliases the tied table; weights stay fp32
    return spec


def _array(weight: Tensor) -> np.ndarray:
    return weight.detach().float().cpu().numpy().copy()


def _fused(*linears: nn.Linear) -> np.ndarray:
    """Linear layers' weights stacked along the output dimension (fused projections)."""
    return np.concatenate([_array(linear.weight) for linear in linears])


def _set_norm(spec: Any, norm: nn.LayerNorm) -> None:
    spec.gamma = _array(norm.weight)
    spec.beta = _array(norm.bias)


def _set_self_attention(spec: Any, attention: Any) -> None:
    spec.linear[0].weight = _fused(attention.q_proj, attention.k_proj, attention.v_proj)
    spec.linear[1].weight = _array(attention.out_proj.weight)


def _set_ffn(spec: Any, norm: nn.LayerNorm, ffn: Any) -> None:
    _set_norm(spec.layer_norm, norm)
    spec.linear_0.weight = _array(ffn.up.weight)
    spec.linear_1.weight = _array(ffn.down.weight)


def is_export(folder: Path) -> bool:
    """Whether `folder` holds a CTranslate2 export (what may be replaced by a new one)."""
    return all((folder / name).is_file() for name in (INFO_FILE, *CT2_FILES))


def export_ctranslate2(source: str | Path, out: str | Path, *, force: bool = False) -> Path:
    """Convert the AR checkpoint `source` (or a run folder's best one) into the CTranslate2
    folder `out` (see the module docstring), written atomically. `out` must be new or empty,
    or with `force` an earlier CTranslate2 export of the same checkpoint
    (:mod:`gmlm.checkpoint.source`), and never `source`, inside it or inside a checkpoint or
    training run folder (`gmlm.io.check_output_folder`)."""
    from gmlm.checkpoint.files import write_checkpoint_dir
    from gmlm.checkpoint.loading import load_for_inference, resolve_checkpoint
    from gmlm.checkpoint.source import ExportSource, check_replaceable
    from gmlm.models.autoregressive import AutoregressiveModel

    import_ctranslate2()  # not installed: the error names the extra, before any work
    target = Path(out)
    with output_folder(
        target,
        "--out",
        "a CTranslate2 export",
        is_export,
        inputs={"--checkpoint": Path(source)},
        replace=force,
    ) as earlier:
        if earlier:
            recorded = Ct2ModelInfo.read(target)
            earlier_source = ExportSource(recorded.exported_from, recorded.source_fingerprint)
            check_replaceable(target, earlier_source, resolve_checkpoint(source))
        loaded = load_for_inference(source)
        exported_from = ExportSource.of(loaded.path)
        if not isinstance(loaded.model, AutoregressiveModel):
            raise GmlmError(
                f"--checkpoint {source}: is a checkpoint of kind '{loaded.kind}'; the "
                "CTranslate2 export takes an autoregressive checkpoint (kind 'ar'): PaDIR's "
                "length prediction and parallel refinement have no CTranslate2 equivalent"
            )
        spec = transformer_spec(loaded.model, loaded.tokenizer)
        config = loaded.model_config
        info = Ct2ModelInfo(
            max_source_len=config.max_source_len,
            max_target_len=config.max_target_len,
            eos_id=config.eos_id,
            refused_ids=tuple(i for i in range(config.n_special) if i != config.eos_id),
            exported_from=exported_from.path,
            languages=loaded.languages.name,
            source_fingerprint=exported_from.fingerprint,
            tokenizer_sha256=loaded.tokenizer.fingerprint,
            versions={
                "gmlm": provenance.gmlm_version(),
                "ctranslate2": provenance.package_version("ctranslate2"),
            },
        )

        def fill(tmp: Path) -> None:
            spec.save(str(tmp))
            loaded.tokenizer.save(tmp / "tokenizer")
            atomic_write_json(tmp / INFO_FILE, info.to_json())

        write_checkpoint_dir(target, fill)
    return target
