"""The GGUF conversion cache under attack (issue 54 item 7): what a run loads or leaves.

Conversions are faked (transformers' ``from_pretrained`` returns objects whose
``save_pretrained`` writes small files), so this runs in seconds on any version of
``leaguezero.diplomacy.llm.model.gguf``; run it on an older checkout (PYTHONPATH=old/src) for
the "before" column. Cases: an entry planted by another uid (root only: chown), a byte
flipped in a cached ``model.safetensors``, a conversion killed while writing, the lock files
left by three sources, a cache root of mode 1777.

    python benchmarks/gguf_cache_hostile.py
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "diplomacy"))
from gguf_bytes import valid_file

FAKE = """
import transformers
from types import SimpleNamespace

class Saves:
    config = SimpleNamespace()
    def __init__(self, name, data, slow=None):
        self.name, self.data, self.slow = name, data, slow
    def save_pretrained(self, folder):
        (folder / self.name).write_bytes(self.data)
        if self.slow:
            open(self.slow, "w").write("writing")
            import time; time.sleep(3600)

def fake(data, slow=None):
    transformers.AutoTokenizer.from_pretrained = staticmethod(
        lambda *a, **k: Saves("tokenizer.json", b"{}"))
    transformers.AutoModelForCausalLM.from_pretrained = staticmethod(
        lambda *a, **k: Saves("model.safetensors", data, slow))
"""


def load(source: Path) -> tuple[str, str]:
    """What ``base_model_folder`` answers: ('loaded', folder) or ('refused', message)."""
    from leaguezero.diplomacy.llm.model import gguf

    try:
        return "loaded", str(gguf.base_model_folder(source))
    except Exception as err:
        return "refused", str(err)[:110]


def main() -> None:
    ns: dict = {}
    exec(FAKE, ns)
    ns["fake"](b"w" * (1 << 20))
    from leaguezero.diplomacy.llm.model import gguf

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        os.environ[gguf.CACHE_ENV] = str(folder / "cache")
        source = folder / "m.gguf"
        source.write_bytes(valid_file() + b"public")
        target = Path(load(source)[1])
        # 1. a byte flipped in the cached weights
        weights = target / "model.safetensors"
        data = bytearray(weights.read_bytes())
        data[100] ^= 1
        weights.write_bytes(bytes(data))
        state, _ = load(source)
        intact = weights.read_bytes() == b"w" * (1 << 20)
        print(f"flipped byte: {state}, weights as converted afterwards: {intact}")
        # 2. an entry planted by another uid
        if os.geteuid() == 0:
            marker = json.loads((target / gguf.MARKER).read_text())
            (target / "model.safetensors").write_bytes(b"planted")
            (target / gguf.MARKER).write_text(json.dumps({**marker, "files": None}))
            for path in [target, *target.iterdir()]:
                os.chown(path, 54321, 54321)
            state, detail = load(source)
            print(f"entry planted by uid 54321: {state} | {detail}")
            for path in [target, *target.iterdir()]:
                os.chown(path, 0, 0)
        else:
            print("entry planted by another uid: needs root (chown); skipped")
        # 3. a conversion killed while writing
        other = folder / "k.gguf"
        other.write_bytes(valid_file() + b"killed")
        ready = folder / "ready"
        code = FAKE + (
            f"\nfake(b'x' * (64 << 20), {str(ready)!r})\n"
            "from leaguezero.diplomacy.llm.model import gguf\n"
            f"gguf.base_model_folder({str(other)!r})\n"
        )
        child = subprocess.Popen([sys.executable, "-c", code], env=dict(os.environ))
        while not ready.exists() and child.poll() is None:
            time.sleep(0.05)
        child.send_signal(signal.SIGKILL)
        child.wait()
        cache = target.parent

        def hidden_bytes() -> int:
            return sum(
                f.stat().st_size
                for d in cache.iterdir()
                if d.name.startswith(".") and d.is_dir()
                for f in d.rglob("*")
            )

        print(f"killed conversion: {hidden_bytes() / 1e6:.0f} MB in hidden temp folders")
        load(other)
        load(source)
        print(f"  after two later runs: {hidden_bytes() / 1e6:.0f} MB")
        # 4. lock files
        for tag in (b"a", b"b", b"c"):
            extra = folder / f"{tag.decode()}.gguf"
            extra.write_bytes(valid_file() + tag)
            load(extra)
        locks = sorted(p.name for p in cache.iterdir() if p.name.endswith(".lock"))
        print(f"lock files after 5 sources: {len(locks)} {locks}")
        # 5. a shared cache root
        shared = folder / "shared"
        shared.mkdir(mode=0o1777)
        os.chmod(shared, 0o1777)
        os.environ[gguf.CACHE_ENV] = str(shared)
        state, detail = load(source)
        print(f"cache root of mode 1777: {state} | {detail}")


if __name__ == "__main__":
    main()
