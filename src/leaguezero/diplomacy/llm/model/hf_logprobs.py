"""Training forwards of :class:`~.hf_backend.HFBackend`: differentiable per-token log-probs of
given completions under one adapter (:meth:`LogProbs.logprobs`), and gradient checkpointing."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from leaguezero.diplomacy.llm.model.hf_adapters import PLACEHOLDER

# Padded tokens in one log-prob forward pass (see HFBackend.logprobs).
LOGPROB_BATCH_TOKENS = 8192


def _token_chunks(
    order: list[int], lengths: list[int], max_rows: int, *, equal: bool = False
) -> list[list[int]]:
    """``order`` (rows sorted by length; ``lengths`` in that order) cut into batches of at most
    ``max_rows`` rows and :data:`LOGPROB_BATCH_TOKENS` padded tokens (at least one row);
    ``equal``: rows of one length only, so a batch needs no padding mask (see
    :meth:`LogProbs.logprobs`)."""
    chunks: list[list[int]] = []
    current: list[int] = []
    previous = None
    for index, length in zip(order, lengths, strict=True):
        if current and (
            len(current) >= max_rows
            or length * (len(current) + 1) > LOGPROB_BATCH_TOKENS
            or (equal and length != previous)
        ):
            chunks.append(current)
            current = []
        current.append(index)
        previous = length
    if current:
        chunks.append(current)
    return chunks


class LogProbs:
    """:class:`~.hf_backend.HFBackend`'s log-prob methods (a mixin); the adapter methods come
    from :class:`~.hf_adapters.AdapterSlots`."""

    def enable_gradient_checkpointing(self) -> None:
        """Training log-probs recompute each layer's activations in the backward pass instead
        of keeping them: several times more records fit one pass (docs/guides/llm.md#memory).

        transformers checkpoints only in train mode; the backend is in eval mode otherwise
        (peft mixes adapters per row only there): see :meth:`_mode_for`. Non-reentrant
        checkpoints need no gradient on the frozen inputs.
        """
        kwargs = {"use_reentrant": False}
        base = self.model.get_base_model()
        if hasattr(base, "activation_checkpointing_enable"):  # the name since transformers 5.2x
            base.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            base.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
        self.gradient_checkpointing = True

    def _mode_for(self, differentiable: bool) -> None:
        """Train mode for a differentiable forward when checkpointing is on, eval otherwise.

        The backward pass recomputes each layer in the mode the model is in *then*, so train
        mode stays until the next non-differentiable call (sampling, scoring without grad)
        switches back; dropout is 0 in the LoRA layers and the decoders we train.
        """
        training = differentiable and self.gradient_checkpointing
        if self.model.training != training:
            self.model.train(training)
        if not training and self.gradient_checkpointing:
            self.model.base_model.set_adapter(PLACEHOLDER, inference_mode=True)
            self._freeze()

    def logprobs(
        self,
        prompts: Sequence[str],
        completions: Sequence[Sequence[int]],
        adapter: str | None,
        allowed: Sequence[Sequence[Sequence[int]] | None] | None = None,
        temperatures: float | Sequence[float] = 1.0,
    ) -> list[torch.Tensor]:
        """Per-token log-probs ``[T_i]`` of each completion's tokens under ``adapter``, of the
        logits divided by ``temperatures`` (one for all rows, or one per row; 1: raw): the
        distribution a row sampled at that temperature was drawn from, as the sampler reports
        it (:mod:`.sampler`), so a trainer scoring at the sampling temperature is on-policy.

        ``allowed[i]`` (optional): row ``i`` was decoded under a constraint; entry ``t`` is
        the token set allowed at position ``t``
        (:meth:`~.hf_sampling.Sampling.allowed_tokens`), and the log-prob is taken over that
        set only (0 where one token was allowed). Differentiable with respect to the adapter's
        parameters when they require gradients
        (:meth:`~.hf_adapters.AdapterSlots.trainable_parameters`). One forward pass per batch
        of rows; rows of similar length share a batch (less padding: 1.5x faster on a step's
        records, whose prompts span 200-560 tokens), at most ``max_batch_size`` rows and
        :data:`LOGPROB_BATCH_TOKENS` padded tokens (a real model's prefill of 16 long rows held
        ~1 GB of transient activations in the KL reference pass).
        """
        if len(prompts) != len(completions):
            raise ValueError("logprobs needs one completion per prompt")
        if allowed is not None and len(allowed) != len(prompts):
            raise ValueError("logprobs needs one allowed-set entry per prompt (or none)")
        if isinstance(temperatures, (int, float)):
            temperatures = [float(temperatures)] * len(prompts)
        if len(temperatures) != len(prompts) or not all(t > 0 for t in temperatures):
            raise ValueError("logprobs needs one temperature > 0 per prompt (or one for all)")
        encoded = [self.encode(p) for p in prompts]
        order = sorted(range(len(prompts)), key=lambda i: len(encoded[i]) + len(completions[i]))
        results: dict[int, torch.Tensor] = {}
        lengths = [len(encoded[i]) + len(completions[i]) for i in order]
        with self._lock:
            name = self._row_name(adapter)
            # With gradients, rows of one length per pass: a padded batch needs an attention
            # mask, and the CPU's masked attention backward (the math kernel) made a pass of
            # 7 padded records 1.8x slower a token than one record at a time (unmasked flash).
            equal = torch.is_grad_enabled() and self.device.type == "cpu"
            for chunk in _token_chunks(order, lengths, self.max_batch_size, equal=equal):
                done = self._logprobs_batch(
                    [encoded[i] for i in chunk],
                    [completions[i] for i in chunk],
                    [allowed[i] if allowed is not None else None for i in chunk],
                    name,
                    [temperatures[i] for i in chunk],
                )
                results.update(zip(chunk, done, strict=True))
        return [results[i] for i in range(len(prompts))]

    def _logprobs_batch(
        self,
        prompts: Sequence[list[int]],
        completions: Sequence[Sequence[int]],
        allowed: Sequence[Sequence[Sequence[int]] | None],
        name: str,
        temperatures: Sequence[float] | None = None,
    ) -> list[torch.Tensor]:
        """Log-probs of one batch from the answer positions only.

        Rows are *left*-padded, so every completion ends at the right edge and the model's own
        ``logits_to_keep`` returns the logits of the last ``max_answer`` positions,
        ``[B, T_max, V]``, instead of ``[B, L, V]`` (a 600-token prompt at SmolLM2's 49k
        vocabulary is 118 MB of logits per row, 365 MB at Qwen's 152k; the answers are a few
        dozen tokens). Using the model's forward keeps what it does after its head (soft-caps,
        logit scales). Positions are counted from each row's first real token, as the sampler
        counts them, so the numbers equal a right-padded full-logits pass (a test checks).
        """
        seqs = [(list(p), list(c)) for p, c in zip(prompts, completions, strict=True)]
        width = max(len(p) + len(c) for p, c in seqs)
        answer = max(len(c) for _, c in seqs)
        input_ids = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for b, (p, c) in enumerate(seqs):
            input_ids[b, width - len(p) - len(c) :] = torch.tensor(p + c, dtype=torch.long)
            mask[b, width - len(p) - len(c) :] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        input_ids, mask = input_ids.to(self.device), mask.to(self.device)
        results = []
        if answer == 0:
            return [torch.zeros((0,), device=self.device) for _ in seqs]
        recompute = torch.is_grad_enabled() and self.gradient_checkpointing
        self._mode_for(recompute)
        with self._one_adapter(name, keep_active=recompute):
            out = self._forward(
                input_ids=input_ids,
                attention_mask=mask,
                position_ids=positions.to(self.device),
                use_cache=False,
                # The logits at position t predict token t + 1: the last answer + 1 positions
                # hold every prediction of every answer (the very last one predicts nothing).
                logits_to_keep=answer + 1,
            )
        logits = out.logits[:, :-1].float()  # [B, T_max, V]: column j predicts token j
        for b, (_, c) in enumerate(seqs):
            if not c:
                results.append(logits.new_zeros((0,)))
                continue
            steps = logits[b, answer - len(c) :]  # [T, V]
            if temperatures is not None and temperatures[b] != 1.0:
                steps = steps / temperatures[b]
            row_allowed = allowed[b]
            if row_allowed is not None:
                if len(row_allowed) != len(c):
                    raise ValueError("an allowed-set list must have one entry per token")
                keep = torch.zeros_like(steps, dtype=torch.bool)
                for t, ids in enumerate(row_allowed):
                    keep[t, list(ids)] = True
                steps = steps.masked_fill(~keep, float("-inf"))
            target = torch.tensor(c, dtype=torch.long, device=self.device)[:, None]
            results.append(torch.log_softmax(steps, dim=-1).gather(1, target)[:, 0])
        return results
