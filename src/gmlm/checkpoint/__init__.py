"""Checkpoints, the format training writes and inference reads: this package owns it, and
inference needs nothing from `gmlm.training`.

A checkpoint folder is self-contained, so it alone can translate raw text:

    model.safetensors   weights (fp32, or bf16 for exported checkpoints)
    config.yaml         the resolved training configuration that made the model; inference
                        reads its model part (`config.CheckpointConfig`: the kind and sizes)
    tokenizer/          the SentencePiece model the data was prepared with
    meta.json           step, validation scores, versions, the tokenizer's fingerprint and
                        the weights' digest (a tokenizer/ that is not the one recorded, or
                        weights changed after they were written, are refused on loading)
    decoding.json       optional: this model's own decoding defaults, chosen on validation
                        data (`decoding_defaults`)

`meta` names these files and reads and writes meta.json as a typed record, `files` writes
and reads them (a folder at a time, atomically), `loading` resolves a run folder to its
checkpoint and loads one for inference, `fingerprint` digests what decides a checkpoint's
translations and `export` copies one, its weights cast. A training run's `last`
checkpoint also holds the state that resuming needs: that is training's own
(`gmlm.training.checkpoint`).
"""
