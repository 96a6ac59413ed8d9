"""The LLM hero's two hot paths, each against its reference in this process.

    python benchmarks/llm_step.py [--base-model models/dip_base] [--rows 48] [--repeats 3]

Without ``--base-model`` a random model of ``leaguezero llm pretrain``'s default shape is built
here (speed does not depend on the weights). Rows are real prompts: every power's prompt from
the phases of a game of random orders, rendered as the league renders them.

1. **Constrained generation** (``llm.mode: constrained``, every row under its legal-order
   constraint, up to 192 new tokens): jump-forward decoding (a run of forced tokens fed in one
   forward pass; the shipped default) against one forward pass per token
   (``backend.jump_forward = False``), for a batch whose rows share one adapter (peft's plain
   path: evaluation of a checkpoint) and one that mixes the hero's adapter with the base model
   (peft's per-row path: a league game). Both must give the same completions (checked).
2. **Training log-probs + backward** (what GRPO does per epoch): ``HFBackend.logprobs`` over
   the rows in their record order (it batches rows of similar length together) against the
   same rows in record-order chunks (each chunk padded to its longest prompt).
3. **A whole GRPO step's memory** (``--step-records`` records, two epochs, KL to the base, as
   ``GRPOTrainer`` runs it): gradient accumulation over passes of 32 records (the LLM hero's
   default, ``train.records_per_pass: 0``) against one pass holding every record's graph, each
   in a fresh process; prints wall time and peak resident memory of each (checks that both
   give the same update).

Wall time of the best of ``--repeats`` interleaved runs, one torch thread. Prints the times
and the ratios reference / ours (above 1: ours is faster).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time

# Run as a script, this folder would shadow the `diplomacy` engine package.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from leaguezero.diplomacy.game.env import POWERS, DiplomacyEnv  # noqa: E402
from leaguezero.diplomacy.llm.model.hf_backend import HFBackend, LoraSettings  # noqa: E402
from leaguezero.diplomacy.llm.orders.constrained import OrderChoices  # noqa: E402
from leaguezero.diplomacy.llm.orders.prompt import build_prompt, render_prompt  # noqa: E402

ALL_PROJECTIONS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def random_base(folder: str) -> str:
    """A random model of the pretrain command's default shape, with a tokenizer trained on
    prompts of a few bot games (seconds)."""
    from leaguezero.diplomacy.llm.base.pretrain import (
        PretrainSettings,
        build_model,
        build_tokenizer,
        collect_examples,
    )

    shape = PretrainSettings()
    examples = collect_examples(4, max_years=2, seed=0)
    tokenizer = build_tokenizer([e.prompt + "\n" + e.answer for e in examples], shape.vocab_size)
    torch.manual_seed(0)
    model = build_model(tokenizer, hidden=shape.hidden, layers=shape.layers, heads=shape.heads)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def phase_rows(backend: HFBackend, rows: int, seed: int) -> tuple[list[str], list[OrderChoices]]:
    """Every power's rendered prompt and constraint, phase after phase of a random game."""
    rng = random.Random(seed)
    prompts: list[str] = []
    choices: list[OrderChoices] = []
    while len(prompts) < rows:
        env = DiplomacyEnv(max_years=3)
        while not env.done and len(prompts) < rows:
            for power in POWERS:
                legal = env.legal_orders(power)
                if not legal:
                    continue
                owed = abs(env.adjustment_count(power)) if env.phase_type == "A" else None
                prompts.append(render_prompt(backend.tokenizer, build_prompt(env, power, legal)))
                choices.append(OrderChoices(legal, env.phase_type, owed))
                orders = [rng.choice(options) for options in legal.values()]
                env.set_orders(power, orders[:owed] if owed is not None else orders)
            env.process()
    return prompts[:rows], choices[:rows]


