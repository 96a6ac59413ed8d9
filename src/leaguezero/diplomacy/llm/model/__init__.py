"""The model in process: transformers + peft (one base, one LoRA adapter per agent, mixed-adapter
batches, differentiable log-probs), the KV-cache sampling loop, cross-caller batching, GGUF
bases and the checked adapter-folder reads.
"""
