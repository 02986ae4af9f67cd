"""`gmlm serve`: translation models behind an HTTP service (the work is in `gmlm.serve`)."""

from __future__ import annotations

import argparse

from gmlm.cli.flags import add_device, add_precision
from gmlm.cli.options import add_option_flags, option_overrides
from gmlm.errors import GmlmError
from gmlm.serve.settings import ServeSettings
from gmlm.translation.rescore_settings import RescoreSettings

EPILOG = """\
examples:
  gmlm serve                      # the shipped Multi30k de-en PaDIR and AR, on 127.0.0.1:8080
  gmlm serve --model padir=checkpoints/multi30k-de-en/padir --model ct2=runs/ar-ct2 --port 9000
  gmlm serve --model en-de=checkpoints/multi30k-en-de/padir \
             --rescore en-de=checkpoints/multi30k-en-de/ar   # PaDIR's candidates rescored by AR
  curl -s localhost:8080/v1/translate -H 'content-type: application/json' \\
       -d '{"model": "padir", "text": ["Zwei Hunde spielen im Schnee."]}'
  curl -s localhost:8080/metrics  # Prometheus; the OpenAPI page is /docs

A folder given to --model is a gmlm checkpoint (AR or PaDIR, decoded in this process) or a
CTranslate2 export of an AR checkpoint (`gmlm export --format ctranslate2`, decoded in a worker
process of its own). A request's decoding settings use `gmlm translate`'s option names
("options": {"steps": 10}); a line's translation is the one `gmlm translate` gives it in a file
of the request's lines, whatever else shares its batch. SIGTERM or Ctrl-C: no new requests,
every accepted one answered, exit 0. Several replicas behind a load balancer: docs/DESIGN.md.
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve",
        help="serve translation models over HTTP (dynamic batching, bounded queues, metrics)",
        description="Serve PaDIR, AR and CTranslate2 models over HTTP: POST /v1/translate, "
        "GET /health, /ready, /v1/models, /metrics (Prometheus) and /docs (OpenAPI).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--model",
        action="append",
        metavar="NAME=FOLDER",
        help="a model to serve under NAME (repeat for several); default: the shipped "
        "checkpoints, padir=checkpoints/multi30k-de-en/padir and ar=checkpoints/multi30k-de-en/ar",
    )
    p.add_argument(
        "--rescore",
        action="append",
        dest="rescorers",
        metavar="NAME=FOLDER",
        help="have the autoregressive checkpoint in FOLDER rescore the candidates of the served "
        "PaDIR model NAME before its final choice, as `gmlm translate --rescore` does (repeat "
        "for several models); that model then decodes without CUDA graphs",
    )
    add_option_flags(p, {"rescoring": RescoreSettings}, exclude=["rescore"])
    add_precision(
        p,
        "arithmetic of every model: fp32, bf16 or int8 (CPU; CTranslate2 exports: fp32 or int8)",
        old_switch=None,
    )
    add_device(p, default="cpu")
    add_option_flags(p, {"service": ServeSettings})
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gmlm.serve.server import parse_models, parse_rescorers, serve
    from gmlm.translation.translator import resolve_device

    # "auto" batches as the device it picks; a named one is checked when the models load
    device = str(resolve_device("auto")) if args.device == "auto" else args.device
    settings = ServeSettings.for_device(device, **option_overrides(args, [ServeSettings]))
    settings.validate()
    models = parse_models(args.model)
    rescorers = parse_rescorers(args.rescorers, models)
    weight = option_overrides(args, [RescoreSettings]).get("rescore_weight")
    if weight is not None and not rescorers:
        raise GmlmError("--rescore-weight needs --rescore NAME=FOLDER, the model it weighs")
    weight = RescoreSettings().rescore_weight if weight is None else weight
    return serve(models, settings, args.precision, args.device, rescorers, weight)
