"""Translation quality on the Tatoeba zho-eng test set: corpus BLEU and chrF with sacrebleu.

    python -m bench.bleu --published                         # the released model's own outputs
    python -m bench.bleu --model-dir DIR --variant int8      # in-process, the handler's code path
    python -m bench.bleu --model synthetic --variant int8    # same, model resolved like archive.build
    python -m bench.bleu --endpoint http://127.0.0.1:8080/predictions/zh_en   # a running server
    python -m bench.bleu --archive model_store/zh_en_int8.mar   # the batch job (python -m batch), in process

`--limit N` scores the first N sentences. One JSON result per run lands in bench/results/.
On the offline stand-in (random weights) the score is meaningless and labeled so.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
import sacrebleu

from archive.tatoeba import Block, read_blocks
from bench.cli import BenchCli, Progress
from bench.common import is_standin
from serving.client import read_key

CHUNK = 8  # sentences per HTTP request or in-process batch
say = Progress("bleu")


@dataclass
class Hypotheses:
    """Translations of the test sources plus what produced them."""

    texts: list[str]
    model: str
    version: str | None = None
    variant: str | None = None
    standin: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def score(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, Any]:
    """Corpus BLEU and chrF (sacrebleu defaults, 13a tokenizer), signatures, mean sentence BLEU."""
    bleu, chrf = sacrebleu.metrics.BLEU(), sacrebleu.metrics.CHRF()
    corpus_bleu = bleu.corpus_score(list(hypotheses), [list(references)])
    corpus_chrf = chrf.corpus_score(list(hypotheses), [list(references)])
    sentence = sacrebleu.metrics.BLEU(effective_order=True)
    sentence_scores = [
        sentence.sentence_score(h, [r]).score for h, r in zip(hypotheses, references, strict=True)
    ]
    return {
        "bleu": round(corpus_bleu.score, 2),
        "chrf": round(corpus_chrf.score, 2),
        "sentence_bleu_mean": round(sum(sentence_scores) / len(sentence_scores), 2),
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
    }


def published(blocks: Sequence[Block]) -> Hypotheses:
    return Hypotheses([b.published for b in blocks], "Helsinki-NLP/opus-mt-zh-en (published outputs)")


def in_process(blocks: Sequence[Block], model_dir: Path, variant: str, num_beams: int | None) -> Hypotheses:
    """The served loop in this process (handlers.scheduling.run) with the archive's handler config,
    CHUNK sentences submitted at a time."""
    from handlers.handler_config import HandlerConfig
    from handlers.model.options import GenerationOptions
    from handlers.model.translator import Translator
    from handlers.scheduling.run import translate

    config = HandlerConfig(variant=variant)  # type: ignore[arg-type]
    translator = Translator.load(model_dir, config.model)
    options = GenerationOptions(num_beams=num_beams)
    chunks = _chunks([b.source for b in blocks])
    texts: list[str] = []
    for done, chunk in enumerate(chunks, start=1):
        texts += translate(translator, chunk, options, config)
        _say_batches(done, len(chunks))
    return Hypotheses(texts, translator.info.source, None, variant, translator.info.standin)


def through_endpoint(
    blocks: Sequence[Block], url: str, key_file: Path, concurrency: int, num_beams: int | None
) -> Hypotheses:
    """POST lists of CHUNK sources with bounded concurrency; identity comes from the responses."""
    session = requests.Session()

    def post(chunk: list[str]) -> dict[str, Any]:
        key = read_key(key_file, "inference")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        body: dict[str, Any] = {"text": chunk, **({"num_beams": num_beams} if num_beams else {})}
        response = session.post(url, json=body, headers=headers, timeout=300)
        if response.status_code != 200:
            raise SystemExit(f"{url} answered {response.status_code}: {response.text[:300]}")
        result: dict[str, Any] = response.json()
        return result

    chunks = _chunks([b.source for b in blocks])
    answers: list[dict[str, Any]] = []
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        for done, answer in enumerate(pool.map(post, chunks), start=1):
            answers.append(answer)
            _say_batches(done, len(chunks))
    first = answers[0]
    texts = [text for answer in answers for text in answer["translations"]]
    return Hypotheses(
        texts, first["model"], first.get("version"), first.get("variant"), bool(first["standin"])
    )


def through_batch_job(blocks: Sequence[Block], archive: Path, num_beams: int | None) -> Hypotheses:
    """The test set as one text file (a source per line) through the batch job, the archive's own
    pipeline (docs/BATCH.md), in this process; identity from the job's sidecar manifest."""
    import json
    import tempfile

    from batch.cli import main as batch_main
    from batch.job import MANIFEST_SUFFIX

    sources = [b.source for b in blocks]
    if any("\n" in source or "\r" in source for source in sources):
        raise SystemExit("a test source holds a line break: one line per source would not line up")
    with tempfile.TemporaryDirectory(prefix="zh_en_bleu_") as workdir:
        corpus, output = Path(workdir) / "tatoeba.zh.txt", Path(workdir) / "out"
        corpus.write_text("\n".join(sources) + "\n", encoding="utf-8")
        beams = ["--beams", str(num_beams)] if num_beams else []
        argv = ["translate", str(corpus), str(output), "--archive", str(archive), "--engine", "local", *beams]
        if batch_main(argv) != 0:
            raise SystemExit(f"the batch job failed on {corpus}")
        texts = (output / corpus.name).read_text(encoding="utf-8").splitlines()
        identity = json.loads((output / (corpus.name + MANIFEST_SUFFIX)).read_text())
    if len(texts) != len(sources):
        raise SystemExit(f"the batch job wrote {len(texts)} lines for {len(sources)} sources")
    return Hypotheses(
        texts, identity["model"], identity.get("version"), identity.get("variant"), bool(identity["standin"])
    )


