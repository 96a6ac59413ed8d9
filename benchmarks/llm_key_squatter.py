"""What a squatter on `llm serve`'s port gets from a client with a key (issue 54 item 1).

Starts ``leaguezero llm serve --api-key KEY`` on a tiny model built on the spot, lets an
``OpenAIClient`` with the key generate once, kills the server, binds a recording HTTP server
("the squatter", answering like ``llm serve`` with a made-up completion) on the same port, and
lets the client generate again. Prints what the squatter received (the key? the prompt?) and
what the client did with its answer. Not a test
(tests/diplomacy/llm/serve/test_llm_key_proof.py is).

    OMP_NUM_THREADS=1 python benchmarks/llm_key_squatter.py

Against an older leaguezero, set PYTHONPATH to its ``src`` (with this key_proof.py copied in:
the squatter imports its header names).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or os.curdir).resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

from tests.diplomacy.test_llm_key_proof import KEY, PROMPT, Squatter  # noqa: E402
from tests.diplomacy.tiny_lm import build_tiny_lm, start_llm_server  # noqa: E402


def main() -> None:
    from leaguezero.diplomacy.llm.client import LLMError
    from leaguezero.diplomacy.llm.remote.openai_client import OpenAIClient

    with tempfile.TemporaryDirectory() as folder:
        model = build_tiny_lm(Path(folder) / "tiny")
        proc, url = start_llm_server(model, "--api-key", KEY)
        client = OpenAIClient(url, api_key=KEY, reconnect_s=30)
        try:
            real = client.generate([PROMPT], [None], 2, 0.0, seed=0)[0]
            print(f"real server: {real.text!r} token ids {real.token_ids}")
            proc.kill()
            proc.wait(timeout=30)
            squatter = Squatter(urlsplit(url).port)
            start = time.monotonic()
            try:
                answer = client.generate([PROMPT], [None], 2, 0.0, seed=0)[0]
                outcome = (
                    f"ACCEPTED the squatter's completion {answer.text!r} "
                    f"(token ids {answer.token_ids}, log-probs {answer.logprobs})"
                )
            except LLMError as err:
                outcome = f"refused in {time.monotonic() - start:.2f} s: {err}"
            finally:
                squatter.close()
            keys = sum(KEY in str(headers) for _, _, headers, _ in squatter.seen)
            prompts = sum(PROMPT.encode() in body for _, _, _, body in squatter.seen)
            print(f"squatter got {len(squatter.seen)} requests: "
                  f"{[(m, p) for m, p, _, _ in squatter.seen]}")  # fmt: skip
            print(f"  carrying the key: {keys}; carrying the prompt: {prompts}")
            print(f"client: {outcome}")
        finally:
            client.close()
            proc.kill()


if __name__ == "__main__":
    main()