class _RowPolicy:
    """The LLM hero's training interface over benchmark rows: a record's payload is its
    (prompt, completion, allowed tokens)."""

    recompute_old_log_probs = True

    def __init__(self, backend: HFBackend, adapter: str | None) -> None:
        self.backend, self.adapter = backend, adapter

    def token_log_probs(self, records):
        prompts, completions, allowed = zip(*(r.payload for r in records), strict=True)
        per_token = self.backend.logprobs(
            list(prompts), list(completions), self.adapter, list(allowed)
        )
        return [t.float() for t in per_token]

    def log_prob(self, records):
        return torch.stack([t.sum() for t in self.token_log_probs(records)])

    def trainable_parameters(self):
        return self.backend.trainable_parameters(self.adapter)

    @staticmethod
    def record_size(record) -> int:
        return len(record.payload[0]) + len(record.payload[1])


def grpo_step_child(folder: str, rows: list, per_pass: int | None, seed: int) -> tuple:
    """One GRPO step over ``rows`` in this (fresh) process: seconds, peak RSS in MiB, and the
    adapter's update (to check both variants agree)."""
    import resource

    from leaguezero.diplomacy.game.records import ActionRecord, seat_game
    from leaguezero.diplomacy.train.grpo import GRPOTrainer
    from leaguezero.diplomacy.train.grpo_settings import GRPOSettings

    torch.set_num_threads(1)
    backend = HFBackend.from_pretrained(folder, lora=LoraSettings(target_modules=ALL_PROJECTIONS))
    backend.add_adapter("hero")
    params = backend.trainable_parameters("hero")
    with torch.no_grad():  # the same adapter in every process (peft's init order varies)
        for i, param in enumerate(params):
            gen = torch.Generator().manual_seed(1000 + i)
            param.copy_(0.05 * torch.randn(param.shape, generator=gen))
    before = [p.detach().clone() for p in params]
    rng = random.Random(seed)
    groups, games = [], 8
    per_game = len(rows) // games
    for group in range(2):
        samples = []
        for g in range(games // 2):
            k = group * games // 2 + g
            recs = [
                ActionRecord("FRANCE", f"S{i}", -1.0, row, tokens=len(row[1]))
                for i, row in enumerate(rows[k * per_game : (k + 1) * per_game])
            ]
            samples.append(seat_game(rng.uniform(0, 10), recs))
        groups.append(samples)
    trainer = GRPOTrainer(
        _RowPolicy(backend, "hero"),
        GRPOSettings(lr=1e-3, epochs=2, kl_coef=0.1, records_per_pass=per_pass),
        reference=_RowPolicy(backend, None),
    )
    started = time.perf_counter()
    trainer.step(groups)
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    update = torch.cat([(p.detach() - b).flatten() for p, b in zip(params, before, strict=True)])
    return seconds, peak, update


def timed(fn, repeats: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeats):
        started = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - started)
    return best, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base-model", default=None, help="a local model folder (default: random)")
    parser.add_argument("--rows", type=int, default=48, help="rows per call (a step's batch)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--step-records", type=int, default=256, help="records of the GRPO step (0: skip)"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.base_model or random_base(scratch)
        backend = HFBackend.from_pretrained(
            folder, lora=LoraSettings(target_modules=ALL_PROJECTIONS)
        )
        backend.add_adapter("hero")
        params = backend.trainable_parameters("hero")
        with torch.no_grad():  # a trained-looking adapter (peft starts B at 0)
            for param in params:
                param.add_(
                    0.01 * torch.randn(param.shape, generator=torch.Generator().manual_seed(1))
                )
        prompts, choices = phase_rows(backend, args.rows, args.seed)
        lengths = [len(backend.encode(p)) for p in prompts]
        print(
            f"{len(prompts)} rows, prompts of {min(lengths)}-{max(lengths)} tokens, "
            f"model {sum(p.numel() for p in backend.model.parameters()) / 1e6:.2f}M parameters"
        )

        def generate(adapters: list[str | None], jump: bool):
            def run():
                backend.jump_forward = jump
                return backend.generate(prompts, adapters, 192, 1.0, args.seed, choices)

            return run

        print(
            f"{'constrained generation':<34}{'ours s':>9}{'per-token s':>13}"
            f"{'ratio':>8}{'forced':>8}"
        )
        for label, adapters in (
            ("one adapter (evaluation)", ["hero"] * len(prompts)),
            (
                "hero + base mixed (league game)",
                ["hero", None] * (len(prompts) // 2) + ["hero"] * (len(prompts) % 2),
            ),
        ):
            t_ref, ref = timed(generate(adapters, False), args.repeats)
            t_ours, ours = timed(generate(adapters, True), args.repeats)
            if [c.token_ids for c in ours] != [c.token_ids for c in ref]:
                raise SystemExit("jump-forward and per-token decoding gave different completions")
            tokens = sum(len(c.token_ids) for c in ours)
            forced = sum(lp == 0.0 for c in ours for lp in c.logprobs) / tokens
            print(f"{label:<34}{t_ours:>9.2f}{t_ref:>13.2f}{t_ref / t_ours:>8.2f}{forced:>8.0%}")

        completions = [c.token_ids for c in ours]
        allowed = [
            backend.allowed_tokens(ch, t) for ch, t in zip(choices, completions, strict=True)
        ]
        order = list(range(len(prompts)))
        random.Random(args.seed).shuffle(order)  # a step's records: games and phases mixed
        rows = [(prompts[i], completions[i], allowed[i]) for i in order]
        size = backend.max_batch_size

        def train(chunked: bool):
            def run():
                for param in params:
                    param.grad = None
                parts = (
                    [rows[i : i + size] for i in range(0, len(rows), size)] if chunked else [rows]
                )
                total = torch.zeros(())
                for part in parts:
                    p, c, a = zip(*part, strict=True)
                    total = total + sum(
                        t.sum() for t in backend.logprobs(list(p), list(c), "hero", list(a))
                    )
                total.backward()

            return run

        t_ref, _ = timed(train(True), args.repeats)
        t_ours, _ = timed(train(False), args.repeats)
        print(
            f"{'training log-probs + backward':<34}{t_ours:>9.2f}{t_ref:>13.2f}"
            f"{t_ref / t_ours:>8.2f}"
            "   (reference: record-order batches)"
        )

        if args.step_records:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            per_pass_records = 32  # the fixed size before passes were sized to memory

            step_rows = [rows[i % len(rows)] for i in range(args.step_records)]
            random.Random(args.seed + 1).shuffle(step_rows)
            spawn = multiprocessing.get_context("spawn")
            runs = {}
            for per_pass in (per_pass_records, None):  # a fresh process each: its own peak
                with ProcessPoolExecutor(1, mp_context=spawn) as pool:
                    job = pool.submit(grpo_step_child, folder, step_rows, per_pass, args.seed)
                    runs[per_pass] = job.result()
            (t_acc, m_acc, u_acc), (t_one, m_one, u_one) = runs[per_pass_records], runs[None]
            # Adam's first steps are ~lr * sign(grad): coordinates whose gradient is ~0 move by
            # float rounding either way, so compare directions, not elements.
            cosine = float(torch.nn.functional.cosine_similarity(u_acc, u_one, dim=0))
            print(f"update cosine {cosine:.6f}, max diff {float((u_acc - u_one).abs().max()):.2e}")
            if cosine < 0.999:
                raise SystemExit("gradient accumulation changed the update")
            print(
                f"GRPO step, {args.step_records} records x 2 epochs: passes of "
                f"{per_pass_records} {t_acc:.2f} s, peak {m_acc:.0f} MiB; one pass "
                f"{t_one:.2f} s, peak {m_one:.0f} MiB; time ratio {t_one / t_acc:.2f}, "
                f"memory ratio {m_one / m_acc:.2f}"
            )


if __name__ == "__main__":
    main()