def _chunks(texts: list[str]) -> list[list[str]]:
    return [texts[i : i + CHUNK] for i in range(0, len(texts), CHUNK)]


def _say_batches(done: int, total: int) -> None:
    if done == total or done % max(1, total // 20) == 0:
        say(f"translated {done}/{total} batches")


def run(source: Callable[[Sequence[Block]], Hypotheses], limit: int | None) -> dict[str, Any]:
    blocks = read_blocks()[:limit]
    hypotheses = source(blocks)
    return {
        **score(hypotheses.texts, [b.reference for b in blocks]),
        "model": hypotheses.model,
        "version": hypotheses.version,
        "variant": hypotheses.variant,
        "standin": hypotheses.standin,
        "meaningful": not hypotheses.standin,
        "n": len(blocks),
    }


def _report(result: dict[str, Any], path: Path) -> None:
    if result["standin"]:
        say(
            "!! offline stand-in (random weights): this score is MEANINGLESS; "
            "run the same command on the real model for the real number"
        )
    print(f"BLEU {result['bleu']:.2f}  chrF {result['chrf']:.2f}  (n={result['n']}, {result['model']})")
    print(f"  sentence BLEU mean {result['sentence_bleu_mean']:.2f}")
    print(f"  {result['bleu_signature']}\n  {result['chrf_signature']}\n  written to {path}")


def main(argv: list[str] | None = None) -> int:
    cli = BenchCli("bleu", __doc__, results_dir=True)
    mode = cli.parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--published", action="store_true", help="score the released model's outputs")
    mode.add_argument("--endpoint", help="a TorchServe predictions URL")
    mode.add_argument("--model-dir", type=Path, help="a saved model directory, in-process")
    mode.add_argument("--archive", type=Path, help="a .mar: the batch job over it, in this process")
    cli.add_model(mode, None, "hub id, local dir or `synthetic`, resolved like archive.build")
    cli.parser.add_argument("--variant", choices=("fp32", "int8"), default="int8")
    cli.parser.add_argument("--num-beams", type=int)
    cli.parser.add_argument("--limit", type=int)
    cli.parser.add_argument("--concurrency", type=int, default=4)
    cli.parser.add_argument("--key-file", type=Path, default=Path("key_file.json"))
    args = cli.parse(argv)
    label, source = _source(args, cli)
    result = run(source, args.limit)
    _report(result, cli.write(f"bleu-{label}", result))
    return 0


def _source(args: argparse.Namespace, cli: BenchCli) -> tuple[str, Callable[[Sequence[Block]], Hypotheses]]:
    """The result's label and where its translations come from: --published, --endpoint, --archive
    (the batch job) or a model in process."""
    if args.published:
        return "published", published
    if args.endpoint:
        return "endpoint", lambda blocks: through_endpoint(
            blocks, args.endpoint, args.key_file, args.concurrency, args.num_beams
        )
    if args.archive:
        from batch.archive_model import open_archive

        archive: Path = args.archive
        opened = open_archive(archive)
        label = f"{'standin' if opened.standin else 'model'}-{opened.served_config.variant}"
        return label, lambda blocks: through_batch_job(blocks, archive, args.num_beams)
    model_dir = args.model_dir or cli.model_dir()
    label = f"{'standin' if is_standin(model_dir) else 'model'}-{args.variant}"
    return label, lambda blocks: in_process(blocks, model_dir, args.variant, args.num_beams)


if __name__ == "__main__":
    raise SystemExit(main())
